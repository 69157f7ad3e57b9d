"""The per-sample command contract: what the command sees, what it must leave, the policies."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from numbered_samples import as_dicts, numbered, run_map, samples_from, tmp_fixture  # noqa: F401

from tarkit.errors import CommandFailed, InputError, UsageError
from tarkit.format.tar_writer import TarWriter
from tarkit.processing.commands import Command, ProcReport, Rejection, unsafe_field_reason
from tarkit.processing.mappers import ShellCommand
from tarkit.processing.supervisor import map_command
from tarkit.stream.combining import combine_inputs


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


def test_with_rows_a_metadata_file_gives_the_samples_row_and_tarproc_ignores_it(tmp: Path) -> None:
    script = (
        'if [ "$TARKIT_KEY" = s01 ]; then echo NaN; else printf \'{"k": "%s"}\' "$TARKIT_KEY"; '
        "fi > tarkit.metadata.json"
    )
    assert as_dicts(run_map(numbered(3), script, tmp)) == as_dicts(numbered(3))

    rejected: list[Rejection] = []
    report = ProcReport()
    mapped = map_command(numbered(3), Command(script, rows=True), on_error="skip",
                         on_reject=rejected.append, report=report, tmpdir=str(tmp))  # fmt: skip
    assert [s.key for s in mapped] == ["s00", "s02"]
    assert report.rows == [{"k": "s00"}, {"k": "s02"}]
    assert [r.line() for r in rejected] == [
        "s01\tbad output\ta tarkit.metadata.json that does not hold a JSON object"
    ]


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


def test_subdirectories_and_locked_directories_a_command_leaves_are_cleared_for_the_next(
    tmp: Path,
) -> None:
    script = (
        'l=$(ls -A | tr "\\n" " "); echo -n "$l" > sample.ls; '
        "mkdir -p sub/deeper && touch sub/deeper/x .hidden && chmod 000 sub/deeper sub"
    )
    out = run_map(numbered(4, ("bin",)), script, tmp)
    assert [s.get("ls") for s in out] == [b"sample.bin "] * 4


def test_large_fields_go_in_and_come_out_whole(tmp: Path) -> None:
    big = bytes(range(256)) * 12_000  # 3 MB
    samples = samples_from([("a.bin", big)])
    out = run_map(samples, "cat sample.bin sample.bin > sample.twice.bin", tmp)
    assert out[0].get("bin") == big and out[0].get("twice.bin") == big + big


def test_bad_arguments_are_usage_errors() -> None:
    for command, options in [
        (Command(" "), {}),
        (Command("true", timeout=0), {}),
        (Command("true"), {"on_error": "retry"}),
        (Command("true"), {"parallel": 0}),
    ]:
        with pytest.raises(UsageError):
            map_command([], command, **options)  # type: ignore[arg-type]


def test_every_caller_refuses_a_bad_on_error_with_one_message() -> None:
    message = "--on-error must be one of fail, skip, keep (got 'retry')"
    with pytest.raises(UsageError) as from_map_command:
        map_command([], Command("true"), on_error="retry")
    with pytest.raises(UsageError) as from_shell_command:
        ShellCommand("true", on_error="retry")
    assert str(from_map_command.value) == str(from_shell_command.value) == message


def test_every_caller_refuses_a_parallel_count_below_one_with_one_message() -> None:
    message = "-p must be at least 1 (got 0)"
    with pytest.raises(UsageError) as from_map_command:
        map_command([], Command("true"), parallel=0)
    with pytest.raises(UsageError) as from_shell_command:
        ShellCommand("true", parallel=0)
    with pytest.raises(UsageError) as from_mixing:
        combine_inputs(["a.tar", "b.tar"], parallel=0)
    assert str(from_map_command.value) == str(from_shell_command.value) == message
    assert str(from_mixing.value) == message
