"""The crash ledger: what the commands of a killed process leave is found and removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import assert_all_gone, make_tar

from tarkit.engines.ledger import sweep_ledgers

LEDGER_CHILD = """
import sys
from tarkit.stream.stages import read_samples
from tarkit.processing.commands import Command
from tarkit.engines.ledger import record_commands
from tarkit.processing.supervisor import map_command
record_commands(sys.argv[1])
list(map_command(read_samples([sys.argv[2]]), Command(sys.argv[3])))
"""


def command_leaving_a_session(source: Path, pid_file: Path) -> str:
    """Write a one-sample input; a command that starts a process in a session of its own,
    writes its own id and that process's into ``pid_file``, and hangs."""
    source.write_bytes(make_tar([("a.txt", b"x")]))
    return (
        f"setsid sleep 30 & echo $$ $! > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; sleep 30"
    )


def test_sweeping_ledgers_spares_live_processes_and_clears_what_dead_ones_left(
    tmp_path: Path,
) -> None:
    base, pid_file, source = tmp_path / "ledgers", tmp_path / "pid", tmp_path / "in.tar"
    # The command's group kill cannot reach the process it starts in a session of its
    # own: the sweep finds it by its mark.
    command = command_leaving_a_session(source, pid_file)
    child = subprocess.Popen([sys.executable, "-c", LEDGER_CHILD, str(base), str(source), command])
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        command_pid, escaped_pid = map(int, pid_file.read_text().split())
        (ledger,) = base.iterdir()
        assert ledger.name.split("-")[1] == str(child.pid)
        start = Path(f"/proc/{command_pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        assert sorted(p.name for p in ledger.iterdir() if not p.name.startswith("tarproc-")) == [
            f"{command_pid}.{start}"
        ]
        assert sweep_ledgers(str(base)) == 0  # its process lives
        assert Path(f"/proc/{command_pid}").exists() and ledger.exists()
    finally:
        child.kill()
        child.wait(timeout=10)
    assert Path(f"/proc/{command_pid}").exists()  # the command outlives its killed parent
    assert sweep_ledgers(str(base)) == 1
    assert_all_gone([command_pid, escaped_pid])
    assert not base.exists()


SPAWNING_CHILD = """
import os, sys
from tarkit.engines.ledger import ledger_directory, record_commands
from tarkit.processing.jobs import spawn
record_commands(sys.argv[1])
ledger = ledger_directory()
if sys.argv[3] == "swept":
    os.rename(ledger, ledger + ".sweeping")  # as a sweep does first
env = dict(os.environ, LEDGER=ledger)
pid = spawn(sys.argv[2], sys.argv[4], env, (1, 2))
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def spawned(tmp_path: Path, command: str, ledger: str) -> tuple[Path, int]:
    """Run ``command`` as a map worker with a ledger does, in a new directory."""
    work = tmp_path / "work"
    work.mkdir()
    args = [str(tmp_path / "ledgers"), command, ledger, str(work)]
    child = subprocess.run([sys.executable, "-c", SPAWNING_CHILD, *args], timeout=60)
    return work, child.returncode


def test_a_command_is_in_its_workers_ledger_before_it_runs(tmp_path: Path) -> None:
    # What the command finds in the ledger: its own process group and start time.
    command = 'ls "$LEDGER" > seen; echo "$$.$(cut -d" " -f22 /proc/$$/stat)" > own'
    work, status = spawned(tmp_path, command, "live")
    assert status == 0
    assert (work / "seen").read_text() == (work / "own").read_text()


def test_a_command_whose_ledger_is_being_swept_does_not_run(tmp_path: Path) -> None:
    # Its worker was killed and a sweep took the ledger while the command was starting:
    # it must not run where nothing would kill it.
    work, status = spawned(tmp_path, "touch ran", "swept")
    assert status == 126
    assert not (work / "ran").exists()


@pytest.mark.parametrize("reused", [False, True], ids=["recorded", "id-reused"])
def test_a_ledger_left_by_a_killed_sweep_is_swept(tmp_path: Path, reused: bool) -> None:
    base = tmp_path / "ledgers"
    command = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        start = Path(f"/proc/{command.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        namespace = os.stat("/proc/self/ns/pid").st_ino
        ledger = base / f"{namespace}-1-1.sweeping"  # renamed by a sweep, then left
        (ledger / "tarproc-x").mkdir(parents=True, mode=0o700)
        base.chmod(0o700)
        # With another start time on record, the id now belongs to another process.
        (ledger / f"{command.pid}.{'1' if reused else start}").touch()
        assert sweep_ledgers(str(base)) == 1
        if reused:
            assert command.poll() is None
        else:
            assert command.wait(timeout=10) == -9
        assert not base.exists()
    finally:
        command.kill()
        command.wait(timeout=10)


def test_finished_commands_leave_no_record(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(make_tar([(f"{i}.txt", b"x") for i in range(5)]))
    script = LEDGER_CHILD + "from tarkit.engines.ledger import ledger_directory\n"
    script += "print(sorted(os.listdir(ledger_directory())))\n"
    child = subprocess.run(
        [sys.executable, "-c", "import os\n" + script, str(tmp_path / "l"), str(source), "true"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert child.stdout.strip() == "[]"  # nor any of the commands' directories


STUBBORN_WORKER = (
    """
import multiprocessing, os, signal, sys, threading, time
from tarkit.engines import local
local.DRIVER_GONE_GRACE = 0.3
signal.signal(signal.SIGTERM, lambda *_: None)  # a task that will not stop
lifeline, driver_end = multiprocessing.Pipe(duplex=False)
threading.Thread(target=local._watch_driver, args=(lifeline, threading.Event())).start()
def driver_dies():  # once the command runs
    while not os.path.exists(sys.argv[4]):
        time.sleep(0.01)
    driver_end.close()
threading.Thread(target=driver_dies, daemon=True).start()
"""
    + LEDGER_CHILD
)


def test_a_worker_that_ignores_its_drivers_end_kills_its_commands_and_exits_after_a_grace(
    tmp_path: Path,
) -> None:
    base, pid_file, source = tmp_path / "ledgers", tmp_path / "pid", tmp_path / "in.tar"
    command = command_leaving_a_session(source, pid_file)
    args = [STUBBORN_WORKER, str(base), str(source), command, str(pid_file)]
    worker = subprocess.run([sys.executable, "-c", *args], timeout=60)
    assert worker.returncode == 128 + signal.SIGTERM
    assert_all_gone(map(int, pid_file.read_text().split()))
    assert not base.exists()
