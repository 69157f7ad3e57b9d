"""procmap: a shell command on every sample, in private directories, in order, losing nothing."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from conftest import assert_gone, make_tar

from tarkit.errors import InputError, UsageError
from tarkit.format.samples import Sample, group_samples
from tarkit.format.tar import TarWriter, read_members
from tarkit.processing.commands import (
    Command,
    CommandFailed,
    ProcReport,
    Rejection,
    map_command,
    run_sample,
    sweep_ledgers,
    unsafe_field_reason,
)


def samples_from(members: list[tuple[str, bytes]]) -> list[Sample]:
    return list(group_samples(read_members(io.BytesIO(make_tar(members)), "in.tar"), "in.tar"))


def numbered(n: int, fields: tuple[str, ...] = ("txt", "cls")) -> list[Sample]:
    return samples_from(
        [(f"s{i:02d}.{f}", f"{f} {i}\n".encode()) for i in range(n) for f in fields]
    )


def as_dicts(samples: list[Sample]) -> list[tuple[str, dict[str, bytes]]]:
    return [(s.key, s.data()) for s in samples]


def run_map(samples: list[Sample], text: str, tmp: Path, **options: object) -> list[Sample]:
    command = Command(text, **{k: options.pop(k) for k in ("timeout", "multi", "quiet",
                                                           "keep_dirs") if k in options})  # fmt: skip
    return list(map_command(samples, command, tmpdir=str(tmp), **options))  # type: ignore[arg-type]


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    """The directory the samples' directories go under; every test checks it is left empty."""
    path = tmp_path / "tmp"
    path.mkdir()
    yield path
    assert not os.listdir(path), "a temporary directory was left behind"


def test_added_changed_and_deleted_fields_form_the_output_sample_in_sorted_order(tmp: Path) -> None:
    script = 'tr a-z A-Z < sample.txt > sample.up.txt; rm sample.cls; printf "%s" "$TARKIT_KEY" > sample.a.key'
    out = run_map(numbered(3), script, tmp)
    assert as_dicts(out) == [
        (f"s{i:02d}", {"a.key": f"s{i:02d}".encode(), "txt": f"txt {i}\n".encode(),
                       "up.txt": f"TXT {i}\n".encode()})
        for i in range(3)
    ]  # fmt: skip
    assert [s.fields for s in out][0] == ["a.key", "txt", "up.txt"]


def test_output_members_have_the_deterministic_headers_of_tarwriter_add(tmp: Path) -> None:
    out = run_map(numbered(2), "true", tmp)
    expected = io.BytesIO()
    writer = TarWriter(expected)
    for i in range(2):
        writer.add(f"s{i:02d}.cls", f"cls {i}\n".encode())
        writer.add(f"s{i:02d}.txt", f"txt {i}\n".encode())
    assert b"".join(s.raw for s in out) == expected.getvalue()


def test_command_runs_with_stdin_from_dev_null_in_an_empty_private_directory(tmp: Path) -> None:
    script = 'l=$(ls -A | tr "\\n" " "); cat > sample.stdin; echo -n "$l" > sample.ls; stat -c %a . > sample.mode'
    out = run_map(numbered(2, ("bin",)), script, tmp, parallel=2)
    for sample in out:
        assert sample.get("stdin") == b""
        assert sample.get("ls") == b"sample.bin "
        assert sample.get("mode") == b"700\n"


