"""Writers leave their sets random-access ready: each uncompressed shard's index made from
the bytes written (the bytes tarindex makes by reading the shard), beside it, named by a
version 2 manifest; kept right by resume; the cluster run on the local engine writes the
files of one machine."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import make_tar
from random_access import check_random_access
from shard_datasets import Words

from tarkit import read_samples
from tarkit.errors import InputError
from tarkit.format.encoding import ImageTransform, encode_sample
from tarkit.format.index import index_stream
from tarkit.format.samples import raw_key
from tarkit.format.tar_writer import default_mtime, encode_member
from tarkit.storage import load_table
from tarkit.writing.cluster import shard_on_engine
from tarkit.writing.from_dataset import shard_dataset
from tarkit.writing.items import ItemEncoder
from tarkit.writing.shard_writer import ShardWriter

LONG = "d" * 120 + "/caf\u00e9"  # a key only a pax header holds


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def write_mixed(directory: Path, source: Path) -> ShardWriter:
    """Shards of dicts, raw members without their key (one named by a pax header) and
    samples read by the reader (written as slices of its buffer), with a manifest."""
    with ShardWriter(str(directory / "s-%03d.tar"), maxcount=3, maxsize=8192,
                     manifest=str(directory / "m.json")) as writer:  # fmt: skip
        for i in range(4):
            writer.write({"__key__": f"k{i}", "txt": "x" * (100 * i), "cls": i})
        writer.write_raw(encode_sample({"__key__": LONG, "txt": "pax"}))
        writer.write_raw(encode_sample({"__key__": "caf\udce9", "bin": b"\0" * 3000}))
        writer.write_all(read_samples([str(source)]))
    return writer


def test_a_shard_writer_with_a_manifest_indexes_each_shard_as_tarindex_would(
    tmp_path: Path, reader: str
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(make_tar((f"r{i:02d}.{f}", b"y" * (i * 40)) for i in range(9)
                                for f in ("jpg", "json")))  # fmt: skip
    write_mixed(tmp_path / "a", source)
    ready = check_random_access(tmp_path / "a" / "m.json")
    assert (ready.shards, ready.samples) == (len(load_table(str(tmp_path / "a" / "m.json"))), 15)
    assert ready.index_bytes == 64 * ready.shards + 16 * ready.samples + ready.key_bytes
    for name, index in ready.indexes.items():
        shard = (tmp_path / "a" / name).read_bytes()
        assert index == index_stream(io.BytesIO(shard), name)  # no second pass, same bytes
    write_mixed(tmp_path / "b", source)
    assert files(tmp_path / "b") == files(tmp_path / "a")  # deterministic


@pytest.mark.parametrize("pattern", ["s-%03d.tar.gz", "s-%03x.tar"])
def test_compressed_or_hex_numbered_shards_get_no_index_and_the_manifest_names_none(
    tmp_path: Path, pattern: str
) -> None:
    with ShardWriter(str(tmp_path / pattern), maxcount=1, manifest=str(tmp_path / "m.json")) as w:
        for i in range(12):
            w.write({"__key__": f"k{i}", "txt": "x"})
    assert not list(tmp_path.glob("*.idx"))
    table = load_table(str(tmp_path / "m.json"))
    assert (len(table), table.index) == (12, None)


def test_write_raw_of_bytes_that_are_not_one_sample_is_an_input_error(tmp_path: Path) -> None:
    pax = encode_sample({"__key__": LONG, "txt": "x" * 3000})
    assert raw_key(pax) == LONG  # read by the strict reader: a pax header first
    with pytest.raises(InputError, match=r"^sample: input ends inside member data"):
        raw_key(pax[:2000])
    two = encode_member("README", b"") + encode_member("a.txt", b"1") + encode_member("b.txt", b"2")
    with pytest.raises(InputError, match="the members of 2 samples, not of one"):
        raw_key(two)
    with pytest.raises(InputError, match="the members of 0 samples, not of one"):
        raw_key(encode_member("README", b"no field"))
    with pytest.raises(InputError):
        with ShardWriter(str(tmp_path / "s-%d.tar"), manifest=str(tmp_path / "m.json")) as w:
            w.write_raw(encode_member("README", b"no field"))
    assert list(tmp_path.iterdir()) == []


def test_resume_makes_the_indexes_of_the_kept_shards_again_when_missing_or_wrong(
    tmp_path: Path,
) -> None:
    samples = [{"__key__": f"k{i:02d}", "txt": "x" * i} for i in range(11)]
    clean = tmp_path / "clean"
    with ShardWriter(str(clean / "s-%d.tar"), maxcount=3, manifest=str(clean / "m.json")) as w:
        w.write_all(samples)
    cut = tmp_path / "cut"
    interrupted = ShardWriter(str(cut / "s-%d.tar"), maxcount=3, manifest=str(cut / "m.json"))
    interrupted.write_all(samples[:8])  # two shards done, the third unfinished
    interrupted._settle()  # killed once the second shard was in place
    interrupted._file.abort()  # type: ignore[union-attr]
    (cut / "s-0.tar.idx").unlink()  # lost
    (cut / "s-1.tar.idx").write_bytes((clean / "s-2.tar.idx").read_bytes())  # another's
    resumed = ShardWriter(str(cut / "s-%d.tar"), maxcount=3, mode="resume",
                          manifest=str(cut / "m.json"))  # fmt: skip
    assert [s.first_key for s in resumed.kept] == ["k00", "k03"]
    assert (cut / "s-1.tar.idx").read_bytes() == (clean / "s-1.tar.idx").read_bytes()
    with resumed:
        resumed.write_all(resumed.skip_kept(samples))
    assert files(cut) == files(clean)


def test_the_cluster_run_on_the_local_engine_writes_one_machines_files_resumed_or_not(
    tmp_path: Path,
) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    shard_dataset(Words(40), str(here / "s-%02d.tar"), maxsize=2000, manifest=str(here / "m.json"))
    assert check_random_access(here / "m.json").samples == 40

    def cluster(mode: str) -> None:
        encoder = ItemEncoder(Words(40), None, default_mtime(), 90, "png",
                              ImageTransform(None, None, 90))  # fmt: skip
        shard_on_engine(encoder, list(range(40)), str(there / "s-%02d.tar"), engine="local",
                        workers=1, address=None, num_cpus=1, retries=0,
                        manifest=str(there / "m.json"), maxcount=100, maxsize=2000,
                        skipping=False, rejects=None, report=lambda tally: None, mode=mode,
                        start=0, storage_options=None, post=None, on_shard=None,
                        on_reject=None)  # fmt: skip

    cluster("create")
    assert files(there) == files(here)
    shards = sorted(there.glob("s-*.tar"))
    assert len(shards) > 4
    for shard in shards[3:]:  # as if the run had stopped there
        shard.unlink()
    (there / "s-01.tar.idx").unlink()  # a kept shard's index lost
    (there / "s-02.tar.idx").write_bytes((there / "s-00.tar.idx").read_bytes())  # another's
    cluster("resume")
    assert files(there) == files(here)
    (there / "s-00.tar.idx").write_bytes(b"stale")
    cluster("overwrite")  # each shard and its index through the commit, under pending names
    assert files(there) == files(here)
