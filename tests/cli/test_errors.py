"""Every input error of the contract, through real pipes.

Each case runs ``tarcat CASE | tee mid.tar | tarcat > out.tar`` in bash and checks: exit
status 2 at both hops (errors cross pipes without pipefail), exactly one stderr line of the
shape ``tarcat: error: <source>: <what> (byte N, member NAME)`` and no traceback, and that
what came out is exactly a whole-sample prefix of the input with no end-of-archive marker.
GNU ``tar -t`` then lists exactly the members of that prefix.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import make_tar, run, run_shell, tool
from shard_server import ShardServer
from tarfiles import END, extension, header, member

from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members

SAMPLE = 3072  # each sample: a 1500-byte .bin (2048 bytes on disk) and a .cls (1024)
BASE = make_tar(
    (f"{i:04d}.{field}", (bytes([i]) * 1500) if field == "bin" else str(i).encode())
    for i in range(4)
    for field in ("bin", "cls")
)
BODY = BASE[:-1024]  # the four samples without the end-of-archive marker


def corrupt(data: bytes, offset: int, field: slice, value: bytes, fix_checksum: bool) -> bytes:
    """``data`` with a header field at ``offset`` replaced (checksum redone if asked)."""
    block = bytearray(data[offset : offset + 512])
    block[field] = value
    if fix_checksum:
        block[148:156] = b" " * 8
        block[148:156] = b"%06o\0 " % sum(block)
    return data[:offset] + bytes(block) + data[offset + 512 :]


@dataclass
class Case:
    data: bytes
    what: str  # regex for the message after "<source>: "
    emitted: int  # bytes of the input that must come out: whole samples


CASES = {
    "cut inside a header": Case(
        BASE[: 2 * SAMPLE + 2048 + 100],
        r"input ends inside a header block \(byte 8192\)",
        2 * SAMPLE,
    ),
    "cut inside member data": Case(
        BASE[: 2 * SAMPLE + 512 + 100],
        r"input ends inside member data \(100 of 1500 bytes\) \(byte 6144, member 0002\.bin\)",
        2 * SAMPLE,  # 0001 is complete: the header of 0002, another key, was read
    ),
    "cut inside the padding after member data": Case(
        BASE[: 2 * SAMPLE + 512 + 1500 + 10],
        r"input ends inside the padding after member data \(byte 6144, member 0002\.bin\)",
        2 * SAMPLE,
    ),
    "cut between members without end marker": Case(
        BASE[: 2 * SAMPLE + 2048],
        r"input ends without the end-of-archive marker .*\(byte 8192\)",
        2 * SAMPLE,
    ),
    "cut at a sample boundary without end marker": Case(
        BASE[: 3 * SAMPLE],
        r"input ends without the end-of-archive marker .*\(byte 9216\)",
        2 * SAMPLE,
    ),
    "bad checksum in the first header": Case(
        corrupt(BASE, 0, slice(0, 1), b"X", fix_checksum=False),
        r"not a tar archive \(bad header checksum in the first block\) \(byte 0\)",
        0,
    ),
    "bad checksum mid-archive": Case(
        corrupt(BASE, 2 * SAMPLE + 2048, slice(0, 1), b"X", fix_checksum=False),
        r"bad header checksum \(byte 8192\)",
        2 * SAMPLE,
    ),
    "negative size": Case(
        corrupt(BASE, 2 * SAMPLE, slice(124, 136), b"\xff" * 12, fix_checksum=True),
        r"negative size field \(-1\) \(byte 6144\)",
        SAMPLE,
    ),
    "malformed size": Case(
        corrupt(BASE, 2 * SAMPLE, slice(124, 136), b"0000000x005\0", fix_checksum=True),
        r"malformed size field '0000000x005' in header \(byte 6144\)",
        SAMPLE,
    ),
    "oversized pax header": Case(
        BODY[: 2 * SAMPLE] + header("././@PaxHeader", 16 << 20, b"x") + bytes(8192),
        r"extension header of 16777216 bytes is over the 1048576-byte limit \(byte 6144\)",
        SAMPLE,
    ),
    "oversized GNU long name": Case(
        BODY[: 2 * SAMPLE] + header("././@LongLink", 2 << 20, b"L") + bytes(8192),
        r"extension header of 2097152 bytes is over the 1048576-byte limit \(byte 6144\)",
        SAMPLE,
    ),
    "malformed pax record": Case(
        BODY[: 2 * SAMPLE] + extension(b"99 path=x.txt\n") + member("x.txt", b"x") + END,
        r"malformed pax extended header record at its byte 0 \(byte 6144\)",
        SAMPLE,
    ),
    "empty input": Case(b"", r"empty input \(0 bytes\)", 0),
    "duplicate field": Case(
        BODY + member("0003.bin", b"again") + END,
        r"field 'bin' appears twice in sample '0003' .* \(byte 12288, member 0003\.bin\)",
        3 * SAMPLE,
    ),
    "key that comes back": Case(
        BODY + member("0001.txt", b"late") + END,
        r"key '0001' comes back after other keys: .*sort the input.* "
        r"\(byte 12288, member 0001\.txt\)",
        3 * SAMPLE,  # 0003 may have more members further on: not known complete
    ),
    "data after the end marker": Case(
        BASE + make_tar([("late.txt", b"x")]),
        r"data after the end-of-archive marker .*--ignore-zeros.* \(byte 13312\)",
        3 * SAMPLE,
    ),
    "non-regular member under --strict": Case(
        BODY[: 2 * SAMPLE]
        + header("link.bin", 0, b"2", linkname=b"0000.bin")
        + BODY[2 * SAMPLE :]
        + END,
        r"symlink member is not allowed with --strict \(byte 6144, member link\.bin\)",
        SAMPLE,
    ),
    "file without a dot under --strict": Case(
        BODY[:SAMPLE] + member("README", b"r") + BODY[SAMPLE:] + END,
        r"member without a field \(no dot in the file name\) is not allowed with --strict "
        r"\(byte 3072, member README\)",
        0,
    ),
}


@dataclass
class Hop:
    statuses: list[int]
    first: str  # stderr of the first tarcat
    second: str
    mid: bytes  # between the two
    out: bytes  # after the second
    listing: list[str]  # tar -t of mid


def hop(directory: Path, args: str, env: dict[str, str] | None = None) -> Hop:
    """``tarcat ARGS | tee mid.tar | tarcat > out.tar`` in ``directory``; then ``tar -t``."""
    result = run_shell(
        f'tarcat {args} 2>e1 | tee mid.tar | tarcat 2>e2 >out.tar; echo "${{PIPESTATUS[*]}}"',
        cwd=directory,
        env=env or {},
    )
    assert result.stderr == "", result.stderr
    listing = subprocess.run(
        ["tar", "-tf", "mid.tar"], cwd=directory, capture_output=True, text=True
    ).stdout.splitlines()
    return Hop(
        [int(s) for s in result.stdout.split()],
        (directory / "e1").read_text(),
        (directory / "e2").read_text(),
        (directory / "mid.tar").read_bytes(),
        (directory / "out.tar").read_bytes(),
        listing,
    )


def one_error_line(stderr: str, source: str) -> str:
    """The message of the single ``tarcat: error: <source>: `` line (no traceback)."""
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    prefix = f"tarcat: error: {source}: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0][len(prefix) :]


def member_names(archive: bytes) -> list[str]:
    return [m.name for m in read_members(io.BytesIO(archive + END))] if archive else []


def is_whole_sample_prefix(part: bytes, whole: bytes) -> bool:
    """``part`` is ``whole`` up to a sample boundary, and carries no end marker."""
    if not whole.startswith(part) or part.endswith(bytes(512)):
        return False
    offsets = [s.members[0].offset for s in group_samples(read_members(io.BytesIO(whole + END)))]
    return len(part) in [*offsets, len(whole)]


def check_error_crosses_the_pipe(h: Hop, source: str, what: str, expected: bytes) -> None:
    assert h.statuses == [2, 0, 2]
    assert re.fullmatch(what, one_error_line(h.first, source)), h.first
    assert h.mid == expected
    assert h.listing == member_names(expected)
    # The next tarcat sees a stream without its end marker: it fails too, whole samples only.
    assert one_error_line(h.second, "<stdin>") == (
        f"input ends without the end-of-archive marker (truncated, or cut between two members) "
        f"(byte {len(expected)})"
        if expected
        else "empty input (0 bytes)"
    )
    assert is_whole_sample_prefix(h.out, h.mid)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_fails_both_hops_with_one_line_and_whole_samples(
    tmp_path: Path, name: str
) -> None:
    case = CASES[name]
    (tmp_path / "case.tar").write_bytes(case.data)
    strict = "--strict " if "--strict" in name else ""
    h = hop(tmp_path, f"{strict}case.tar")
    check_error_crosses_the_pipe(h, "case.tar", case.what, case.data[: case.emitted])


def test_same_errors_on_stdin_name_the_source_stdin(tmp_path: Path) -> None:
    (tmp_path / "case.tar").write_bytes(CASES["cut inside member data"].data)
    h = hop(tmp_path, "- < case.tar")
    check_error_crosses_the_pipe(
        h, "<stdin>", CASES["cut inside member data"].what, BASE[: 2 * SAMPLE]
    )


def test_one_trailing_zero_block_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "case.tar").write_bytes(BODY + bytes(512))
    h = hop(tmp_path, "case.tar")
    assert h.statuses == [0, 0, 0]
    assert (h.first, h.second) == ("", "")
    assert h.out == h.mid == BASE


def test_empty_input_is_accepted_with_allow_empty(tmp_path: Path) -> None:
    result = run_shell("tarcat --allow-empty < /dev/null | tar -tvf -; echo ${PIPESTATUS[*]}")
    assert (result.stdout, result.stderr) == (b"0 0\n", "")
    assert run(["tarcat", "--allow-empty"], input=b"").stdout == bytes(1024)


def test_ignore_zeros_reads_concatenated_archives(tmp_path: Path) -> None:
    second = make_tar([("late.txt", b"x")])
    (tmp_path / "case.tar").write_bytes(BASE + second)
    result = run(["tarcat", "--ignore-zeros", "case.tar"], cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == BODY + second


def test_gzip_with_a_bad_crc_fails_after_writing_all_but_the_last_sample(tmp_path: Path) -> None:
    packed = bytearray(gzip.compress(BASE, mtime=0))
    packed[-8] ^= 0xFF
    (tmp_path / "case.tar.gz").write_bytes(bytes(packed))
    h = hop(tmp_path, "case.tar.gz")
    what = r"corrupt gzip stream: CRC check failed .*"
    check_error_crosses_the_pipe(h, "case.tar.gz", what, BASE[: 3 * SAMPLE])


def test_gzip_cut_short_fails_with_a_whole_sample_prefix(tmp_path: Path) -> None:
    packed = gzip.compress(BASE, mtime=0)
    (tmp_path / "case.tar.gz").write_bytes(packed[: len(packed) - 4])
    h = hop(tmp_path, "case.tar.gz")
    assert h.statuses == [2, 0, 2]
    assert one_error_line(h.first, "case.tar.gz") == "gzip stream is cut short"
    assert is_whole_sample_prefix(h.mid, BODY)


def test_missing_input_file_is_exit_2_with_its_name(tmp_path: Path) -> None:
    h = hop(tmp_path, "missing.tar")
    check_error_crosses_the_pipe(h, "missing.tar", "no such file", b"")


def test_error_in_a_later_input_keeps_the_samples_of_earlier_ones(tmp_path: Path) -> None:
    (tmp_path / "a.tar").write_bytes(make_tar([("x.txt", b"x"), ("y.txt", b"y")]))
    (tmp_path / "b.tar").write_bytes(CASES["cut inside member data"].data)
    h = hop(tmp_path, "a.tar b.tar")
    expected = make_tar([("x.txt", b"x"), ("y.txt", b"y")])[:-1024] + BASE[: 2 * SAMPLE]
    check_error_crosses_the_pipe(h, "b.tar", CASES["cut inside member data"].what, expected)


@pytest.mark.parametrize(
    "command, what",
    [
        ("head -c 7000 base.tar; exit 3", "command exited with status 3"),
        ("cat base.tar; exit 3", "command exited with status 3"),
        ("false", "command exited with status 1"),
    ],
)
def test_failing_pipe_command_is_exit_2_naming_the_command(
    tmp_path: Path, command: str, what: str
) -> None:
    (tmp_path / "base.tar").write_bytes(BASE)
    h = hop(tmp_path, f"'pipe:{command}'")
    assert h.statuses == [2, 0, 2]
    assert one_error_line(h.first, f"pipe:{command}") == what
    assert is_whole_sample_prefix(h.mid, BODY)
    assert is_whole_sample_prefix(h.out, h.mid)


def test_http_input_is_streamed(tmp_path: Path, http_server: ShardServer) -> None:  # noqa: F811
    http_server.files["/base.tar"] = BASE
    http_server.files["/base.tar.gz"] = gzip.compress(BASE, mtime=0)
    for path in ["/base.tar", "/base.tar.gz"]:
        result = run(["tarcat", f"{http_server.url}{path}"])
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout == BASE


def test_http_404_is_exit_2(tmp_path: Path, http_server: ShardServer) -> None:  # noqa: F811
    url = f"{http_server.url}/missing.tar"
    h = hop(tmp_path, url)
    check_error_crosses_the_pipe(h, url, "HTTP 404 Not Found", b"")


def test_http_connection_closed_halfway_is_exit_2(tmp_path: Path, http_server: ShardServer) -> None:  # noqa: F811
    http_server.files["/base.tar"] = BASE
    http_server.cut["/base.tar"] = len(BASE) // 2
    url = f"{http_server.url}/base.tar"
    h = hop(tmp_path, url, env={"TARKIT_RETRIES": "0"})
    assert h.statuses == [2, 0, 2]
    assert one_error_line(h.first, url) == (
        f"connection closed after {len(BASE) // 2} of {len(BASE)} bytes"
    )
    assert is_whole_sample_prefix(h.mid, BODY)


def big_archive(path: Path) -> bytes:
    data = make_tar((f"{i:05d}.bin", bytes([i % 251]) * 20_000) for i in range(400))
    path.write_bytes(data)
    return data


def test_closed_output_pipe_is_a_quiet_141(tmp_path: Path) -> None:
    big_archive(tmp_path / "big.tar")
    result = run_shell(
        "tarcat big.tar 2>err | head -c 100 > /dev/null; echo ${PIPESTATUS[0]}", cwd=tmp_path
    )
    assert result.stdout == b"141\n"
    assert (tmp_path / "err").read_text() == ""


def test_full_disk_is_exit_2_with_a_message(tmp_path: Path) -> None:
    big_archive(tmp_path / "big.tar")
    result = run(["tarcat", "big.tar", "-o", "/dev/full"], cwd=tmp_path)
    assert result.returncode == 2
    assert one_error_line(result.stderr, "/dev/full") == "write failed: No space left on device"


FULL_OUTPUTS = {  # (output redirection, the name in the message, its directory)
    "file": ("-o {disk}/out.tar", "{disk}/out.tar", "{disk}"),
    "stdout to a file": ("> {disk}/out.tar", "<stdout>", "{disk}"),
    "below the mount point": ("-o {disk}/sub/out.tar", "{disk}/sub/out.tar",
                              "{disk}/sub (mounted at {disk},"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(FULL_OUTPUTS))
def test_a_full_file_system_is_named_with_the_space_left_on_it(
    tmp_path: Path, small_disk: Path, case: str
) -> None:
    (tmp_path / "in.tar").write_bytes(make_tar((f"{i:03d}.bin", bytes(20_000)) for i in range(40)))
    (small_disk / "sub").mkdir()
    output, name, directory = (s.format(disk=small_disk) for s in FULL_OUTPUTS[case])
    result = run_shell(f"tarcat in.tar {output}", cwd=tmp_path)
    assert result.returncode == 2
    message = one_error_line(result.stderr, name)
    place = directory if directory.endswith(",") else f"{directory} ("
    assert re.fullmatch(
        rf"write failed: no space left on the file system of {re.escape(place)} ?[\d.]+ (B|KiB) free\)",
        message,
    ), message
    if output.startswith("-o"):  # (the shell made the file stdout goes to)
        assert [p.name for p in small_disk.rglob("*") if p.is_file()] == []


def test_a_file_size_limit_is_named_as_ulimit(tmp_path: Path) -> None:
    # Python ignores SIGXFSZ, so a write past `ulimit -f` fails with EFBIG.
    (tmp_path / "in.tar").write_bytes(make_tar((f"{i:03d}.bin", bytes(20_000)) for i in range(40)))
    result = run_shell("ulimit -f 100 && tarcat in.tar -o out.tar", cwd=tmp_path)
    assert result.returncode == 2
    message = one_error_line(result.stderr, "out.tar")
    assert message == "write failed: file size limit reached (100.0 KiB, ulimit -f)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.tar"]


def test_output_file_is_atomic_on_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "case.tar").write_bytes(CASES["cut inside member data"].data)
    (tmp_path / "old.tar").write_bytes(b"old")
    for target in ["new.tar", "old.tar", "new.tar.gz"]:
        result = run(["tarcat", "case.tar", "-o", target], cwd=tmp_path)
        assert result.returncode == 2
        one_error_line(result.stderr, "case.tar")
    assert sorted(os.listdir(tmp_path)) == ["case.tar", "old.tar"]
    assert (tmp_path / "old.tar").read_bytes() == b"old"


def test_non_regular_members_and_no_dot_names_are_warned_counted_and_exit_0(
    tmp_path: Path,
) -> None:
    data = (
        BODY[:SAMPLE]
        + member("README", b"r")
        + header("link.bin", 0, b"2", linkname=b"0000.bin")
        + member("LICENSE", b"l")
        + header("dir/", 0, b"5")
        + BODY[SAMPLE:]
        + END
    )
    (tmp_path / "case.tar").write_bytes(data)
    result = run(["tarcat", "case.tar"], cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout == BASE
    assert result.stderr.splitlines() == [
        "tarcat: warning: case.tar: skipping member without a field (no dot in the file name): "
        "README",
        "tarcat: warning: case.tar: skipping symlink member: link.bin",
        "tarcat: warning: skipped 3 members: 2 without a field (no dot in the file name), "
        "1 symlink",
    ]


def test_traceback_only_with_tarkit_debug(tmp_path: Path) -> None:
    (tmp_path / "case.tar").write_bytes(CASES["bad checksum mid-archive"].data)
    result = run(["tarcat", "case.tar"], cwd=tmp_path, env=dict(os.environ, TARKIT_DEBUG="1"))
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert result.stderr.rstrip().endswith(
        "tarcat: error: case.tar: bad header checksum (byte 8192)"
    )


@pytest.mark.parametrize(
    "args, what",
    [
        (["--slice", "a:b"], "--slice 'a:b': expected integers, as in START:STOP[:STEP]"),
        (["--slice", "::-1"], "--slice '::-1': the step must be positive on a stream"),
        (["--shuffle", "-3"], "--shuffle needs a buffer size of at least 1"),
        (["-c", "-1"], "the count must not be negative"),
        (["--skip=-3"], "--skip must not be negative"),
        (
            ["-c", "abc"],
            "invalid value for '-c' / '--count': 'abc' is not a valid integer (see tarcat --help)",
        ),
        (["--bogus"], "no such option '--bogus' (see tarcat --help)"),
    ],
)
def test_bad_option_values_are_one_line_errors(args: list[str], what: str) -> None:
    result = run(["tarcat", *args], input=BASE)
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr == f"tarcat: error: {what}\n"


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_mid_run_exits_with_its_status_and_leaves_no_output_file(
    tmp_path: Path, signum: int, status: int
) -> None:
    (tmp_path / "base.tar").write_bytes(BODY)
    # The command lets go of our stderr so that only tarcat holds it, and says when it
    # has written everything: tarcat is then waiting for more, mid-run.
    command = "pipe:exec 2>/dev/null; cat base.tar; touch written; exec sleep 60"
    process = subprocess.Popen(
        [tool("tarcat"), command, "-o", "out.tar"], cwd=tmp_path, stderr=subprocess.PIPE
    )
    for _ in range(3000):
        if (tmp_path / "written").exists():
            break
        time.sleep(0.01)
    (tmp_path / "written").unlink()
    time.sleep(0.2)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == status
    assert stderr == b""
    assert os.listdir(tmp_path) == ["base.tar"]


def test_tar_t_downstream_lists_exactly_the_whole_samples(tmp_path: Path) -> None:
    (tmp_path / "case.tar").write_bytes(CASES["cut inside a header"].data)
    result = run_shell("tarcat case.tar | tar -tv; echo ${PIPESTATUS[*]}", cwd=tmp_path)
    lines = result.stdout.decode().splitlines()
    assert lines[-1] == "2 0"  # GNU tar itself accepts a stream without its end marker
    assert [line.split()[-1] for line in lines[:-1]] == member_names(BASE[: 2 * SAMPLE])
    assert result.stderr.count("tarcat: error:") == 1


def test_unbalanced_braces_in_an_input_name_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for command in ("tarcat", "tar2tsv"):
        result = run([command, "a{b.tar"], cwd=tmp_path)
        assert (result.returncode, result.stdout) == (2, b"")
        assert result.stderr == (
            f"{command}: error: a{{b.tar: unbalanced braces (write \\{{ or \\}} for a literal "
            "brace)\n"
        )


HUGE = "99999999999999999999"  # over sys.maxsize: no stream has that many samples


@pytest.mark.parametrize(
    "args, samples",
    [
        (["-c", HUGE], 4),
        (["--skip", HUGE], 0),
        (["--slice", f"{HUGE}:"], 0),
        (["--slice", f"-{HUGE}:"], 4),
        (["--slice", f":{HUGE}"], 4),
        (["--slice", f":-{HUGE}"], 0),
        (["--slice", f"1::{HUGE}"], 1),
    ],
)
def test_numbers_beyond_any_stream_act_as_on_a_long_enough_list(
    args: list[str], samples: int
) -> None:
    result = run(["tarcat", *args], input=BASE)
    assert (result.returncode, result.stderr) == (0, "")
    first = 1 if args[-1].startswith("1::") else 0
    assert result.stdout == BODY[first * SAMPLE : (first + samples) * SAMPLE] + END


@pytest.mark.parametrize("command", ["tar2tsv", "tarshow"])
def test_a_count_beyond_any_stream_means_every_sample(command: str) -> None:
    every = run([command], input=BASE)
    result = run([command, "-c", HUGE], input=BASE)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == every.stdout and every.stdout.count(b"0003") == 1


PLAN = "__key__,@bin,cls\na,base.tar,1\nb,base.tar,2\n"  # embeds a file: no warning


@pytest.mark.parametrize(
    "script, message",
    [
        ("tarcat <&-", "tarcat: error: <stdin>: not open"),
        ("tarsplit -o 's-%06d.tar' <&-", "tarsplit: error: <stdin>: not open"),
        ("tarsort <&-", "tarsort: error: <stdin>: not open"),
        ("tar2tsv <&-", "tar2tsv: error: <stdin>: not open"),
        ("tarkit cat - <&-", "tarkit cat: error: <stdin>: not open"),
        ("tarcat base.tar >&-", "tarcat: error: <stdout>: not open"),
        ("tar2tsv base.tar >&-", "tar2tsv: error: <stdout>: not open"),
        ("tarshow base.tar >&-", "tarshow: error: <stdout>: not open"),
        ("tarfirst -f cls base.tar >&-", "tarfirst: error: <stdout>: not open"),
        ("tarindex base.tar >&-", "tarindex: error: <stdout>: not open"),
        ("tarsort base.tar >&-", "tarsort: error: <stdout>: not open"),
        ("tarcreate plan.csv >&-", "tarcreate: error: <stdout>: not open"),
    ],
)
def test_a_closed_stdin_or_stdout_is_one_line_and_exit_2(
    tmp_path: Path, script: str, message: str
) -> None:
    (tmp_path / "base.tar").write_bytes(BASE)
    (tmp_path / "plan.csv").write_text(PLAN)
    result = run_shell(f"{script}; echo $?", cwd=tmp_path)
    assert (result.stdout, result.stderr) == (b"2\n", message + "\n")
    assert sorted(os.listdir(tmp_path)) == ["base.tar", "plan.csv"]


def test_a_closed_stdout_is_fine_when_the_output_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "base.tar").write_bytes(BASE)
    result = run_shell("tarcat - -o out.tar < base.tar >&-; echo $?", cwd=tmp_path)
    assert (result.stdout, result.stderr) == (b"0\n", "")
    assert (tmp_path / "out.tar").read_bytes() == BASE


def test_a_closed_stderr_keeps_the_exit_status_of_the_work(tmp_path: Path) -> None:
    (tmp_path / "base.tar").write_bytes(BASE)
    (tmp_path / "cut.tar").write_bytes(BASE[:5000])
    result = run_shell(
        "tarcat base.tar 2>&- > out.tar; echo $?; tarcat cut.tar 2>&- > /dev/null; echo $?",
        cwd=tmp_path,
    )
    assert (result.stdout, result.stderr) == (b"0\n2\n", "")
    assert (tmp_path / "out.tar").read_bytes() == BASE


# --- inputs that are not tar archives: named, with what to do -----------------------------

SHARDS_FROM = (
    "make shards of image files with tarkit shard DIR -o 'shards/shard-%06d.tar' (or tarcreate)"
)
DECOMPRESS = "tarkit reads gzip, bzip2, xz and zstd; decompress it first"


def not_tar_file(directory: Path, kind: str) -> str:
    """A file of ``kind`` made by the tool that makes such files; its name."""
    from PIL import Image

    picture = Image.new("RGB", (600, 400), (200, 30, 30))  # over one 512-byte block, as JPEG
    if kind in ("jpg", "png"):  # (more kinds in tests/format/test_file_types.py)
        picture.save(directory / f"cat.{kind}")
        return f"cat.{kind}"
    if kind == "zip":
        import zipfile

        with zipfile.ZipFile(directory / "photos.zip", "w") as archive:
            archive.writestr("cat.txt", "a cat")
        return "photos.zip"
    if kind == "json":
        (directory / "manifest.json").write_text('{"version": 2, "shards": []}\n')
        return "manifest.json"
    (directory / "x.txt").write_bytes(b"x")
    tool_args = {"lz4": ["bsdtar", "--lz4"], "lz": ["bsdtar", "--lzip"], "Z": ["bsdtar", "-Z"]}
    name = f"x.tar.{kind}"
    subprocess.run([*tool_args[kind], "-cf", name, "x.txt"], cwd=directory, check=True)
    return name


NOT_TAR = {
    "jpg": f"a JPEG image, not a tar archive: {SHARDS_FROM}",
    "png": f"a PNG image, not a tar archive: {SHARDS_FROM}",
    "zip": "a zip archive, not a tar archive: unpack it into a directory and make shards of "
    "that with tarkit shard DIR -o 'shards/shard-%06d.tar'",
    # A manifest named to tarcat is a dataset, read by its index (docs/tarcat.md).
    "json": "tarcat reads a dataset (a manifest or its directory) by its index, with --keys "
    "FILE; to read all of it, name its shards",
    "lz4": f"an lz4 stream: {DECOMPRESS}: lz4 -dc x.tar.lz4 > x.tar (or read 'pipe:lz4 -dc "
    "x.tar.lz4')",
    "lz": f"an lzip stream: {DECOMPRESS}: lzip -dc x.tar.lz > x.tar (or read 'pipe:lzip -dc "
    "x.tar.lz')",
    "Z": f"a compress (.Z) stream: {DECOMPRESS}: gzip -dc x.tar.Z > x.tar (or read 'pipe:gzip "
    "-dc x.tar.Z')",
}


@pytest.mark.parametrize("kind", sorted(NOT_TAR))
def test_a_file_that_is_not_tar_is_named_with_what_to_do(tmp_path: Path, kind: str) -> None:
    name = not_tar_file(tmp_path, kind)
    result = run(["tarcat", name], cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, b"")
    assert one_error_line(result.stderr, name) == NOT_TAR[kind]


def test_not_tar_on_stdin_says_what_it_is_and_a_tar_with_a_bad_first_header_does_not(
    tmp_path: Path,
) -> None:
    name = not_tar_file(tmp_path, "lz4")
    result = run_shell(f"tarcat < {name}", cwd=tmp_path)
    assert one_error_line(result.stderr, "<stdin>") == (
        f"an lz4 stream: {DECOMPRESS}, with lz4 -dc in the pipe"
    )
    # The ustar magic in place: a damaged tar archive, whatever the rest looks like.
    damaged = corrupt(BASE, 0, slice(0, 4), b"\xff\xd8\xff\xe0", fix_checksum=False)
    result = run(["tarcat"], input=damaged)
    assert one_error_line(result.stderr, "<stdin>") == (
        "not a tar archive (bad header checksum in the first block) (byte 0)"
    )


def test_a_directory_given_for_a_shard_says_what_it_holds(tmp_path: Path) -> None:
    from PIL import Image

    for name in ("cat/1.jpg", "dog/2.jpg"):
        (tmp_path / "photos" / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4)).save(tmp_path / "photos" / name)
    for command in (["tarcat"], ["tarkit", "verify"]):
        result = run([*command, "photos"], cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr.endswith(
            "; it holds images (jpg): make shards of it with tarkit shard photos "
            "-o 'shards/photos-%06d.tar'\n"
        ), result.stderr


def test_an_html_page_served_for_a_shard_is_named(http_server: ShardServer) -> None:  # noqa: F811
    # A server or proxy that answers 200 with a page (a login, a quota): not a cut archive.
    http_server.files["/data-000.tar"] = b"<!DOCTYPE html>\n<html><title>Sign in</title></html>\n"
    url = f"{http_server.url}/data-000.tar"
    result = run(["tarcat", url])
    assert (result.returncode, result.stdout) == (2, b"")
    assert one_error_line(result.stderr, url) == (
        "an HTML page, not a tar archive: an error page in place of the shard? check its URL "
        "and fetch it again"
    )
