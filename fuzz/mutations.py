"""Seeded mutation fuzzing of tarkit's reader: seed archives, mutations and the oracle.

A case is a seed archive (ustar, GNU long names, pax, skipped member types, gzip) with
one to four mutations applied: bit flips, byte overwrites, header fields overwritten
with the values that matter (octal digits, base-256, NUL, space) with or without the
checksum fixed afterwards (so that a mutation reaches the code behind the checksum),
pax records rewritten, 512-byte blocks duplicated, removed, swapped or zeroed,
truncation, appended bytes, and mutations of the compressed bytes of a gzip seed.
Everything follows from ``(seed, index)``: a case can be made again from its number.

The oracle (:func:`check`) reads the case as every command does (decompress, members,
samples) and writes the samples as ``tarcat`` does. It passes when either

- the read fails with a :class:`~tarkit.errors.TarkitError` (the commands' exit 2
  with a one-line message), or
- it succeeds and the output is a clean archive: Python's ``tarfile`` reads it without
  an error and finds exactly the members tarkit wrote (names and bytes), tarkit reads
  it back as the same samples, and a second run gives the same bytes;

and it fails for any other exception (a crash), a run over the time limit (a hang),
or an output that breaks those rules (a silent loss or a misread).
"""

from __future__ import annotations

import gzip
import io
import random
import signal
import sys
import tarfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "robustness"))

from corpus import (  # noqa: E402
    BASE,
    BODY,
    END,
    MEMBERS,
    extension,
    header,
    member,
    pax,
    pax_record,
)

from tarkit.cli.runner import one_line  # noqa: E402
from tarkit.errors import TarkitError  # noqa: E402
from tarkit.format import scanner  # noqa: E402
from tarkit.format.compression import open_decompressed  # noqa: E402
from tarkit.format.samples import Sample, group_samples  # noqa: E402
from tarkit.format.tar import END_OF_ARCHIVE, read_members  # noqa: E402

BLOCK = 512
TIME_LIMIT = 2.0  # CPU seconds per case: the seeds read in about a millisecond


def seed_archives() -> dict[str, bytes]:
    """The archives mutations start from, each a few kilobytes."""
    long_dir = "d" * 90 + "/" + "e" * 40
    gnu = (
        extension(f"{long_dir}/a.txt\0".encode(), b"L") + member("x", b"gnu long name")
        + extension(f"{long_dir}/a.json\0".encode(), b"L") + member("y", b'{"a": 1}')
        + extension(b"target/" * 20 + b"\0", b"K") + header("b.lnk", 0, b"2")
        + member("b.txt", b"b" * 700)
    )  # fmt: skip
    pax_archive = (
        pax(path="ünï/cödé.txt".encode(), mtime=b"946684800.5") + member("u.txt", b"utf8")
        + pax(size=b"600") + header("v.bin", 0) + bytes(range(256)) * 2 + bytes(88 + 424)
        + extension(pax_record("comment", b"global"), b"g")
        + pax(path=b"w.cls", linkpath=b"z") + member("w", b"7")
    )  # fmt: skip
    types = (
        MEMBERS[0] + header("dir/", 0, b"5") + header("l.bin", 0, b"1", linkname=b"0000.bin")
        + header("f.fifo", 0, b"6") + member("README", b"no field") + MEMBERS[1]
        + member("__meta__", b"{}") + member("0001.b", b"\0" * 1024) + member("0001.c", b"")
    )  # fmt: skip
    return {
        "ustar": BASE,
        "gnu": gnu + END,
        "pax": pax_archive + END,
        "types": types + END,
        "v7": b"".join(member(f"v{i}.txt", b"v7" * i, b"\0", magic=bytes(8)) for i in range(4))
        + END,
        "gzip": gzip.compress(BODY + END, mtime=0),
    }


SEEDS = seed_archives()
SEED_NAMES = sorted(SEEDS)

# Header fields (start, stop) where mutations matter most.
FIELDS = [(0, 100), (100, 108), (124, 136), (136, 148), (148, 156), (156, 157), (157, 257),
          (257, 265), (329, 345), (345, 500)]  # fmt: skip
INTERESTING = [b"\0", b"\xff", b"\x80", b" ", b"0", b"7", b"8", b"/", b".", b"=", b"\n", b"x",
               b"L", b"K", b"g", b"S", b"5", b"2", b"1"]  # fmt: skip


def headers_of(data: bytes) -> list[int]:
    """Offsets of blocks that look like headers (ustar or GNU magic, or v7 checksums)."""
    found = []
    for offset in range(0, len(data) - BLOCK + 1, BLOCK):
        block = data[offset : offset + BLOCK]
        if block[257:262] == b"ustar" or (block[0] and block[148:155].strip(b" \0").isdigit()):
            found.append(offset)
    return found


