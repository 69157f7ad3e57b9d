"""`tarkit map` through the real console script: --fn and -c, progress, errors, Ctrl-C, resume."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import map_functions as fns
import pytest
from conftest import (
    BIN,
    LONG_KEY,
    LONG_KEY_PROBLEM,
    assert_all_gone,
    assert_gone,
    run,
    samples_of,
    webdataset_samples,
    write_long_key_archive,
)
from map_functions import PER_SHARD, SHARDS, write_inputs

TESTS = Path(__file__).resolve().parent.parent


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment for `tarkit map`: map_functions importable (and this checkout's
    tarkit, in every process), marks in tmp_path."""
    marks = tmp_path / "marks"
    marks.mkdir()
    path = os.pathsep.join([str(TESTS), str(TESTS.parent)])
    return dict(os.environ, PYTHONPATH=path, TARKIT_TEST_MARKS=str(marks))


def outputs(directory: Path, shards: int = SHARDS) -> list[Path]:
    return [directory / f"in-{s}.tar" for s in range(shards)]


def keys_of(paths: list[Path]) -> list[str]:
    return [key for path in paths for key, _ in samples_of(path.read_bytes())]


ALL_KEYS = [f"s{s}-{i:02d}" for s in range(SHARDS) for i in range(PER_SHARD)]