def test_commands_get_default_sigpipe_so_pipelines_end_quietly(
    tmp: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = run_map(numbered(1), "yes | head -n 2 > sample.yes", tmp)
    assert out[0].get("yes") == b"y\ny\n"
    assert "Broken pipe" not in capfd.readouterr().err


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


def test_multi_gives_one_sample_per_part_in_sorted_part_order(tmp: Path) -> None:
    script = "for p in 10 02 01; do echo $p > sample-$p.txt; cp sample.cls sample-$p.cls; done"
    out = run_map(numbered(2), script, tmp, multi=True)
    assert [s.key for s in out] == ["s00/01", "s00/02", "s00/10", "s01/01", "s01/02", "s01/10"]
    assert out[2].data() == {"cls": b"cls 0\n", "txt": b"10\n"}


def test_deleting_every_field_drops_the_sample(tmp: Path) -> None:
    out = run_map(numbered(5), '[ "$TARKIT_KEY" = s03 ] || rm sample.*', tmp, parallel=2)
    assert [s.key for s in out] == ["s03"]


def test_multi_with_no_parts_gives_no_sample(tmp: Path) -> None:
    assert run_map(numbered(3), "true", tmp, multi=True) == []


def test_fail_raises_naming_the_sample_after_exactly_the_samples_before_it(tmp: Path) -> None:
    script = 'case $TARKIT_KEY in s05) echo first >&2; echo "no such thing" >&2; exit 3;; esac'
    out = []
    with pytest.raises(CommandFailed) as failure:
        for sample in map_command(numbered(20), Command(script, quiet=True), tmpdir=str(tmp)):
            out.append(sample.key)
    assert out == [f"s{i:02d}" for i in range(5)]
    assert str(failure.value) == (
        "in.tar: sample 's05': command exited with status 3: first | no such thing"
    )
    assert failure.value.rejection.status == "exit 3"


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


def test_skip_leaves_failed_samples_out_and_reports_each_in_order(tmp: Path) -> None:
    rejected: list[Rejection] = []
    report = ProcReport()
    script = 'case $TARKIT_KEY in s03|s07) echo "bad $TARKIT_KEY" >&2; exit 1;; esac'
    out = list(map_command(numbered(10), Command(script, quiet=True), parallel=3,
                           on_error="skip", on_reject=rejected.append, report=report,
                           tmpdir=str(tmp)))  # fmt: skip
    assert [s.key for s in out] == [f"s{i:02d}" for i in range(10) if i not in (3, 7)]
    assert [r.line() for r in rejected] == ["s03\texit 1\tbad s03", "s07\texit 1\tbad s07"]
    assert (report.samples_in, report.samples_out, report.rejected) == (10, 8, 2)


def test_keep_passes_failed_samples_through_byte_for_byte(tmp: Path) -> None:
    samples = numbered(6)
    rejected: list[Rejection] = []
    script = "echo changed > sample.txt; case $TARKIT_KEY in s01|s04) kill -KILL $$;; esac"
    out = list(map_command(samples, Command(script), parallel=2, on_error="keep",
                           on_reject=rejected.append, tmpdir=str(tmp)))  # fmt: skip
    assert [s.key for s in out] == [s.key for s in samples]
    assert out[1].raw == samples[1].raw and out[4].raw == samples[4].raw
    assert out[0].get("txt") == b"changed\n"
    assert [(r.key, r.status) for r in rejected] == [
        ("s01", "signal SIGKILL"),
        ("s04", "signal SIGKILL"),
    ]


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


@pytest.mark.parametrize(
    "script, problem",
    [
        ("ln -s /etc/passwd sample.pw", "an output 'sample.pw' that is not a regular file"),
        ("mkdir sample.d", "an output 'sample.d' that is not a regular file"),
        ("echo > sample.", "an output file 'sample.' without a field name"),
        ("echo > sample.TXT", "output fields that differ only in case (TXT, cls, txt)"),
    ],
)
def test_an_output_that_is_not_a_plain_file_fails_the_sample(
    tmp: Path, script: str, problem: str
) -> None:
    with pytest.raises(CommandFailed) as failure:
        run_map(numbered(1), script, tmp)
    assert failure.value.rejection.status == "bad output"
    assert failure.value.rejection.reason == problem


@pytest.mark.parametrize(
    "name, why",
    [
        ("a.x\nrm", "contains a control character"),
        ("a..hidden", "starts with '.'"),
        ("a.-rf", "starts with '-'"),
        ("a." + "x" * 250, "is too long for a file name"),
    ],
)
def test_unsafe_field_names_are_refused_with_the_key_before_any_command_runs(
    tmp: Path, tmp_path: Path, name: str, why: str
) -> None:
    marker = tmp_path / "ran"
    samples = samples_from([("a.ok", b"1"), (name, b"2")])
    with pytest.raises(InputError) as error:
        run_map(samples, f"touch {marker}", tmp)
    assert f"sample 'a': field name {name.split('.', 1)[1]!r} {why}" in str(error.value)
    assert "in.tar" in str(error.value)
    assert not marker.exists()


def test_unsafe_field_reason_accepts_ordinary_fields() -> None:
    for name in ("jpg", "seg.png", "JSON", "a b", "ünïcode", "x-y_z"):
        assert unsafe_field_reason(name) is None, name


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


def test_keep_dirs_keeps_each_samples_directory_and_logs(tmp_path: Path) -> None:
    report = ProcReport()
    command = Command("echo made > sample.new; echo note >&2", keep_dirs=True, quiet=True)
    out = list(map_command(numbered(2), command, report=report, tmpdir=str(tmp_path)))
    assert len(out) == 2 and report.root is not None
    kept = sorted(os.listdir(report.root))
    assert kept == ["000000", "000000.stderr", "000000.stdout", "000001", "000001.stderr",
                    "000001.stdout"]  # fmt: skip
    assert sorted(os.listdir(Path(report.root) / "000001")) == [
        "sample.cls", "sample.new", "sample.txt"
    ]  # fmt: skip
    assert (Path(report.root) / "000001.stderr").read_text() == "note\n"


def test_command_output_goes_to_stderr_as_one_block_per_sample_and_quiet_drops_it(
    tmp: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run_map(numbered(2), 'echo "out $TARKIT_KEY"; echo "err $TARKIT_KEY" >&2', tmp, parallel=2)
    captured = capfd.readouterr()
    assert captured.out == ""
    assert captured.err == "out s00\nerr s00\nout s01\nerr s01\n"
    run_map(numbered(2), 'echo "out $TARKIT_KEY"; echo "err" >&2', tmp, quiet=True)
    assert capfd.readouterr() == ("", "")


def test_bad_arguments_are_usage_errors() -> None:
    for command, options in [
        (Command(" "), {}),
        (Command("true", timeout=0), {}),
        (Command("true"), {"on_error": "retry"}),
        (Command("true"), {"parallel": 0}),
    ]:
        with pytest.raises(UsageError):
            map_command([], command, **options)  # type: ignore[arg-type]


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


def test_subdirectories_and_locked_directories_a_command_leaves_are_cleared_for_the_next(
    tmp: Path,
) -> None:
    script = (
        'l=$(ls -A | tr "\\n" " "); echo -n "$l" > sample.ls; '
        "mkdir -p sub/deeper && touch sub/deeper/x .hidden && chmod 000 sub/deeper sub"
    )
    out = run_map(numbered(4, ("bin",)), script, tmp)
    assert [s.get("ls") for s in out] == [b"sample.bin "] * 4


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


def test_large_fields_go_in_and_come_out_whole(tmp: Path) -> None:
    big = bytes(range(256)) * 12_000  # 3 MB
    samples = samples_from([("a.bin", big)])
    out = run_map(samples, "cat sample.bin sample.bin > sample.twice.bin", tmp)
    assert out[0].get("bin") == big and out[0].get("twice.bin") == big + big


LEDGER_CHILD = """
import sys
from tarkit.stream.stages import read_samples
from tarkit.processing.commands import Command, map_command, record_commands
record_commands(sys.argv[1])
list(map_command(read_samples([sys.argv[2]]), Command(sys.argv[3])))
"""


def test_sweeping_ledgers_spares_live_processes_and_clears_what_dead_ones_left(
    tmp_path: Path,
) -> None:
    base, pid_file, source = tmp_path / "ledgers", tmp_path / "pid", tmp_path / "in.tar"
    source.write_bytes(make_tar([("a.txt", b"x")]))
    command = f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; sleep 30"
    child = subprocess.Popen([sys.executable, "-c", LEDGER_CHILD, str(base), str(source), command])
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        command_pid = int(pid_file.read_text())
        (ledger,) = base.iterdir()
        assert ledger.name.split("-")[1] == str(child.pid)
        assert sorted(p.name for p in ledger.iterdir() if not p.name.startswith("tarproc-")) == [
            str(command_pid)
        ]
        assert sweep_ledgers(str(base)) == 0  # its process lives
        assert Path(f"/proc/{command_pid}").exists() and ledger.exists()
    finally:
        child.kill()
        child.wait(timeout=10)
    assert Path(f"/proc/{command_pid}").exists()  # the command outlives its killed parent
    assert sweep_ledgers(str(base)) == 1
    assert_gone(command_pid)
    assert not base.exists()
