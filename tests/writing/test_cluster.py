"""shard_dataset and tarkit shard on a real Ray cluster: one node, then two.

The module's cluster (:mod:`ray_cluster`) starts with its head node only; the tests that
need two nodes add the second (the ``two_nodes`` fixture), so the one-node tests come
first. Every Ray run is compared, byte for byte, with the local engine's shards and
manifest of the same dataset and options.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import S3_ENV, run, sigkill_when, tool
from ray_cluster import HERE, RayCluster, free_port, namespace_of
from shard_datasets import Words

from tarkit.errors import InputError
from tarkit.writing.from_dataset import ShardProgress, shard_dataset
from tarkit.writing.from_files import shard_files

pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(150)

# (options, suffix): by count in index order, by size shuffled, by size through gzip
# (whose cuts only the writer can measure).
PLAIN = ({"maxcount": 7}, ".tar")
SIZED = ({"maxsize": 1000, "shuffle": True, "seed": 3}, ".tar")
ZIPPED = ({"maxsize": 1500, "shuffle": True}, ".tar.gz")


@pytest.fixture(scope="module")
def s3_server(cluster: RayCluster) -> Iterator[str]:
    """The S3 server of this module: in the cluster's network namespace, where its nodes
    reach it (the session's is outside)."""
    from moto.server import ThreadedMotoServer

    endpoint = cluster.s3  # type: ignore[attr-defined]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(endpoint.rsplit(":", 1)[1]),
                                verbose=False)  # fmt: skip
    server.start()
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    marks = tmp_path_factory.mktemp("marks")
    import ray

    # The nodes' S3 endpoint: the module's server (s3_server), started on this port when
    # a test asks for it (nothing else listens in the cluster's new namespace).
    endpoint = f"http://127.0.0.1:{free_port()}"
    cluster = RayCluster(dict(S3_ENV, TARKIT_TEST_MARKS=str(marks),
                              FSSPEC_S3_ENDPOINT_URL=endpoint))  # fmt: skip
    cluster.marks = marks  # type: ignore[attr-defined]
    cluster.s3 = endpoint  # type: ignore[attr-defined]
    try:
        # Connected once: the runs in this process use this connection as it is.
        ray.init(address=cluster.address, include_dashboard=False, logging_level="WARNING")
        yield cluster
    finally:
        ray.shutdown()
        cluster.stop()


@pytest.fixture
def marks(cluster: RayCluster, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory: Path = cluster.marks  # type: ignore[attr-defined]
    for path in directory.iterdir():
        path.unlink()
    monkeypatch.setenv("TARKIT_TEST_MARKS", str(directory))
    return directory


@pytest.fixture
def two_nodes(cluster: RayCluster) -> str:
    if cluster.nodes < 2:
        cluster.add_node()
    return cluster.address


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def shard_both(tmp_path: Path, dataset: Any, options: dict[str, Any], suffix: str,
               **ray: Any) -> tuple[dict[str, bytes], dict[str, bytes]]:  # fmt: skip
    """The files of the local engine's run and of the Ray run, with a manifest each."""
    found = []
    for name, engine in (("local", {}), ("ray", dict(engine="ray", **ray))):
        out = tmp_path / name
        shard_dataset(dataset, str(out / f"s-%02d{suffix}"), manifest=str(out / "m.json"),
                      **options, **engine)  # fmt: skip
        found.append(files(out))
    return found[0], found[1]


def test_ray_on_one_node_writes_the_local_engines_shards_and_manifest(
    tmp_path: Path, cluster: RayCluster, marks: Path
) -> None:
    assert cluster.nodes == 1
    for n, (options, suffix) in enumerate((PLAIN, SIZED)):
        local, ray = shard_both(tmp_path / str(n), Words(60), options, suffix,
                                address=cluster.address)  # fmt: skip
        assert len(local) > 4 and ray == local, options
    assert len(list(marks.glob("node-*"))) == 1


def test_ray_on_two_nodes_writes_the_local_engines_shards_and_manifest(
    tmp_path: Path, two_nodes: str, marks: Path
) -> None:
    reports: list[ShardProgress] = []
    for n, (options, suffix) in enumerate((PLAIN, SIZED, ZIPPED)):
        # Items that take a moment, so that the second node's worker, slow to start on
        # a loaded machine, still finds work.
        local, ray = shard_both(tmp_path / str(n), Words(150, delay=0.02), options, suffix,
                                address=two_nodes, progress=reports.append)  # fmt: skip
        assert len(local) > 4 and ray == local, options
    assert len(list(marks.glob("node-*"))) == 2, "only one node read items"
    last = reports[-1]
    assert last.finished and (last.samples, last.total) == (150, 150)
    assert last.shards == len(local) - 2  # the manifest and its columns


def test_an_item_that_raises_on_ray_is_named_and_the_shards_before_it_stay(
    tmp_path: Path, two_nodes: str
) -> None:
    pattern = str(tmp_path / "s-%02d.tar")
    with pytest.raises(InputError) as caught:
        shard_dataset(Words(60, bad=23), pattern, maxcount=10, engine="ray", address=two_nodes)
    assert str(caught.value) == "dataset: item 23: ValueError: no words for 23"
    assert sorted(p.name for p in tmp_path.glob("s-*")) == ["s-00.tar", "s-01.tar"]
    # Their records stay beside them (hidden), for a resumed run to keep them.
    shard_dataset(Words(60), pattern, maxcount=10, engine="ray", address=two_nodes,
                  mode="resume")  # fmt: skip
    shard_dataset(Words(60), str(tmp_path / "local" / "s-%02d.tar"), maxcount=10)
    assert files(tmp_path) == files(tmp_path / "local")


def test_items_left_out_on_ray_give_the_local_engines_shards_and_rejects_file(
    tmp_path: Path, two_nodes: str
) -> None:
    options = {"maxcount": 10, "on_error": "skip", "shuffle": True}
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "s-00.tar").write_bytes(b"an earlier run's shard")
    local, ray = shard_both(tmp_path, Words(60, bad=23), options, ".tar", mode="overwrite",
                            address=two_nodes)  # fmt: skip
    assert ray == local and b"no words for 23" in local["s-rejects.tsv"]


