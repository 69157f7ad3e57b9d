"""One shard task: its failure names the sample and comes back whole from another process."""

from __future__ import annotations

import pickle
import re
import tempfile
from pathlib import Path

import map_functions as fns
import pytest
from conftest import make_tar

from tarkit.errors import CommandFailed, MapError, ShardFailure
from tarkit.processing.commands import Rejection
from tarkit.processing.driver import MapResult
from tarkit.processing.mappers import SampleMapper, ShellCommand, made_by
from tarkit.processing.shard_task import ShardTask, run_shard

FIELDS = ("input", "output", "key", "error", "traceback", "attempts", "final")


def fields_of(failure: ShardFailure) -> tuple[object, ...]:
    return tuple(getattr(failure, name) for name in FIELDS)


def write_shard(path: Path, texts: list[bytes]) -> str:
    path.write_bytes(make_tar([(f"k{i}.txt", text) for i, text in enumerate(texts)]))
    return str(path)


def test_a_failing_function_names_its_sample_and_the_failure_survives_a_pickle_round_trip(
    tmp_path: Path,
) -> None:
    source = write_shard(tmp_path / "in.tar", [b"good", b"bad", b"good"])
    mapper = SampleMapper(fns.fail_on_bad)
    task = ShardTask(0, source, str(tmp_path / "out.tar"), made_by(mapper), attempt=2)
    result = run_shard(mapper, task)
    failure = result.failure
    assert failure is not None
    assert fields_of(failure)[:4] == (source, task.output, "k1", "ValueError: cannot map k1")
    assert (failure.attempts, failure.final) == (2, False)
    assert "fail_on_bad" in failure.traceback
    back = pickle.loads(pickle.dumps(result)).failure
    assert fields_of(back) == fields_of(failure)
    assert str(back) == str(failure) == f"{source}, sample 'k1': ValueError: cannot map k1"


def test_a_corrupt_local_input_is_a_final_failure_without_a_key_and_stays_final_when_pickled(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(make_tar([("k0.txt", b"x" * 2000)])[:1000])
    mapper = SampleMapper(fns.shout)
    result = run_shard(mapper, ShardTask(0, str(source), str(tmp_path / "o.tar"), made_by(mapper)))
    failure = pickle.loads(pickle.dumps(result)).failure
    assert (failure.key, failure.final, failure.traceback) == (None, True, "")
    assert failure.error.startswith(f"{source}: ")


def test_a_failed_command_becomes_the_shards_failure_naming_its_sample(tmp_path: Path) -> None:
    source = write_shard(tmp_path / "in.tar", [b"a", b"b", b"c"])
    command = ShellCommand('[ "$TARKIT_KEY" = k2 ] && { echo broken >&2; exit 4; }; true',
                           parallel=2, quiet=True)  # fmt: skip
    result = run_shard(command, ShardTask(0, source, str(tmp_path / "o.tar"), made_by(command)))
    failure = pickle.loads(pickle.dumps(result)).failure
    assert (failure.key, failure.output) == ("k2", str(tmp_path / "o.tar"))
    assert str(failure) == f"{source}, sample 'k2': command exited with status 4: broken"


def test_command_failed_and_map_error_pickle_with_their_message() -> None:
    failed = CommandFailed(Rejection("k", "exit 3", "oops", ("oops",)), "in.tar")
    back = pickle.loads(pickle.dumps(failed))
    assert (back.rejection, back.source, str(back)) == (failed.rejection, "in.tar", str(failed))
    failure = ShardFailure("in.tar", "out.tar", "k", "boom", attempts=3)
    error = MapError([failure], MapResult(["out.tar", "other.tar"]))
    back_error = pickle.loads(pickle.dumps(error))
    assert (
        str(back_error)
        == str(error)
        == "1 of 2 shards failed after 3 attempts: in.tar, sample 'k': boom"
    )


def test_a_full_disk_fails_the_shard_naming_the_file_system_that_filled(
    tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_shard(tmp_path / "in.tar", [b"a" * 600_000])
    output = str(small_disk / "o.tar")
    mapper = SampleMapper(fns.shout)
    failure = run_shard(mapper, ShardTask(0, source, output, made_by(mapper))).failure
    assert failure is not None and failure.traceback == ""
    assert re.fullmatch(
        rf"{output}: write failed: no space left on the file system of "
        rf"{re.escape(str(small_disk))} \([\d.]+ \w+ free\)", failure.error
    ), failure.error  # fmt: skip
    # The command's workspace is in $TMPDIR, which fills; the output's disk has room.
    monkeypatch.setenv("TMPDIR", str(small_disk))
    monkeypatch.setattr(tempfile, "tempdir", None)
    command = ShellCommand("cp sample.txt sample.out", parallel=1, quiet=True)
    task = ShardTask(0, source, str(tmp_path / "o.tar"), made_by(command))
    failure = run_shard(command, task).failure
    assert failure is not None and failure.traceback == ""
    assert re.fullmatch(
        rf"{source}: sample 'k0': cannot write its files for the command: no space left on "
        rf"the file system of \$TMPDIR \({re.escape(str(small_disk))}, [\d.]+ \w+ free\)",
        failure.error,
    ), failure.error
    assert list(small_disk.iterdir()) == [] and not (tmp_path / "o.tar").exists()