def fix_checksum(data: bytearray, offset: int) -> None:
    block = data[offset : offset + BLOCK]
    if len(block) < BLOCK:
        return
    block[148:156] = b" " * 8
    data[offset + 148 : offset + 156] = b"%06o\0 " % sum(block)


def random_number_field(rng: random.Random, width: int) -> bytes:
    choice = rng.randrange(7)
    if choice == 0:  # base-256, maybe negative
        first = rng.choice([b"\x80", b"\xff"])
        return first + rng.randbytes(width - 1)
    if choice == 1:  # octal far larger than any input
        return b"7" * (width - 1) + b"\0"
    if choice == 2:  # small octal
        return b"%0*o\0" % (width - 1, rng.randrange(8 ** min(4, width - 1)))
    if choice == 3:  # spaces and digits
        text = rng.choice([b" ", b"0"]) * rng.randrange(width) + b"12"
        return (text + b" " * width)[:width]
    if choice == 4:  # empty
        return bytes(width)
    if choice == 5:  # one bad digit
        return b"%0*o" % (width - 1, rng.randrange(64)) + rng.choice([b"8", b"x", b"\xff"])
    return rng.randbytes(width)


def mutate_header(rng: random.Random, data: bytearray) -> str:
    offsets = headers_of(bytes(data))
    if not offsets:
        return mutate_bytes(rng, data)
    offset = rng.choice(offsets)
    start, stop = rng.choice(FIELDS)
    width = stop - start
    if start in (100, 124, 136, 148, 329) and rng.random() < 0.7:
        value = random_number_field(rng, 12 if start in (124, 136) else 8)[:width]
    elif start == 156:
        value = rng.choice([b"0", b"\0", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"x", b"g",
                            b"L", b"K", b"S", b"V", b"M", b"N", b"D", b"Z"])  # fmt: skip
    elif start == 257:
        value = rng.choice([b"ustar\x0000", b"ustar  \0", bytes(8), b"ustar\0xx"])
    else:
        value = bytes(data[offset + start : offset + stop])
        cut = rng.randrange(width + 1)
        value = value[:cut] + rng.choice(INTERESTING) * rng.randrange(1, 4) + value[cut:]
        value = value[:width]
    data[offset + start : offset + start + len(value)] = value
    fixed = rng.random() < 0.75
    if fixed:
        fix_checksum(data, offset)
    return f"header@{offset}+{start}={value!r}{' fixed' if fixed else ''}"


def mutate_pax(rng: random.Random, data: bytearray) -> str:
    """Rewrite the payload of a pax header with records that are odd but well-formed."""
    offsets = [o for o in headers_of(bytes(data)) if data[o + 156 : o + 157] in (b"x", b"g")]
    if not offsets:
        return mutate_header(rng, data)
    offset = rng.choice(offsets)
    try:
        size = int(bytes(data[offset + 124 : offset + 135]).strip(b" \0") or b"0", 8)
    except ValueError:
        size = 0
    keywords = ["path", "linkpath", "size", "mtime", "hdrcharset", "comment", "uid",
                "GNU.sparse.major", "uname", "SCHILY.xattr.a", ""]  # fmt: skip
    values = [b"x.txt", b"", b"a\0b.txt", b"99999999999999999999", b"-1", b"12a", b"BINARY",
              b"\xff\xfe.bin", b"../../up.txt", b"/abs.txt", b"0", b"7" * 30]  # fmt: skip
    records = b"".join(
        pax_record(rng.choice(keywords), rng.choice(values)) for _ in range(rng.randrange(1, 4))
    )
    room = max(0, min(size, len(data) - offset - BLOCK))  # the payload as far as it goes
    payload = (records + bytes(room))[:room] if room else records[:BLOCK]
    if rng.random() < 0.3:  # break a length
        payload = rng.choice([b"0 ", b"999 ", b"5 a=b\n", b"3 x"]) + payload
    payload = payload[: max(size, 1)]
    data[offset + BLOCK : offset + BLOCK + len(payload)] = payload
    return f"pax@{offset}={payload[:40]!r}"


def mutate_bytes(rng: random.Random, data: bytearray) -> str:
    if not data:
        data.extend(rng.randbytes(rng.randrange(1, 600)))
        return "filled"
    position = rng.randrange(len(data))
    if rng.random() < 0.5:
        bit = 1 << rng.randrange(8)
        data[position] ^= bit
        return f"flip@{position}^{bit}"
    value = rng.choice(INTERESTING) * rng.randrange(1, 9)
    data[position : position + len(value)] = value
    return f"bytes@{position}={value!r}"


