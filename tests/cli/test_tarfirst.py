"""tarfirst through real pipes, on an archive made by GNU tar."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import make_tar, run, run_shell


@pytest.fixture(scope="module")
def shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("first")
    tree = base / "tree"
    tree.mkdir()
    (tree / "a.cls").write_bytes(b"0")
    (tree / "b.PNG").write_bytes(b"\x89PNG b")
    (tree / "b.cls").write_bytes(b"1")
    (tree / "c.jpg").write_bytes(b"\xff\xd8 c" * 1000)
    (tree / "c.png").write_bytes(b"\x89PNG c")
    path = base / "shard.tar"
    subprocess.run(
        ["tar", "--sort=name", "--format=gnu", "-cf", str(path), "-C", str(tree), "."], check=True
    )
    return path


@pytest.mark.parametrize(
    "args, want",
    [
        (["-f", "jpg"], b"\xff\xd8 c" * 1000),
        (["-f", "png"], b"\x89PNG b"),  # case-insensitive, as webdataset reads it
        (["-f", "jpg;png"], b"\x89PNG b"),  # the first sample with one of them
        (["-f", "cls", "--key", "./b"], b"1"),
        ([], b"0"),  # the first field of the first sample
    ],
)
def test_writes_the_bytes_of_the_first_matching_field(
    shard: Path, args: list[str], want: bytes
) -> None:
    result = run(["tarfirst", *args, str(shard)])
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == want


def test_redirected_to_a_file_through_a_pipe(shard: Path, tmp_path: Path) -> None:
    result = run_shell(f"cat {shard} | tarfirst -f jpg > {tmp_path}/x.jpg")
    assert result.returncode == 0
    assert (tmp_path / "x.jpg").read_bytes() == b"\xff\xd8 c" * 1000


@pytest.mark.parametrize(
    "args, message",
    [
        (["-f", "txt"], "SHARD: no sample has a field 'txt' (3 samples read)"),
        (["--key", "./z"], "SHARD: no sample has the key './z' (3 samples read)"),
        (["-f", "jpg", "--key", "./a"], "SHARD: sample './a' has no field 'jpg'"),
        (["-f", "jpg cls"], "-f 'jpg cls': tarfirst writes one field ('jpg;png' for alternatives)"),
    ],
)
def test_nothing_matched_is_exit_2_with_a_message_naming_the_input(
    shard: Path, args: list[str], message: str
) -> None:
    result = run(["tarfirst", *args, str(shard)])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == f"tarfirst: error: {message.replace('SHARD', str(shard))}\n"


def test_nothing_matched_in_several_inputs_names_them(shard: Path, tmp_path: Path) -> None:
    two = run(["tarfirst", "-f", "txt", str(shard), "-"], input=shard.read_bytes())
    assert (two.returncode, two.stdout) == (2, b"")
    assert two.stderr == (
        f"tarfirst: error: {shard}, <stdin>: no sample has a field 'txt' (6 samples read)\n"
    )
    for n in range(4):
        (tmp_path / f"{n}.tar").write_bytes(shard.read_bytes())
    many = run(["tarfirst", "-f", "txt", "{0..3}.tar"], cwd=tmp_path)
    assert many.stderr == (
        "tarfirst: error: 0.tar … 3.tar (4 inputs): no sample has a field 'txt' (12 samples read)\n"
    )


def test_a_full_disk_is_exit_2_with_the_message_of_every_command(shard: Path) -> None:
    result = run_shell(f"tarfirst -f jpg {shard} > /dev/full")
    assert result.returncode == 2
    assert result.stderr == "tarfirst: error: <stdout>: write failed: No space left on device\n"


def test_reading_stops_at_the_match(tmp_path: Path) -> None:
    # Two samples, then a command that would write more only after 30 seconds.
    start = tmp_path / "start.tar"
    start.write_bytes(make_tar([("a.txt", b"first"), ("b.txt", b"second")])[:-1024])
    result = run(["tarfirst", "-f", "txt", f"pipe:cat {start}; exec sleep 30"], timeout=20)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"first", "")


def test_an_input_error_before_the_match_is_exit_2(tmp_path: Path) -> None:
    data = make_tar([("a.txt", b"x" * 2000), ("b.jpg", b"y")])
    result = run(["tarfirst", "-f", "jpg"], input=data[:1500])
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.startswith("tarfirst: error: <stdin>: input ends inside member data")


def test_a_field_cut_off_by_a_closed_pipe_is_a_quiet_141(tmp_path: Path) -> None:
    big = tmp_path / "big.tar"
    big.write_bytes(make_tar([("a.bin", b"x" * 5_000_000), ("b.bin", b"y")]))
    result = run_shell(f"tarfirst {big} | head -c 100 >/dev/null; echo ${{PIPESTATUS[0]}}")
    assert (result.stdout, result.stderr) == (b"141\n", "")
