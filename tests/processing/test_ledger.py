"""The crash ledger: what the commands of a killed process leave is found and removed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import assert_gone, make_tar

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


def test_sweeping_ledgers_spares_live_processes_and_clears_what_dead_ones_left(
    tmp_path: Path,
) -> None:
    base, pid_file, source = tmp_path / "ledgers", tmp_path / "pid", tmp_path / "in.tar"
    source.write_bytes(make_tar([("a.txt", b"x")]))
    command = f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; sleep 30"
    child = subprocess.Popen([sys.executable, "-c", LEDGER_CHILD, str(base), str(source), command])
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        command_pid = int(pid_file.read_text())
        (ledger,) = base.iterdir()
        assert ledger.name.split("-")[1] == str(child.pid)
        assert sorted(p.name for p in ledger.iterdir() if not p.name.startswith("tarproc-")) == [
            str(command_pid)
        ]
        assert sweep_ledgers(str(base)) == 0  # its process lives
        assert Path(f"/proc/{command_pid}").exists() and ledger.exists()
    finally:
        child.kill()
        child.wait(timeout=10)
    assert Path(f"/proc/{command_pid}").exists()  # the command outlives its killed parent
    assert sweep_ledgers(str(base)) == 1
    assert_gone(command_pid)
    assert not base.exists()


SPAWNING_CHILD = """
import os, sys
from tarkit.engines.ledger import ledger_directory, record_commands, remove_tree
from tarkit.processing.supervisor import spawn
record_commands(sys.argv[1])
ledger = ledger_directory()
if sys.argv[3] == "swept":
    remove_tree(ledger)
env = dict(os.environ, LEDGER=ledger)
pid = spawn(sys.argv[2], sys.argv[4], env, (1, 2))
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_command_is_in_its_workers_ledger_before_it_runs(tmp_path: Path) -> None:
    # What the command sees in the ledger under its own process group: its start time.
    command = 'cat "$LEDGER/$$" > seen; cut -d" " -f22 /proc/$$/stat > start'
    work = tmp_path / "work"
    work.mkdir()
    args = [str(tmp_path / "ledgers"), command, "live", str(work)]
    subprocess.run([sys.executable, "-c", SPAWNING_CHILD, *args], check=True, timeout=60)
    assert (work / "seen").read_text() == (work / "start").read_text().strip() != ""


def test_a_command_whose_ledger_was_swept_does_not_run(tmp_path: Path) -> None:
    # Its worker was killed and swept while the command was starting: it must not run
    # where nothing would kill it.
    work = tmp_path / "work"
    work.mkdir()
    args = [str(tmp_path / "ledgers"), "touch ran", "swept", str(work)]
    child = subprocess.run(
        [sys.executable, "-c", SPAWNING_CHILD, *args], capture_output=True, timeout=60
    )
    assert child.returncode == 126
    assert b"No such file or directory" in child.stderr
    assert not (work / "ran").exists()


def test_a_ledger_left_by_a_killed_sweep_is_swept(tmp_path: Path) -> None:
    base = tmp_path / "ledgers"
    command = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        start = Path(f"/proc/{command.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        namespace = os.stat("/proc/self/ns/pid").st_ino
        ledger = base / f"{namespace}-1-1.sweeping"  # renamed by a sweep, then left
        ledger.mkdir(parents=True, mode=0o700)
        base.chmod(0o700)
        (ledger / str(command.pid)).write_text(start)
        assert sweep_ledgers(str(base)) == 1
        assert command.wait(timeout=10) == -9
        assert not base.exists()
    finally:
        command.kill()
        command.wait(timeout=10)
