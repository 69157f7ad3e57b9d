"""The commands writing to moto's S3 server on 127.0.0.1: the same bytes as a local run,
objects only when complete, --post per finished shard, nothing left of a killed upload."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import make_tar, paused_commit_env, run, tool

from tarkit.storage import remove_stale_temp
from tarkit.stream.stages import read_samples
from tarkit.writing.shard_writer import ShardWriter

ARCHIVE = make_tar((f"{i:03d}.bin", bytes([i]) * 1000) for i in range(45))
SAMPLE = 512 + 1024  # one member of 1000 bytes: a header and two blocks


@pytest.fixture
def bucket(s3_env: dict[str, str], s3_server: str) -> str:
    import s3fs

    name = f"cli{time.monotonic_ns()}"
    s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True).mkdir(name)
    return name


@pytest.fixture
def fs(s3_server: str):  # type: ignore[no-untyped-def]
    import s3fs

    return s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True)


def env_for(s3_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, **s3_env, TMPDIR=str(tmp_path))


def test_tarsplit_to_s3_writes_the_local_bytes_manifest_and_posts_each_shard(
    tmp_path: Path, bucket: str, fs, s3_env: dict[str, str]
) -> None:
    local = tmp_path / "local"
    local.mkdir()
    args = ["-c", "10", "--post", "echo {} >> posted"]
    assert run(["tarsplit", *args, "-o", "s-%03d.tar", "--manifest", "manifest.json"],
               input=ARCHIVE, cwd=local).returncode == 0  # fmt: skip
    remote = f"s3://{bucket}/d"
    result = run(["tarsplit", *args, "-o", f"{remote}/s-%03d.tar", "--manifest",
                  f"{remote}/manifest.json"], input=ARCHIVE, cwd=tmp_path,
                 env=env_for(s3_env, tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    for name in [*(f"s-{i:03d}.tar" for i in range(5)), "manifest.json"]:
        assert fs.cat(f"{bucket}/d/{name}") == (local / name).read_bytes(), name
    assert (tmp_path / "posted").read_text().split() == [
        f"{remote}/s-{i:03d}.tar" for i in range(5)
    ]
    assert not [n for n in os.listdir(tmp_path) if n.startswith("tarkit-upload-")]


def test_tarcat_and_tarcreate_write_to_s3_as_to_a_file(
    tmp_path: Path, bucket: str, fs, s3_env: dict[str, str]
) -> None:
    (tmp_path / "in.tar").write_bytes(ARCHIVE)
    (tmp_path / "plan.csv").write_text("__key__,txt\na,one\nb,two\n")
    env = env_for(s3_env, tmp_path)
    for command, name in [
        (["tarcat", "in.tar"], "cat.tar"),
        (["tarcreate", "plan.csv"], "plan.tar"),
    ]:
        assert run([*command, "-o", name], cwd=tmp_path).returncode == 0
        result = run([*command, "-o", f"s3://{bucket}/{name}"], cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr
        assert fs.cat(f"{bucket}/{name}") == (tmp_path / name).read_bytes()


def test_a_killed_tarsplit_leaves_only_complete_shards_under_final_names(
    tmp_path: Path, bucket: str, fs, s3_env: dict[str, str]
) -> None:
    local = tmp_path / "local"
    local.mkdir()
    run(["tarsplit", "-c", "10", "-o", str(local / "s-%03d.tar")], input=ARCHIVE)
    process = subprocess.Popen(
        [tool("tarsplit"), "-c", "10", "-o", f"s3://{bucket}/k/s-%03d.tar"],
        stdin=subprocess.PIPE, env=env_for(s3_env, tmp_path),
    )  # fmt: skip
    assert process.stdin is not None
    process.stdin.write(ARCHIVE[: 35 * SAMPLE])  # three shards and half of the fourth
    process.stdin.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not fs.exists(f"{bucket}/k/s-002.tar"):
        fs.invalidate_cache()
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{bucket}/k")) == [
        "s-000.tar", "s-001.tar", "s-002.tar"
    ]  # fmt: skip
    for i in range(3):
        assert fs.cat(f"{bucket}/k/s-{i:03d}.tar") == (local / f"s-{i:03d}.tar").read_bytes()


def test_a_resumed_writer_aborts_the_multipart_upload_a_killed_run_left(
    bucket: str, fs, s3_server: str
) -> None:
    # What a run killed in the middle of a large upload leaves: parts, no object.
    key = "w/s-001.tar"
    upload = fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)
    fs.call_s3("upload_part", Bucket=bucket, Key=key, UploadId=upload["UploadId"],
               PartNumber=1, Body=b"x" * 100)  # fmt: skip
    other = fs.call_s3("create_multipart_upload", Bucket=bucket, Key="w/other.tar")
    options = {"endpoint_url": s3_server}
    with ShardWriter(f"s3://{bucket}/w/s-%03d.tar", maxcount=1, storage_options=options) as w:
        w.write({"__key__": "a", "txt": "one"})
    with ShardWriter(f"s3://{bucket}/w/s-%03d.tar", maxcount=1, storage_options=options,
                     mode="resume") as w:  # fmt: skip
        assert w.samples_done == 1
        w.write({"__key__": "b", "txt": "two"})
    uploads = fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads", [])
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("w/other.tar", other["UploadId"])]
    remove_stale_temp(f"s3://{bucket}/w/other.tar", options)
    assert not fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")
    assert fs.ls(f"{bucket}/w", refresh=True) == [f"{bucket}/w/s-000.tar", f"{bucket}/w/s-001.tar"]


def test_a_large_upload_is_one_object_when_complete_and_none_when_interrupted(
    tmp_path: Path, bucket: str, fs, s3_env: dict[str, str]
) -> None:
    # Over 100 MiB, s3fs uploads in parts: the object appears only once they are joined.
    big = make_tar([("a.bin", os.urandom(1 << 20) * 101)])
    (tmp_path / "big.tar").write_bytes(big)
    env = env_for(s3_env, tmp_path)
    states: set[tuple[bool, int]] = set()
    process = subprocess.Popen([tool("tarcat"), "big.tar", "-o", f"s3://{bucket}/big.tar"],
                               cwd=tmp_path, env=env)  # fmt: skip
    while process.poll() is None:
        fs.invalidate_cache()
        uploads = fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads") or []
        states.add((fs.exists(f"{bucket}/big.tar"), len(uploads)))
        time.sleep(0.1)
    assert process.returncode == 0
    assert (False, 1) in states and (True, 1) not in states
    assert fs.cat(f"{bucket}/big.tar") == big

    process = subprocess.Popen([tool("tarcat"), "big.tar", "-o", f"s3://{bucket}/cut.tar"],
                               cwd=tmp_path, env=env)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads"):
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 143
    fs.invalidate_cache()
    assert not fs.exists(f"{bucket}/cut.tar")
    assert not fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")


def test_a_full_tmpdir_staging_an_upload_is_named_not_the_bucket(
    tmp_path: Path, small_disk: Path, bucket: str, fs, s3_env: dict[str, str]
) -> None:
    # The object is staged whole in $TMPDIR before the upload: that disk fills, not S3.
    (tmp_path / "in.tar").write_bytes(make_tar([("a.bin", bytes(600_000))]))
    env = dict(os.environ, **s3_env, TMPDIR=str(small_disk))
    result = run(["tarcat", "in.tar", "-o", f"s3://{bucket}/out.tar"], cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert re.fullmatch(
        rf"tarcat: error: s3://{bucket}/out.tar: cannot stage the upload: no space left on "
        rf"the file system of \$TMPDIR \({re.escape(str(small_disk))}, [\d.]+ \w+ free\)\n",
        result.stderr,
    ), result.stderr
    assert fs.ls(bucket) == [] and list(small_disk.iterdir()) == []


def test_an_overwrite_stopped_in_its_commit_on_s3_leaves_no_manifest_and_the_next_run_ends_it(
    tmp_path: Path, bucket: str, fs, s3_env: dict[str, str], s3_server: str
) -> None:
    (tmp_path / "old.tar").write_bytes(make_tar((f"o{i:03d}.txt", b"old") for i in range(3)))
    (tmp_path / "new.tar").write_bytes(make_tar((f"n{i:03d}.txt", b"new") for i in range(2)))

    def write(where: str, archive: str, mode: str = "create", **options: object) -> None:
        with ShardWriter(f"{where}/s-%03d.tar", maxcount=1, manifest=f"{where}/manifest.json",
                         mode=mode, storage_options=options) as writer:  # fmt: skip
            samples = read_samples([str(tmp_path / archive)])
            writer.write_all(itertools.islice(samples, writer.samples_done, None))

    local = tmp_path / "local"
    write(str(local), "new.tar")
    remote = f"s3://{bucket}/c"
    write(remote, "old.tar", endpoint_url=s3_server)
    # Paused once the first object is copied to its name: Ctrl-C there.
    env = paused_commit_env(tmp_path / "go", env_for(s3_env, tmp_path))
    process = subprocess.Popen(
        [tool("tarsplit"), "new.tar", "-c", "1", "-o", f"{remote}/s-%03d.tar", "--manifest",
         f"{remote}/manifest.json", "--overwrite"], cwd=tmp_path, env=env,
    )  # fmt: skip
    first = (local / "s-000.tar").read_bytes()
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        fs.invalidate_cache()
        if fs.exists(f"{bucket}/c/s-000.tar") and fs.cat(f"{bucket}/c/s-000.tar") == first:
            break
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before its commit could be interrupted"
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == 130
    fs.invalidate_cache()
    assert not fs.exists(f"{bucket}/c/manifest.json")  # none claims the set while it is a mix
    write(remote, "new.tar", "resume", endpoint_url=s3_server)
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{bucket}/c")) == sorted(
        p.name for p in local.iterdir()
    )
    for path in local.iterdir():
        assert fs.cat(f"{bucket}/c/{path.name}") == path.read_bytes(), path.name
