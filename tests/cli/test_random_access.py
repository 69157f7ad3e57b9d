"""Random access from the shell, through the real commands: tarcat --keys, tarfirst --key and
tarshow --position/--key over an indexed dataset (a manifest, its directory) or indexed
archives read only the samples asked for, and write exactly what reading everything would."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from conftest import run, run_shell
from shard_server import ShardServer
from test_tar2tsv import imported_modules

import tarkit
from tarkit.errors import InputError
from tarkit.format.field_spec import parse_field_spec, select_fields
from tarkit.format.index import SUFFIX, ShardIndex, index_stream
from tarkit.storage import Sink, publish
from tarkit.stream.filters import filter_samples, key_in
from tarkit.stream.show import describe
from tarkit.stream.stages import read_samples, write_samples
from tarkit.writing.index import index_shards

COUNTS = [7, 3, 9, 5]
# Listed out of order, one twice, from the first, third and last shards (none from the second).
WANTED = ["k02-008", "k00-000", "k03-004", "k02-001", "k00-000", "k02-005"]


def write_shards(directory: Path) -> list[str]:
    """Shards written by ShardWriter: samples ``kSS-III`` with cls, txt (of varied sizes)
    and json."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, count in enumerate(COUNTS):
        with tarkit.ShardWriter(str(directory / f"part{n}-%03d.tar"), maxcount=10**6) as writer:
            for i in range(count):
                writer.write({"__key__": f"k{n:02d}-{i:03d}", "cls": str(n * 100 + i).encode(),
                              "txt": (f"sample {n}/{i} " * (3 * i + 1)).encode(),
                              "json": json.dumps({"n": n, "i": i}).encode()})  # fmt: skip
        path = directory / f"s-{n:03d}.tar"
        (directory / f"part{n}-000.tar").rename(path)
        paths.append(str(path))
    return paths


def index_beside(paths: list[str]) -> None:
    """Each shard's index beside it, as tarindex and the writers make it."""
    for path in paths:
        with open(path, "rb") as stream:
            Path(path + SUFFIX).write_bytes(index_stream(stream, path))


def write_manifest(directory: Path, paths: list[str]) -> str:
    manifest = str(directory / "manifest.json")
    publish(manifest, index_shards(paths, manifest_path=manifest).to_bytes())
    return manifest


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[Path, list[str]]:
    """A directory of four indexed shards and their manifest."""
    directory = tmp_path / "d"
    paths = write_shards(directory)
    index_beside(paths)
    write_manifest(directory, paths)
    return directory, paths


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.txt"
    path.write_text("\n".join(WANTED) + "\n")
    return path


def filtered(paths: list[str], *options: str) -> bytes:
    """What tarcat of every shard piped through the filter writes (read whole)."""
    result = run_shell(f"tarcat {' '.join(paths)} | tarcat {' '.join(options)}")
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return result.stdout


def kept(paths: list[str], keys: list[str], tmp_path: Path) -> bytes:
    """What the filter writes, made in this process (the commands agree:
    test_keys_over_a_dataset_or_indexed_archives_write_the_bytes_of_the_filter)."""
    out = tmp_path / "kept.tar"
    samples = read_samples(paths)
    write_samples(filter_samples(samples, key_in(keys)), Sink(str(out)))
    return out.read_bytes()


def shown(paths: list[str], positions: slice, fields: str | None = None) -> bytes:
    """What tarshow prints of the samples at ``positions`` (made in this process)."""
    samples = list(read_samples(paths))[positions]
    if fields is not None:
        samples = [select_fields(sample, parse_field_spec(fields)) for sample in samples]
    return "".join(line + "\n" for s in samples for line in describe(s)).encode()


def spans(paths: list[str], keys: set[str]) -> dict[str, list[tuple[int, int]]]:
    """Per shard, the byte spans of the samples with ``keys``, from its index."""
    found: dict[str, list[tuple[int, int]]] = {}
    for path in paths:
        index = ShardIndex(Path(path + SUFFIX).read_bytes(), path)
        entries = [index.entry(i) for i in range(len(index))]
        found[path] = [(e.offset, e.stop) for e in entries if e.key in keys]
    return found


