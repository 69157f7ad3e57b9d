"""`tarkit map --overwrite` commits its outputs whole: stopped while mapping, the old set
stays as it was (outputs, records, indexes, manifest, metadata); stopped in its commit
(``conftest.paused_commit_env``, then ``kill -9``), the set is refused by every reader
until the next run into the outputs finishes it and says so.

The old set is made by ``-c true`` (the inputs as they are), the new one by
``map_functions:slow`` (upper case, as slowly as ``TARKIT_TEST_DELAY`` says): a mix of
the two shows in the bytes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import paused_commit_env, run, tool
from map_functions import write_inputs

from tarkit import ShardDataset
from tarkit.errors import SourceError

TESTS = Path(__file__).resolve().parent.parent
SET = ["-o", "out/", "--manifest", "out/manifest.json", "--metadata", "out/meta.jsonl", "-q"]
OLD = ["tarkit", "map", "-c", "true", "in/in-{0..3}.tar", *SET]
NEW = ["tarkit", "map", "--fn", "map_functions:slow", "in/in-{0..3}.tar", *SET]  # as shout


def files(directory: Path) -> dict[str, bytes]:
    """Every file in ``directory``, hidden ones included (name → bytes)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def environment(**more: str) -> dict[str, str]:
    path = os.pathsep.join([str(TESTS), os.environ["PYTHONPATH"]])
    return dict(os.environ, PYTHONPATH=path, **{"TARKIT_TEST_DELAY": "0", **more})


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    """The old set and the new set, each made by an uninterrupted run into an empty
    directory."""
    made = {}
    for name, command in (("old", OLD), ("new", NEW)):
        where = tmp_path_factory.mktemp(name)
        write_inputs(where / "in")
        done = run(command, cwd=where, env=environment())
        assert done.returncode == 0, done.stderr
        made[name] = files(where / "out")
    assert len(made["old"]) == 15 and made["old"]["in-0.tar"] != made["new"]["in-0.tar"]
    return made


def overwrite_old_set(tmp_path: Path, env: dict[str, str], *more: str) -> subprocess.Popen:
    """Write the old set into ``tmp_path/out``, then start the new set's overwrite."""
    write_inputs(tmp_path / "in")
    assert run(OLD, cwd=tmp_path, env=environment()).returncode == 0
    return subprocess.Popen([tool("tarkit"), *NEW[1:], "--overwrite", *more], cwd=tmp_path,
                            env=env, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip


def test_an_overwrite_stopped_while_mapping_leaves_the_old_set_whole(
    tmp_path: Path, sets: dict[str, dict[str, bytes]]
) -> None:
    process = overwrite_old_set(tmp_path, environment(TARKIT_TEST_DELAY="0.1"), "-j", "2")
    out = tmp_path / "out"
    deadline = time.monotonic() + 60
    while not list(out.glob(".in-*.tar.pending")) and process.poll() is None:
        if (out / "in-0.tar").read_bytes() != sets["old"]["in-0.tar"]:
            break  # (replaced in place: the old set is lost)
        assert time.monotonic() < deadline, "no shard was mapped within 60 s"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGINT)  # as a terminal does
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr.decode()
    assert files(out) == sets["old"]  # no new output, no pending file, the old manifest


def test_an_overwrite_killed_in_its_commit_is_refused_then_finished_by_the_next_run(
    tmp_path: Path, sets: dict[str, dict[str, bytes]]
) -> None:
    process = overwrite_old_set(tmp_path, paused_commit_env(tmp_path / "go", environment()))
    out = tmp_path / "out"
    deadline = time.monotonic() + 60
    while (out / "in-0.tar").read_bytes() != sets["new"]["in-0.tar"] and process.poll() is None:
        assert time.monotonic() < deadline, "the commit never began"
        time.sleep(0.01)
    assert process.poll() is None, "the run ended before it could be stopped"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    shown = {n: d for n, d in files(out).items() if not n.startswith(".")}
    assert "manifest.json" not in shown and "meta.jsonl" not in shown  # none claims the mix
    with pytest.raises(SourceError, match="a mix of two runs") as refused:
        ShardDataset(str(out))
    assert refused.value.reason == SourceError.UNFINISHED
    reader = run(["tarkit", "map", "-c", "true", "out/in-{0..3}.tar", "-o", "other/"],
                 cwd=tmp_path, env=environment())  # fmt: skip
    assert reader.returncode == 2 and "tarkit map: error: " in reader.stderr
    assert "out/in-0.tar: part of a set whose commit was stopped midway" in reader.stderr

    again = run(NEW, cwd=tmp_path, env=environment())  # a resume, as by default
    assert again.returncode == 0, again.stderr
    assert again.stderr.startswith(
        "tarkit map: warning: out/in-0.tar: finished the commit of an earlier overwrite of "
        "these outputs that was stopped midway ("
    )
    assert files(out) == sets["new"]
