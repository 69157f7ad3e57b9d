"""Compression: detection by magic bytes, decompression checked to the end, output by name."""

from __future__ import annotations

import gzip
import io
import random
import struct
import subprocess
import tracemalloc
import zlib
from pathlib import Path

import pytest
import zstandard
from conftest import make_tar

from tarkit.errors import CompressionError
from tarkit.format.compression import (
    compressed_bound,
    compression_for,
    measure,
    open_compressor,
    open_decompressed,
    sniff,
)
from tarkit.stream.stages import read_samples

TOOLS = {"gzip": ["gzip", "-c"], "bzip2": ["bzip2", "-c"], "xz": ["xz", "-c"],
         "zstd": ["zstd", "-q", "-c"]}  # fmt: skip
PAYLOAD = bytes(range(256)) * 2000 + b"tail"


def compress(kind: str, data: bytes) -> bytes:
    """Compress with the real command-line tool."""
    return subprocess.run(TOOLS[kind], input=data, capture_output=True, check=True).stdout


class Pipe(io.RawIOBase):
    """A non-seekable stream without peek that hands out at most ``step`` bytes per read."""

    def __init__(self, data: bytes, step: int = 4096) -> None:
        self._data = io.BytesIO(data)
        self._step = step

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:  # type: ignore[override]
        if n is None or n < 0:
            return self._data.read()
        return self._data.read(min(self._step, n))

    def read1(self, n: int = -1) -> bytes:  # type: ignore[override]
        return self._data.read(min(self._step, n) if n > 0 else self._step)


def decompress(data: bytes, step: int = 4096) -> bytes:
    stream = open_decompressed(Pipe(data, step), "in")  # type: ignore[arg-type]
    out = []
    while chunk := stream.read(1 << 16):
        out.append(chunk)
    return b"".join(out)


@pytest.mark.parametrize("kind", sorted(TOOLS))
@pytest.mark.parametrize("peekable", [True, False])
def test_sniff_detects_compression_and_keeps_the_first_bytes(kind: str, peekable: bool) -> None:
    data = compress(kind, PAYLOAD)
    stream = io.BufferedReader(io.BytesIO(data)) if peekable else Pipe(data, 1)
    found, rest = sniff(stream)  # type: ignore[arg-type]
    assert found == kind
    assert rest.read() == data


@pytest.mark.parametrize("data", [b"", b"ab", b"plain tar bytes" * 100])
def test_sniff_passes_uncompressed_input_through_whole(data: bytes) -> None:
    found, rest = sniff(Pipe(data, 3))  # type: ignore[arg-type]
    assert found is None
    assert rest.read() == data


@pytest.mark.parametrize("kind", sorted(TOOLS))
@pytest.mark.parametrize("step", [1, 7, 65536])
def test_output_of_real_tools_decompresses_exactly(kind: str, step: int) -> None:
    data = compress(kind, PAYLOAD)
    if step == 1:
        data = compress(kind, PAYLOAD[:3000])
        assert decompress(data, step) == PAYLOAD[:3000]
    else:
        assert decompress(data, step) == PAYLOAD


@pytest.mark.parametrize("kind", sorted(TOOLS))
def test_concatenated_streams_decompress_as_one(kind: str) -> None:
    # gzip, bzip2, xz and zstd all define concatenation as the concatenated content.
    data = compress(kind, b"first ") + compress(kind, b"second")
    assert decompress(data) == b"first second"


def test_gzip_with_a_bad_crc_is_an_error() -> None:
    data = bytearray(compress("gzip", PAYLOAD))
    data[-8] ^= 0xFF  # the CRC32 in the trailer
    with pytest.raises(CompressionError, match="corrupt gzip stream: CRC check failed"):
        decompress(bytes(data))


@pytest.mark.parametrize("kind", sorted(TOOLS))
@pytest.mark.parametrize("keep", [0.5, -4])
def test_compressed_stream_cut_short_is_an_error(kind: str, keep: float) -> None:
    data = compress(kind, PAYLOAD)
    cut = data[: int(len(data) * keep)] if keep > 0 else data[: int(keep)]
    with pytest.raises(CompressionError) as info:
        decompress(cut)
    assert str(info.value).startswith("in: ")
    assert kind in str(info.value)


def test_a_zstd_stream_cut_anywhere_but_between_frames_is_cut_short() -> None:
    # The frame and block headers of every layout: content size in 0 (a single segment),
    # 1, 2 or 4 bytes or none (a window descriptor then), with and without a checksum;
    # raw, RLE and compressed blocks, two blocks in a frame; a skippable frame.
    contents = [b"x" * 100, random.Random(1).randbytes(300), b"text " * 60 + bytes(140_000)]
    frames = [
        (
            zstandard.ZstdCompressor(write_checksum=checksum, write_content_size=size).compress(
                data
            ),
            data,
        )
        for data in contents
        for checksum in (False, True)
        for size in (False, True)
    ]
    frames.append((struct.pack("<II", 0x184D2A5A, 5) + b"12345", b""))
    stream = b"".join(frame for frame, _ in frames)
    ends = {0: b""}
    for frame, data in frames:
        ends[max(ends) + len(frame)] = ends[max(ends)] + data
    for cut in range(4, len(stream) + 1):  # the magic whole: detected as zstd
        if cut in ends:
            assert decompress(stream[:cut]) == ends[cut]
            continue
        with pytest.raises(CompressionError) as info:
            decompress(stream[:cut])
        assert (info.value.reason, str(info.value)) == (
            CompressionError.TRUNCATED,
            "in: zstd stream is cut short",
        ), cut


