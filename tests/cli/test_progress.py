"""The progress line of the long-running commands: drawn by tqdm on a terminal (a real
pseudo-terminal here), never into a pipe, and no import of tqdm or rich unless drawn.

Each command gets input that pauses for longer than the line's delay (a ``pipe:`` input
that sleeps, a slow command, a slow dataset, or a reader of stdout that waits), so that
a line that should appear does appear.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading
import time
from pathlib import Path

import pytest
from conftest import make_tar, run, tool
from test_tar2tsv import imported_modules

PAUSE = 0.8  # longer than tarkit.cli.progress.DELAY
SAMPLES = 300


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """data.tar (300 samples, .cls and .txt), two more shards, a plan, a slow dataset."""
    root = tmp_path_factory.mktemp("progress")
    archive = make_tar(
        (f"{i:06d}.{field}", f"{field} {i}".encode())
        for i in range(SAMPLES)
        for field in ("cls", "txt")
    )
    for name in ("data.tar", "a.tar", "b.tar"):
        (root / name).write_bytes(archive)
    for name in ("small.tar", "small2.tar"):
        (root / name).write_bytes(make_tar((f"{i:02d}.txt", b"t") for i in range(20)))
    (root / "page.txt").write_bytes(b"x" * 50_000)
    (root / "plan.csv").write_text(
        "cls,@txt\n" + "".join(f"{i},page.txt\n" for i in range(SAMPLES))
    )
    (root / "slowdata.py").write_text(
        "import time\n"
        "class Slow:\n"
        "    def __len__(self): return 6\n"
        "    def __getitem__(self, i):\n"
        "        time.sleep(0.15)\n"
        "        return {'__key__': f'k{i}', 'txt': str(i)}\n"
        "def make(): return Slow()\n"
    )
    return root


def slow(path: str) -> str:
    """A ``pipe:`` input that gives the first 20 KB of ``path``, pauses, then the rest."""
    return f"pipe:head -c 20480 {path}; sleep {PAUSE}; tail -c +20481 {path}"


BAR = "\u2588"
ELAPSED = r"\[\d\d:\d\d"
# name: (command line, the last state the line must show)
CASES = {
    "tarcat": (["tarcat", slow("data.tar"), "-o", "out.tar"],
               rf"tarcat: 300 samples {ELAPSED}, \s*[\d.]+ samples/s\]"),
    "tarcat -c": (["tarcat", slow("data.tar"), "-c", "250", "-o", "out.tar"],
                  rf"tarcat: 100%\|{BAR}+\| 250/250 {ELAPSED}<00:00, \s*[\d.]+ samples/s\]"),
    "tar2tsv": (["tar2tsv", slow("data.tar")],
                rf"tar2tsv: 300 samples {ELAPSED}, \s*[\d.]+ samples/s\]"),
    "tarsplit": (["tarsplit", slow("data.tar"), "--num-shards", "4", "--total", "300", "-o",
                  "split/s-%d.tar", "--overwrite"],
                 rf"tarsplit: 100%\|{BAR}+\| 300/300 {ELAPSED}<00:00, \s*[\d.]+ samples/s, 4 shards\]"),
    "tarsort": (["tarsort", slow("data.tar"), "-r", "-o", "sorted.tar"],
                rf"tarsort \(writing\): 100%\|{BAR}+\| 600/600 {ELAPSED}<00:00, \s*[\d.]+ members/s\]"),
    "tarindex": (["tarindex", "a.tar", slow("data.tar"), "b.tar", "-o", "m.json"],
                 rf"tarindex: 100%\|{BAR}+\| 3/3 {ELAPSED}<00:00, \s*[\d.]+ shards/s, 900 samples\]"),
    "tarproc": (["tarproc", "-c", f"sleep {PAUSE}", "-p", "20", "small.tar", "-o", "p.tar"],
                rf"tarproc: 20 samples {ELAPSED}, \s*[\d.]+ samples/s\]"),
    "tarcreate": (["tarcreate", "plan.csv"],
                  rf"tarcreate: 100%\|{BAR}+\| 300/300 {ELAPSED}<00:00, \s*[\d.]+ samples/s\]"),
    "shard": (["tarkit", "shard", "--dataset", "slowdata:make", "-o", "sh/s-%d.tar",
               "--overwrite"],
              rf"tarkit shard: 100%\|{BAR}+\| 6/6 {ELAPSED}<00:00, \s*[\d.]+ samples/s, 1 shard done\]"),
    "map": (["tarkit", "map", "-c", f"sleep {PAUSE / 2}", "small.tar", "small2.tar", "-o",
             "mapped/", "-j", "1", "-p", "20", "--overwrite"],
            rf"tarkit map: 100%\|{BAR}+\| 2/2 {ELAPSED}<00:00, \s*[\d.]+ shards/s, 40 samples, "
            rf"\d+ samples/s, 0 failed\]"),
}  # fmt: skip


def command(args: list[str]) -> list[str]:
    return [tool(args[0]), *args[1:]]


def on_terminal(args: list[str], cwd: Path, *, stdout_too: bool = False, drain_after: float = 0
                ) -> tuple[int, bytes, str]:  # fmt: skip
    """Run ``args`` with stderr on a pseudo-terminal 100 columns wide (stdout too with
    ``stdout_too``, else a pipe read ``drain_after`` seconds after its first 4 KB); the
    exit status, stdout and what the terminal received."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    out = follower if stdout_too else subprocess.PIPE
    process = subprocess.Popen(command(args), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                               stderr=follower)  # fmt: skip
    os.close(follower)
    chunks: list[bytes] = []

    def drain() -> None:
        assert process.stdout is not None
        chunks.append(process.stdout.read(4096))
        time.sleep(drain_after)
        chunks.append(process.stdout.read())

    reader = threading.Thread(target=drain)
    if not stdout_too:
        reader.start()
    screen = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the other side is closed and everything was read
                break
            if not chunk:
                break
            screen += chunk
    finally:
        os.close(leader)
    status = process.wait(timeout=120)
    if not stdout_too:
        reader.join()
    return status, b"".join(chunks), screen.decode("utf-8", "replace")