# --- tarcat --keys ----------------------------------------------------------------------


def test_keys_over_a_dataset_or_indexed_archives_write_the_bytes_of_the_filter(
    dataset: tuple[Path, list[str]], keys_file: Path, tmp_path: Path
) -> None:
    directory, paths = dataset
    want = filtered(paths, "--keys", str(keys_file))
    assert [s.key for s in tarkit.group_samples(tarkit.read_members(io.BytesIO(want)))] == [
        "k00-000", "k02-001", "k02-005", "k02-008", "k03-004"
    ]  # fmt: skip
    assert kept(paths, WANTED, tmp_path) == want
    for source in (str(directory), str(directory / "s-*.tar")):
        result = run_shell(f"tarcat --keys {keys_file} {source}")
        assert (result.returncode, result.stderr, result.stdout) == (0, "", want), source
    options = "--where 'cls > 200' -f txt -c 2"  # the other options apply after it
    result = run_shell(f"tarcat --keys {keys_file} {options} {directory}/manifest.json")
    assert (
        result.stdout
        == run_shell(f"tarcat --keys {keys_file} {options} < {tmp_path}/kept.tar").stdout
    )


def test_keys_read_only_the_listed_samples_the_others_may_be_anything(
    dataset: tuple[Path, list[str]], keys_file: Path, tmp_path: Path
) -> None:
    directory, paths = dataset
    want = kept(paths, WANTED, tmp_path)
    for path, listed in spans(paths, set(WANTED)).items():
        data = Path(path).read_bytes()
        garbage = bytearray(b"\xab" * len(data))  # the same size: only reading tells
        for start, stop in listed:
            garbage[start:stop] = data[start:stop]
        Path(path).write_bytes(garbage)
    result = run(["tarcat", "--keys", str(keys_file), str(directory)])
    assert (result.returncode, result.stderr, result.stdout) == (0, "", want)
    archives = run_shell(f"tarcat --keys {keys_file} {directory}/s-*.tar")
    assert (archives.returncode, archives.stderr, archives.stdout) == (0, "", want)
    with pytest.raises(InputError, match="bad header checksum"):  # what reading them gives
        list(read_samples(paths))


def test_over_http_each_listed_sample_is_one_ranged_request(
    dataset: tuple[Path, list[str]], keys_file: Path, http_server: ShardServer, tmp_path: Path
) -> None:
    directory, paths = dataset
    for name in sorted(os.listdir(directory)):
        http_server.put(f"/d/{name}", (directory / name).read_bytes())
    want = kept(paths, WANTED, tmp_path)
    result = run(["tarcat", "--keys", str(keys_file), f"{http_server.url}/d/manifest.json"])
    assert (result.returncode, result.stderr, result.stdout) == (0, "", want)
    listed = spans(paths, set(WANTED))
    for path in paths:
        shard = f"/d/{Path(path).name}"
        ranges = [r for r in http_server.requests if r[0] == shard]
        assert len(ranges) == len(listed[path]) and all("Range" in h for _, h in ranges)
        assert http_server.hits[shard + SUFFIX] == 1  # each index fetched once
    indexes = sum(len(Path(p + SUFFIX).read_bytes()) for p in paths)
    samples = sum(stop - start for found in listed.values() for start, stop in found)
    manifest = len((directory / "manifest.json").read_bytes())
    assert http_server.sent == manifest + indexes + samples  # nothing else of the shards
    sent = http_server.sent
    first = run(["tarfirst", "-f", "txt", "--key", "k02-008", f"{http_server.url}/d/"])
    assert (first.returncode, first.stdout) == (0, b"sample 2/8 " * 25)
    ((start, stop),) = spans([paths[2]], {"k02-008"})[paths[2]]
    up_to = sum(len(Path(p + SUFFIX).read_bytes()) for p in paths[:3])  # the indexes looked at
    assert http_server.sent - sent == manifest + up_to + stop - start


