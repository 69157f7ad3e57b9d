"""tarkit verify through the real command: every shard read to its end, bad ones named with
what is wrong and where, the others still checked; exit 0 only when all are good."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import make_tar, run
from shard_server import ShardServer, drop

from tarkit.storage import publish
from tarkit.writing.index import index_shards

SAMPLES = 5
MEMBER = 512 + 512  # a header and one block of data: every member below is 100 bytes


def write_shards(directory: Path, count: int = 4, *, offsets: bool = False) -> list[Path]:
    """``count`` shards made by GNU tar (``SAMPLES`` samples of jpg and cls each) and their
    manifest.json (with keys and offsets when ``offsets``)."""
    directory.mkdir(exist_ok=True)
    paths = []
    for number in range(count):
        tree = directory / f"tree{number}"
        tree.mkdir()
        names = []
        for i in range(SAMPLES):
            for field in ("cls", "jpg"):
                name = f"s{number}-{i}.{field}"
                (tree / name).write_bytes(bytes([number * 16 + i]) * 100)
                names.append(name)
        path = directory / f"shard-{number:06d}.tar"
        subprocess.run(["tar", "--format=gnu", "-cf", str(path), "-C", str(tree), *names],
                       check=True)  # fmt: skip
        paths.append(path)
    manifest = str(directory / "manifest.json")
    made = index_shards([str(p) for p in paths], offsets=offsets, manifest_path=manifest)
    publish(manifest, made.to_bytes())  # (version 1: with keys and offsets)
    return paths


def verify(*args: str, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    return run(["tarkit", "verify", *args], cwd=cwd, timeout=60, **kw)


def report(result: subprocess.CompletedProcess) -> list[str]:
    return result.stdout.decode().splitlines()


def json_report(result: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in report(result)]


def test_a_good_set_exits_0_with_the_summary(tmp_path: Path) -> None:
    paths = write_shards(tmp_path / "set")
    result = verify(str(tmp_path / "set"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    [summary] = report(result)
    assert summary.startswith(
        "checked 4 shards against their manifest: 4 good, 0 bad; 20 samples, 80.0 KiB in "
    )
    verbose = verify("-v", *map(str, paths))  # the manifest beside lists exactly them
    assert report(verbose)[:4] == [f"{p}: OK: 5 samples, 20.0 KiB" for p in paths]
    assert "against their manifest: 4 good" in report(verbose)[4]


@pytest.mark.usefixtures("reader")
def test_a_truncated_first_shard_is_named_with_its_byte_and_the_three_after_it_are_checked(
    tmp_path: Path,
) -> None:
    paths = write_shards(tmp_path)
    first = paths[0]
    first.write_bytes(first.read_bytes()[: 3 * MEMBER + 600])  # inside member 3's data
    result = verify(str(tmp_path / "shard-{000000..000003}.tar"))
    assert result.returncode == 2
    assert result.stderr == "tarkit verify: error: 1 of 4 shards failed verification\n"
    bad, summary = report(result)
    assert bad == (
        f"{first}: FAILED: input ends inside member data (88 of 100 bytes) "
        f"(byte {3 * MEMBER}, member s0-1.jpg, after 1 whole sample)"
    )
    assert "4 shards against their manifest: 3 good, 1 bad; 15 samples, 60.0 KiB in" in summary
    checks = json_report(verify("--json", str(tmp_path / "manifest.json")))
    assert [c["ok"] for c in checks[:4]] == [False, True, True, True]
    assert checks[0]["problem"] == {"reason": "truncated", "offset": 3 * MEMBER,
                                    "member": "s0-1.jpg", "sample": None,
                                    "what": "input ends inside member data (88 of 100 bytes)"}  # fmt: skip
    assert checks[4]["summary"]["shards"] == 4


def test_a_flipped_byte_inside_a_member_is_caught_by_the_manifests_sha256(tmp_path: Path) -> None:
    paths = write_shards(tmp_path)
    data = bytearray(paths[2].read_bytes())
    data[4 * MEMBER + 512 + 7] ^= 0x01  # in the data of s2-2.cls: every header still adds up
    paths[2].write_bytes(bytes(data))
    result = verify(str(tmp_path))
    assert result.returncode == 2
    [bad] = [line for line in report(result) if "FAILED" in line]
    assert bad.startswith(f"{paths[2]}: FAILED: sha256 ")
    assert bad.endswith("… (bytes changed in place)")
    assert "differs from the manifest's" in bad
    [check] = [c for c in json_report(verify("--json", str(tmp_path)))[:4] if not c["ok"]]
    assert check["problem"]["reason"] == "sha256"
    assert check["samples"] == SAMPLES and check["sha256"] != check["expected"]["sha256"]


def test_a_shard_with_another_sample_count_than_its_manifest_names_both(tmp_path: Path) -> None:
    paths = write_shards(tmp_path)
    paths[1].write_bytes(make_tar([("s1-0.cls", b"1"), ("s1-0.jpg", b"2"), ("extra.cls", b"3")]))
    result = verify(str(tmp_path / "manifest.json"))
    assert result.returncode == 2
    assert report(result)[0] == f"{paths[1]}: FAILED: the shard has 2 samples, the manifest says 5"


def test_the_manifests_keys_and_offsets_are_checked_and_name_the_sample(tmp_path: Path) -> None:
    paths = write_shards(tmp_path, 2, offsets=True)
    renamed = [(f"s0-{i if i != 3 else 9}.{f}", bytes([i]) * 100)
               for i in range(SAMPLES) for f in ("cls", "jpg")]  # fmt: skip
    paths[0].write_bytes(make_tar(renamed))
    longer = [(f"s1-{i}.{f}", bytes([i]) * (100 if i != 1 else 600))
              for i in range(SAMPLES) for f in ("cls", "jpg")]  # fmt: skip
    paths[1].write_bytes(make_tar(longer))
    result = verify(str(tmp_path))
    assert result.returncode == 2
    assert report(result)[:2] == [
        f"{paths[0]}: FAILED: sample 3 is 's0-9', the manifest says 's0-3' "
        f"(byte {6 * MEMBER}, sample 3)",
        f"{paths[1]}: FAILED: the sample starts at byte {4 * MEMBER + 1024}, the manifest "
        f"says {4 * MEMBER} (byte {4 * MEMBER + 1024}, sample 2)",
    ]


def test_a_missing_shard_is_reported_and_the_others_are_checked(tmp_path: Path) -> None:
    paths = write_shards(tmp_path)
    paths[1].unlink()
    result = verify(str(tmp_path), "-p", "2")
    assert result.returncode == 2
    bad, summary = report(result)
    assert bad == f"{paths[1]}: FAILED: no such file"
    assert "4 shards against their manifest: 3 good, 1 bad; 15 samples" in summary
    # Named as a pattern past the last shard: each missing one is named, none stops the rest.
    more = verify(str(tmp_path / "shard-{000002..000005}.tar"))
    assert more.returncode == 2
    assert [line.split(": ", 1)[1] for line in report(more)[:2]] == [
        "FAILED: no such file", "FAILED: no such file",
    ]  # fmt: skip
    assert "without a manifest" in report(more)[2] and "2 good, 2 bad" in report(more)[2]


def test_remote_shards_over_http_are_checked_against_a_remote_manifest(
    tmp_path: Path, http_server: ShardServer
) -> None:
    paths = write_shards(tmp_path)
    for path in [*paths, tmp_path / "manifest.json"]:
        http_server.files[f"/d/{path.name}"] = path.read_bytes()
    data = bytearray(paths[1].read_bytes())
    data[512 + 3] ^= 0x20  # in the data of the first member
    http_server.files["/d/shard-000001.tar"] = bytes(data)
    del http_server.files["/d/shard-000003.tar"]
    http_server.fail("/d/shard-000002.tar", drop(1500))  # reconnects at the byte reached
    url = f"{http_server.url}/d"
    result = verify(f"{url}/manifest.json", env={**os.environ, "TARKIT_TIMEOUT": "5"})
    assert result.returncode == 2, result.stderr
    lines = report(result)
    assert lines[0].startswith(f"{url}/shard-000001.tar: FAILED: sha256 ")
    assert lines[1] == f"{url}/shard-000003.tar: FAILED: HTTP 404 Not Found"
    assert "4 shards against their manifest: 2 good, 2 bad; 15 samples" in lines[2]
    assert "reconnecting" in result.stderr and "shard-000002.tar" in result.stderr


def test_parallel_gives_the_same_report_in_the_same_order(tmp_path: Path) -> None:
    paths = write_shards(tmp_path, 8)
    paths[0].write_bytes(paths[0].read_bytes()[:1000])
    paths[5].unlink()
    data = bytearray(paths[6].read_bytes())
    data[600] ^= 1
    paths[6].write_bytes(bytes(data))

    def without_times(result: subprocess.CompletedProcess) -> list[dict]:
        checks = json_report(result)
        for check in checks:
            (check.get("summary") or check).pop("seconds")
        return checks

    one, two = (verify("--json", "-p", p, str(tmp_path)) for p in ("1", "2"))
    assert one.returncode == two.returncode == 2
    assert without_times(one) == without_times(two)
    assert [c.get("ok") for c in without_times(two)] == [False, *[True] * 4, False, False, True,
                                                         None]  # fmt: skip
    text_one, text_two = (verify("-v", "-p", p, str(tmp_path)) for p in ("1", "3"))
    assert report(text_one)[:-1] == report(text_two)[:-1]
    assert len(report(text_two)) == 9


def test_stdin_and_a_malformed_manifest_are_errors_before_any_shard_is_read(
    tmp_path: Path,
) -> None:
    result = verify("-")
    assert (result.returncode, result.stderr) == (
        2, "tarkit verify: error: verify needs shard paths or URLs, not stdin\n",
    )  # fmt: skip
    (tmp_path / "manifest.json").write_text("{}")
    result = verify(str(tmp_path / "manifest.json"))
    assert result.returncode == 2 and result.stdout == b""
    assert "not a tarkit manifest" in result.stderr


def test_members_the_loader_skips_are_warned_about_in_order_and_strict_fails_their_shards(
    tmp_path: Path,
) -> None:
    for number in range(2):
        members = [(f"s{number}.cls", b"1"), ("README", b"no field"), (f"t{number}.cls", b"2")]
        (tmp_path / f"shard-{number}.tar").write_bytes(make_tar(members))
    pattern = str(tmp_path / "shard-{0..1}.tar")
    result = verify("-p", "2", pattern)
    assert result.returncode == 0
    assert result.stderr.splitlines() == [
        f"tarkit verify: warning: {tmp_path}/shard-0.tar: skipping member without a field "
        "(no dot in the file name): README",
        "tarkit verify: warning: skipped 2 members: 2 without a field (no dot in the file name)",
    ]
    strict = verify("--strict", pattern)
    assert strict.returncode == 2
    assert report(strict)[0].startswith(f"{tmp_path}/shard-0.tar: FAILED: ")
    assert report(strict)[0].endswith("is not allowed with --strict (byte 1024, member README)")
    assert "2 good" not in report(strict)[2] and "0 good, 2 bad" in report(strict)[2]