def test_fn_maps_every_shard_with_metadata_and_progress_on_stderr_only(
    tmp_path: Path, env: dict[str, str]
) -> None:
    inputs = write_inputs(tmp_path / "in")
    result = run(
        ["tarkit", "map", "--fn", "map_functions:shout", inputs, "-o", f"{tmp_path}/out/",
         "--metadata", str(tmp_path / "meta.tsv"), "-j", "2"],
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    last = result.stderr.splitlines()[-1]
    assert last.startswith("tarkit map: 4/4 shards, 20 samples in ") and last.endswith(", 0 failed")
    read = [s for path in outputs(tmp_path / "out") for s in webdataset_samples(path)]
    assert [key for key, _ in read] == ALL_KEYS
    lines = (tmp_path / "meta.tsv").read_text().splitlines()
    assert lines[0] == "key\tlength\tshard"
    assert [line.split("\t")[0] for line in lines[1:]] == ALL_KEYS

    # Again: everything is complete already, nothing is mapped.
    (tmp_path / "marks" / "calls").unlink()
    again = run(["tarkit", "map", "--fn", "map_functions:shout", inputs, "-o", f"{tmp_path}/out/"],
                env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "4/4 shards (4 already complete), 0 samples in " in again.stderr
    assert not (tmp_path / "marks" / "calls").exists()


def test_a_failing_shard_exits_2_naming_the_shard_and_the_sample(
    tmp_path: Path, env: dict[str, str]
) -> None:
    from conftest import make_tar

    (tmp_path / "a.tar").write_bytes(make_tar([("k1.txt", b"ok"), ("k2.txt", b"bad")]))
    (tmp_path / "b.tar").write_bytes(make_tar([("k3.txt", b"ok")]))
    result = run(
        ["tarkit", "map", "--fn", "map_functions:fail_on_bad", str(tmp_path / "a.tar"),
         str(tmp_path / "b.tar"), "-o", f"{tmp_path}/out/", "--retries", "1"],
        env=env,
    )  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert (
        f"tarkit map: warning: retrying {tmp_path}/a.tar, sample 'k2': ValueError: cannot map k2"
        in lines
    )
    assert lines[-1] == (
        f"tarkit map: error: 1 of 2 shards failed after 2 attempts: {tmp_path}/a.tar, "
        "sample 'k2': ValueError: cannot map k2"
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".b.tar.map.json", "b.tar"]


def test_a_corrupt_local_input_fails_at_once_with_one_error_line_naming_it_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    from conftest import make_tar

    cut = tmp_path / "cut.tar"
    cut.write_bytes(make_tar([("k1.txt", b"ok"), ("k2.txt", b"x" * 900)])[:1536])
    (tmp_path / "b.tar").write_bytes(make_tar([("k3.txt", b"ok")]))
    result = run(
        ["tarkit", "map", "-c", "true", str(cut), str(tmp_path / "b.tar"), "-o",
         f"{tmp_path}/out/"],
        env=env,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert not [line for line in lines if "retrying" in line]  # it would fail the same way
    assert [line for line in lines if ": error: " in line] == [lines[-1]]
    assert lines[-1] == (
        f"tarkit map: error: 1 of 2 shards failed after 1 attempt: {cut}: input ends inside "
        "member data (0 of 900 bytes) (byte 1024, member k2.txt)"
    )
    assert f"tarkit map: failed: {cut}: input ends inside member data" in result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".b.tar.map.json", "b.tar"]


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "give either -c COMMAND or --fn package.module:function"),
        (["-c", "true", "--fn", "map_functions:shout"], "give either -c COMMAND or --fn"),
        (["--fn", "map_functions"], "expected package.module:function"),
        (["--fn", "no_such_module:f"], "cannot import no_such_module"),
        (["--fn", "map_functions:nothing"], "map_functions has no nothing"),
        (
            ["--fn", "map_functions:shout", "-p", "2"],
            "-p, --on-error, --rejects, --timeout and --multi go with -c",
        ),
        (["--fn", "map_functions:shout", "--engine", "spark"], "unknown engine 'spark'"),
        (["--fn", "map_functions:shout", "--metadata", "m.csv"], "name it .jsonl"),
        # The same messages as tarproc's and tarcat's: one check per option.
        (["-c", "true", "-p", "0"], "-p must be at least 1 (got 0)"),
        (["-c", "true", "--on-error", "retry"], "--on-error must be one of fail, skip, keep"),
        (["--fn", "map_functions:shout", "-j", "0"], "workers must be at least 1 (got 0)"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    tmp_path: Path, env: dict[str, str], args: list[str], message: str
) -> None:
    inputs = write_inputs(tmp_path / "in")
    result = run(["tarkit", "map", inputs, "-o", f"{tmp_path}/out/", *args], env=env,
                 cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("tarkit map: error: ") and message in result.stderr
    assert not (tmp_path / "out").exists()


def test_engine_ray_without_ray_says_how_to_install_it(tmp_path: Path, env: dict[str, str]) -> None:
    hide = tmp_path / "hide" / "ray"
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    env["PYTHONPATH"] = f"{tmp_path / 'hide'}{os.pathsep}{env['PYTHONPATH']}"
    inputs = write_inputs(tmp_path / "in")
    result = run(["tarkit", "map", "--fn", "map_functions:shout", inputs, "-o", f"{tmp_path}/o/",
                  "--engine", "ray"], env=env)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        "tarkit map: error: engine 'ray' needs Ray, which is not installed: "
        "pip install 'tarkit[ray]'\n"
    )


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_leaves_only_complete_outputs_and_the_rerun_does_the_rest(
    tmp_path: Path, env: dict[str, str], how: signal.Signals
) -> None:
    inputs = write_inputs(tmp_path / "in", shards=6, per_shard=2)
    out = tmp_path / "out"
    command = [str(BIN / "tarkit"), "map", "--fn", "map_functions:slow", inputs, "-o", f"{out}/",
               "-j", "2", "--metadata", str(tmp_path / "meta.jsonl")]  # fmt: skip
    env["TARKIT_TEST_DELAY"] = "0.4"
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while not list(out.glob("in-*.tar")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(out.glob("in-*.tar")), "no shard finished within 60 s"
    # As a terminal does: the signal goes to the whole process group.
    os.killpg(process.pid, how)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == (130 if how == signal.SIGINT else 143), stderr
    assert b"Traceback" not in stderr
    done = sorted(p.name for p in out.glob("in-*.tar"))
    assert 1 <= len(done) < 6
    assert not [p for p in out.iterdir() if ".map-" in p.name or p.name.endswith(".tmp")]
    assert not (tmp_path / "meta.jsonl").exists()
    for name in done:  # every output present is complete
        assert len(samples_of((out / name).read_bytes())) == 2

    (tmp_path / "marks" / "calls").unlink()
    env["TARKIT_TEST_DELAY"] = "0"
    rerun = subprocess.run(command, env=env, capture_output=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert {shard for shard, _ in fns.calls(tmp_path / "marks")} == (
        {f"in-{s}.tar" for s in range(6)} - set(done)
    )
    keys = [f"s{s}-{i:02d}" for s in range(6) for i in range(2)]
    assert keys_of([out / f"in-{s}.tar" for s in range(6)]) == keys
    assert [r["key"] for r in fns.rows_of(tmp_path / "meta.jsonl")] == keys


# ---------------------------------------------------------------------------------------
# -c: tarproc's per-sample model over many shards


def test_command_gives_the_bytes_tarproc_gives_for_each_shard(tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "in")
    command = 'tr a-z A-Z < sample.txt > sample.up.txt && echo "$TARKIT_KEY" > sample.key.txt'
    result = run(["tarkit", "map", "-c", command, inputs, "-o", f"{tmp_path}/out/", "-j", "2",
                  "-p", "2", "--manifest", str(tmp_path / "out" / "manifest.json")])  # fmt: skip
    assert result.returncode == 0, result.stderr
    for s in range(SHARDS):
        with open(tmp_path / "in" / f"in-{s}.tar", "rb") as stdin:
            expected = subprocess.run(
                [str(BIN / "tarproc"), "-c", command], stdin=stdin, capture_output=True,
                timeout=60, check=True,
            ).stdout  # fmt: skip
        assert (tmp_path / "out" / f"in-{s}.tar").read_bytes() == expected
    first = samples_of((tmp_path / "out" / "in-0.tar").read_bytes())[0]
    assert first[1]["up.txt"] == b"WORD" and first[1]["key.txt"] == b"s0-00\n"


def test_command_failures_follow_the_on_error_policy(tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "in")
    command = 'case "$TARKIT_KEY" in *-01) exit 3;; esac; true'
    fail = run(["tarkit", "map", "-c", command, inputs, "-o", f"{tmp_path}/f/", "--retries", "0"])
    assert fail.returncode == 2 and "s0-01" in fail.stderr.splitlines()[-1]
    assert not list((tmp_path / "f").glob("in-*.tar"))

    skip = run(["tarkit", "map", "-c", command, inputs, "-o", f"{tmp_path}/s/", "--on-error",
                "skip", "--rejects", str(tmp_path / "rejects.tsv")])  # fmt: skip
    assert skip.returncode == 1, skip.stderr
    assert "4 samples failed their command (left out)" in skip.stderr
    assert [k for k in keys_of(outputs(tmp_path / "s"))] == [k for k in ALL_KEYS if k[-2:] != "01"]
    rejects = (tmp_path / "rejects.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in rejects] == [f"s{s}-01" for s in range(SHARDS)]

    keep = run(
        ["tarkit", "map", "-c", command, inputs, "-o", f"{tmp_path}/k/", "--on-error", "keep"]
    )
    assert keep.returncode == 1
    assert keys_of(outputs(tmp_path / "k")) == ALL_KEYS


def test_command_metadata_rows_come_from_tarkit_metadata_json_and_meta_json_fields_pass(
    tmp_path: Path,
) -> None:
    from conftest import make_tar

    # meta.json is a common webdataset field: inputs' meta.json fields, JSON objects or
    # not, are fields like any other and pass through untouched.
    (tmp_path / "in.tar").write_bytes(make_tar([
        ("a.txt", b"one"), ("a.meta.json", b"[1, 2]"),
        ("b.txt", b"two words"), ("b.meta.json", b'{"source": "web"}'),
    ]))  # fmt: skip
    command = (
        'printf \'{"key": "%s", "words": %d}\' "$TARKIT_KEY" $(wc -w < sample.txt) '
        "> tarkit.metadata.json"
    )
    result = run(["tarkit", "map", "-c", command, str(tmp_path / "in.tar"), "-o",
                  f"{tmp_path}/out/", "--metadata", str(tmp_path / "meta.jsonl")])  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert fns.rows_of(tmp_path / "meta.jsonl") == [
        {"key": "a", "words": 1}, {"key": "b", "words": 2}
    ]  # fmt: skip
    assert samples_of((tmp_path / "out" / "in.tar").read_bytes()) == [
        ("a", {"meta.json": b"[1, 2]", "txt": b"one"}),
        ("b", {"meta.json": b'{"source": "web"}', "txt": b"two words"}),
    ]

    # A metadata file that is not a JSON object is a bad output: --on-error decides.
    bad = run(["tarkit", "map", "-c", "echo nope > tarkit.metadata.json", str(tmp_path / "in.tar"),
               "-o", f"{tmp_path}/bad/", "--on-error", "skip", "--rejects",
               str(tmp_path / "rejects.tsv"), "-q"])  # fmt: skip
    assert bad.returncode == 1, bad.stderr
    assert (tmp_path / "rejects.tsv").read_text().splitlines() == [
        f"{key}\tbad output\ta tarkit.metadata.json that does not hold a JSON object"
        for key in "ab"
    ]


def test_command_multi_splits_samples_into_parts(tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "in", shards=1, per_shard=3)
    command = 'i=0; for w in $(cat sample.txt); do echo -n "$w$i" > sample-$i.txt; i=$((i+1)); done'
    result = run(["tarkit", "map", "-c", command, "--multi", inputs, "-o", f"{tmp_path}/out/",
                  "-p", "3"])  # fmt: skip
    assert result.returncode == 0, result.stderr
    samples = samples_of((tmp_path / "out" / "in-0.tar").read_bytes())
    assert [key for key, _ in samples] == ["s0-00/0", "s0-01/0", "s0-01/1", "s0-02/0",
                                           "s0-02/1", "s0-02/2"]  # fmt: skip
    assert samples[2][1] == {"txt": b"word1"}


def test_command_on_a_key_too_long_for_the_environment_fails_or_skips_that_sample(
    tmp_path: Path, env: dict[str, str]
) -> None:
    long, problem = LONG_KEY, LONG_KEY_PROBLEM
    source = tmp_path / "in.tar"
    write_long_key_archive(source)
    fail = run(["tarkit", "map", "-c", "true", str(source), "-o", f"{tmp_path}/f/"], env=env)
    assert fail.returncode == 2
    last = fail.stderr.splitlines()[-1]
    assert f"{source}: sample '{long[:40]}…{long[:20]}' (200000 bytes): {problem} " in last
    assert last.endswith(f"(byte 1024, member {long[:40]}…{long[:16]}.txt)")
    assert "retrying" not in fail.stderr  # a local input reads the same every time

    rejects = tmp_path / "rejects.tsv"
    skip = run(["tarkit", "map", "-c", "true", str(source), "-o", f"{tmp_path}/s/",
                "--on-error", "skip", "--rejects", str(rejects)], env=env)  # fmt: skip
    assert skip.returncode == 1, skip.stderr
    assert [key for key, _ in samples_of((tmp_path / "s" / "in.tar").read_bytes())] == ["a", "c"]
    (line,) = rejects.read_text().splitlines()
    assert line.startswith(f"{long}\tbad key\t{problem} ")


def test_rejects_go_with_skip_or_keep(tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "in")
    result = run(["tarkit", "map", "-c", "true", inputs, "-o", f"{tmp_path}/o/", "--rejects",
                  str(tmp_path / "r.tsv")])  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == "tarkit map: error: --rejects goes with --on-error skip or keep\n"


def test_a_worker_killed_mid_command_loses_its_command_and_directory_not_its_shard(
    tmp_path: Path, env: dict[str, str]
) -> None:
    inputs = write_inputs(tmp_path / "in")
    # A short TMPDIR: multiprocessing puts a socket there, and a socket's path may not be
    # longer than 107 bytes (pytest-xdist's temporary paths can be).
    tmpdir = Path(tempfile.mkdtemp(prefix="tk-", dir="/tmp"))
    env["TMPDIR"] = str(tmpdir)
    pids = tmp_path / "marks" / "pids"
    # The first attempt at s1-02 records its own and its worker's process ids and that of
    # a process it starts in a session of its own, then hangs; the test kills that
    # worker from outside.
    command = (
        'if [ "$TARKIT_KEY" = s1-02 ] && mkdir "$TARKIT_TEST_MARKS/once" 2>/dev/null; then '
        f"setsid sleep 30 & echo $$ $PPID $! > {pids}.tmp && mv {pids}.tmp {pids}; sleep 30; fi; "
        "tr a-z A-Z < sample.txt > sample.up.txt"
    )
    process = subprocess.Popen(
        [str(BIN / "tarkit"), "map", "-c", command, inputs, "-o", f"{tmp_path}/out/", "-j", "2"],
        env=env, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 90  # a loaded machine starts workers slowly
    while not pids.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if not pids.exists():
        process.kill()
        raise AssertionError(f"s1-02 never ran: {process.communicate()[1].decode()}")
    command_pid, worker_pid, escaped_pid = map(int, pids.read_text().split())
    os.kill(worker_pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert f"retrying {tmp_path}/in/in-1.tar: its worker process (pid {worker_pid}) was killed" in (
        stderr.decode()
    )
    assert keys_of(outputs(tmp_path / "out")) == ALL_KEYS
    assert_gone(command_pid)
    assert_gone(escaped_pid)
    assert list(tmpdir.iterdir()) == []  # no tarproc-* nor anything else
    tmpdir.rmdir()


def test_a_driver_killed_mid_command_takes_its_workers_and_their_commands_along(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # kill -9 of the driver alone (the OOM killer's way): its workers notice, kill their
    # commands (and what those left in a session of their own) and exit, within seconds.
    inputs = write_inputs(tmp_path / "in")
    tmpdir = Path(tempfile.mkdtemp(prefix="tk-", dir="/tmp"))  # short: see the test above
    env["TMPDIR"] = str(tmpdir)
    marks = tmp_path / "marks"
    command = (
        f"setsid sleep 60 & echo $$ $PPID $! > {marks}/$TARKIT_KEY.tmp && "
        f"mv {marks}/$TARKIT_KEY.tmp {marks}/$TARKIT_KEY.pids; sleep 60"
    )
    process = subprocess.Popen(
        [str(BIN / "tarkit"), "map", "-c", command, inputs, "-o", f"{tmp_path}/out/", "-j", "2"],
        env=env, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90  # a loaded machine starts workers slowly
        while len(list(marks.glob("*.pids"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        pids = [int(p) for f in marks.glob("*.pids") for p in f.read_text().split()]
        assert len(pids) == 6, process.stderr
    finally:
        process.kill()
        process.wait(timeout=30)
    assert_all_gone(pids)  # two workers, their commands and the commands' own sessions
    assert not list((tmp_path / "out").glob("*"))  # no partial output either
    assert not [p for p in tmpdir.iterdir() if not p.name.startswith("pymp-")]
    shutil.rmtree(tmpdir)


def test_a_long_temporary_directory_is_no_obstacle(tmp_path: Path, env: dict[str, str]) -> None:
    # Workers start another way when a socket in TMPDIR would pass 107 bytes.
    tmpdir = tmp_path / ("t" * 110)
    tmpdir.mkdir()
    env["TMPDIR"] = str(tmpdir)
    inputs = write_inputs(tmp_path / "in")
    result = run(["tarkit", "map", "--fn", "map_functions:shout", inputs, "-o",
                  f"{tmp_path}/out/", "-j", "2"], env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert keys_of(outputs(tmp_path / "out")) == ALL_KEYS


def test_outputs_of_an_earlier_run_that_this_run_would_not_write_are_refused_then_overwritten(
    tmp_path: Path, env: dict[str, str]
) -> None:
    many = write_inputs(tmp_path / "in", shards=4)
    first = run(["tarkit", "map", "--fn", "map_functions:shout", many, "-o", f"{tmp_path}/out/"],
                env=env)  # fmt: skip
    assert first.returncode == 0, first.stderr
    fewer = str(tmp_path / "in" / "in-{0..1}.tar")
    refused = run(["tarkit", "map", "--fn", "map_functions:shout", fewer, "-o",
                   f"{tmp_path}/out/"], env=env)  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.endswith(
        f"tarkit map: error: {tmp_path}/out/: 2 earlier outputs of tarkit map match the output "
        f"pattern but are not of this run, first {tmp_path}/out/in-2.tar: outputs read "
        "by pattern would mix two runs. Pass --overwrite (mode='overwrite') to redo every shard "
        "and remove them once this run is complete\n"
    )
    replaced = run(["tarkit", "map", "--fn", "map_functions:shout", fewer, "-o",
                    f"{tmp_path}/out/", "--overwrite", "-q"], env=env)  # fmt: skip
    assert replaced.returncode == 0, replaced.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".in-0.tar.map.json", ".in-1.tar.map.json", "in-0.tar", "in-1.tar"
    ]  # fmt: skip


def test_a_failed_overwrite_removes_no_earlier_output(tmp_path: Path, env: dict[str, str]) -> None:
    many = write_inputs(tmp_path / "in", shards=4)
    pattern = f"{tmp_path}/out/o-{{0..3}}.tar"
    first = run(["tarkit", "map", "--fn", "map_functions:shout", many, "-o", pattern], env=env)
    assert first.returncode == 0, first.stderr
    from conftest import make_tar

    (tmp_path / "in" / "in-1.tar").write_bytes(make_tar([("s1-00.txt", b"bad")]))
    fewer = str(tmp_path / "in" / "in-{0..1}.tar")
    failed = run(["tarkit", "map", "--fn", "map_functions:fail_on_bad", fewer, "-o",
                  f"{tmp_path}/out/o-{{0..1}}.tar", "--overwrite", "--retries", "0", "-q"],
                 env=env)  # fmt: skip
    assert failed.returncode == 2, failed.stderr
    assert sorted(p.name for p in (tmp_path / "out").glob("o-*.tar")) == [
        f"o-{i}.tar" for i in range(4)
    ]


def test_a_resume_with_another_function_or_command_is_refused_naming_the_output(
    tmp_path: Path, env: dict[str, str]
) -> None:
    from conftest import make_tar

    inputs = write_inputs(tmp_path / "in")
    out = tmp_path / "out"
    first = run(["tarkit", "map", "--fn", "map_functions:shout", inputs, "-o", f"{out}/", "-q"],
                env=env)  # fmt: skip
    assert first.returncode == 0, first.stderr
    # Another function with --overwrite fails on in-1.tar: the first run's set stays whole.
    first_set = {p.name: p.read_bytes() for p in out.iterdir()}
    good = (tmp_path / "in" / "in-1.tar").read_bytes()
    (tmp_path / "in" / "in-1.tar").write_bytes(make_tar([("s1-00.txt", b"bad")]))
    other = ["tarkit", "map", "--fn", "map_functions:fail_on_bad", inputs, "-o", f"{out}/", "-q"]
    failed = run([*other, "--overwrite", "--retries", "0"], env=env)
    assert failed.returncode == 2, failed.stderr
    (tmp_path / "in" / "in-1.tar").write_bytes(good)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first_set

    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    resumed = run(other, env=env)
    assert resumed.returncode == 2
    assert resumed.stderr == (
        f"tarkit map: error: {out}/in-0.tar: made by the function map_functions:shout, while "
        "this run maps with the function map_functions:fail_on_bad (4 of 4 outputs): resuming "
        "would keep outputs of both in one set. Pass --overwrite (mode='overwrite') to redo "
        "every shard, or write the outputs elsewhere\n"
    )
    changed = run(["tarkit", "map", "-c", "true", inputs, "-o", f"{out}/", "-q"], env=env)
    assert changed.returncode == 2
    assert changed.stderr.startswith(
        f"tarkit map: error: {out}/in-0.tar: made by the function map_functions:shout, "
        "while this run maps with the command 'true' (4 of 4 outputs): "
    )
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before  # nothing ran


def test_fn_giving_several_samples_each_with_its_row_writes_the_rows_in_output_order(
    tmp_path: Path, env: dict[str, str]
) -> None:
    inputs = write_inputs(tmp_path / "in", shards=2, per_shard=3)
    result = run(["tarkit", "map", "--fn", "map_functions:word_rows", inputs, "-o",
                  f"{tmp_path}/out/", "--metadata", str(tmp_path / "meta.jsonl"), "-q"],
                 env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    keys = [f"s{s}-{i:02d}/{w}" for s in range(2) for i in range(3) for w in range(i + 1)]
    assert keys_of(outputs(tmp_path / "out", 2)) == keys
    assert fns.rows_of(tmp_path / "meta.jsonl") == [
        {"key": key, "word": int(key[-1])} for key in keys
    ]


def test_a_function_giving_fewer_rows_than_samples_fails_at_once_saying_both_counts(
    tmp_path: Path, env: dict[str, str]
) -> None:
    inputs = write_inputs(tmp_path / "in", shards=1)
    result = run(["tarkit", "map", "--fn", "map_functions:rows_short", inputs, "-o",
                  f"{tmp_path}/out/", "--retries", "2", "-q"], env=env)  # fmt: skip
    assert result.returncode == 2
    assert "retrying" not in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"tarkit map: error: 1 of 1 shards failed after 1 attempt: {tmp_path}/in/in-0.tar, "
        "sample 's0-00': the function map_functions:rows_short returned 2 samples and 1 row; "
        "it may return a sample dict, a list of them, None, or (samples, row) with row a dict "
        "(one metadata row per input sample) or a list of dicts (one row per output sample)"
    )
    assert not (tmp_path / "out" / "in-0.tar").exists()


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_a_missing_or_directory_input_fails_before_any_shard_is_mapped(
    tmp_path: Path, env: dict[str, str], kind: str
) -> None:
    write_inputs(tmp_path / "in", shards=3)
    bad = tmp_path / "in" / "in-1.tar"
    bad.unlink()
    if kind == "directory":
        bad.mkdir()
    inputs = str(tmp_path / "in" / "in-{0..2}.tar")
    result = run(["tarkit", "map", "--fn", "map_functions:shout", inputs, "-o", f"{tmp_path}/out/"],
                 env=env)  # fmt: skip
    assert result.returncode == 2
    what = "no such file (1 of 3 inputs does not exist)" if kind == "missing" else (
        "is a directory, not a shard; it holds no files"
    )  # fmt: skip
    assert result.stderr == f"tarkit map: error: {bad}: {what}\n"
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "marks" / "calls").exists()
