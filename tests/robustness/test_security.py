"""Nothing from an archive is ever written outside a private temporary directory.

Hostile archives in the PEP 706 sense (the cases Python's ``tarfile`` ``data`` filter
refuses): classic ``..`` traversal, absolute paths, a symlink chain that points out of the
tree and a member written through it, hard links, devices and FIFOs, set-uid modes.

- No command that reads tar creates a file named after a member: every file that exists
  after a run is one the command was asked to write.
- ``tarproc`` writes each sample's fields as ``sample.<field>`` in a private (0700)
  directory under ``$TMPDIR``, with mode 0600 and no link or special file, and removes
  it; the member's path never becomes a file path. What the command leaves is read
  without following links, so a link or a FIFO it leaves fails the sample instead of
  reading (or blocking on) something outside.
- ``tarsort`` spills its sorted runs into a private directory that is always removed.
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from conftest import tool
from corpus import END, header, member

from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members


def hostile_archive(outside: Path) -> bytes:
    """Every kind of member PEP 706's data filter refuses, around one honest sample."""
    return (
        member("ok.txt", b"honest")
        + member("../../evil.txt", b"traversal")
        + member("a/../../../evil2.txt", b"traversal in the middle")
        + member(f"{outside}/absolute.txt", b"absolute path")
        + header("chain", 0, b"2", linkname=b"up")  # chain -> up -> ../../..
        + header("up", 0, b"2", linkname=b"../../..")
        + member(f"chain/{outside.name}/through-link.txt", b"written through the link")
        + header("hard.txt", 0, b"1", linkname=f"{outside}/secret.txt".encode())
        + header("dev.txt", 0, b"3", fields={329: b"0000001\0", 337: b"0000003\0"})
        + header("fifo.txt", 0, b"6")
        + member("setuid.bin", b"#!/bin/sh\n", fields={100: b"0004777\0"})
        + END
    )


