"""map_shards and tarkit map over remote shards: faulty HTTP inputs ridden through at the
byte reached and counted; outputs to moto's S3 complete or absent, even after kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import map_functions as fns
import pytest
from conftest import ROOT, tool
from map_functions import write_inputs
from shard_server import ShardServer, drop, reset, stall, status

from tarkit.processing.driver import MapProgress, map_shards

TESTS = ROOT / "tests"


def test_map_over_faulty_http_inputs_gives_the_local_outputs_and_counts_reconnections(
    tmp_path: Path, http_server: ShardServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TARKIT_TIMEOUT", "1")
    write_inputs(tmp_path / "in", shards=4, per_shard=40)
    for s in range(4):
        http_server.files[f"/in-{s}.tar"] = (tmp_path / "in" / f"in-{s}.tar").read_bytes()
    http_server.fail("/in-0.tar", drop(20_000))
    http_server.fail("/in-1.tar", stall(30_000, seconds=20))
    http_server.fail("/in-2.tar", status(503), reset(10_000))
    urls = [f"{http_server.url}/in-{s}.tar" for s in range(4)]
    warned: list[tuple[str | None, str | None]] = []

    def progress(state: MapProgress) -> None:
        if state.event == "warning":
            warned.append((state.shard, state.message))

    result = map_shards(fns.shout, urls, str(tmp_path / "out-{0..3}.tar"), workers=2,
                        progress=progress)  # fmt: skip
    map_shards(
        fns.shout, str(tmp_path / "in" / "in-{0..3}.tar"), str(tmp_path / "local-{0..3}.tar")
    )
    for s in range(4):
        assert (tmp_path / f"out-{s}.tar").read_bytes() == (
            tmp_path / f"local-{s}.tar"
        ).read_bytes()
    assert result.reconnections == 4
    assert sorted(warned) == [
        (urls[0], "1 reconnection while reading, each at the byte reached"),
        (urls[1], "1 reconnection while reading, each at the byte reached"),
        (urls[2], "2 reconnections while reading, each at the byte reached"),
    ]


def test_a_forkserver_started_in_a_clusters_namespace_is_not_used_after_it(
    tmp_path: Path, http_server: ShardServer
) -> None:
    # A local map inside a Ray cluster's test starts this process's forkserver in the
    # cluster's namespace; later maps must not start their workers there.
    from multiprocessing import forkserver

    from ray_cluster import loopback_only, namespace_of

    forkserver._forkserver._stop()  # type: ignore[attr-defined]
    with loopback_only():
        forkserver.ensure_running()
        inside = namespace_of(forkserver._forkserver._forkserver_pid)  # type: ignore[attr-defined]
    assert inside != namespace_of("thread-self")
    write_inputs(tmp_path / "in", shards=2, per_shard=5)
    for s in range(2):
        http_server.files[f"/in-{s}.tar"] = (tmp_path / "in" / f"in-{s}.tar").read_bytes()
    urls = [f"{http_server.url}/in-{s}.tar" for s in range(2)]
    result = map_shards(fns.shout, urls, str(tmp_path / "out-{0..1}.tar"), workers=2)
    assert result.samples_in == 10 and result.processed == 2


@pytest.fixture
def bucket(s3_env: dict[str, str], s3_server: str) -> str:
    import s3fs

    name = f"map{time.monotonic_ns()}"
    s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True).mkdir(name)
    return name


def test_a_killed_map_to_s3_leaves_only_whole_objects_and_a_rerun_completes_the_set(
    tmp_path: Path, bucket: str, s3_env: dict[str, str], s3_server: str
) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True)
    inputs = write_inputs(tmp_path / "in", shards=4, per_shard=8)
    map_shards(fns.shout, inputs, str(tmp_path / "local-{0..3}.tar"))
    local = [(tmp_path / f"local-{s}.tar").read_bytes() for s in range(4)]
    out = f"s3://{bucket}/out/out-{{0..3}}.tar"
    path = os.pathsep.join([str(TESTS), str(TESTS.parent)])  # this checkout's tarkit too
    env = dict(os.environ, **s3_env, PYTHONPATH=path, TARKIT_TEST_DELAY="0.1",
               TMPDIR=str(tmp_path))  # fmt: skip
    command = [tool("tarkit"), "map", "--fn", "map_functions:slow", inputs, "-o", out, "-j", "1",
               "--manifest", f"s3://{bucket}/out/manifest.json"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not fs.exists(f"{bucket}/out/out-1.tar"):
            fs.invalidate_cache()
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the driver and its workers
        process.wait(30)
    fs.invalidate_cache()
    found = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{bucket}/out") if "/out/out-" in p)
    names = [name for name in found if name.endswith(".tar")]
    assert "out-1.tar" in names and len(names) < 4
    assert {f"{name}.idx" for name in names} <= set(found)  # each with its index, put first
    for name in names:
        assert fs.cat(f"{bucket}/out/{name}") == local[int(name[4])]
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"({len(names)} already complete)" in again.stderr
    fs.invalidate_cache()
    assert [fs.cat(f"{bucket}/out/out-{s}.tar") for s in range(4)] == local
    assert b'"samples": 32' in fs.cat(f"{bucket}/out/manifest.json")
