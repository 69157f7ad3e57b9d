"""Every command that reads tar, and the loader, against every case of the hostile corpus.

Each command runs as a console script through real pipes; what it writes is read back
(by tarkit's reader and GNU ``tar -t``) and must be exactly the case's samples, whole:
on success with the end-of-archive marker, on failure without it. Its stderr holds no
traceback and at most one ``error:`` line, whose message the case names. The commands
are rows of :data:`COMMANDS`; the loader, :class:`~tarkit.dataset.ShardDataset`, runs in
this process under ``handler="raise"`` and ``handler="skip"``.
"""

from __future__ import annotations

import io
import re
import tempfile
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from corpus import Case, Expected, cases
from outputs import archive_samples, as_expected, check_stderr, shell, to_sample

from tarkit.errors import InputError, SourceError
from tarkit.samples import Sample, group_samples
from tarkit.tario import read_members

CASES = cases()
# Cases whose expected behaviour tarkit does not have yet: reported to the lead, with
# the failing case and what is expected. strict=True: the mark goes once it is fixed.
KNOWN_BUGS = {
    "pax-path-with-nul": "tario keeps a NUL inside a pax path (GNU tar and bsdtar cut the "
    "name there, tarfile keeps it): expected HeaderError 'pax path contains a NUL byte'",
    "interleaved-keys": "group_samples yields the sample before a key that comes back, "
    "which may be partial (0003 without its cls here)",
}


def case_params(selected: Sequence[Case] = CASES) -> list[object]:
    return [
        pytest.param(case, id=case.name, marks=pytest.mark.xfail(reason=KNOWN_BUGS[case.name],
                                                                 strict=True))
        if case.name in KNOWN_BUGS else pytest.param(case, id=case.name)
        for case in selected
    ]  # fmt: skip


# --- the commands ---------------------------------------------------------------------


@dataclass
class Outcome:
    status: int
    stderr: str
    samples: list[Expected]


def run_tarcat(directory: Path, case: Case) -> Outcome:
    """``tarcat case.tar | tee out.tar | tar -t``: the output lists in GNU tar too."""
    args = " ".join(case.args)
    statuses = shell(directory, f"tarcat {args} case.tar 2>err | tee out.tar | tar -tf - "
                                ">listing 2>/dev/null")  # fmt: skip
    out = (directory / "out.tar").read_bytes()
    got = archive_samples(out, complete=statuses[0] == 0)
    listing = (directory / "listing").read_text(errors="replace").splitlines()
    assert len(listing) == sum(len(fields) for _, fields in got)
    if statuses[0] == 0:
        assert statuses[2] == 0
    check_stderr(
        (directory / "err").read_text(),
        "tarcat",
        "case.tar",
        case.status,
        case.error,
        case.warnings,
    )
    return Outcome(statuses[0], "", got)


def run_tarsplit(directory: Path, case: Case) -> Outcome:
    """``cat case.tar | tarsplit -c 1``: one sample per shard, every shard whole."""
    args = " ".join(case.args)
    statuses = shell(directory, f"cat case.tar | tarsplit -c 1 -o 'out/s-%06d.tar' {args} 2>err")
    check_stderr(
        (directory / "err").read_text(),
        "tarsplit",
        "<stdin>",
        case.status,
        case.error,
        case.warnings,
    )
    out = directory / "out"
    names = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert names == [f"s-{i:06d}.tar" for i in range(len(names))], names  # no temp files
    got = [s for name in names for s in archive_samples((out / name).read_bytes(), True)]
    return Outcome(statuses[1], "", got)


def run_tar2tsv(directory: Path, case: Case) -> Outcome:
    """``cat case.tar | tar2tsv``: one whole line per sample that came out."""
    from tarkit.tsv import tsv_lines

    args = " ".join(case.args)
    statuses = shell(directory, f"cat case.tar | tar2tsv {args} 2>err >out.tsv")
    check_stderr(
        (directory / "err").read_text(),
        "tar2tsv",
        "<stdin>",
        case.status,
        case.error,
        case.warnings,
    )
    out = (directory / "out.tsv").read_bytes()
    expected = list(case.samples)
    # Lines are compared whole, so the samples are those of the case exactly when the
    # text is that of the case's samples; anything else is reported as not matching.
    want = "".join(tsv_lines(map(to_sample, expected))).encode("utf-8", "surrogateescape")
    if statuses[1] == 2 and not expected:
        want = b""
    return Outcome(statuses[1], "", expected if out == want else [("<output>", (("tsv", out),))])


def run_tarshow(directory: Path, case: Case) -> Outcome:
    """``tarshow case.tar``: the key and field lines of exactly the case's samples."""
    from tarkit.show import describe

    args = " ".join(case.args)
    statuses = shell(directory, f"tarshow {args} case.tar 2>err >out.txt")
    check_stderr(
        (directory / "err").read_text(),
        "tarshow",
        "case.tar",
        case.status,
        case.error,
        case.warnings,
    )
    out = (directory / "out.txt").read_bytes()
    expected = list(case.samples)
    want = "".join("\n".join(describe(to_sample(s))) + "\n" for s in expected)
    matches = out == want.encode("utf-8", "surrogateescape")
    return Outcome(statuses[0], "", expected if matches else [("<output>", (("txt", out),))])


# Every command that reads tar: (console script, how to run it and read what it wrote).
COMMANDS: dict[str, Callable[[Path, Case], Outcome]] = {
    "tarcat": run_tarcat,
    "tarsplit": run_tarsplit,
    "tar2tsv": run_tar2tsv,
    "tarshow": run_tarshow,
}


