"""tarsort through real pipes: archives made by GNU tar with interleaved members, 100,000
members in 8M of memory, temporary files removed on every way out."""

from __future__ import annotations

import io
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_tar, run, run_shell, tool, webdataset_samples

from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members

FIELDS = ("cls", "jpg", "txt")


def tree_with_samples(root: Path, count: int) -> dict[str, dict[str, bytes]]:
    """Files k000.cls, k000.jpg, k000.txt… (a long directory name for pax/GNU long names)."""
    samples: dict[str, dict[str, bytes]] = {}
    directory = root / ("d" * 120)
    directory.mkdir(parents=True)
    rng = random.Random(count)
    for i in range(count):
        key = f"{'d' * 120}/k{i:03d}"
        samples[key] = {}
        for field in FIELDS:
            data = f"{field} {i}\n".encode() * rng.randrange(1, 300)
            (root / f"{key}.{field}").write_bytes(data)
            samples[key][field] = data
    return samples


def gnu_tar_interleaved(root: Path, out: Path, names: list[str], fmt: str) -> Path:
    """An archive GNU tar makes of ``names`` in this order (as `tar -cf x.tar *.cls *.jpg`)."""
    listing = root.parent / f"{out.name}.list"
    listing.write_text("".join(f"{n}\n" for n in names))
    subprocess.run(
        ["tar", f"--format={fmt}", "-cf", str(out), "-C", str(root), "-T", str(listing)],
        check=True,
    )
    return out


