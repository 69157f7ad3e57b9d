"""Three reference shards cut at every 512-byte boundary and one byte either side.

The shards are written by GNU tar (ustar; GNU with long names; pax with long and UTF-8
names), so their layout is read independently with Python's ``tarfile``. Every cut gives
exit 0 with the complete sample set only where the contract accepts the cut (the first
zero block of the end marker is whole: at most the second one is missing), and
otherwise exit 2 with exactly the whole samples that were known complete before it: the
samples of the members read whole, minus the last one, unless the cut falls inside the
data of a member whose header was read, under another key (then that one too).

The library reader sees every cut (through a stream handing out a few bytes at a time
as well), the loader too under both handlers, and ``tarcat`` a seeded subsample of cuts.
"""

from __future__ import annotations

import io
import os
import random
import subprocess
import tarfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from corpus import MTIME, Expected
from outputs import archive_samples, as_expected, check_stderr, shell

from tarkit.errors import InputError, TruncatedError
from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members

# Every test here runs with the compiled scanner and with the pure-Python reader.
pytestmark = pytest.mark.usefixtures("reader")

BLOCK = 512
SUBSAMPLE_SEED = 20240917  # which cuts tarcat sees
SUBSAMPLE = 10  # cuts per shard through tarcat, besides those around the end


def sample_files(kind: str) -> list[tuple[str, bytes]]:
    """Files of the reference shard ``kind``: six samples, fields of awkward sizes."""
    prefix = {
        "ustar": "",
        "gnu": "g" * 70 + "/" + "h" * 60 + "/",  # names over 100 bytes, no '/' split fits
        "pax": "päx-" + "p" * 120 + "/",  # long and not ASCII
    }[kind]
    sizes = [0, 1, 511, 512, 513, 1500]
    files = []
    for i, size in enumerate(sizes):
        key = f"{prefix}s{i:02d}"
        files.append((f"{key}.bin", bytes((i * 31 + j) % 256 for j in range(size))))
        files.append((f"{key}.cls", str(i).encode()))
        if i % 2:
            files.append((f"{key}.json", b'{"i": %d}' % i))
    return files


@dataclass(frozen=True)
class Layout:
    """Where each member lies in a shard, read by tarfile."""

    name: str
    start: int  # first block, extension headers included
    data: int  # first data byte (after its own header)
    end: int  # after its padding
    payload: bytes


@dataclass(frozen=True)
class Shard:
    kind: str
    data: bytes  # the members and the two-block end marker, no record padding
    members: tuple[Layout, ...]