def check_outcome(command: str, outcome: Outcome, case: Case) -> None:
    assert outcome.status == case.status, (command, outcome.status)
    expected = list(case.samples)
    if command == "tarsplit" and case.status == 2:
        # The shard holding the last sample read is still open at the error, so it may
        # be removed with it; every shard that stays is whole.
        assert outcome.samples == expected[: len(outcome.samples)]
        assert len(outcome.samples) >= len(expected) - 1
    else:
        assert outcome.samples == expected


# Commands run a few at a time in threads (each one a subprocess pipeline), the next
# case's while this one's are checked: starting Python dominates the cost of each run.
_POOL = ThreadPoolExecutor(max_workers=3)
_RUNS: dict[tuple[str, str], Future[Outcome]] = {}
_AHEAD = 2  # cases whose commands are started at once


def outcome_of(command: str, case: Case, root: Path) -> Outcome:
    """Run ``command`` on ``case`` (started early with the next cases' commands)."""
    index = CASES.index(case)
    for ahead in CASES[index : index + _AHEAD]:
        for name, runner in COMMANDS.items():
            if (name, ahead.name) not in _RUNS:
                directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
                (directory / "case.tar").write_bytes(ahead.data)
                _RUNS[name, ahead.name] = _POOL.submit(runner, directory, ahead)
    return _RUNS.pop((command, case.name)).result()


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", case_params())
def test_command_gives_exactly_the_cases_samples_and_status(
    runs_root: Path, command: str, case: Case
) -> None:
    check_outcome(command, outcome_of(command, case, runs_root), case)


# --- the library reader and the loader -------------------------------------------------


@pytest.mark.parametrize("case", case_params())
def test_library_reader_gives_exactly_the_cases_samples(case: Case) -> None:
    from tarkit.compression import open_decompressed
    from tarkit.samples import SkipLog

    skips = SkipLog()
    stream = open_decompressed(io.BytesIO(case.data), "case.tar")  # type: ignore[arg-type]
    members = read_members(stream, "case.tar", ignore_zeros="--ignore-zeros" in case.args)
    got: list[Sample] = []
    try:
        got.extend(group_samples(members, "case.tar", skips=skips))
    except InputError as exc:
        assert case.status == 2 and case.error is not None
        assert re.fullmatch(case.error, str(exc).removeprefix("case.tar: ")), str(exc)
    else:
        assert case.status == 0
    assert as_expected(got) == list(case.samples)
    assert skips.total == case.warnings


LOADER_CASES = [c for c in CASES if not c.args]  # the loader has no --ignore-zeros


def loader_view(samples: Sequence[Expected]) -> list[tuple[str, dict[str, bytes]]]:
    """Samples as the loader gives them: fields lowercased, as webdataset does."""
    return [(key, {f.lower(): d for f, d in fields}) for key, fields in samples]


def loader_samples(items: list[dict[str, object]]) -> list[tuple[str, dict[str, bytes]]]:
    return [
        (str(item["__key__"]), {k: v for k, v in item.items() if not k.startswith("__")})  # type: ignore[misc]
        for item in items
    ]


@pytest.mark.parametrize("case", case_params(LOADER_CASES))
def test_loader_raises_after_exactly_the_cases_samples(tmp_path: Path, case: Case) -> None:
    from tarkit.dataset import ShardDataset

    path = tmp_path / "case.tar"
    path.write_bytes(case.data)
    got: list[dict[str, object]] = []
    if case.status == 2:
        with pytest.raises((InputError, SourceError)) as info:
            got.extend(ShardDataset(str(path), handler="raise"))
        what = str(info.value).removeprefix(f"{path}: ")
        assert case.error is not None and re.fullmatch(case.error, what), str(info.value)
    else:
        got.extend(ShardDataset(str(path), handler="raise"))
    assert loader_samples(got) == loader_view(case.samples)


@pytest.mark.parametrize("case", case_params(LOADER_CASES))
def test_loader_skip_gives_the_same_samples_and_counts_the_bad_shard(
    tmp_path: Path, case: Case
) -> None:
    from tarkit.dataset import ShardDataset

    path = tmp_path / "case.tar"
    path.write_bytes(case.data)
    dataset = ShardDataset(str(path), handler="skip")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = list(dataset)
    assert loader_samples(got) == loader_view(case.samples)
    skipped = dataset.skipped
    if case.status == 2:
        assert skipped.total_shards == 1, skipped
        assert len([w for w in caught if "skipping bad input" in str(w.message)]) == 1
    else:
        assert not skipped, skipped
        assert [w for w in caught if "tarkit" in str(w.message)] == []


def test_corpus_covers_every_group_with_40_cases_or_more() -> None:
    groups = {c.group for c in CASES}
    assert len(CASES) >= 40
    assert groups == {
        "truncation", "checksum", "numeric", "extension", "format", "type", "name",
        "sample", "concatenation", "compression",
    }  # fmt: skip
    assert {c.status for c in CASES} == {0, 2}


def test_sparse_cases_hold_what_gnu_tar_writes_for_sparse_files(tmp_path: Path) -> None:
    import tarfile

    from corpus import by_name

    for name in ["gnu-sparse-member", "pax-sparse-member"]:
        with tarfile.open(fileobj=io.BytesIO(by_name(name).data)) as archive:
            sparse = [m.name for m in archive.getmembers() if m.issparse()]
        assert sparse == ["0002.bin"], name
