"""The supervisor: commands N at once, in input order, killed with everything they started."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from conftest import assert_all_gone, assert_gone
from numbered_samples import numbered, run_map, tmp_fixture  # noqa: F401

from tarkit.engines.leftovers import start_time
from tarkit.errors import CommandFailed
from tarkit.processing.commands import Command, Rejection
from tarkit.processing.supervisor import map_command, run_sample


def test_output_is_in_input_order_with_four_commands_at_once(tmp: Path) -> None:
    # Later samples finish first: the first ones sleep longest.
    script = "n=${TARKIT_KEY#s}; sleep 0.$(( (20 - 10#$n) / 4 )); echo $n > sample.n"
    samples = numbered(20)
    out = run_map(samples, script, tmp, parallel=4)
    assert [s.key for s in out] == [s.key for s in samples]
    unordered = run_map(samples, script, tmp, parallel=4, ordered=False)
    assert sorted(s.key for s in unordered) == [s.key for s in samples]
    assert [s.key for s in unordered] != [s.key for s in samples]


def test_memory_stays_bounded_samples_are_read_only_a_few_ahead(tmp: Path) -> None:
    read = []

    def source():
        for sample in numbered(40):
            read.append(sample.key)
            yield sample

    ahead = []
    for count, _ in enumerate(map_command(source(), Command("true"), parallel=3, tmpdir=str(tmp))):
        ahead.append(len(read) - count)
    assert max(ahead) <= 3 * 2 + 1


def wait_for_file(path: Path) -> str:
    """Shell: wait (at most 10 s) until ``path`` is there."""
    return f"for i in $(seq 1000); do [ -s {path} ] && break; sleep 0.01; done"


def fail_behind_a_slow_sample(tmp_path: Path) -> tuple[str, Path]:
    """A script where s01 would run 30 s and s02 fails once s01 runs and s00 is finished
    (reaped: gone from /proc); and the file that gets s01's process id."""
    first, slow = tmp_path / "s00.pid", tmp_path / "s01.pid"
    script = f"""case $TARKIT_KEY in
      s00) echo $$ > {first};;
      s01) echo $$ > {slow}; sleep 30;;
      s02) {wait_for_file(first)}; {wait_for_file(slow)}
           while [ -e /proc/$(cat {first}) ]; do sleep 0.01; done; exit 3;;
    esac"""
    return script, slow


# Ordered, s03… may finish too but come after the gap s01 leaves; unordered, three
# samples, so that what had finished is s00 alone.
@pytest.mark.parametrize("ordered, count", [(True, 8), (False, 3)])
def test_fail_kills_commands_of_earlier_samples_and_yields_only_what_had_finished(
    tmp: Path, tmp_path: Path, ordered: bool, count: int
) -> None:
    script, slow = fail_behind_a_slow_sample(tmp_path)
    out = []
    started = time.monotonic()
    with pytest.raises(CommandFailed) as failure:
        for sample in map_command(numbered(count), Command(script, quiet=True), parallel=3,
                                  ordered=ordered, tmpdir=str(tmp)):  # fmt: skip
            out.append(sample.key)
    assert time.monotonic() - started < 10  # not waiting for s01's sleep 30
    assert out == ["s00"]
    assert failure.value.rejection.key == "s02"
    assert_gone(int(slow.read_text()))


