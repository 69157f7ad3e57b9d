"""The crash ledger: what the commands of a killed process leave is found and removed."""

from __future__ import annotations

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
