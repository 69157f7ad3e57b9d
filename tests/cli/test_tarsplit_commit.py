"""tarsplit --overwrite commits a set whole, and --resume keeps only shards the input holds.

An overwrite of 40 one-sample shards by 30 others is stopped in its commit (the renames
of the pending shards made slow, ``conftest.slow_renames_env``, and the signal sent when
the first new shard has its name): Ctrl-C and SIGTERM give the whole new set; ``kill -9``
leaves a journal that the next run finishes, whatever its mode, and that the loader
refuses to read past meanwhile. ``--resume`` with another input is an error.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import make_tar, run, slow_renames_env, tool

from tarkit import ShardDataset
from tarkit.errors import SourceError

OLD = make_tar((f"o{i:03d}.txt", f"old {i}".encode()) for i in range(40))
NEW = make_tar((f"n{i:03d}.txt", f"new sample {i}".encode()) for i in range(30))
SPLIT = ["-c", "1", "-o", "out/s-%03d.tar", "--manifest", "out/manifest.json"]


def files(directory: Path) -> dict[str, bytes]:
    """Every file in ``directory``, hidden ones included (name → bytes)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    """The whole old set and the whole new set, each written by an uninterrupted run."""
    made = {}
    for name, archive in (("old", OLD), ("new", NEW)):
        where = tmp_path_factory.mktemp(name)
        assert run(["tarsplit", *SPLIT], input=archive, cwd=where).returncode == 0
        made[name] = files(where / "out")
    assert len(made["old"]) == 41 and len(made["new"]) == 31  # the shards and the manifest
    return made


def overwrite_stopped_in_commit(tmp_path: Path, first_new: bytes, how: int) -> int:
    """Write the old set, then overwrite it with the new one, slowly enough to send
    ``how`` once the first new shard has its name; the overwrite's exit status."""
    (tmp_path / "new.tar").write_bytes(NEW)
    assert run(["tarsplit", *SPLIT], input=OLD, cwd=tmp_path).returncode == 0
    process = subprocess.Popen(
        [tool("tarsplit"), "new.tar", *SPLIT, "--overwrite"], cwd=tmp_path,
        env=slow_renames_env(0.03), stderr=subprocess.PIPE,
    )  # fmt: skip
    first = tmp_path / "out" / "s-000.tar"
    deadline = time.monotonic() + 60
    while first.read_bytes() != first_new and process.poll() is None:
        assert time.monotonic() < deadline, "the commit never began"
        time.sleep(0.005)
    assert process.poll() is None, "the run ended before it could be stopped"
    process.send_signal(how)
    _, stderr = process.communicate(timeout=60)
    assert b"Traceback" not in stderr, stderr.decode()
    return process.returncode


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_ctrl_c_or_sigterm_in_an_overwrites_commit_leaves_the_whole_new_set(
    tmp_path: Path, sets: dict[str, dict[str, bytes]], how: int
) -> None:
    status = overwrite_stopped_in_commit(tmp_path, sets["new"]["s-000.tar"], how)
    assert status == (130 if how == signal.SIGINT else 143)
    assert files(tmp_path / "out") == sets["new"]  # no pending shard, no journal either


def test_kill_9_in_an_overwrites_commit_is_refused_by_the_loader_and_finished_by_resume(
    tmp_path: Path, sets: dict[str, dict[str, bytes]]
) -> None:
    status = overwrite_stopped_in_commit(tmp_path, sets["new"]["s-000.tar"], signal.SIGKILL)
    assert status == -signal.SIGKILL
    out = tmp_path / "out"
    shown = {n: d for n, d in files(out).items() if not n.startswith(".")}
    assert shown != sets["new"] and shown != sets["old"]  # killed midway: a mix on disk
    with pytest.raises(SourceError, match="a mix of two runs: run the writer again"):
        ShardDataset(str(out))
    resumed = run(["tarsplit", "new.tar", *SPLIT, "--resume"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert files(out) == sets["new"]


def test_a_run_without_a_mode_after_kill_9_in_a_commit_finishes_it_then_refuses(
    tmp_path: Path, sets: dict[str, dict[str, bytes]]
) -> None:
    overwrite_stopped_in_commit(tmp_path, sets["new"]["s-000.tar"], signal.SIGKILL)
    again = run(["tarsplit", *SPLIT], input=OLD, cwd=tmp_path)
    assert again.returncode == 2 and "30 files already match" in again.stderr, again.stderr
    assert files(tmp_path / "out") == sets["new"]


@pytest.mark.parametrize(
    ("kept", "given", "changed", "message"),
    [
        pytest.param(200, 50, 50, "the input ends after 50 samples", id="shorter"),
        pytest.param(
            60, 200, 20, "the input's samples 20 to 39 are 'x020' to 'x039'", id="other-keys"
        ),  # fmt: skip
    ],
)
def test_resume_with_another_input_is_a_usage_error_naming_the_shard(
    tmp_path: Path, kept: int, given: int, changed: int, message: str
) -> None:
    first = make_tar((f"k{i:03d}.txt", b"x") for i in range(220))
    other = make_tar((f"{'k' if i < changed else 'x'}{i:03d}.txt", b"x") for i in range(given))
    split = ["-c", "20", "-o", "out/s-%03d.tar", "--manifest", "out/manifest.json"]
    cut = first[: (kept + 2) * 1024]  # a run that failed with `kept` samples in whole shards
    assert run(["tarsplit", *split], input=cut, cwd=tmp_path).returncode == 2
    before = files(tmp_path / "out")
    assert len(before) == kept // 20  # the complete shards of the interrupted run
    result = run(["tarsplit", *split, "--resume"], input=other, cwd=tmp_path)
    assert result.returncode == 2
    shard = "out/s-002.tar" if given < kept else "out/s-001.tar"
    assert result.stderr.startswith(f"tarsplit: error: {shard}: the input is not the one"), (
        result.stderr
    )
    assert message in result.stderr
    assert files(tmp_path / "out") == before  # nothing written, no manifest


def test_resume_with_a_total_skips_the_kept_samples(tmp_path: Path) -> None:
    archive = make_tar((f"k{i:03d}.txt", b"x") for i in range(10))
    split = ["-c", "2", "-o", "out/s-%03d.tar"]
    assert run(["tarsplit", *split], input=archive[: 5 * 1024], cwd=tmp_path).returncode == 2
    result = run(["tarsplit", *split, "--resume", "--total", "10"], input=archive, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (tmp_path / "clean").mkdir()
    assert run(["tarsplit", *split], input=archive, cwd=tmp_path / "clean").returncode == 0
    assert files(tmp_path / "out") == files(tmp_path / "clean" / "out")