def test_timeout_kills_the_command_and_everything_it_started(tmp: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 60 & echo $! >> {pids}; sleep 60"
    rejected: list[Rejection] = []
    started = time.monotonic()
    out = run_map(numbered(2), script, tmp, timeout=0.3, on_error="skip",
                  on_reject=rejected.append, parallel=2)  # fmt: skip
    assert time.monotonic() - started < 10
    assert out == []
    assert [(r.status, r.reason) for r in rejected] == [
        ("timeout", "ran longer than 0.3 s (--timeout) and was killed")
    ] * 2
    for pid in pids.read_text().split():
        assert_gone(int(pid))


def test_background_processes_of_a_successful_command_are_killed(tmp: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    out = run_map(numbered(1), f"sleep 60 & echo $! > {pids}", tmp)
    assert len(out) == 1
    assert_gone(int(pids.read_text()))


def test_what_a_command_left_in_a_session_of_its_own_is_killed_when_it_ends(tmp: Path) -> None:
    # A double fork: the process is an orphan (adopted) while the command still runs.
    pid_file = tmp / ".." / "pid"
    outcome = run_sample(
        Command(f"(setsid sleep 30 & echo $! > {pid_file}); sleep 0.1"), 0, "k", [], str(tmp)
    )
    assert_all_gone([int(pid_file.read_text())])
    assert outcome.rejection is None


def test_a_workspace_is_not_reused_while_something_its_command_left_may_live(
    tmp: Path, tmp_path: Path
) -> None:
    # s00 leaves a process that no mark finds (env -i clears its environment): it is not
    # killed, but s01 runs in a new directory, out of its reach. s00 ends once that
    # process is sleep (its environment read while env execs may be empty for a moment).
    pid_file = tmp_path / "pid"
    script = (
        f'[ "$TARKIT_KEY" = s00 ] && {{ env -i setsid sleep 30 & echo $! > {pid_file}; '
        'n=0; until [ "$(cat /proc/$!/comm)" = sleep ] || [ $n = 1000 ]; do '
        "sleep 0.01; n=$((n + 1)); done; }; "
        "pwd > sample.dir"
    )
    try:
        out = run_map(numbered(3), script, tmp)
        left = int(pid_file.read_text())
        assert start_time(left) is not None, "the process no mark finds was killed"
    finally:
        with contextlib.suppress(ProcessLookupError, FileNotFoundError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    directories = [sample.data()["dir"] for sample in out]
    assert directories[0] != directories[1]


def test_a_key_too_long_for_the_environment_fails_its_sample_unrun(tmp: Path) -> None:
    outcome = run_sample(Command("touch ran"), 0, "k" * 200_000, [], str(tmp))
    assert outcome.rejection is not None and outcome.rejection.status == "bad key"
    assert outcome.rejection.describe().startswith(
        "the key is too long for the command's environment (TARKIT_KEY holds at most "
    )
    assert not list(tmp.iterdir())


def test_closing_the_generator_early_kills_commands_and_removes_directories(
    tmp: Path, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    script = f'[ "$TARKIT_KEY" = s00 ] || {{ echo $$ >> {pids}; sleep 60; }}'
    outputs = map_command(numbered(10), Command(script), parallel=3, tmpdir=str(tmp))
    assert next(outputs).key == "s00"
    deadline = time.monotonic() + 10
    while (not pids.exists() or len(pids.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.02)
    outputs.close()  # type: ignore[attr-defined]
    for pid in pids.read_text().split():
        assert_gone(int(pid))


def test_command_output_goes_to_stderr_as_one_block_per_sample_and_quiet_drops_it(
    tmp: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run_map(numbered(2), 'echo "out $TARKIT_KEY"; echo "err $TARKIT_KEY" >&2', tmp, parallel=2)
    captured = capfd.readouterr()
    assert captured.out == ""
    # Each command's output comes as one block when it ends: s01 may finish first.
    first, second = "out s00\nerr s00\n", "out s01\nerr s01\n"
    assert captured.err in (first + second, second + first)
    run_map(numbered(2), 'echo "out $TARKIT_KEY"; echo "err" >&2', tmp, quiet=True)
    assert capfd.readouterr() == ("", "")


def test_run_sample_works_in_another_process_and_its_outcome_pickles(tmp: Path) -> None:
    command = Command('echo "$TARKIT_KEY" > sample.key; exit ${FAIL:-0}')
    with ProcessPoolExecutor(1) as pool:
        ok = pool.submit(run_sample, command, 7, "k7", [("txt", b"hi")], str(tmp)).result()
    assert ok.outputs == [("k7", [("key", b"k7\n"), ("txt", b"hi")])]
    assert ok.rejection is None
    failing = Command("echo nope >&2; exit 9", quiet=True)
    outcome = run_sample(failing, 8, "k8", [("txt", b"hi")], str(tmp))
    assert pickle.loads(pickle.dumps(outcome)).rejection == Rejection(
        "k8", "exit 9", "nope", ("nope",)
    )


def test_without_pidfds_commands_are_polled_and_still_time_out(
    tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pidfd(pid: int) -> int:
        raise OSError("pidfd_open is not available")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    rejected: list[Rejection] = []
    script = '[ "$TARKIT_KEY" = s01 ] && sleep 30; echo "$TARKIT_KEY" > sample.key'
    out = run_map(numbered(4), script, tmp, parallel=2, timeout=0.5, on_error="skip",
                  on_reject=rejected.append)  # fmt: skip
    assert [s.get("key") for s in out] == [b"s00\n", b"s02\n", b"s03\n"]
    assert [(r.key, r.status) for r in rejected] == [("s01", "timeout")]