def tree(root: Path) -> set[str]:
    """Every path under ``root``, relative."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def scene(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(work directory with hostile.tar, a directory 'outside', private TMPDIR)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"secret")
    work = tmp_path / "a" / "b" / "work"  # ../../ from here is still inside tmp_path
    work.mkdir(parents=True)
    (work / "hostile.tar").write_bytes(hostile_archive(outside))
    private = tmp_path / "tmp"
    private.mkdir()
    return work, outside, private


def test_the_hostile_archive_is_what_the_data_filter_refuses_or_rewrites(
    scene: tuple[Path, Path, Path],
) -> None:
    work, outside, _ = scene
    verdicts = {}
    with tarfile.open(work / "hostile.tar") as archive:
        for info in archive.getmembers():
            try:
                kept = tarfile.data_filter(info, str(work))
                verdicts[info.name] = (kept.name, kept.mode)
            except tarfile.FilterError as exc:
                verdicts[info.name] = type(exc).__name__
    assert verdicts["../../evil.txt"] == "OutsideDestinationError"
    assert verdicts["a/../../../evil2.txt"] == "OutsideDestinationError"
    assert verdicts["up"] == "LinkOutsideDestinationError"
    assert verdicts["hard.txt"] == "AbsoluteLinkError"
    assert verdicts["dev.txt"] == verdicts["fifo.txt"] == "SpecialFileError"
    assert verdicts[f"{outside}/absolute.txt"][0] == f"{outside}/absolute.txt".lstrip("/")
    assert verdicts["setuid.bin"][1] == 0o755  # set-uid and group/other write dropped
    # tarkit reads the regular members as data, and skips the rest.
    keys = [s.key for s in group_samples(read_members(io.BytesIO(hostile_archive(outside))))]
    assert keys == ["ok", "../../evil", "a/../../../evil2", f"{outside}/absolute",
                    f"chain/{outside.name}/through-link", "setuid"]  # fmt: skip


# Every command that reads tar, with the only files it may write.
COMMANDS = {
    "tarcat": (["tarcat", "hostile.tar", "-o", "out.tar"], {"out.tar"}),
    "tarsplit": (["tarsplit", "-c", "2", "-o", "s-%02d.tar", "hostile.tar"],
                 {"s-00.tar", "s-01.tar", "s-02.tar"}),
    "tar2tsv": (["tar2tsv", "hostile.tar"], set()),
    "tarshow": (["tarshow", "hostile.tar"], set()),
    "tarsort": (["tarsort", "hostile.tar", "-o", "sorted.tar"], {"sorted.tar"}),
    "tarfirst": (["tarfirst", "--key", "../../evil", "hostile.tar"], set()),
    "tarindex": (["tarindex", "hostile.tar", "-o", "index.json"], {"index.json", "index.columns", "index", "index/000000.idx"}),
    "tarproc": (["tarproc", "-c", "true", "hostile.tar", "-o", "proc.tar"], {"proc.tar"}),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_command_writes_a_file_named_by_a_member(
    tmp_path: Path, scene: tuple[Path, Path, Path], name: str
) -> None:
    work, outside, private = scene
    args, outputs = COMMANDS[name]
    before = tree(tmp_path)
    result = subprocess.run([tool(args[0]), *args[1:]], cwd=work, capture_output=True,
                            env=dict(os.environ, TMPDIR=str(private)), timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr
    created = tree(tmp_path) - before
    assert created == {str((work / o).relative_to(tmp_path)) for o in outputs}
    assert sorted(private.iterdir()) == []  # private temporary files are gone
    assert (outside / "secret.txt").read_bytes() == b"secret"


def run_tarproc(
    work: Path, private: Path, command: str, data: bytes
) -> subprocess.CompletedProcess:
    (work / "in.tar").write_bytes(data)
    return subprocess.run(
        [tool("tarproc"), "-c", command, "in.tar"], cwd=work, capture_output=True,
        env=dict(os.environ, TMPDIR=str(private)), timeout=60,
    )  # fmt: skip


def fields(archive: bytes) -> dict[str, dict[str, bytes]]:
    return {s.key: s.data() for s in group_samples(read_members(io.BytesIO(archive)))}


def test_tarproc_sample_files_are_private_plain_and_not_executable(
    scene: tuple[Path, Path, Path],
) -> None:
    work, outside, private = scene
    probe = "stat -c '%a %F' . sample.* > sample.modes; echo \"$TARKIT_KEY\" > sample.key"
    result = run_tarproc(work, private, probe, hostile_archive(outside))
    assert result.returncode == 0, result.stderr
    out = fields(result.stdout)
    assert out["setuid"]["modes"].decode().splitlines() == [
        "700 directory", "600 regular file"
    ]  # fmt: skip
    assert out["../../evil"]["key"] == b"../../evil\n"  # the key is data, not a path
    assert sorted(private.iterdir()) == []


@pytest.mark.parametrize("leave", [
    "ln -sf {secret} sample.txt",
    "ln -s ../../../../.. sample.dir",
    "mkfifo sample.fifo",
    "mkdir sample.d",
])  # fmt: skip
def test_tarproc_refuses_links_and_special_files_the_command_leaves(
    scene: tuple[Path, Path, Path], leave: str
) -> None:
    work, outside, private = scene
    command = leave.format(secret=outside / "secret.txt")
    result = run_tarproc(work, private, command, member("k.txt", b"x") + END)
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.endswith("that is not a regular file\n"), stderr
    assert b"secret" not in result.stdout
    assert sorted(private.iterdir()) == []


def test_tarproc_follows_no_link_a_command_plants_for_the_next_sample(
    scene: tuple[Path, Path, Path],
) -> None:
    """Sample a's command leaves sample.next -> outside; sample b's field is sample.next."""
    work, outside, private = scene
    plant = f"if [ -e sample.txt ]; then ln -s {outside}/planted.txt sample.next; fi"
    (work / "in.tar").write_bytes(member("a.txt", b"first") + member("b.next", b"second") + END)
    result = subprocess.run(
        [tool("tarproc"), "--on-error", "skip", "-c", plant, "in.tar"], cwd=work,
        capture_output=True, env=dict(os.environ, TMPDIR=str(private)), timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # sample a left a link: skipped
    assert fields(result.stdout) == {"b": {"next": b"second"}}
    assert not (outside / "planted.txt").exists()
    assert sorted(private.iterdir()) == []


def test_tarsort_spills_into_a_private_directory_that_is_removed(tmp_path: Path) -> None:
    private = tmp_path / "tmp"
    private.mkdir()
    big = b"".join(member(f"{i:05d}.bin", bytes([i % 251]) * 3000) for i in range(3000)) + END
    (tmp_path / "big.tar").write_bytes(big)
    # The input pauses after 6 MB, when at least one 2 MB run has been spilled, until
    # the spill directory has been looked at.
    source = ("pipe:head -c 6000000 big.tar; touch paused; "
              "while [ ! -e go ]; do sleep 0.02; done; tail -c +6000001 big.tar")  # fmt: skip
    sorting = subprocess.Popen(
        [tool("tarsort"), "-m", "2M", "-r", source, "-o", "sorted.tar"], cwd=tmp_path,
        env=dict(os.environ, TMPDIR=str(private)), stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "paused").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        spills = list(private.iterdir())
        while not spills and time.monotonic() < deadline:
            time.sleep(0.02)
            spills = list(private.iterdir())
        seen = [(p.name[:8], p.is_dir(), stat.S_IMODE(p.stat().st_mode)) for p in spills]
        (tmp_path / "go").touch()
        _, stderr = sorting.communicate(timeout=60)
    finally:
        sorting.kill()
        sorting.wait()
    assert sorting.returncode == 0, stderr
    assert seen == [("tarsort-", True, 0o700)]  # one spill directory, private to the user
    assert sorted(private.iterdir()) == []
    cut = big[: len(big) // 2]
    (tmp_path / "cut.tar").write_bytes(cut)
    failed = subprocess.run([tool("tarsort"), "-m", "2M", "cut.tar"], cwd=tmp_path,
                            env=dict(os.environ, TMPDIR=str(private)), capture_output=True)  # fmt: skip
    assert failed.returncode == 2
    assert sorted(private.iterdir()) == []