def mutate_blocks(rng: random.Random, data: bytearray) -> str:
    blocks = len(data) // BLOCK
    if blocks < 2:
        return mutate_bytes(rng, data)
    i, j = rng.randrange(blocks) * BLOCK, rng.randrange(blocks) * BLOCK
    what = rng.randrange(4)
    if what == 0:
        data[j:j] = data[i : i + BLOCK]
        return f"duplicate {i}->{j}"
    if what == 1:
        del data[i : i + BLOCK]
        return f"remove {i}"
    if what == 2:
        a, b = bytes(data[i : i + BLOCK]), bytes(data[j : j + BLOCK])
        data[i : i + BLOCK], data[j : j + BLOCK] = b, a
        return f"swap {i}<->{j}"
    data[i : i + BLOCK] = bytes(BLOCK)
    return f"zero {i}"


def mutate_length(rng: random.Random, data: bytearray) -> str:
    if rng.random() < 0.7:
        cut = rng.randrange(len(data) + 1)
        if rng.random() < 0.5:
            cut -= cut % BLOCK
        del data[cut:]
        return f"truncate {cut}"
    tail = rng.choice([bytes(rng.randrange(1, 2048)), rng.randbytes(rng.randrange(1, 64)),
                       BASE, END_OF_ARCHIVE[:512]])  # fmt: skip
    data.extend(tail)
    return f"append {len(tail)}"


MUTATIONS: list[tuple[float, Callable[[random.Random, bytearray], str]]] = [
    (0.35, mutate_header),
    (0.10, mutate_pax),
    (0.25, mutate_bytes),
    (0.15, mutate_blocks),
    (0.15, mutate_length),
]


@dataclass(frozen=True)
class Mutant:
    index: int
    seed_name: str
    data: bytes
    steps: tuple[str, ...]


def make_case(seed: int, index: int) -> Mutant:
    """Case ``index`` of the run with ``seed``: the same bytes on every machine."""
    rng = random.Random(f"{seed}:{index}")
    name = rng.choice(SEED_NAMES)
    original = SEEDS[name]
    compressed = name == "gzip"
    inner = rng.random() < 0.5 if compressed else False
    data = bytearray(gzip.decompress(original) if inner else original)
    steps = []
    weights = [w for w, _ in MUTATIONS]
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
        mutation = rng.choices([m for _, m in MUTATIONS], weights)[0]
        if compressed and not inner and mutation in (mutate_header, mutate_pax):
            mutation = mutate_bytes
        steps.append(mutation(rng, data))
    if inner:
        data = bytearray(gzip.compress(bytes(data), mtime=0))
        steps.append("gzip")
    return Mutant(index, name, bytes(data), tuple(steps))


# --- the oracle -------------------------------------------------------------------------


class Hang(Exception):
    """A case ran past the CPU time limit."""


@dataclass(frozen=True)
class Failure:
    index: int
    kind: str  # crash, hang, memory, misread, nondeterministic, disagreement
    detail: str
    data: bytes

    def __str__(self) -> str:
        return f"case {self.index}: {self.kind}: {self.detail}"


def read_and_write(data: bytes) -> tuple[bytes | None, list[Sample], str | None]:
    """Read ``data`` as the commands do and write its samples as tarcat does.

    Returns (output, samples, None), or (None, samples so far, error message).
    """
    output, got, error = read_case(io.BytesIO(data))
    return output, got, None if error is None else str(error)


def read_case(
    stream: io.RawIOBase | io.BytesIO,
) -> tuple[bytes | None, list[Sample], TarkitError | None]:
    """:func:`read_and_write` on a stream, the error itself rather than its message."""
    out: list[bytes] = []
    got: list[Sample] = []
    stream = open_decompressed(stream, "case")  # type: ignore[arg-type]
    try:
        for sample in group_samples(read_members(stream, "case"), "case"):
            got.append(sample)
            out.append(sample.raw)
    except TarkitError as exc:
        return None, got, exc
    out.append(END_OF_ARCHIVE)
    return b"".join(out), got, None


