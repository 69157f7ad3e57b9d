"""The compiled member scanner itself: built from this source, chosen by TARKIT_PURE, and
its samples (spans of the read buffer) written as large slices of that buffer.

That it reads everything exactly as the pure-Python reader does is checked by running
every reader test both ways (the ``reader`` fixture) and by the mutation fuzzer, which
compares the two on every case (fuzz/mutations.py: ``disagreement``).
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, make_tar

from tarkit.errors import SampleError
from tarkit.format import scanner
from tarkit.format.samples import Sample, group_samples
from tarkit.format.tar import read_members
from tarkit.storage import Sink
from tarkit.stream import stages
from tarkit.stream.stages import WRITE_CHUNK, shuffle_samples, write_samples

pytestmark = pytest.mark.usefixtures("reader")


def compiled_only(reader: str) -> None:
    if reader != "compiled":
        pytest.skip("about the compiled scanner")


def test_the_built_scanner_is_compiled_from_the_current_source(reader: str) -> None:
    compiled_only(reader)
    source = (ROOT / "tarkit" / "format" / "_scan.c").read_bytes()
    assert scanner.compiled is not None
    assert scanner.compiled.SOURCE_HASH == hashlib.sha256(source).hexdigest()[:16], (
        "the built scanner is stale: run pip install -e . (or bin/setup) again"
    )


@pytest.mark.parametrize("value, implementation", [("1", "pure"), ("0", "compiled"),
                                                   ("", "compiled")])  # fmt: skip
def test_tarkit_pure_chooses_the_reader_of_a_new_process(
    reader: str, value: str, implementation: str
) -> None:
    compiled_only(reader)
    result = subprocess.run(
        [sys.executable, "-c", "from tarkit.format import scanner; print(scanner.implementation())"],
        env=dict(os.environ, TARKIT_PURE=value), capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.stdout.strip() == implementation


def small_samples(count: int) -> bytes:
    return make_tar((f"{i:06d}.{f}", os.urandom(100 + i % 900)) for i in range(count)
                    for f in ("cls", "jpg", "json"))  # fmt: skip


class CountingStream(io.RawIOBase):
    """A file stream that records what each write was given."""

    def __init__(self, stream: io.BufferedWriter) -> None:
        self.stream = stream
        self.writes: list[object] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[no-untyped-def, override]
        self.writes.append(data)
        return self.stream.write(data)

    def flush(self) -> None:
        self.stream.flush()


def test_write_samples_copies_unchanged_samples_in_writes_of_about_a_megabyte(
    tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stages, "FLUSH_INTERVAL", 1e9)  # this test has no slow input
    archive = small_samples(6000)  # about 7 MB in 18,000 members
    sink = Sink(str(tmp_path / "out.tar"))
    counting = CountingStream(sink.stream)  # type: ignore[arg-type]
    sink.stream = counting  # type: ignore[assignment]
    count = write_samples(
        group_samples(read_members(io.BytesIO(archive), chunk_size=1 << 20)), sink
    )
    assert count == 6000
    assert (tmp_path / "out.tar").read_bytes() == archive
    sizes = [len(memoryview(w)) for w in counting.writes]  # type: ignore[arg-type]
    # Runs of samples, and the few read across the end of a read buffer between them.
    assert len(archive) / len(sizes) > WRITE_CHUNK / 4, sizes
    if reader == "compiled":
        # Runs of samples go out as slices of the read buffer, without a copy.
        views = [w for w in counting.writes if isinstance(w, memoryview)]
        assert sum(len(v) for v in views) > 0.9 * len(archive)


def test_a_scanned_sample_is_a_span_of_the_read_buffer_until_detached(reader: str) -> None:
    archive = small_samples(50)
    samples = list(group_samples(read_members(io.BytesIO(archive))))
    inner = samples[1:-1]  # the first and last sample meet the Python reader
    if reader == "compiled":
        assert all(s.span is not None for s in inner)
    else:
        assert all(s.span is None for s in samples)
    for sample in inner:
        detached = sample.detached()
        assert detached.span is None
        assert (detached.key, detached.fields, detached.members, detached.raw) == (
            sample.key, sample.fields, sample.members, sample.raw)  # fmt: skip
    shuffled = list(shuffle_samples(iter(samples), 10, seed=1))
    assert all(s.span is None for s in shuffled)
    assert sorted(s.raw for s in shuffled) == sorted(s.raw for s in samples)


def test_field_bytes_read_from_a_span_equal_the_members_data(reader: str) -> None:
    archive = make_tar(
        [(f"k{i}.{field}", bytes([i]) * size) for i in range(30)
         for field, size in (("jpg", 700 + i), ("cls", 1), ("json", 0), ("txt", 512))]
    )  # fmt: skip
    samples = list(group_samples(read_members(io.BytesIO(archive))))
    assert any(s.span is not None for s in samples) == (reader == "compiled")
    for sample in samples:
        data = [m.data for m in sample.detached().members]
        assert sample.data_all() == data
        assert [sample.data_at(i) for i in range(len(sample.fields))] == data
        picks = [3, 0, 0, 2]
        assert sample.data_of(picks) == [data[i] for i in picks]
        assert sample.data_of([]) == []
        with pytest.raises(IndexError):
            sample.data_of([4])


@pytest.mark.parametrize("fields", [3, 17, 2000])
@pytest.mark.parametrize("twin", [None, "f0000x", "F0000X"])
def test_a_field_twice_fails_a_sample_of_any_width(
    reader: str, fields: int, twin: str | None
) -> None:
    # Up to 16 fields the scanner compares them pair by pair, more after sorting them.
    names = [f"f{i:04d}x" for i in range(fields)]
    if twin is not None:
        names[-1] = twin  # the first field again, or again but for its case
    archive = make_tar([(f"{key}.{name}", b"") for key in "ab" for name in names])
    samples = group_samples(read_members(io.BytesIO(archive), "x.tar"))
    if twin is None:
        assert [(s.key, len(s.fields)) for s in samples] == [("a", fields), ("b", fields)]
    else:
        with pytest.raises(SampleError, match="appears twice in sample 'a'"):
            list(samples)


def test_a_pickled_sample_keeps_its_members_not_the_read_buffer(reader: str) -> None:
    import pickle

    archive = small_samples(50)
    sample = list(group_samples(read_members(io.BytesIO(archive))))[20]
    copy = pickle.loads(pickle.dumps(sample))
    assert isinstance(copy, Sample) and copy.span is None
    assert (copy.key, copy.fields, copy.members, copy.raw) == (
        sample.key, sample.fields, sample.members, sample.raw)  # fmt: skip
    assert len(pickle.dumps(sample)) < 2 * len(sample.raw) + 1000
    assert list(group_samples(copy.members))[0].fields == sample.fields  # kinds still FILE


def test_the_compiled_crc32_is_zlibs_for_every_length_start_and_buffer(reader: str) -> None:
    import random
    import zlib

    compiled_only(reader)
    assert scanner.compiled is not None
    crc32 = scanner.compiled.crc32
    data = random.Random(7).randbytes(70_000)
    for length in [*range(0, 200), 511, 512, 1024, 4099, 65536, 70_000]:
        for start in (0, 1, 0xFFFFFFFF, 0x12345678):
            assert crc32(data[:length], start) == zlib.crc32(data[:length], start), (length, start)
    view = memoryview(data)[3:60_003]  # not aligned, not bytes
    assert crc32(view) == zlib.crc32(view) and crc32(bytearray(view)) == zlib.crc32(view)
    assert crc32(data[5000:], crc32(data[:5000])) == zlib.crc32(data)
    assert crc32(bytes(3 << 20)) == zlib.crc32(bytes(3 << 20))  # long: run without the GIL


SPANS = [
    ("one sample of three fields", [("a.jpg", 700), ("a.cls", 1), ("a.json", 0)]),
    ("a path with directories", [("x/y/a.seg.png", 600), ("x/y/a.txt", 3)]),
]
NOT_ONE = [
    ("two keys", [("a.jpg", 10), ("b.jpg", 10)]),
    ("metadata", [("__meta__.txt", 10)]),
    ("no field", [("a.jpg", 10), ("README", 3)]),
    ("a field twice in another case", [("a.jpg", 10), ("a.JPG", 10)]),
    ("a long name (a pax header)", [("n" * 120 + ".jpg", 10)]),
]


@pytest.mark.parametrize("what, members", SPANS + NOT_ONE, ids=[w for w, _ in SPANS + NOT_ONE])
def test_a_span_is_one_sample_only_when_the_python_reader_says_so(
    reader: str, what, members
) -> None:  # type: ignore[no-untyped-def]
    compiled_only(reader)
    assert scanner.compiled is not None
    archive = make_tar((name, bytes([n]) * size) for n, (name, size) in enumerate(members))
    span = archive[: len(archive) - 1024]  # without the end-of-archive marker
    found = scanner.compiled.span_sample(span, 4096, "s.tar")
    if (what, members) in NOT_ONE:
        assert found is None  # for the Python reader, which says what is wrong
        return
    (expected,) = list(group_samples(read_members(io.BytesIO(archive), start=4096), "s.tar"))
    assert (found.key, found.fields, found.source) == (expected.key, expected.fields, "s.tar")
    assert found.data_all() == [m.data for m in expected.members]
    assert [(m.name, m.offset) for m in found.members] == [
        (m.name, m.offset) for m in expected.members
    ]
    assert scanner.compiled.span_sample(span[:700], 0, "s.tar") is None  # cut in a member