def test_a_worker_killed_mid_run_is_retried_and_the_shards_are_the_same_bytes(
    tmp_path: Path, two_nodes: str, marks: Path
) -> None:
    (marks / "die").touch()
    reports: list[ShardProgress] = []
    options, suffix = PLAIN
    shard_dataset(Words(80), str(tmp_path / "local" / f"s-%02d{suffix}"), **options)
    shard_dataset(Words(80, die=41), str(tmp_path / "ray" / f"s-%02d{suffix}"), **options,
                  engine="ray", address=two_nodes, progress=reports.append)  # fmt: skip
    local, ray = files(tmp_path / "local"), files(tmp_path / "ray")
    assert ray == local
    assert not (marks / "die").exists()
    retried = [r.message for r in reports if r.message]
    assert len(retried) == 1 and "WorkerCrashedError" in retried[0], retried
    assert reports[-1].retries == 1


def test_the_driver_killed_mid_run_then_resume_gives_the_bytes_of_a_clean_run(
    tmp_path: Path, two_nodes: str
) -> None:
    args = ["shard", "--dataset", "shard_datasets:slow_words", "-c", "6", "--manifest"]
    path = os.pathsep.join([str(HERE), os.environ["PYTHONPATH"]])  # this checkout's tarkit
    env = dict(os.environ, PYTHONPATH=path, TARKIT_TEST_DELAY="0")
    clean = run(["tarkit", *args, "clean/m.json", "-o", "clean/s-%02d.tar"], cwd=tmp_path,
                env=env)  # fmt: skip
    assert clean.returncode == 0, clean.stderr

    ray = ["--engine", "ray", "--address", two_nodes]
    command = [tool("tarkit"), *args, "cut/m.json", "-o", "cut/s-%02d.tar", *ray]
    # The workers read items slowly (shard_datasets.slow_words: 0.05 s each).
    process = subprocess.Popen(command, cwd=tmp_path, env=env)
    cut = tmp_path / "cut"
    sigkill_when(process, lambda: len(list(cut.glob("s-*.tar"))) >= 3)
    done = sorted(p.name for p in cut.glob("s-*.tar"))
    assert process.returncode == -9 and 3 <= len(done) < 20, done

    resumed = run(["tarkit", *args, "cut/m.json", "-o", "cut/s-%02d.tar", *ray, "--resume",
                   "--progress"],
                  cwd=tmp_path, env=env)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert files(cut) == files(tmp_path / "clean")
    assert resumed.stderr.rstrip().endswith("20 shards done]"), resumed.stderr


def test_an_imagefolder_in_s3_sharded_to_s3_on_ray_is_the_local_folders_shards(
    tmp_path: Path, two_nodes: str, s3_env: dict[str, str]
) -> None:
    # The S3 server is the module's, in the cluster's namespace. This process reaches it
    # with boto3 (its sockets are this thread's), the runs through the command line:
    # fsspec's I/O thread may have been started in the namespace this thread left.
    import boto3
    from PIL import Image

    folder = tmp_path / "folder"
    for n in range(12):
        (folder / ("cat", "dog", "owl")[n % 3]).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8 + n, 8), (n * 20, 0, 0)).save(
            folder / ("cat", "dog", "owl")[n % 3] / f"{n}.png"
        )
    s3 = boto3.client("s3", endpoint_url=s3_env["FSSPEC_S3_ENDPOINT_URL"])
    s3.create_bucket(Bucket="cluster-in")
    s3.create_bucket(Bucket="cluster-out")
    for path in folder.rglob("*.png"):
        s3.upload_file(str(path), "cluster-in", f"train/{path.relative_to(folder)}")
    done = run(["tarkit", "shard", "s3://cluster-in/train/", "-o", "s3://cluster-out/s-%d.tar",
                "-c", "5", "--manifest", "s3://cluster-out/m.json", "--engine", "ray",
                "--address", two_nodes], env=dict(os.environ, **s3_env))  # fmt: skip
    assert done.returncode == 0, done.stderr
    shard_files(str(folder), str(tmp_path / "local" / "s-%d.tar"), maxcount=5,
                manifest=str(tmp_path / "local" / "m.json"))  # fmt: skip
    listed = s3.list_objects_v2(Bucket="cluster-out")["Contents"]
    stored = {o["Key"]: s3.get_object(Bucket="cluster-out", Key=o["Key"])["Body"].read()
              for o in listed}  # fmt: skip
    assert stored == files(tmp_path / "local")
    shards = [f"s-{i}.tar{index}" for i in range(3) for index in ("", ".idx")]
    assert sorted(stored) == ["classes.json", "m.columns", "m.json", *shards]


def test_the_cluster_and_this_driver_share_a_network_namespace_of_loopback_alone(
    cluster: RayCluster,
) -> None:
    import ray

    assert socket.if_nameindex() == [(1, "lo")]
    ours = namespace_of("thread-self")
    assert {namespace_of(pid) for pid in cluster.processes()} == {ours}
    assert ours != cluster.outside
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