def test_keys_no_sample_has_are_an_error_for_a_dataset_and_left_out_of_archives(
    dataset: tuple[Path, list[str]], keys_file: Path, tmp_path: Path
) -> None:
    directory, paths = dataset
    keys_file.write_text("k00-001\nnope\nk03-000\nnot-either\n")
    out = tmp_path / "out.tar"
    result = run(["tarcat", "--keys", str(keys_file), str(directory), "-o", str(out)])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == (
        f"tarcat: error: {directory}: no sample has 2 of the 4 keys listed (the first: 'nope'); "
        "--allow-missing leaves such keys out\n"
    )
    assert not out.exists()  # nothing written: the indexes say so before any sample is read
    want = kept(paths, ["k00-001", "k03-000"], tmp_path)
    lenient = run(["tarcat", "--keys", str(keys_file), "--allow-missing", str(directory)])
    assert (lenient.returncode, lenient.stdout) == (0, want)
    archives = run_shell(f"tarcat --keys {keys_file} {directory}/s-*.tar")  # a stream's rule
    assert (archives.returncode, archives.stderr, archives.stdout) == (0, "", want)


@pytest.mark.parametrize("how", ["same size", "appended"])
def test_a_shard_changed_after_it_was_indexed_is_named_after_the_samples_before_it(
    dataset: tuple[Path, list[str]], keys_file: Path, how: str, tmp_path: Path
) -> None:
    directory, paths = dataset
    before = kept(paths[:1], WANTED, tmp_path)  # k00-000, from the first shard
    data = Path(paths[2]).read_bytes()
    if how == "same size":  # a byte of k02-001's text: only the crc32 can tell
        at = data.index(b"sample 2/1 ")
        data = data[:at] + b"S" + data[at + 1 :]
    else:
        data += bytes(1024)
    Path(paths[2]).write_bytes(data)
    result = run(["tarcat", "--keys", str(keys_file), str(directory)])
    assert result.returncode == 2
    assert result.stderr.startswith(f"tarcat: error: {paths[2]}: sample 1 (key 'k02-001') is "
                                    "not as indexed (")  # fmt: skip
    assert "the shard changed after it was indexed; index it again with tarindex" in result.stderr
    assert (
        result.stdout == before[: len(result.stdout)] and len(result.stdout) >= len(before) - 1024
    )


def test_a_dataset_without_indexes_is_refused_naming_tarindex_archives_are_read_whole(
    dataset: tuple[Path, list[str]], keys_file: Path, tmp_path: Path
) -> None:
    directory, paths = dataset
    want = kept(paths, WANTED, tmp_path)
    Path(paths[1] + SUFFIX).write_text("0 1024 k01-000\n")  # not tarkit's: DALI's wds2idx
    archives = run_shell(f"tarcat --keys {keys_file} {directory}/s-*.tar")
    assert (archives.returncode, archives.stderr, archives.stdout) == (0, "", want)
    for path in paths:
        os.unlink(path + SUFFIX)
    result = run(["tarcat", "--keys", str(keys_file), str(directory)])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == (
        f"tarcat: error: {paths[0]}: no shard index ({paths[0]}.idx does not exist): random "
        "access needs one; build the indexes with tarindex SHARDS… -o DIR/manifest.json\n"
    )
    archives = run_shell(f"tarcat --keys {keys_file} {directory}/s-*.tar")
    assert (archives.returncode, archives.stderr, archives.stdout) == (0, "", want)