def samples_of_bytes(data: bytes) -> list[tuple[str, dict[str, bytes]]]:
    return [(s.key, s.data()) for s in group_samples(read_members(io.BytesIO(data)))]


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A GNU tar (pax) archive of 200 samples whose members come field by field."""
    base = tmp_path_factory.mktemp("interleaved")
    root = base / "tree"
    samples = tree_with_samples(root, 200)
    names = [f"{key}.{field}" for field in FIELDS for key in samples]
    return gnu_tar_interleaved(root, base / "interleaved.tar", names, "pax"), samples


@pytest.mark.parametrize("fmt", ["gnu", "pax", "ustar"])
def test_gnu_tar_archive_with_interleaved_members_is_repaired_in_key_order(
    tmp_path: Path, fmt: str
) -> None:
    root = tmp_path / "tree"
    samples = tree_with_samples(root, 60)
    keys = list(samples)
    random.Random(1).shuffle(keys)
    names = [f"{key}.{field}" for field in ("txt", "cls", "jpg") for key in keys]
    archive = gnu_tar_interleaved(root, tmp_path / f"{fmt}.tar", names, fmt)
    refused = run(["tarcat", str(archive)])
    assert refused.returncode == 2 and "comes back after other keys" in refused.stderr
    result = run_shell(f"tarsort --memory 1M < {archive} | tarcat > {tmp_path}/out.tar")
    assert (result.returncode, result.stderr) == (0, "")
    out = tmp_path / "out.tar"
    # Fields keep the order they were read in; samples come in key order.
    want = [(k, {f: samples[k][f] for f in ("txt", "cls", "jpg")}) for k in sorted(samples)]
    got = samples_of_bytes(out.read_bytes())
    assert [(k, list(d)) for k, d in got] == [(k, list(d)) for k, d in want]
    assert got == want
    assert webdataset_samples(out) == want
    # Every member is copied byte for byte, extension headers included.
    read = sorted(m.raw for m in read_members(io.BytesIO(archive.read_bytes())))
    assert sorted(m.raw for m in read_members(io.BytesIO(out.read_bytes()))) == read
    listed = subprocess.run(["tar", "-tf", str(out)], capture_output=True, text=True, check=True)
    assert len(listed.stdout.splitlines()) == 180


def test_sorting_by_a_numeric_field_is_stable_and_reversible(tmp_path: Path) -> None:
    labels = [3, 10, 2, 10, 3, 1]
    archive = make_tar(
        (f"{key}.{field}", data)
        for i, label in enumerate(labels)
        for key in [f"s{5 - i}"]  # keys in reverse input order: stability is not key order
        for field, data in (("cls", f" {label}\n".encode()), ("txt", b"x"))
    )

    def order(*args: str) -> list[str]:
        result = run(["tarsort", *args], input=archive)
        assert result.returncode == 0, result.stderr
        return [k for k, _ in samples_of_bytes(result.stdout)]

    assert order("-k", "cls", "-n") == ["s0", "s3", "s5", "s1", "s4", "s2"]
    assert order("-k", "cls", "-n", "-r") == ["s4", "s2", "s5", "s1", "s3", "s0"]
    assert order("-k", "CLS") == ["s0", "s4", "s2", "s3", "s5", "s1"]  # text: "10" < "2"
    assert order() == [f"s{i}" for i in range(6)]
    assert order("-r") == [f"s{i}" for i in reversed(range(6))]


def test_shuffle_is_deterministic_per_seed_and_keeps_every_sample(interleaved) -> None:
    archive, samples = interleaved
    first = run(["tarsort", "--shuffle", "--seed", "7", str(archive)])
    again = run(["tarsort", "--shuffle", "--seed", "7", "--memory", "1M", str(archive)])
    other = run(["tarsort", "--shuffle", "--seed", "8", str(archive)])
    assert first.returncode == again.returncode == other.returncode == 0
    assert first.stdout == again.stdout
    keys = [k for k, _ in samples_of_bytes(first.stdout)]
    assert sorted(keys) == sorted(samples) and keys != sorted(keys)
    assert keys != [k for k, _ in samples_of_bytes(other.stdout)]


def test_members_split_over_several_inputs_form_one_sample(tmp_path: Path) -> None:
    (tmp_path / "a.tar").write_bytes(make_tar([("x.jpg", b"J"), ("y.jpg", b"j")]))
    (tmp_path / "b.tar").write_bytes(make_tar([("y.cls", b"c"), ("x.cls", b"C")]))
    result = run(["tarsort", f"{tmp_path}/{{a,b}}.tar"])
    assert result.returncode == 0, result.stderr
    assert samples_of_bytes(result.stdout) == [
        ("x", {"jpg": b"J", "cls": b"C"}),
        ("y", {"jpg": b"j", "cls": b"c"}),
    ]


def test_a_field_twice_in_a_key_is_an_error_naming_both_members(tmp_path: Path) -> None:
    archive = tmp_path / "dup.tar"
    archive.write_bytes(make_tar([("a.jpg", b"1"), ("b.jpg", b"2"), ("a.JPG", b"3")]))
    result = run(["tarsort", str(archive), "-o", str(tmp_path / "out.tar")])
    assert result.returncode == 2
    assert result.stderr == (
        f"tarsort: error: {archive}: field 'JPG' appears twice in sample 'a' (first as a.jpg "
        f"at byte 0 of {archive}; fields are compared case-insensitively, as webdataset "
        "does) (byte 2048, member a.JPG)\n"
    )
    assert not (tmp_path / "out.tar").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["-k", "cls"], "sample 's1' has no field 'cls' to sort by"),
        (["-k", "txt", "-n"], "field 'txt' of sample 's0' is not a number: 'abc'"),
        (["-n"], "--numeric needs a field to sort by (-k FIELD)"),
        (["--seed", "3"], "--seed needs --shuffle"),
        (["--memory", "100K"], "--memory must be at least 1M"),
        (["--memory", "lots"], "--memory 'lots': expected a number of bytes"),
    ],
)
def test_bad_fields_and_options_exit_2_with_one_line(args: list[str], message: str) -> None:
    archive = make_tar([("s0.cls", b"1"), ("s0.txt", b"abc"), ("s1.txt", b"d")])
    result = run(["tarsort", *args], input=archive)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert not result.stdout.endswith(bytes(1024))


def test_sorting_a_file_in_place_replaces_it_when_complete(interleaved, tmp_path: Path) -> None:
    archive, samples = interleaved
    copy = tmp_path / "data.tar"
    copy.write_bytes(archive.read_bytes())
    result = run(["tarsort", "--memory", "1M", str(copy), "-o", str(copy)])
    assert (result.returncode, result.stderr) == (0, "")
    assert [k for k, _ in samples_of_bytes(copy.read_bytes())] == sorted(samples)


def test_a_truncated_input_writes_nothing(interleaved, tmp_path: Path) -> None:
    archive, _ = interleaved
    data = archive.read_bytes()
    result = run(["tarsort", "--memory", "1M"], input=data[: len(data) // 2 + 100])
    assert result.returncode == 2 and "input ends" in result.stderr
    assert result.stdout == b""


# --- 100,000 members in 8M ----------------------------------------------------------------


def peak_rss_kb(args: list[str], env: dict[str, str]) -> tuple[int, int]:
    """(exit status, peak RSS in KiB) of a command run by a fresh Python process."""
    probe = (
        "import resource, subprocess, sys\n"
        "status = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
        "print(status, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env, timeout=120
    )
    status, rss = result.stdout.split()
    return int(status), int(rss)


def test_100k_interleaved_members_sort_in_8M_and_leave_no_temporary_files(tmp_path: Path) -> None:
    # 50,000 samples of two fields, every cls member before every txt member: ~100 MB.
    archive = tmp_path / "interleaved.tar"
    archive.write_bytes(
        make_tar(
            (f"k{i * 7919 % 50000:05d}.{field}", b"%d" % i * (i % 50))
            for field in ("cls", "txt")
            for i in range(50000)
        )
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp))
    out = tmp_path / "sorted.tar"
    status, sort_rss = peak_rss_kb(
        [tool("tarsort"), "--memory", "8M", str(archive), "-o", str(out)], env
    )
    assert status == 0
    assert list(temp.iterdir()) == []
    # The streaming tarcat on the same input is the baseline: interpreter, imports, buffers.
    status, cat_rss = peak_rss_kb([tool("tarcat"), str(out), "-o", str(tmp_path / "copy.tar")], env)
    assert status == 0
    assert sort_rss < cat_rss + 16 * 1024, (sort_rss, cat_rss)
    assert archive.stat().st_size > 96 * 1024 * 1024  # holding it would have shown
    with open(out, "rb") as f:
        samples = [(s.key, s.fields) for s in group_samples(read_members(f))]
    assert [k for k, _ in samples] == [f"k{i:05d}" for i in range(50000)]
    assert all(fields == ["cls", "txt"] for _, fields in samples)


# --- signals ------------------------------------------------------------------------------


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_while_spilling_removes_the_temporary_runs(
    tmp_path: Path, sig: int, status: int
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    data = make_tar((f"k{i % 997:03d}.f{i // 997}", b"x" * 600) for i in range(4000))
    process = subprocess.Popen(
        [tool("tarsort"), "--memory", "1M", "-o", str(tmp_path / "out.tar")],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, TMPDIR=str(temp)),
    )
    assert process.stdin is not None
    try:
        process.stdin.write(data[: len(data) // 2])  # no end: tarsort waits for more
        process.stdin.flush()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(d.iterdir() for d in temp.iterdir()):
            time.sleep(0.05)
        runs = [p.name for d in temp.iterdir() for p in d.iterdir()]
        assert runs, "tarsort spilled no run"
        process.send_signal(sig)
        assert process.wait(timeout=30) == status
    finally:
        process.kill()
        process.stdin.close()
        process.wait()
    assert list(temp.iterdir()) == []
    assert not (tmp_path / "out.tar").exists()


def test_output_pipe_closed_early_is_quiet_and_removes_the_runs(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    archive = tmp_path / "in.tar"
    archive.write_bytes(make_tar((f"k{i:05d}.bin", os.urandom(2000)) for i in range(3000)))
    result = run_shell(
        f"tarsort -r --memory 1M {archive} | head -c 5000 > /dev/null; echo ${{PIPESTATUS[0]}}",
        env={"TMPDIR": str(temp)},
    )
    assert result.stdout == b"141\n" and result.stderr == ""
    assert list(temp.iterdir()) == []


def test_a_full_temporary_directory_is_named_with_its_file_system(
    tmp_path: Path, small_disk: Path
) -> None:
    archive = tmp_path / "in.tar"
    archive.write_bytes(make_tar((f"k{i:03d}.bin", bytes(5000)) for i in range(300)))
    result = run(["tarsort", "-r", "--memory", "1M", str(archive), "-o", "out.tar"],
                 cwd=tmp_path, env=dict(os.environ, TMPDIR=str(small_disk)))  # fmt: skip
    assert result.returncode == 2
    disk = re.escape(str(small_disk))
    assert re.fullmatch(
        rf"tarsort: error: {disk}/tarsort-\w+/run-\d+ \(a sorted run\): write failed: no space "
        rf"left on the file system of \$TMPDIR \({disk}, [\d.]+ \w+ free\)\n",
        result.stderr,
    ), result.stderr
    assert list(small_disk.iterdir()) == [] and not (tmp_path / "out.tar").exists()