def states(screen: str) -> list[str]:
    """The states the line went through, and the other lines, in order."""
    return [part.rstrip() for part in re.split(r"[\r\n]+", screen) if part.strip()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_line_is_drawn_on_a_terminal_and_left_standing_at_the_end(
    data: Path, name: str
) -> None:
    args, last = CASES[name]
    status, _, screen = on_terminal(args, data, drain_after=PAUSE if name == "tarcreate" else 0)
    assert status == 0, screen
    assert re.fullmatch(last, states(screen)[-1]), screen
    assert screen.endswith("\r\n")


@pytest.mark.parametrize("name", sorted(CASES))
def test_nothing_is_drawn_into_a_pipe(data: Path, name: str) -> None:
    args, _ = CASES[name]
    result = run(command(args), cwd=data)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr and "/s" not in result.stderr.replace(" samples/s)", "")


def test_the_line_shows_the_time_left_while_the_total_is_known(data: Path) -> None:
    _, _, screen = on_terminal(CASES["tarsplit"][0], data)
    assert any(re.search(r"\| \d+/300 \[\d\d:\d\d<\d\d:\d\d", s) for s in states(screen)[:-1])


def test_no_progress_draws_nothing_on_a_terminal_and_progress_draws_into_a_pipe(data: Path
                                                                                ) -> None:  # fmt: skip
    args = ["tarcat", slow("data.tar"), "-o", "out.tar"]
    status, _, screen = on_terminal([*args, "--no-progress"], data)
    assert (status, screen) == (0, "")
    forced = run(command([*args, "--progress"]), cwd=data)
    assert forced.returncode == 0 and re.search(r"\rtarcat: 300 samples", forced.stderr)


def test_nothing_is_drawn_when_the_output_goes_to_the_same_terminal(data: Path) -> None:
    status, _, screen = on_terminal(["tar2tsv", slow("data.tar")], data, stdout_too=True)
    assert status == 0
    assert "000299\t" in screen and "samples/s" not in screen


def test_a_quick_command_draws_nothing(data: Path) -> None:
    status, _, screen = on_terminal(["tarcat", "data.tar", "-o", "out.tar"], data)
    assert (status, screen) == (0, "")


def test_report_lines_go_above_the_line_whole(data: Path) -> None:
    args = [*CASES["tarsplit"][0], "-v"]
    status, _, screen = on_terminal(args, data)
    assert status == 0
    reports = [s for s in states(screen) if s.startswith("tarsplit: split/")]
    assert len(reports) == 4
    for i, report in enumerate(reports):
        assert re.fullmatch(rf"tarsplit: split/s-{i}\.tar: 75 samples, [\d.]+ KiB", report)


def test_the_sort_shows_its_reading_stage_then_its_writing_stage(data: Path) -> None:
    _, _, screen = on_terminal(CASES["tarsort"][0], data)
    lines = states(screen)
    reading = [i for i, s in enumerate(lines) if s.startswith("tarsort (reading): ")]
    assert reading and lines[reading[-1]].startswith("tarsort (reading): 600 members [")
    assert all(s.startswith("tarsort (writing): ") for s in lines[reading[-1] + 1 :])


def modules_loaded(module: str, args: list[str], cwd: Path, *, terminal: bool) -> set[str]:
    """Top-level packages imported by ``module``'s main(), stderr a pipe or a terminal."""
    leader, follower = pty.openpty()
    try:
        return imported_modules(module, args, cwd, follower if terminal else subprocess.PIPE)
    finally:
        os.close(follower)
        os.close(leader)


STARTS = {
    "tarcat": ["data.tar", "-o", "out.tar"],
    "tarsplit": ["data.tar", "-o", "st/s-%d.tar", "--overwrite"],
    "tarsort": ["data.tar", "-o", "sorted.tar"],
    "tarindex": ["data.tar", "-o", "m.json"],
    "tarproc": ["-c", "true", "-p", "20", "small.tar", "-o", "p.tar"],
    "tar2tsv": ["-c", "2", "data.tar"],
    "tarcreate": ["plan.csv", "-o", "c.tar"],
}


@pytest.mark.parametrize("name", sorted(STARTS))
def test_tqdm_and_rich_are_not_imported_unless_stderr_is_a_terminal(data: Path, name: str
                                                                    ) -> None:  # fmt: skip
    piped = modules_loaded(f"tarkit.cli.{name}", STARTS[name], data, terminal=False)
    assert "tarkit" in piped  # the probe saw the run (the terminal run below shows it drew)
    assert not piped & {"tqdm", "rich", "torch", "numpy"}
    shown = modules_loaded(f"tarkit.cli.{name}", STARTS[name], data, terminal=True)
    assert "tqdm" in shown and not shown & {"rich", "torch", "numpy"}