@cache
def reference_shard(kind: str) -> Shard:
    """The reference shard ``kind``, written by GNU tar."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        names = []
        for name, data in sample_files(kind):
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            names.append(name)
        subprocess.run(
            ["tar", f"--format={kind}", "--owner=0", "--group=0", "--numeric-owner",
             f"--mtime=@{MTIME}", "--mode=0644", "--no-recursion", "-cf", "shard.tar",
             *names],
            cwd=root, check=True, capture_output=True, env=dict(os.environ, LC_ALL="C.UTF-8"),
        )  # fmt: skip
        written = (root / "shard.tar").read_bytes()
    layout = []
    with tarfile.open(fileobj=io.BytesIO(written)) as archive:
        for info in archive.getmembers():
            end = info.offset_data + (info.size + BLOCK - 1) // BLOCK * BLOCK
            payload = written[info.offset_data : info.offset_data + info.size]
            layout.append(Layout(info.name, info.offset, info.offset_data, end, payload))
    last = layout[-1].end
    assert written[last : last + 1024] == bytes(1024)
    return Shard(kind, written[: last + 1024], tuple(layout))


KINDS = ["ustar", "gnu", "pax"]


def key_field(name: str) -> tuple[str, str]:
    slash = name.rfind("/") + 1
    dot = name.index(".", slash)
    return name[:dot], name[dot + 1 :]


def group(members: list[Layout]) -> list[Expected]:
    out: list[Expected] = []
    for m in members:
        key, field = key_field(m.name)
        if out and out[-1][0] == key:
            out[-1] = (key, out[-1][1] + ((field, m.payload),))
        else:
            out.append((key, ((field, m.payload),)))
    return out


def expected_at(shard: Shard, cut: int) -> tuple[int, list[Expected]]:
    """Exit status and samples for ``shard`` cut to ``cut`` bytes."""
    if cut >= len(shard.data) - BLOCK:
        return 0, group(list(shard.members))
    whole = [m for m in shard.members if m.end <= cut]
    samples = group(whole)
    named = [m for m in shard.members if m.data <= cut < m.end]
    if named and samples and key_field(named[0].name)[0] != samples[-1][0]:
        return 2, samples  # the header after the last sample was read: it is complete
    return 2, samples[:-1]


def cuts(shard: Shard) -> list[int]:
    """Every 512-byte boundary and one byte either side, within the shard."""
    points = set()
    for boundary in range(0, len(shard.data) + 1, BLOCK):
        points.update({boundary - 1, boundary, boundary + 1})
    return sorted(p for p in points if 0 <= p <= len(shard.data))


class Trickle(io.RawIOBase):
    """A stream that hands out at most a few bytes per read, as a slow pipe does."""

    def __init__(self, data: bytes, seed: int) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._rng = random.Random(seed)

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:
        step = self._rng.randint(1, 700)
        chunk = bytes(self._data[self._pos : self._pos + min(step, n if n > 0 else step)])
        self._pos += len(chunk)
        return chunk

    def read(self, n: int | None = -1) -> bytes:
        return self.read1(-1 if n is None else n)


def read_cut(
    stream: io.RawIOBase | io.BytesIO, data_only: bool = False
) -> tuple[int, list[Expected], InputError | None]:
    got = []
    try:
        members = read_members(stream, "cut.tar", data_only=data_only)  # type: ignore[arg-type]
        got.extend(group_samples(members))
    except InputError as exc:
        return 2, as_expected(got), exc
    return 0, as_expected(got), None


def all_cuts() -> Iterator[tuple[str, int]]:
    for kind in KINDS:
        for cut in cuts(reference_shard(kind)):
            yield kind, cut


def test_reference_shards_have_the_layout_the_sweep_needs() -> None:
    for kind in KINDS:
        shard = reference_shard(kind)
        extension_headers = [m.data - m.start > BLOCK for m in shard.members]
        assert any(extension_headers) == (kind != "ustar"), kind
        assert len(group(list(shard.members))) == 6
        assert len(cuts(shard)) > 3 * len(shard.data) // BLOCK


@pytest.mark.parametrize("kind", KINDS)
def test_library_reader_gives_all_or_a_whole_sample_prefix_at_every_cut(kind: str) -> None:
    shard = reference_shard(kind)
    for cut in cuts(shard):
        status, expected = expected_at(shard, cut)
        for stream, data_only in (
            (io.BytesIO(shard.data[:cut]), False),
            (Trickle(shard.data[:cut], seed=cut), False),
            # Members straddle reads, so each is read into a buffer of its own, with its
            # data alone in the loader's way.
            (Trickle(shard.data[:cut], seed=cut), True),
        ):
            got_status, got, error = read_cut(stream, data_only)
            assert (got_status, got) == (status, expected), (kind, cut, error)
            assert error is None or isinstance(error, TruncatedError), (kind, cut, error)


@pytest.mark.parametrize("kind", KINDS)
def test_loader_raises_or_skips_with_a_whole_sample_prefix_at_every_cut(
    tmp_path: Path, kind: str
) -> None:
    from tarkit.loading import ShardDataset

    shard = reference_shard(kind)
    path = tmp_path / "cut.tar"
    for cut in cuts(shard):
        status, expected = expected_at(shard, cut)
        view = [(key, dict(fields)) for key, fields in expected]
        path.write_bytes(shard.data[:cut])
        got: list[dict[str, object]] = []
        try:
            got.extend(ShardDataset(str(path), handler="raise"))
        except TruncatedError:
            assert status == 2, cut
        else:
            assert status == 0, cut
        assert [(s["__key__"], fields_of(s)) for s in got] == view, cut
        dataset = ShardDataset(str(path), handler="skip")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            skipped = list(dataset)
        assert [(s["__key__"], fields_of(s)) for s in skipped] == view, cut
        assert dataset.skipped.total_shards == (status == 2), cut


def fields_of(item: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in item.items() if not k.startswith("__")}


def tarcat_cuts() -> list[tuple[str, int]]:
    """A seeded subsample of cuts, plus every cut around the end marker."""
    rng = random.Random(SUBSAMPLE_SEED)
    chosen = []
    for kind in KINDS:
        shard = reference_shard(kind)
        points = cuts(shard)
        near_end = [p for p in points if p >= len(shard.data) - 2 * BLOCK - 1]
        rest = [p for p in points if p not in near_end]
        chosen += [(kind, p) for p in sorted(rng.sample(rest, SUBSAMPLE) + near_end)]
    return chosen


@pytest.mark.parametrize("kind, cut", tarcat_cuts())
def test_tarcat_gives_all_or_a_whole_sample_prefix_without_end_marker(
    tmp_path: Path, kind: str, cut: int
) -> None:
    shard = reference_shard(kind)
    status, expected = expected_at(shard, cut)
    (tmp_path / "cut.tar").write_bytes(shard.data[:cut])
    statuses = shell(tmp_path, "cat cut.tar | tarcat 2>err | tee out.tar | tar -tf - &>/dev/null")
    assert statuses[1] == status
    what = r"(input ends .*|empty input \(0 bytes\))" if status else None
    check_stderr((tmp_path / "err").read_text(), "tarcat", "<stdin>", status, what)
    assert archive_samples((tmp_path / "out.tar").read_bytes(), complete=status == 0) == expected
    if status == 0:
        assert statuses[2] == 0  # GNU tar reads the output cleanly
