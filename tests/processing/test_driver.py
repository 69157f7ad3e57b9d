"""map_shards on the local engine: outputs, metadata, failures, killed workers, resume, S3."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import map_functions as fns
import pytest
from conftest import make_tar, samples_of, webdataset_samples
from map_functions import PER_SHARD, SHARDS, write_inputs
from random_access import check_random_access

from tarkit.errors import EngineError, UsageError
from tarkit.processing.driver import MapError, MapProgress, MapResult, map_shards
from tarkit.processing.mappers import ShellCommand
from tarkit.processing.records import record_path
from tarkit.storage import load_table


@pytest.fixture
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "marks"
    path.mkdir()
    monkeypatch.setenv("TARKIT_TEST_MARKS", str(path))
    return path


def outputs_of(directory: Path, shards: int = SHARDS) -> list[Path]:
    return [directory / f"out-{s}.tar" for s in range(shards)]


def test_every_sample_is_mapped_once_and_metadata_rows_come_in_input_order(tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "in")
    events: list[str] = []
    result = map_shards(
        fns.shout, inputs, str(tmp_path / "out" / "out-{0..3}.tar"), workers=2,
        metadata=str(tmp_path / "meta.jsonl"), manifest=str(tmp_path / "out" / "manifest.json"),
        progress=lambda p: events.append(p.event),
    )  # fmt: skip
    keys = [f"s{s}-{i:02d}" for s in range(SHARDS) for i in range(PER_SHARD)]
    read = [s for path in outputs_of(tmp_path / "out") for s in webdataset_samples(path)]
    assert [key for key, _ in read] == keys
    assert read[1][1] == {"cls": b"9", "txt": b"WORD WORD"}
    rows = fns.rows_of(tmp_path / "meta.jsonl")
    assert [r["key"] for r in rows] == keys
    assert rows[PER_SHARD] == {"key": "s1-00", "length": 4, "shard": "in-1.tar"}
    assert (result.processed, result.resumed, result.samples, result.rows) == (4, 0, 20, 20)
    assert events.count("done") == SHARDS and events[-1] == "finished"
    from tarkit.storage import load_manifest as load

    manifest = load(str(tmp_path / "out" / "manifest.json"))
    assert [s.url for s in manifest.shards] == [f"out-{s}.tar" for s in range(SHARDS)]
    assert manifest.samples == 20
    # GNU tar reads every output, and nothing else is left in the output directory.
    for path in outputs_of(tmp_path / "out"):
        listing = subprocess.run(["tar", "-tf", path], capture_output=True, check=True)
        assert len(listing.stdout.splitlines()) == 2 * PER_SHARD
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    expected = [f".out-{s}.tar.map.json" for s in range(SHARDS)]
    expected += [f"out-{s}.tar.idx" for s in range(SHARDS)]  # each output's index
    assert names == sorted(
        expected + ["manifest.columns", "manifest.json"]
        + [p.name for p in outputs_of(tmp_path / "out")]
    )  # fmt: skip


def test_outputs_with_a_manifest_are_random_access_ready_and_a_rerun_mends_their_indexes(
    tmp_path: Path,
) -> None:
    inputs = write_inputs(tmp_path / "in")
    out = tmp_path / "out"

    def mapped() -> MapResult:
        return map_shards(fns.shout, inputs, f"{out}/out-{{0..3}}.tar", workers=1,
                          manifest=str(out / "manifest.json"))  # fmt: skip

    mapped()
    ready = check_random_access(out / "manifest.json")
    assert (ready.samples, sorted(ready.indexes)) == (20, [f"out-{s}.tar" for s in range(4)])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {f"out-{s}.tar.idx" for s in range(4)} <= set(before)  # beside each output
    (out / "out-1.tar.idx").unlink()
    (out / "out-2.tar.idx").write_bytes(before["out-0.tar.idx"])  # another output's
    assert mapped().resumed == 4
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_outputs_named_by_no_one_pattern_get_their_indexes_beside_the_manifest(
    tmp_path: Path,
) -> None:
    inputs = write_inputs(tmp_path / "in", shards=2)
    for number, name in enumerate(("cats", "dogs")):
        (tmp_path / "in" / f"in-{number}.tar").rename(tmp_path / "in" / f"{name}.tar")
    named = [str(tmp_path / "in" / f"{name}.tar") for name in ("cats", "dogs")]
    assert inputs.endswith("in-{0..1}.tar")
    map_shards(fns.shout, named, str(tmp_path / "out") + "/", workers=1,
               manifest=str(tmp_path / "manifest.json"))  # fmt: skip
    assert load_table(str(tmp_path / "manifest.json")).index == "index/%06d.idx"
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == ["000000.idx", "000001.idx"]
    assert sorted(check_random_access(tmp_path / "manifest.json").indexes) == [
        "out/cats.tar", "out/dogs.tar"
    ]  # fmt: skip


def test_fn_may_return_several_samples_or_none(tmp_path: Path) -> None:
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / "a.tar").write_bytes(
        make_tar([("x.txt", b"two words"), ("y.txt", b""), ("z.txt", b"one")])
    )
    result = map_shards(fns.split_words, [str(directory / "a.tar")], [str(tmp_path / "b.tar")])
    assert [key for key, _ in samples_of((tmp_path / "b.tar").read_bytes())] == [
        "x/0", "x/1", "z/0",
    ]  # fmt: skip
    assert (result.samples_in, result.samples) == (3, 3)


def test_an_output_without_samples_is_an_empty_archive(tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "in", shards=1)
    map_shards(
        fns.json_meta, inputs, str(tmp_path / "out-0.tar.gz"), metadata=str(tmp_path / "m.tsv")
    )
    listing = subprocess.run(["tar", "-tzf", tmp_path / "out-0.tar.gz"], capture_output=True)
    assert listing.returncode == 0 and listing.stdout == b""
    lines = (tmp_path / "m.tsv").read_text().splitlines()
    assert lines[0] == "key\ttext" and lines[1] == "s0-00\tword\\tand\\nmore"
    assert len(lines) == 1 + PER_SHARD


def test_outputs_are_byte_identical_whatever_the_number_of_workers(tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "in")
    map_shards(fns.as_image, inputs, str(tmp_path / "one" / "out-{0..3}.tar"), workers=1)
    map_shards(fns.as_image, inputs, str(tmp_path / "two" / "out-{0..3}.tar"), workers=2)
    for a, b in zip(outputs_of(tmp_path / "one"), outputs_of(tmp_path / "two"), strict=True):
        assert a.read_bytes() == b.read_bytes()
    assert samples_of(outputs_of(tmp_path / "one")[0].read_bytes())[0][1]["png"][:4] == b"\x89PNG"


def test_a_failing_sample_is_retried_then_reported_after_the_other_shards_are_done(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "in"
    directory.mkdir()
    for s in range(3):
        texts = [b"fine", b"bad" if s == 1 else b"fine", b"fine"]
        (directory / f"in-{s}.tar").write_bytes(
            make_tar((f"k{s}{i}.txt", t) for i, t in enumerate(texts))
        )
    events: list[tuple[str, str | None]] = []

    def progress(p: MapProgress) -> None:
        if p.event in ("retry", "failed", "done"):
            events.append((p.event, p.shard and Path(p.shard).name))

    with pytest.raises(MapError) as caught:
        map_shards(
            fns.fail_on_bad, str(directory / "in-{0..2}.tar"),
            str(tmp_path / "out" / "o-{0..2}.tar"), workers=2, retries=2, metadata=str(tmp_path / "meta.jsonl"), progress=progress,
        )  # fmt: skip
    error = caught.value
    assert len(error.failures) == 1
    failure = error.failures[0]
    assert (Path(failure.input).name, failure.key, failure.attempts) == ("in-1.tar", "k11", 3)
    assert "ValueError: cannot map k11" in failure.error and "fail_on_bad" in failure.traceback
    assert str(error) == (
        f"1 of 3 shards failed after 3 attempts: {failure.input}, sample 'k11': "
        "ValueError: cannot map k11"
    )
    assert [e for e in events if e[1] == "in-1.tar"] == [
        ("retry", "in-1.tar"), ("retry", "in-1.tar"), ("failed", "in-1.tar"),
    ]  # fmt: skip
    assert sorted(e[1] for e in events if e[0] == "done") == ["in-0.tar", "in-2.tar"]
    # The other shards are complete; nothing half-written, no metadata for an incomplete job.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".o-0.tar.map.json", ".o-2.tar.map.json", "o-0.tar", "o-2.tar",
    ]  # fmt: skip
    assert not (tmp_path / "meta.jsonl").exists()
    assert [s.samples for s in error.result.shards] == [3, 3]


def test_a_transient_failure_is_retried_and_the_job_succeeds(tmp_path: Path, marks: Path) -> None:
    inputs = write_inputs(tmp_path / "in")
    retried: list[str] = []
    result = map_shards(
        fns.fail_once, inputs, str(tmp_path / "out" / "out-{0..3}.tar"), workers=2,
        progress=lambda p: p.event == "retry" and retried.append(p.message or ""),
    )  # fmt: skip
    assert len(retried) == SHARDS
    assert "sample 's0-00': RuntimeError: transient failure" in sorted(retried)[0]
    assert result.samples == SHARDS * PER_SHARD


def test_no_retries_means_one_attempt(tmp_path: Path, marks: Path) -> None:
    inputs = write_inputs(tmp_path / "in", shards=1)
    with pytest.raises(MapError, match="1 of 1 shards failed after 1 attempt: "):
        map_shards(fns.fail_once, inputs, str(tmp_path / "out-0.tar"), retries=0)


@pytest.mark.parametrize("fn", [fns.die_once, fns.exit_once], ids=["sigkill", "exit"])
def test_a_killed_worker_costs_one_attempt_of_its_shard_and_the_job_completes(
    tmp_path: Path, marks: Path, fn: object
) -> None:
    inputs = write_inputs(tmp_path / "in")
    (marks / "die-in-1.tar").touch()
    (marks / "die-in-2.tar").touch()
    retried: list[str] = []
    result = map_shards(
        fn, inputs, str(tmp_path / "out" / "out-{0..3}.tar"), workers=2,
        metadata=str(tmp_path / "meta.jsonl"),
        progress=lambda p: p.event == "retry" and retried.append(p.message or ""),
    )  # fmt: skip
    assert sorted(m.split(":")[0] for m in retried) == [
        str(tmp_path / "in" / "in-1.tar"), str(tmp_path / "in" / "in-2.tar"),
    ]  # fmt: skip
    how = "was killed by signal 9 (SIGKILL)" if fn is fns.die_once else "exited with status 1"
    assert all(how in m for m in retried)
    keys = [k for p in outputs_of(tmp_path / "out") for k, _ in samples_of(p.read_bytes())]
    assert keys == [f"s{s}-{i:02d}" for s in range(SHARDS) for i in range(PER_SHARD)]
    assert len(fns.rows_of(tmp_path / "meta.jsonl")) == SHARDS * PER_SHARD
    assert result.processed == SHARDS
    assert not [p for p in (tmp_path / "out").iterdir() if ".map-" in p.name]


def test_a_worker_killed_from_outside_mid_shard_costs_one_attempt_and_the_job_completes(
    tmp_path: Path, marks: Path
) -> None:
    inputs = write_inputs(tmp_path / "in")
    (marks / "hang-s2-03").touch()
    killed: list[int] = []

    def kill_the_hanging_worker() -> None:
        deadline = time.monotonic() + 30
        while not (marks / "hanging").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        killed.append(int((marks / "hanging").read_text()))
        os.kill(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_the_hanging_worker)
    killer.start()
    retried: list[str] = []
    try:
        result = map_shards(
            fns.hang_once, inputs, str(tmp_path / "out" / "out-{0..3}.tar"), workers=2,
            metadata=str(tmp_path / "meta.jsonl"),
            progress=lambda p: p.event == "retry" and retried.append(p.message or ""),
        )  # fmt: skip
    finally:
        killer.join(timeout=60)
    assert retried == [
        f"{tmp_path}/in/in-2.tar: its worker process (pid {killed[0]}) was killed by signal 9 "
        "(SIGKILL)"
    ]
    keys = [f"s{s}-{i:02d}" for s in range(SHARDS) for i in range(PER_SHARD)]
    outputs = outputs_of(tmp_path / "out")
    assert [k for p in outputs for k, _ in samples_of(p.read_bytes())] == keys
    assert [r["key"] for r in fns.rows_of(tmp_path / "meta.jsonl")] == keys
    assert result.processed == SHARDS


def test_progress_counts_the_samples_of_a_shard_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = write_inputs(tmp_path / "in", shards=1, per_shard=8)
    monkeypatch.setenv("TARKIT_TEST_DELAY", "0.1")
    seen: list[tuple[str, int, int]] = []
    map_shards(fns.slow, inputs, str(tmp_path / "out-0.tar"), workers=1,
               progress=lambda p: seen.append((p.event, p.done, p.samples)))  # fmt: skip
    assert [s for event, done, s in seen if done == 0 and 0 < s < 8], seen
    assert seen[-1] == ("finished", 1, 8)


UNGUARDED_SCRIPT = """
import sys
from tarkit import MapError, map_shards