@pytest.mark.parametrize(
    "args, message",
    [
        (["DIR"], "DIR: tarcat reads a dataset (a manifest or its directory) by its index, "
                  "with --keys FILE; to read all of it, name its shards"),
        (["--keys", "KEYS", "DIR", "DIR/s-000.tar"],
         "DIR: a dataset (a manifest or its directory) is read alone, not with other inputs"),
        (["--keys", "KEYS", "--mix", "1", "--ignore-zeros", "DIR/manifest.json"],
         "--mix and --ignore-zeros read archives whole, not a dataset by its index "
         "(DIR/manifest.json)"),
    ],
)  # fmt: skip
def test_a_dataset_with_options_that_read_archives_whole_is_a_usage_error(
    dataset: tuple[Path, list[str]], keys_file: Path, args: list[str], message: str
) -> None:
    directory = str(dataset[0])
    result = run(["tarcat", *(a.replace("DIR", directory).replace("KEYS", str(keys_file))
                              for a in args)])  # fmt: skip
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == f"tarcat: error: {message.replace('DIR', directory)}\n"


# --- tarfirst --key, tarshow --position/--key -------------------------------------------


def test_tarfirst_key_over_a_dataset_writes_that_samples_field(
    dataset: tuple[Path, list[str]],
) -> None:
    directory, paths = dataset
    assert run(["tarfirst", "-f", "cls", "--key", "k03-004", str(directory)]).stdout == b"304"
    assert run(["tarfirst", "-f", "json", str(directory)]).stdout == b'{"n": 0, "i": 0}'
    result = run(["tarfirst", "--key", "k09-000", str(directory)])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == (f"tarfirst: error: {directory}: no sample has the key 'k09-000' "
                             "(24 samples, looked up in their indexes)\n")  # fmt: skip
    result = run(["tarfirst", "-f", "jpg", "--key", "k01-002", str(directory / "manifest.json")])
    assert (
        result.stderr
        == f"tarfirst: error: {directory}/manifest.json: sample 'k01-002' has no field 'jpg'\n"
    )


@pytest.mark.parametrize(
    "args, positions",
    [(["--position", "12"], slice(12, 13)), (["--position", "-1"], slice(-1, None)),
     (["--key", "k02-000"], slice(10, 11))],
)  # fmt: skip
def test_tarshow_shows_sample_n_or_key_k_alone_indexed_or_not(
    dataset: tuple[Path, list[str]], args: list[str], positions: slice
) -> None:
    directory, paths = dataset
    want = shown(paths, positions)
    assert want.count(b"\n") == 4  # the key and three fields
    result = run(["tarshow", *args, str(directory)])
    assert (result.returncode, result.stderr, result.stdout) == (0, "", want)
    for path in paths:  # archives without indexes: found in the stream
        os.unlink(path + SUFFIX)
    streamed = run(["tarshow", *args, *paths])
    assert (streamed.returncode, streamed.stderr, streamed.stdout) == (0, "", want)


def test_tarshow_of_a_dataset_shows_its_samples_in_order(dataset: tuple[Path, list[str]]) -> None:
    directory, paths = dataset
    result = run(["tarshow", "-c", "9", "-f", "cls", str(directory)])
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == shown(paths, slice(0, 9), "cls")


def test_tarshow_no_such_sample_is_exit_2_naming_the_inputs(
    dataset: tuple[Path, list[str]],
) -> None:
    directory, paths = dataset
    result = run(["tarshow", "--position", "24", str(directory)])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == f"tarshow: error: {directory}: no sample 24 (24 samples)\n"
    os.unlink(paths[0] + SUFFIX)
    result = run(["tarshow", "--key", "nope", paths[0]])
    assert (
        result.stderr
        == f"tarshow: error: {paths[0]}: no sample has the key 'nope' (7 samples read)\n"
    )
    both = run(["tarshow", "--key", "k00-000", "--position", "0", paths[0]])
    assert both.stderr == ("tarshow: error: --position and --key each name one sample: give one "
                           "of them\n")  # fmt: skip


def test_random_access_from_the_shell_imports_no_torch_or_numpy(
    dataset: tuple[Path, list[str]], keys_file: Path
) -> None:
    directory, _ = dataset
    modules = imported_modules("tarkit.cli.tarcat", ["--keys", str(keys_file), str(directory)],
                               directory, stderr=None)  # fmt: skip
    assert "tarkit" in modules and not modules & {"torch", "numpy", "PIL"}