def test_zstd_inflates_no_more_than_each_read_asks_for() -> None:
    # A few kilobytes of zstd hold 128 MiB of zeros: a read of a megabyte must not
    # inflate them all at once.
    compressor = zstandard.ZstdCompressor().compressobj()
    data = b"".join(compressor.compress(bytes(1 << 20)) for _ in range(128)) + compressor.flush()
    assert len(data) < 16 << 10
    stream = open_decompressed(Pipe(data, 1 << 20), "in")  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        assert len(stream.read1(1 << 20)) == 1 << 20  # type: ignore[attr-defined]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


@pytest.mark.parametrize("kind", sorted(TOOLS))
def test_corrupt_compressed_data_is_an_error(kind: str) -> None:
    data = bytearray(compress(kind, PAYLOAD))
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(16) if data[middle] else b"\xff" * 16
    with pytest.raises(CompressionError, match=f"{kind}"):
        decompress(bytes(data))


def test_gzip_bad_crc_after_the_end_marker_fails_the_read(tmp_path: Path) -> None:
    # The tar end marker comes before the gzip trailer: the reader must read on to it.
    data = bytearray(gzip.compress(make_tar([("a.txt", b"a" * 5000)]), mtime=0))
    data[-8] ^= 0xFF
    path = tmp_path / "bad.tar.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(CompressionError, match="CRC check failed"):
        list(read_samples([str(path)]))


@pytest.mark.parametrize(
    "name, kind",
    [
        ("x.tar", None),
        ("x.tar.gz", "gzip"),
        ("X.TGZ", "gzip"),
        ("x.tar.bz2", "bzip2"),
        ("x.tbz2", "bzip2"),
        ("x.tar.xz", "xz"),
        ("x.txz", "xz"),
        ("x.tar.zst", "zstd"),
        ("x.tzst", "zstd"),
        ("-", None),
        ("gz", None),
    ],
)
def test_output_compression_is_chosen_by_name(name: str, kind: str | None) -> None:
    assert compression_for(name) == kind


def compressed_with_tarkit(kind: str | None, data: bytes) -> tuple[bytes, bool]:
    target = io.BytesIO()
    writer = open_compressor(target, kind)
    writer.write(data[:1000])
    writer.write(data[1000:])
    writer.close()
    return target.getvalue(), target.closed


@pytest.mark.parametrize("kind", sorted(TOOLS))
def test_compressed_output_is_valid_deterministic_and_leaves_stream_open(kind: str) -> None:
    first, closed = compressed_with_tarkit(kind, PAYLOAD)
    assert not closed
    assert compressed_with_tarkit(kind, PAYLOAD)[0] == first
    test = subprocess.run([TOOLS[kind][0], "-d", "-c"], input=first, capture_output=True)
    assert test.returncode == 0
    assert test.stdout == PAYLOAD


def test_gzip_output_carries_no_name_and_mtime_zero() -> None:
    data, _ = compressed_with_tarkit("gzip", b"x")
    flags, mtime = data[3], int.from_bytes(data[4:8], "little")
    assert (flags & 0x08, mtime) == (0, 0)


def test_uncompressed_output_is_the_stream_itself() -> None:
    target = io.BytesIO()
    assert open_compressor(target, None) is target


@pytest.mark.parametrize("kind", sorted(TOOLS))
def test_decompressed_stream_reads_at_most_n_and_read_gives_all(kind: str) -> None:
    # zstd inflates a 1 MiB chunk to many: read1(n) must still hand out at most n.
    data = compress(kind, bytes(3 << 20))
    stream = open_decompressed(Pipe(data, 1 << 20), "in")  # type: ignore[arg-type]
    first = stream.read1(10)  # type: ignore[attr-defined]
    assert 0 < len(first) <= 10
    assert stream.read(0) == b""
    assert len(first + stream.read()) == 3 << 20


@pytest.mark.parametrize("kind", sorted(TOOLS))
@pytest.mark.parametrize("size", [0, 1, 511, 70_000, 600_000])
def test_compressed_bound_holds_for_random_data(kind: str, size: int) -> None:
    data = random.Random(size).randbytes(size)
    compressed, _ = compressed_with_tarkit(kind, data)
    assert len(compressed) <= compressed_bound(kind, size)


@pytest.mark.parametrize("kind", sorted(TOOLS))
def test_compressed_bound_is_within_two_percent_of_the_input(kind: str) -> None:
    # A loose bound would make compressed shards needlessly small.
    size = 10 << 20
    assert compressed_bound(kind, size) <= size * 1.02
    assert compressed_bound(kind, 0) <= 1024


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_measure_pushes_every_byte_written_out_of_the_compressor(kind: str) -> None:
    target = io.BytesIO()
    writer = open_compressor(target, kind)
    writer.write(PAYLOAD)
    assert measure(writer, kind)
    # What is below the compressor now decompresses to everything written so far.
    if kind == "gzip":
        inflated = zlib.decompressobj(-zlib.MAX_WBITS).decompress(target.getvalue()[10:])
    else:
        inflated = zstandard.ZstdDecompressor().decompressobj().decompress(target.getvalue())
    assert inflated == PAYLOAD
    writer.write(b"more")
    writer.close()
    assert decompress(target.getvalue()) == PAYLOAD + b"more"


@pytest.mark.parametrize("kind", ["bzip2", "xz", None])
def test_measure_says_when_a_compression_cannot_be_flushed(kind: str | None) -> None:
    assert not measure(open_compressor(io.BytesIO(), kind), kind)