def upper(sample):
    return {"__key__": sample["__key__"], "txt": sample["txt"].upper()}

try:  # no `if __name__ == "__main__":`
    map_shards(upper, sys.argv[1], sys.argv[2], workers=1, retries=0)
except MapError as error:
    print(error)
"""


def test_workers_dying_while_starting_name_the_missing_main_guard(tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "in", shards=1)
    (tmp_path / "prep.py").write_text(UNGUARDED_SCRIPT)
    result = subprocess.run(
        [sys.executable, "prep.py", inputs, "out-0.tar"], cwd=tmp_path, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert result.stdout.startswith("1 of 1 shards failed after 1 attempt: ")
    assert result.stdout.rstrip().endswith(
        "exited with status 1 while starting, before it ran any shard (its error is on "
        "stderr): worker processes import the main module (prep.py), so a script must call "
        'map_shards under `if __name__ == "__main__":`'
    ), result.stdout
    assert "if __name__ == '__main__':" in result.stderr  # multiprocessing's own words


def test_a_rerun_maps_only_the_shards_that_are_missing_or_do_not_match(
    tmp_path: Path, marks: Path
) -> None:
    inputs = write_inputs(tmp_path / "in")
    out = str(tmp_path / "out" / "out-{0..3}.tar")
    meta = str(tmp_path / "meta.jsonl")
    map_shards(fns.shout, inputs, out, workers=2, metadata=meta)
    first = [p.read_bytes() for p in outputs_of(tmp_path / "out")]
    rows = (tmp_path / "meta.jsonl").read_bytes()
    outputs = outputs_of(tmp_path / "out")
    outputs[1].unlink()  # as if the run had been interrupted before it
    data = bytearray(outputs[3].read_bytes())  # changed since it was written
    data[600] ^= 1
    outputs[3].write_bytes(bytes(data))
    (tmp_path / "meta.jsonl").unlink()
    (marks / "calls").unlink()

    result = map_shards(fns.shout, inputs, out, workers=2, metadata=meta)
    assert sorted({shard for shard, _ in fns.calls(marks)}) == ["in-1.tar", "in-3.tar"]
    assert (result.processed, result.resumed) == (2, 2)
    assert [p.read_bytes() for p in outputs] == first
    assert (tmp_path / "meta.jsonl").read_bytes() == rows

    # Outputs made from other inputs are not complete for this run.
    (marks / "calls").unlink()
    (tmp_path / "in" / "in-2.tar").rename(tmp_path / "in" / "other-2.tar")
    others = [inputs.replace("{0..3}", str(s)) for s in range(SHARDS)]
    others[2] = str(tmp_path / "in" / "other-2.tar")
    result = map_shards(fns.shout, others, [str(p) for p in outputs], workers=2)
    assert {shard for shard, _ in fns.calls(marks)} == {"other-2.tar"}
    assert (result.processed, result.resumed) == (1, 3)

    (marks / "calls").unlink()
    result = map_shards(fns.shout, others, [str(p) for p in outputs], workers=2, mode="overwrite")
    assert len(fns.calls(marks)) == SHARDS * PER_SHARD and result.processed == SHARDS


def test_a_rerun_after_failures_does_only_the_failed_shards(tmp_path: Path, marks: Path) -> None:
    inputs = write_inputs(tmp_path / "in")
    out = str(tmp_path / "out" / "out-{0..3}.tar")
    (marks / "die-in-0.tar").touch()
    with pytest.raises(MapError):
        map_shards(fns.die_once, inputs, out, workers=2, retries=0)
    assert len({shard for shard, _ in fns.calls(marks)}) == 3
    (marks / "calls").unlink()
    result = map_shards(fns.die_once, inputs, out, workers=2, metadata=str(tmp_path / "m.jsonl"))
    assert {shard for shard, _ in fns.calls(marks)} == {"in-0.tar"}
    assert (result.processed, result.resumed) == (1, 3)
    assert len(fns.rows_of(tmp_path / "m.jsonl")) == SHARDS * PER_SHARD


def test_a_bad_input_shard_is_reported_with_its_position(tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path / "in", shards=2)
    broken = tmp_path / "in" / "in-1.tar"
    broken.write_bytes(broken.read_bytes()[:1500])
    with pytest.raises(MapError) as caught:
        map_shards(fns.shout, inputs, str(tmp_path / "out-{0..1}.tar"), retries=0)
    failure = caught.value.failures[0]
    assert failure.key is None and failure.error.startswith(f"{broken}: ")
    assert "byte" in failure.error
    assert (tmp_path / "out-0.tar").exists() and not (tmp_path / "out-1.tar").exists()


def test_a_function_returning_something_else_than_samples_fails_at_once_naming_it(
    tmp_path: Path,
) -> None:
    inputs = write_inputs(tmp_path / "in", shards=1)
    with pytest.raises(MapError) as caught:
        map_shards(fns.text_only, inputs, str(tmp_path / "o.tar"), retries=2)
    failure = caught.value.failures[0]
    assert (failure.key, failure.attempts, failure.traceback) == ("s0-00", 1, "")
    assert failure.error == (
        "the function map_functions:text_only returned a str; it may return a sample dict, a "
        "list of them, None, or (samples, row) with row a dict (one metadata row per input "
        "sample) or a list of dicts (one row per output sample)"
    )


def test_records_say_where_each_output_came_from(tmp_path: Path) -> None:

    inputs = write_inputs(tmp_path / "in", shards=1)
    map_shards(fns.shout, inputs, [str(tmp_path / "o.tar")])
    record = json.loads(Path(record_path(str(tmp_path / "o.tar"))).read_text())
    assert record["input"] == str(tmp_path / "in" / "in-0.tar")
    assert record["made_by"] == {"function": "map_functions:shout"}
    assert record["shard"]["url"] == "o.tar" and record["shard"]["samples"] == PER_SHARD
    assert len(record["metadata"]) == PER_SHARD


def test_a_resume_with_other_command_options_is_refused_but_not_with_another_parallel(
    tmp_path: Path,
) -> None:
    inputs = write_inputs(tmp_path / "in", shards=1)
    out = str(tmp_path / "o.tar")
    map_shards(ShellCommand("true", on_error="skip"), inputs, [out], workers=1)
    with pytest.raises(UsageError) as refused:
        map_shards(ShellCommand("true"), inputs, [out], workers=1)
    assert str(refused.value).startswith(
        f"{out}: made by the command 'true' with on_error 'skip', while this run has on_error "
        "'fail' (1 of 1 outputs): "
    )
    # -p does not shape the outputs.
    again = map_shards(ShellCommand("true", on_error="skip", parallel=2), inputs, [out], workers=1)
    assert again.resumed == 1
    # A record whose output is gone holds nothing that could mix.
    Path(out).unlink()
    assert map_shards(ShellCommand("true"), inputs, [out], workers=1).processed == 1


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"outputs": "o-{0..2}.tar"}, "4 inputs but 3 outputs"),
        ({"outputs": ["o.tar"] * 4}, "is named twice"),
        ({"metadata": "meta.csv"}, "name it .jsonl"),
        ({"engine": "spark"}, "unknown engine"),
        ({"retries": -1}, "must not be negative"),
        ({"num_cpus": -1, "engine": "ray"}, "num_cpus must not be negative"),
        ({"fn": lambda s: s}, "cannot be sent to worker processes"),
    ],
)
def test_bad_arguments_are_usage_errors_before_anything_runs(
    tmp_path: Path, kwargs: dict, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    arguments = {
        "fn": fns.shout,
        "inputs": write_inputs(tmp_path / "in"),
        "outputs": "o-{0..3}.tar",
    }
    arguments.update(kwargs)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=message):
        map_shards(**arguments)  # type: ignore[arg-type]
    assert not list(tmp_path.glob("o-*"))


def test_ray_engine_without_ray_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(EngineError, match=r"pip install 'tarkit\[ray\]'"):
        map_shards(fns.shout, write_inputs(tmp_path / "in"), "o-{0..3}.tar", engine="ray")


# ---------------------------------------------------------------------------------------
# S3 (moto's server on 127.0.0.1)


@pytest.fixture(scope="module")
def s3_server():
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server})
    bucket = f"b{os.getpid()}-{len(fs.ls('/'))}"
    fs.mkdir(bucket)
    yield fs, bucket


def test_s3_inputs_and_outputs_with_resume(tmp_path: Path, s3, marks: Path) -> None:
    fs, bucket = s3
    inputs = write_inputs(tmp_path / "in", shards=2)
    for s in range(2):
        fs.put_file(str(tmp_path / "in" / f"in-{s}.tar"), f"{bucket}/in/in-{s}.tar")
    out = f"s3://{bucket}/out/out-{{0..1}}.tar"
    map_shards(fns.shout, f"s3://{bucket}/in/in-{{0..1}}.tar", out, workers=2,
               metadata=f"s3://{bucket}/meta.jsonl")  # fmt: skip
    map_shards(fns.shout, inputs, str(tmp_path / "local-{0..1}.tar"), workers=2)
    for s in range(2):
        assert (
            fs.cat_file(f"{bucket}/out/out-{s}.tar") == (tmp_path / f"local-{s}.tar").read_bytes()
        )
    assert sorted(fs.ls(f"{bucket}/out")) == sorted(
        [f"{bucket}/out/out-{s}.tar" for s in range(2)]
        + [f"{bucket}/out/.out-{s}.tar.map.json" for s in range(2)]
    )
    rows = fs.cat_file(f"{bucket}/meta.jsonl").decode().splitlines()
    assert len(rows) == 2 * PER_SHARD
    (marks / "calls").unlink()
    fs.rm(f"{bucket}/out/out-1.tar")
    result = map_shards(fns.shout, f"s3://{bucket}/in/in-{{0..1}}.tar", out, workers=2)
    assert (result.processed, result.resumed) == (1, 1)
    assert {shard for shard, _ in fns.calls(marks)} == {"in-1.tar"}

    # An object replaced by another of the same size differs in ETag: it is redone.
    record = json.loads(fs.cat_file(f"{bucket}/out/.out-0.tar.map.json"))
    assert record["etag"] == fs.info(f"{bucket}/out/out-0.tar")["ETag"]
    expected = (tmp_path / "local-0.tar").read_bytes()
    fs.pipe_file(f"{bucket}/out/out-0.tar", expected[::-1])
    (marks / "calls").unlink()
    result = map_shards(fns.shout, f"s3://{bucket}/in/in-{{0..1}}.tar", out, workers=2)
    assert (result.processed, result.resumed) == (1, 1)
    assert {shard for shard, _ in fns.calls(marks)} == {"in-0.tar"}
    assert fs.cat_file(f"{bucket}/out/out-0.tar") == expected
