"""shard_dataset on this machine, where items give several samples or none: the records
beside the shards are part of the set (an overwrite commits them with its shards, one
stopped before its commit leaves the old set's as they were, one killed in its commit is
finished with them), and a set whose shards happen to hold as many samples as items is
still resumed by its records, not by counting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import paused_commit_env
from shard_datasets import Chunks, Words

from tarkit.writing.from_dataset import shard_dataset

TESTS = Path(__file__).resolve().parent.parent


def files(directory: Path) -> dict[str, bytes]:
    """Every file in ``directory``, hidden ones (the records) included."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


class Balanced:
    """A ``to_sample`` whose items give two samples, one, one, none, over again: every
    four items give four samples, so shards of four end where counting items would put
    them. Item ``stop`` ends the run as a crash would."""

    def __init__(self, stop: int | None = None) -> None:
        self.stop = stop

    def __call__(self, item: int, index: int) -> list[dict[str, str]]:
        if index == self.stop:
            raise KeyboardInterrupt
        count = (2, 1, 1, 0)[index % 4]
        return [{"__key__": f"i{index:02d}/{n}", "txt": f"{index} {n}"} for n in range(count)]


def test_a_set_of_items_giving_two_samples_and_none_resumes_by_its_records(
    tmp_path: Path,
) -> None:
    shard_dataset(range(16), str(tmp_path / "clean" / "s-%d.tar"), to_sample=Balanced(),
                  maxcount=4)  # fmt: skip
    pattern = str(tmp_path / "cut" / "s-%d.tar")
    with pytest.raises(KeyboardInterrupt):
        shard_dataset(range(16), pattern, to_sample=Balanced(stop=10), maxcount=4)
    assert sorted(os.listdir(tmp_path / "cut")) == [
        ".s-0.tar.shard.json", ".s-1.tar.shard.json", "s-0.tar", "s-1.tar"
    ]  # fmt: skip
    # Counting would take item 3 (no sample) for the last of s-0.tar: the record says 2.
    shard_dataset(range(16), pattern, to_sample=Balanced(), maxcount=4, mode="resume")
    assert files(tmp_path / "cut") == files(tmp_path / "clean")
    shard_dataset(range(16), pattern, to_sample=Balanced(), maxcount=4, mode="resume")
    assert files(tmp_path / "cut") == files(tmp_path / "clean")


def test_an_overwrite_of_a_set_with_records_commits_its_own_or_leaves_the_old_ones(
    tmp_path: Path,
) -> None:
    for name, maxcount in (("a", 5), ("b", 4)):  # the old set and the new one, alone
        shard_dataset(Words(40), str(tmp_path / name / "s-%02d.tar"), to_sample=Chunks(),
                      maxcount=maxcount)  # fmt: skip
    old, new = files(tmp_path / "a"), files(tmp_path / "b")
    assert ".s-00.tar.shard.json" in old and old.keys() != new.keys()
    pattern = str(tmp_path / "a" / "s-%02d.tar")
    with pytest.raises(KeyboardInterrupt):  # stopped before its commit
        shard_dataset(Words(40), pattern, to_sample=Chunks(stop=30), maxcount=4, mode="overwrite")
    assert files(tmp_path / "a") == old  # the old records too: the old set resumes
    shard_dataset(Words(40), pattern, to_sample=Chunks(), maxcount=5, mode="resume")
    assert files(tmp_path / "a") == old
    shard_dataset(Words(40), pattern, to_sample=Chunks(), maxcount=4, mode="overwrite")
    assert files(tmp_path / "a") == new
    shard_dataset(Words(40), str(tmp_path / "a" / "s-%02d.tar"), maxcount=4, mode="overwrite")
    assert not [name for name in os.listdir(tmp_path / "a") if name.startswith(".")]


def test_an_overwrite_killed_in_its_commit_is_finished_records_included_by_a_resume(
    tmp_path: Path,
) -> None:
    shard_dataset(Words(40), str(tmp_path / "new" / "s-%02d.tar"), to_sample=Chunks(),
                  maxcount=4)  # fmt: skip
    new = files(tmp_path / "new")
    out = tmp_path / "out"
    shard_dataset(Words(40), str(out / "s-%02d.tar"), to_sample=Chunks(), maxcount=5)
    overwrite = (
        "from shard_datasets import Chunks, Words\n"
        "from tarkit import shard_dataset\n"
        "shard_dataset(Words(40), 'out/s-%02d.tar', to_sample=Chunks(), maxcount=4, "
        "mode='overwrite')\n"
    )
    env = paused_commit_env(tmp_path / "go")
    env["PYTHONPATH"] += os.pathsep + str(TESTS)
    process = subprocess.Popen([sys.executable, "-c", overwrite], cwd=tmp_path, env=env,
                               stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while (out / "s-00.tar").read_bytes() != new["s-00.tar"] and process.poll() is None:
        assert time.monotonic() < deadline, "the commit never began"
        time.sleep(0.005)
    assert process.poll() is None, process.communicate()[1].decode()
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert files(out) != new and any(name.endswith(".commit.json") for name in os.listdir(out))
    told = []
    shard_dataset(Words(40), str(out / "s-%02d.tar"), to_sample=Chunks(), maxcount=4,
                  mode="resume", progress=lambda state: told.append(state.message))  # fmt: skip
    assert files(out) == new
    assert told[0] == (  # the first report, before any item: tarkit shard prints it
        f"finished the commit of an earlier overwrite into {out}/s-%02d.tar that was stopped "
        f"midway ({out}/.s-%02d.tar.commit.json): its new set is in place"
    )
