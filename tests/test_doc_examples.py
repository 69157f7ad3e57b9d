"""Every code block of README.md and docs/*.md that can run here runs here.

Blocks fenced as ```bash, ```sh or ```console run in bash; ```python blocks run in a
subprocess. Each runs in its own copy of one directory of small real data made with tarkit
(``doc_examples_data.py``: the names the examples use, data-000.tar, photos/, plan.csv…),
with the venv's commands first on PATH. Other fences (none, json, csv) are synopses, output
and data: not code.

- A ``bash`` block runs under ``set -e``; a line ``$ COMMAND`` is a command whose output
  follows it (up to a blank line), which is not run.
- A ``console`` block is a transcript: each ``$ COMMAND`` runs, and the lines after it are
  what it must print (stdout and stderr), whatever its exit status.
- A ``python`` block whose first line is ``# NAME.py`` is a module of the page: it is
  written as NAME.py beside every block of that page (and compiled), not run.

A block says what it needs, or why it cannot run here, in HTML comments right above its
fence (invisible on the rendered page):

    <!-- not run: needs a Ray cluster -->             the block is skipped, with this reason
    <!-- not run, lines with "https://host": a remote host -->
                                                      the commands (whole, continuation lines
                                                      included) that contain the text are left
                                                      out; the rest runs
    <!-- setup: tarkit shard photos/ -o 'shards/s-%06d.tar' -->
                                                      runs first, in the block's directory

``pytest -rs tests/test_doc_examples.py`` lists what was skipped and why. An unmarked block
that fails is a failure: fix the block (or the code), or mark it with its reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import BIN, ROOT
from doc_examples_data import prepare

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNS = {"bash", "sh", "shell", "console", "python"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
COMMENT = re.compile(r"^\s*<!--\s*(.*?)\s*-->\s*$")
LINES_WITH = re.compile(r'not run, lines with "(.+?)": (.+)')
MODULE = re.compile(r"# (\w+)\.py\n")
TIMEOUT = 120  # seconds for one block


@dataclass
class Block:
    page: Path
    line: int
    language: str
    code: str
    skip: str | None = None  # why the whole block does not run here
    leave_out: list[tuple[str, str]] = field(default_factory=list)  # (text, why)
    setup: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def module(self) -> str | None:
        """NAME for a ``# NAME.py`` python block, a module of its page."""
        found = MODULE.match(self.code) if self.language == "python" else None
        return found[1] if found else None


def markers(text: str, start: int) -> list[str]:
    """The HTML comments on the lines right above offset ``start`` (blank lines between)."""
    found = []
    for line in reversed(text[:start].splitlines()):
        comment = COMMENT.match(line)
        if comment:
            found.append(comment[1])
        elif line.strip():
            break
    return found[::-1]


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for fence in FENCE.finditer(text):
        if fence[1] not in RUNS:
            continue
        block = Block(page, text.count("\n", 0, fence.start()) + 1, fence[1], fence[2])
        for marker in markers(text, fence.start()):
            lines_with = LINES_WITH.fullmatch(marker)
            if lines_with:
                block.leave_out.append((lines_with[1], lines_with[2]))
            elif marker.startswith("not run:"):
                block.skip = marker.split(":", 1)[1].strip()
            elif marker.startswith("setup:"):
                block.setup.append(marker.split(":", 1)[1].strip())
        found.append(block)
    return found


BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def commands(script: str) -> list[list[str]]:
    """The lines of ``script`` grouped into whole commands: a trailing backslash or an open
    quote carries a command onto the next line."""
    groups: list[list[str]] = []
    current: list[str] = []
    for line in script.splitlines():
        current.append(line)
        text = "\n".join(current)
        if text.rstrip().endswith("\\"):
            continue
        try:
            shlex.split(text, comments=True)
        except ValueError:  # a quote is still open
            continue
        groups.append(current)
        current = []
    if current:
        groups.append(current)
    return groups


