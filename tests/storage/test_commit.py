"""A set committed through a journal: a commit stopped midway is finished by every writer
of the pattern, whatever its mode; readers refuse only the files it names; a journal
that cannot be finished, or is not one, is an error that says what to do."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from tarkit.errors import OutputError, SourceError
from tarkit.format.encoding import ImageTransform
from tarkit.format.tar_writer import default_mtime
from tarkit.storage import Move, check_local_files, commit_files, finish_commit
from tarkit.writing.cluster import ClusterRun
from tarkit.writing.from_dataset import shard_dataset
from tarkit.writing.items import ItemEncoder
from tarkit.writing.patterns import PatternFiles, journal_name
from tarkit.writing.shard_writer import ShardWriter


def write(directory: Path, keys: str, manifest: bool = True, size: int = 3) -> dict[str, bytes]:
    """One-sample shards ``s-N.tar`` of ``keys`` in ``directory``, and their manifest."""
    with ShardWriter(str(directory / "s-%d.tar"), maxcount=1,
                     manifest=str(directory / "m.json") if manifest else None) as writer:  # fmt: skip
        for key in keys:
            writer.write({"__key__": key, "txt": key * size})
    return files(directory)


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def stopped_commit(tmp_path: Path) -> tuple[Path, dict[str, bytes], dict[str, bytes]]:
    """An overwrite of shards a–e by shards v–x stopped after its second move (its third
    staged file missing for a moment): the directory, the old set and the new set."""
    new = write(tmp_path / "new", "vwx", size=600)  # (not the old shards' size)
    out = tmp_path / "out"
    old = write(out, "abcde")
    staged = [f"s-{n}.tar" for n in range(3)] + [f"s-{n}.tar.idx" for n in range(3)]
    for name in staged:
        shutil.copy(tmp_path / "new" / name, out / f".{name}.pending")
    (out / ".s-2.tar.pending").rename(tmp_path / "aside")
    moves = [Move(str(out / f".{name}.pending"), str(out / name), len(new[name]))
             for name in staged]  # fmt: skip
    removals = [str(out / f"s-{n}.tar{index}") for n in range(5) for index in ("", ".idx")]
    manifest = [(str(out / name), new[name]) for name in ("m.columns", "m.json")]
    with pytest.raises(OutputError, match="neither the new file nor its staged copy"):
        commit_files(journal_name(str(out / "s-%d.tar")), moves, removals, manifest)
    (tmp_path / "aside").rename(out / ".s-2.tar.pending")
    shown = {n: d for n, d in files(out).items() if not n.startswith(".")}
    assert shown["s-0.tar"] == new["s-0.tar"] and shown["s-2.tar"] == old["s-2.tar"]
    assert "m.json" not in shown  # no manifest claims either set meanwhile
    return out, old, new


def cluster_run(pattern: str, mode: str) -> None:
    encoder = ItemEncoder([], None, default_mtime(), 90, "png", ImageTransform(None, None, 90))
    ClusterRun(encoder, [], pattern, maxcount=1, maxsize=1 << 20, mode=mode, start=0,
               storage_options=None, manifest=None, skipping=False, rejects=None,
               on_reject=None, post=None, on_shard=None, report=print)  # fmt: skip


@pytest.mark.parametrize(
    "mode", ["create", "overwrite", "resume", "cluster create", "dataset resume"]
)
def test_every_writer_of_the_pattern_finishes_a_stopped_commit_whatever_its_mode(
    tmp_path: Path, mode: str
) -> None:
    out, _, new = stopped_commit(tmp_path)
    pattern = str(out / "s-%d.tar")
    if mode == "create":
        with pytest.raises(OutputError, match="3 files already match"):
            ShardWriter(pattern)
    elif mode == "cluster create":
        with pytest.raises(OutputError, match="3 files already match"):
            cluster_run(pattern, "create")
    elif mode == "dataset resume":  # the new set is whole before its shards are checked
        items = [{"__key__": key, "txt": key * 600} for key in "vwx"]
        shard_dataset(items, pattern, maxcount=1, mode="resume")
    else:
        writer = ShardWriter(pattern, mode=mode)
        assert writer.finished_commit
        if mode == "resume":
            assert [s.first_key for s in writer.kept] == ["v", "w", "x"]
    assert files(out) == new


def test_readers_refuse_the_files_of_a_stopped_commit_and_only_those(tmp_path: Path) -> None:
    out, _, _ = stopped_commit(tmp_path)
    write(out / "val", "pq", manifest=False)
    (out / "val" / "s-0.tar").rename(out / "v-0.tar")  # another set in the same directory
    with pytest.raises(SourceError, match=r"\.s-%d\.tar\.commit\.json\), so the files there are"):
        check_local_files([str(out / "s-1.tar")])
    with pytest.raises(SourceError) as raised:
        check_local_files([str(out / "s-4.tar")])  # to be removed by the commit
    assert raised.value.reason == SourceError.UNFINISHED
    check_local_files([str(out / "v-0.tar")])
    pattern = str(out / "s-%d.tar")
    assert finish_commit(journal_name(pattern), PatternFiles(pattern))
    check_local_files([str(out / "s-1.tar")])


def test_a_journal_that_cannot_be_finished_says_so_and_a_foreign_one_is_not_followed(
    tmp_path: Path,
) -> None:
    out, _, _ = stopped_commit(tmp_path)
    journal = Path(journal_name(str(out / "s-%d.tar")))
    (out / ".s-2.tar.pending").unlink()
    with pytest.raises(OutputError, match=r"s-2\.tar: cannot finish the commit of .*remove the "):
        finish_commit(str(journal), PatternFiles(str(out / "s-%d.tar")))
    entries = json.loads(journal.read_text())
    assert entries["format"] == "tarkit-commit" and entries["moves"][0][:2] == [
        ".s-0.tar.pending", "s-0.tar"
    ]  # fmt: skip
    victim = tmp_path / "victim.txt"
    victim.write_text("not a shard")
    for named in (str(victim), "../victim.txt", "file:../victim.txt"):
        journal.write_text(json.dumps({**entries, "moves": [], "remove": [named]}))
        with pytest.raises(OutputError, match="or one naming files outside its directory"):
            ShardWriter(str(out / "s-%d.tar"), mode="overwrite")
    # The files published with a manifest (version 2): its columns file alone.
    (out / "notes.txt").write_text("the user's")
    other = [["notes.txt", base64.b64encode(b"overwritten").decode()], entries["manifest"][-1]]
    journal.write_text(json.dumps({**entries, "manifest": other}))
    with pytest.raises(OutputError, match=r"it publishes .*notes\.txt, not the columns file"):
        ShardWriter(str(out / "s-%d.tar"), mode="overwrite")
    assert (out / "notes.txt").read_text() == "the user's"
    journal.write_text('{"moves": "rm -rf /"}')
    with pytest.raises(OutputError, match="not the journal of a tarkit commit"):
        ShardWriter(str(out / "s-%d.tar"))
    assert victim.read_text() == "not a shard"
    assert not finish_commit(str(out / ".none.commit.json"), PatternFiles(str(out / "s-%d.tar")))


def test_a_journal_that_cannot_be_written_leaves_the_old_set_and_no_pending_shard(
    tmp_path: Path,
) -> None:
    old = write(tmp_path, "abc")
    pattern = str(tmp_path / "s-%d.tar")
    with pytest.raises(OutputError, match="commit.json: cannot rename into place"):
        with ShardWriter(pattern, maxcount=1, mode="overwrite") as writer:
            writer.write({"__key__": "v", "txt": "new"})
            Path(journal_name(pattern)).mkdir()  # where the journal should go
    Path(journal_name(pattern)).rmdir()
    assert files(tmp_path) == old


def test_a_journal_above_the_shards_is_found_by_readers_and_a_link_out_is_refused(
    tmp_path: Path,
) -> None:
    # The shard number in a directory: the journal lies above the shards (out/), not beside.
    pattern = str(tmp_path / "out" / "{shard:03d}" / "x.tar")
    with ShardWriter(pattern, maxcount=1) as writer:
        for key in "abc":
            writer.write({"__key__": key, "txt": key})
    out = tmp_path / "out"
    for n in range(3):
        (out / f"{n:03d}" / ".x.tar.pending").write_bytes((out / f"{n:03d}" / "x.tar").read_bytes())
    moves = [
        Move(str(out / f"{n:03d}" / ".x.tar.pending"), str(out / f"{n:03d}" / "x.tar"), 3072)
        for n in (0, 1, 2, 3)
    ]  # fmt: skip (the fourth staged shard is missing)
    with pytest.raises(OutputError, match="neither the new file nor its staged copy"):
        commit_files(journal_name(pattern), moves, [])
    assert Path(journal_name(pattern)).parent == out
    with pytest.raises(SourceError, match=r"_x\.tar\.commit\.json\), so the files there") as raised:
        check_local_files([str(out / "001" / "x.tar")])
    assert raised.value.reason == SourceError.UNFINISHED

    # A shard directory that is a link: the journal's removal would reach through it.
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "x.tar").write_text("not a shard of this set")
    shutil.rmtree(out / "002")
    (out / "002").symlink_to(victim)
    journal = Path(journal_name(pattern))
    journal.write_text(json.dumps({"format": "tarkit-commit", "version": 1, "moves": [],
                                   "remove": ["002/x.tar"], "manifest": None}))  # fmt: skip
    with pytest.raises(
        OutputError, match=r"002/x\.tar lies outside its directory \(through a link\)"
    ):
        ShardWriter(pattern, mode="overwrite")
    assert (victim / "x.tar").read_text() == "not a shard of this set"


def test_a_manifests_numbered_shards_are_checked_by_one_listing_as_by_a_stat_each(
    tmp_path: Path,
) -> None:
    from tarkit.format.manifest import ShardInfo
    from tarkit.format.shard_table import ShardTable
    from tarkit.storage.manifests import ShardUrls
    from tarkit.storage.shards import local_problems

    out, _, _ = stopped_commit(tmp_path)  # s-0…s-4 named by its journal
    for n in range(5, 9):
        (out / f"s-{n}.tar").write_bytes(b"")
    (out / "s-6.tar").unlink()
    (out / "s-7.tar").unlink()
    (out / "s-7.tar").mkdir()
    (out / "s-10.tar").mkdir()  # past the manifest's shards: not one of them
    infos = [ShardInfo(f"s-{n}.tar", 1, 0) for n in range(10)]
    urls = ShardUrls(ShardTable.from_infos(infos, location=str(out / "m.json")))
    assert urls.pattern == str(out / "s-%d.tar")
    listed = local_problems(urls)
    assert listed == local_problems(list(urls))  # the same problems, in the same order
    assert {spec[len(str(out)) + 1 :]: p.what for spec, p in listed.items()} == {
        **{f"s-{n}.tar": "unfinished" for n in range(5)},
        "s-6.tar": "missing", "s-7.tar": "directory", "s-9.tar": "missing",
    }  # fmt: skip
    with pytest.raises(SourceError) as raised:
        check_local_files(urls, "shards")
    assert raised.value.reason == SourceError.UNFINISHED
