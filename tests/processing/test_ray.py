"""map_shards on a real Ray cluster: a head node and a worker node started with `ray start`.

One cluster for the module (Ray takes seconds to start; :mod:`ray_cluster` starts and
stops it). Worker processes see the tests directory on PYTHONPATH (for
``map_functions``) and the marks directory in ``TARKIT_TEST_MARKS``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import map_functions as fns
import pytest
from conftest import BIN, assert_gone, run, samples_of
from map_functions import write_inputs
from ray_cluster import RayCluster

from tarkit.errors import UsageError
from tarkit.processing.driver import MapError, map_shards

pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(150)  # each test, the cluster's start-up included


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """(address, marks directory) of a two-node Ray cluster on this machine."""
    marks = tmp_path_factory.mktemp("marks")
    ray = RayCluster({"TARKIT_TEST_MARKS": str(marks)})
    try:
        ray.add_node()
        yield ray.address, marks
    finally:
        ray.stop()


@pytest.fixture
def marks(cluster: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = cluster[1]
    for path in directory.iterdir():
        path.unlink()
    monkeypatch.setenv("TARKIT_TEST_MARKS", str(directory))
    return directory


def test_a_job_of_16_shards_runs_on_both_nodes_and_every_sample_comes_out_once(
    tmp_path: Path, cluster: tuple[str, Path], marks: Path
) -> None:
    address, _ = cluster
    inputs = write_inputs(tmp_path / "in", shards=16, per_shard=3)
    out = str(tmp_path / "ray" / "out-{0..15}.tar")
    result = map_shards(
        fns.where, inputs, out, engine="ray", address=address,
        metadata=str(tmp_path / "meta.jsonl"),
    )  # fmt: skip
    keys = [f"s{s}-{i:02d}" for s in range(16) for i in range(3)]
    rows = fns.rows_of(tmp_path / "meta.jsonl")
    assert [r["key"] for r in rows] == keys
    assert all(r["length"] == int(r["key"][-2:]) * 5 + 4 for r in rows)
    nodes = Counter(r["node"] for r in rows)
    assert len(nodes) == 2, f"only one node did work: {nodes}"
    outputs = [tmp_path / "ray" / f"out-{s}.tar" for s in range(16)]
    assert [k for path in outputs for k, _ in samples_of(path.read_bytes())] == keys
    assert Counter(key for _, key in fns.calls(marks)) == Counter({k: 1 for k in keys})
    assert result.processed == 16 and result.samples == 48

    # The same outputs, byte for byte, from the local engine.
    map_shards(fns.shout, inputs, str(tmp_path / "local" / "out-{0..15}.tar"), workers=2)
    for s in range(16):
        local = (tmp_path / "local" / f"out-{s}.tar").read_bytes()
        assert outputs[s].read_bytes() == local


def test_a_ray_worker_killed_mid_job_costs_one_attempt_and_the_job_completes(
    tmp_path: Path, cluster: tuple[str, Path], marks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", cluster[0])
    inputs = write_inputs(tmp_path / "in", shards=4)
    (marks / "die-in-1.tar").touch()
    (marks / "die-in-3.tar").touch()
    retried: list[str] = []
    result = map_shards(
        fns.die_once, inputs, str(tmp_path / "out" / "out-{0..3}.tar"), engine="ray",
        metadata=str(tmp_path / "meta.jsonl"),
        progress=lambda p: p.event == "retry" and retried.append(p.message or ""),
    )  # fmt: skip
    assert sorted(Path(m.split(":")[0]).name for m in retried) == ["in-1.tar", "in-3.tar"]
    assert all("WorkerCrashedError" in m for m in retried), retried
    keys = [f"s{s}-{i:02d}" for s in range(4) for i in range(5)]
    outputs = [tmp_path / "out" / f"out-{s}.tar" for s in range(4)]
    assert [k for p in outputs for k, _ in samples_of(p.read_bytes())] == keys
    assert [r["key"] for r in fns.rows_of(tmp_path / "meta.jsonl")] == keys
    assert result.processed == 4
    assert not [p for p in (tmp_path / "out").iterdir() if ".map-" in p.name]

    # A re-run after losing two outputs does only those two, on Ray as well.
    outputs[0].unlink()
    outputs[2].unlink()
    (marks / "calls").unlink()
    result = map_shards(fns.die_once, inputs, str(tmp_path / "out" / "out-{0..3}.tar"),
                        engine="ray")  # fmt: skip
    assert {shard for shard, _ in fns.calls(marks)} == {"in-0.tar", "in-2.tar"}
    assert (result.processed, result.resumed) == (2, 2)


def test_a_shard_that_keeps_failing_on_ray_is_reported_after_the_others(
    tmp_path: Path, cluster: tuple[str, Path], marks: Path
) -> None:
    directory = tmp_path / "in"
    write_inputs(directory, shards=3)
    from conftest import make_tar

    (directory / "in-1.tar").write_bytes(make_tar([("k1.txt", b"bad"), ("k2.txt", b"x")]))
    with pytest.raises(MapError) as caught:
        map_shards(fns.fail_on_bad, str(directory / "in-{0..2}.tar"),
                   str(tmp_path / "o-{0..2}.tar"), engine="ray", address=cluster[0],
                   retries=1)  # fmt: skip
    failure = caught.value.failures[0]
    assert (Path(failure.input).name, failure.key, failure.attempts) == ("in-1.tar", "k1", 2)
    assert "ValueError: cannot map k1" in failure.error
    assert (tmp_path / "o-0.tar").exists() and (tmp_path / "o-2.tar").exists()
    assert not (tmp_path / "o-1.tar").exists()


def test_tarkit_map_command_on_ray_gives_tarproc_bytes_for_each_shard(
    tmp_path: Path, cluster: tuple[str, Path]
) -> None:
    inputs = write_inputs(tmp_path / "in", shards=4)
    command = "tr a-z A-Z < sample.txt > sample.up.txt && rm sample.cls"
    started = time.monotonic()
    result = run(
        ["tarkit", "map", "-c", command, inputs, "-o", str(tmp_path / "out-{0..3}.tar"),
         "--engine", "ray", "--address", cluster[0], "-p", "2"],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "4/4 shards" in result.stderr and time.monotonic() - started < 120
    for s in range(4):
        with open(tmp_path / "in" / f"in-{s}.tar", "rb") as stdin:
            expected = subprocess.run(
                [str(BIN / "tarproc"), "-c", command], stdin=stdin, capture_output=True,
                timeout=60, check=True,
            ).stdout  # fmt: skip
        assert (tmp_path / f"out-{s}.tar").read_bytes() == expected
        assert samples_of(expected)[0][1] == {"txt": b"word", "up.txt": b"WORD"}


def test_a_ray_worker_killed_mid_command_loses_its_command_not_its_shard(
    tmp_path: Path, cluster: tuple[str, Path], marks: Path
) -> None:
    inputs = write_inputs(tmp_path / "in", shards=2)
    pids = marks / "pids"
    # The first attempt at s1-02 records its own and its worker's process ids, kills
    # that worker and hangs: the retry's task sweeps what the dead worker left.
    command = (
        'if [ "$TARKIT_KEY" = s1-02 ] && mkdir "$TARKIT_TEST_MARKS/once" 2>/dev/null; then '
        f"echo $$ $PPID > {pids}; kill -KILL $PPID; sleep 30; fi; "
        "tr a-z A-Z < sample.txt > sample.up.txt"
    )
    result = run(
        ["tarkit", "map", "-c", command, inputs, "-o", str(tmp_path / "out-{0..1}.tar"),
         "--engine", "ray", "--address", cluster[0]],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "WorkerCrashedError" in result.stderr
    keys = [
        key for s in range(2) for key, _ in samples_of((tmp_path / f"out-{s}.tar").read_bytes())
    ]
    assert keys == [f"s{s}-{i:02d}" for s in range(2) for i in range(5)]
    command_pid, worker_pid = map(int, pids.read_text().split())
    assert_gone(command_pid)
    ledgers = Path(tempfile.gettempdir()) / f"tarkit-commands-{os.getuid()}"
    assert not list(ledgers.glob(f"*-{worker_pid}-*"))


def test_num_cpus_one_runs_and_more_than_any_node_has_fails_at_once_saying_so(
    tmp_path: Path, cluster: tuple[str, Path]
) -> None:
    inputs = write_inputs(tmp_path / "in", shards=2)
    command = ["tarkit", "map", "-c", "true", inputs, "-o", str(tmp_path / "out-{0..1}.tar"),
               "--engine", "ray", "--address", cluster[0]]  # fmt: skip
    one = run([*command, "--num-cpus", "1"], timeout=60)
    assert one.returncode == 0, one.stderr
    assert "2/2 shards" in one.stderr
    (tmp_path / "out-0.tar").unlink()
    # Each node of the cluster has one CPU: Ray would keep the tasks pending forever.
    two = run([*command, "--num-cpus", "2", "--overwrite"], timeout=60)
    assert two.returncode == 2
    assert two.stderr == (
        "tarkit map: error: each shard task asks for 2 CPUs (num_cpus, --num-cpus) but no "
        "node of the Ray cluster has that many: the largest has 1 (2 nodes, 2 CPUs in all)\n"
    )
    assert not (tmp_path / "out-0.tar").exists()
    with pytest.raises(UsageError, match="asks for 1.5 CPUs"):
        map_shards(fns.shout, inputs, str(tmp_path / "o-{0..1}.tar"), engine="ray",
                   address=cluster[0], num_cpus=1.5)  # fmt: skip