def shell_script(block: Block) -> str:
    """The block as bash runs it: transcript output and left-out commands removed."""
    kept = []
    output = False
    for line in block.code.splitlines():
        if line.startswith("$ "):
            kept.append(line[2:])
            output = True
        elif output and line.strip() and not line.startswith("#"):
            continue  # what the `$` command above prints
        else:
            output = False
            kept.append(line)
    script = []
    for group in commands("\n".join(kept)):
        if not any(text in line for text, _ in block.leave_out for line in group):
            script.extend(group)
    return "\n".join(script) + "\n"


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("doc-data")
    prepare(root)
    return root


def workdir(block: Block, prepared: Path, tmp_path: Path) -> Path:
    """A copy of the data, the modules of the block's page, and the block's setup run."""
    work = tmp_path / "work"
    shutil.copytree(prepared, work)
    for other in BLOCKS:
        if other.page == block.page and other.module:
            (work / f"{other.module}.py").write_text(other.code)
    for command in block.setup:
        status, _, stderr = run_block(["bash", "-c", command], work)
        assert status == 0, f"setup {command!r} failed: {stderr}"
    return work


def run_block(args: list[str], work: Path) -> tuple[int, str, str]:
    """Run ``args`` in ``work`` with the venv's commands first on PATH, in a session of
    its own that is killed afterwards, so that nothing a block starts outlives it."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    process = subprocess.Popen(args, cwd=work, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)  # fmt: skip
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return process.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def run_console(block: Block, work: Path) -> None:
    lines = block.code.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("$ "):
            continue
        expected = []
        for after in lines[i + 1 :]:
            if after.startswith("$ ") or not after.strip():
                break
            expected.append(after)
        _, out, err = run_block(["bash", "-c", line[2:]], work)
        printed = (out + err).splitlines()
        assert sorted(printed) == sorted(expected), f"{block.name}: {line}"


def execute(block: Block, prepared: Path, tmp_path: Path) -> None:
    """Run one block in a fresh copy of the data; AssertionError when it fails."""
    work = workdir(block, prepared, tmp_path)
    if block.language == "console":
        run_console(block, work)
        return
    if block.language == "python":
        (work / "example.py").write_text(block.code)
        status, _, stderr = run_block([sys.executable, "example.py"], work)
    else:
        status, _, stderr = run_block(["bash", "-c", "set -e\n" + shell_script(block)], work)
    assert status == 0, f"{block.name} exited {status}:\n{stderr}"


@pytest.fixture(scope="session")
def outcomes(
    request: pytest.FixtureRequest, prepared: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[None]]]:
    """The blocks the session runs, run a few at a time: most of their time is start-up
    (Python, torch, DataLoader workers) and waiting on the processes they start."""
    chosen = {
        item.callspec.params["block"].name
        for item in request.session.items
        if hasattr(item, "callspec") and "block" in item.callspec.params
    }
    runnable = [b for b in BLOCKS if b.name in chosen and not b.skip and not b.module]
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        futures = {b.name: pool.submit(execute, b, prepared, tmp_path_factory.mktemp("block"))
                   for b in runnable}  # fmt: skip
        yield futures


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_block_runs(block: Block, outcomes: dict[str, Future[None]]) -> None:
    if block.skip:
        pytest.skip(f"not run: {block.skip}")
    if block.module:
        compile(block.code, f"{block.module}.py", "exec")
        return
    outcomes[block.name].result()  # re-raises the block's failure


def test_every_marker_says_why_and_every_left_out_text_is_in_its_block() -> None:
    for block in BLOCKS:
        if block.skip is not None:
            assert block.skip, f"{block.name}: 'not run:' without a reason"
        for text, why in block.leave_out:
            assert why.strip(), f"{block.name}: lines with {text!r} left out without a reason"
            assert text in block.code, f"{block.name}: no line has {text!r}"


def test_the_splitter_keeps_quoted_and_continued_lines_together() -> None:
    script = "a \\\n  b\nc 'd\ne' f\n# g\nh"
    assert commands(script) == [["a \\", "  b"], ["c 'd", "e' f"], ["# g"], ["h"]]