class Pieces(io.RawIOBase):
    """``data`` handed out a few bytes at a time (sizes from ``seed``), like a slow pipe:
    the compiled scanner then meets members cut by the end of its buffer everywhere."""

    def __init__(self, data: bytes, seed: int) -> None:
        self.data = io.BytesIO(data)
        self.rng = random.Random(seed)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        size = self.rng.choice([1, 7, 100, 511, 512, 513, 1500, 4096])
        return self.data.read(size if n is None or n < 0 else min(n, size))

    read1 = read  # type: ignore[assignment]

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def outcome(result: tuple[bytes | None, list[Sample], TarkitError | None]) -> tuple:
    """Everything a reading gives, to compare two readings exactly."""
    output, samples, error = result
    got = [(s.key, s.fields, s.source, s.raw, list(s.members)) for s in samples]
    what = None if error is None else (type(error), str(error), error.offset, error.member)
    return output, got, what


def disagreement(index: int, data: bytes) -> str | None:
    """How the compiled scanner and the pure-Python reader differ on ``data``, read whole
    and read in small pieces; None when they agree byte for byte and error for error, or
    when the scanner is not built. (Whole and in pieces may differ from each other: on a
    corrupt compressed stream, how far the decompressor has read decides which error
    comes first.)"""
    compiled = scanner.compiled
    if compiled is None:
        return None
    readings = []
    for implementation in (compiled, None):
        scanner.compiled = implementation
        try:
            whole = outcome(read_case(io.BytesIO(data)))
            pieces = outcome(read_case(Pieces(data, index)))
        finally:
            scanner.compiled = compiled
        readings.append((whole, pieces))
    for how, ours, theirs in zip(("whole", "in small pieces"), *readings, strict=True):
        if ours != theirs:
            parts = [name for name, a, b in zip(("output", "samples", "error"), ours, theirs,
                                                strict=True) if a != b]  # fmt: skip
            return (f"read {how}, the compiled scanner and the pure-Python reader differ in "
                    f"{', '.join(parts)}: {ours[2]} / {theirs[2]}")  # fmt: skip
    return None


def _on_time_limit(signum: int, frame: object) -> None:
    raise Hang()


def check(index: int, data: bytes, time_limit: float = TIME_LIMIT) -> Failure | None:
    """Run the oracle on one input; None when tarkit behaved."""
    previous = signal.signal(signal.SIGVTALRM, _on_time_limit)
    signal.setitimer(signal.ITIMER_VIRTUAL, time_limit)
    try:
        first = read_and_write(data)
        second = read_and_write(data)
        differs = disagreement(index, data)
    except Hang:
        return Failure(index, "hang", f"over {time_limit} s of CPU", data)
    except MemoryError:
        return Failure(index, "memory", "out of memory (over the address space limit)", data)
    except Exception:
        return Failure(index, "crash", traceback.format_exc(limit=-3), data)
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)
    output, samples, error = first
    if (output, error) != second[::2] or [s.raw for s in samples] != [s.raw for s in second[1]]:
        return Failure(index, "nondeterministic", "a second run differs", data)
    if differs is not None:
        return Failure(index, "disagreement", differs, data)
    if output is None:
        # The commands print it as one line, naming the source.
        if error is None or "\n" in one_line(error) or not error.startswith("case: "):
            return Failure(index, "crash", f"bad message {error!r}", data)
        return None
    problem = output_problem(output, samples)
    return Failure(index, "misread", problem, data) if problem else None


def output_problem(output: bytes, samples: list[Sample]) -> str | None:
    """What is wrong with a successful output, or None."""
    members = [m for s in samples for m in s.members]
    try:
        with tarfile.open(fileobj=io.BytesIO(output), mode="r|", errorlevel=2) as archive:
            theirs = []
            for info in archive:
                file = archive.extractfile(info) if info.isreg() else None
                theirs.append((info.name, file.read() if file is not None else b""))
    except (tarfile.TarError, OSError, ValueError, EOFError) as exc:
        return f"tarfile cannot read the output: {exc!r}"
    ours = [(m.name, m.data) for m in members]
    if theirs != ours:
        diff = next(
            (f"member {i}: tarkit {a[0]!r} ({len(a[1])} bytes), tarfile {b[0]!r} ({len(b[1])} bytes)"
             for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
            f"tarkit wrote {len(ours)} members, tarfile read {len(theirs)}",
        )  # fmt: skip
        return f"tarfile reads the output differently: {diff}"
    again = list(group_samples(read_members(io.BytesIO(output))))
    if [(s.key, s.fields, [m.data for m in s.members]) for s in again] != [
        (s.key, s.fields, [m.data for m in s.members]) for s in samples
    ]:
        return "tarkit reads its own output as other samples"
    return None


def run(seed: int, cases: int, start: int = 0) -> Iterator[tuple[Mutant, Failure | None]]:
    """Make and check cases ``start`` to ``start + cases`` of the run with ``seed``."""
    for index in range(start, start + cases):
        mutant = make_case(seed, index)
        yield mutant, check(index, mutant.data)
