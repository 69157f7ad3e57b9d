"""Every command that reads tar, and the loader, against every case of the hostile corpus.

Each command runs as a console script through real pipes; what it writes is read back
(by tarkit's reader and GNU ``tar -t``) and must be exactly the case's samples, whole:
on success with the end-of-archive marker, on failure without it. Its stderr holds no
traceback and at most one ``error:`` line, whose message the case names. The commands
are rows of :data:`COMMANDS`; the loader, :class:`~tarkit.loading.dataset.ShardDataset`, runs in
this process under ``handler="raise"`` and ``handler="skip"``.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tempfile
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import reader_env
from corpus import ALL, Case, Expected, cases, samples
from outputs import archive_samples, as_expected, check_stderr, shell, shell_env, to_sample

from tarkit.cli.runner import one_line
from tarkit.errors import InputError, SourceError
from tarkit.format.samples import Sample, group_samples
from tarkit.format.tar import read_members

# Every test here runs with the compiled scanner and with the pure-Python reader.
pytestmark = pytest.mark.usefixtures("reader")

CASES = cases()
# Cases whose expected behaviour tarkit does not have yet, reported to the lead with the
# failing case and what is expected; with the readers they do not affect (a command that
# stops before the bad part, or whose own semantics make the case fine). strict=True:
# the mark must go once the bug is fixed.
KNOWN_BUGS: dict[str, tuple[str, set[str]]] = {}
# Known bugs of one command on some cases: (command, case) -> what is expected.
COMMAND_BUGS: dict[tuple[str, str], str] = {}


def param(case: Case, reader: str, *values: object) -> object:
    """A test parameter for ``case`` read by ``reader``, marked if a known bug hits it."""
    bug = KNOWN_BUGS.get(case.name)
    reason = bug[0] if bug and reader not in bug[1] else COMMAND_BUGS.get((reader, case.name))
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(*values, case, id=case.name if not values else f"{case.name}-{reader}",
                        marks=marks)  # fmt: skip


# --- the commands ---------------------------------------------------------------------


@dataclass(frozen=True)
class Want:
    """What one command must do with a case: status, output (as read back), stderr."""

    status: int
    output: object
    error: str | None
    warnings: int = 0


@dataclass
class Outcome:
    status: int
    output: object


def as_case_says(case: Case) -> Want:
    return Want(case.status, list(case.samples), case.error, case.warnings)


def check_err(directory: Path, tool: str, source: str | None, want: Want) -> None:
    stderr = (directory / "err").read_text(errors="replace")
    check_stderr(stderr, tool, source, want.status, want.error, want.warnings)


def run_tarcat(directory: Path, case: Case, want: Want) -> Outcome:
    """``tarcat case.tar | tee out.tar | tar -t``: the output lists in GNU tar too."""
    args = " ".join(case.args)
    statuses = shell(directory, f"tarcat {args} case.tar 2>err | tee out.tar | tar -tf - "
                                ">listing 2>/dev/null")  # fmt: skip
    check_err(directory, "tarcat", "case.tar", want)
    got = archive_samples((directory / "out.tar").read_bytes(), complete=statuses[0] == 0)
    listing = (directory / "listing").read_text(errors="replace").splitlines()
    assert len(listing) == sum(len(fields) for _, fields in got)
    if statuses[0] == 0:
        assert statuses[2] == 0
    return Outcome(statuses[0], got)


def run_tarsplit(directory: Path, case: Case, want: Want) -> Outcome:
    """``cat case.tar | tarsplit -c 1``: one sample per shard, every shard whole."""
    args = " ".join(case.args)
    statuses = shell(directory, f"cat case.tar | tarsplit -c 1 -o 'out/s-%06d.tar' {args} 2>err")
    check_err(directory, "tarsplit", "<stdin>", want)
    out = directory / "out"
    names = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert names == [f"s-{i:06d}.tar" for i in range(len(names))], names  # no temp files
    got = [s for name in names for s in archive_samples((out / name).read_bytes(), True)]
    expected = want.output
    assert isinstance(expected, list)
    if statuses[1] == 2 and got == expected[:-1]:
        # The shard of the last sample read was still open at the error: it is removed
        # with it. Every shard that stays is whole.
        got = expected
    return Outcome(statuses[1], got)


def run_tar2tsv(directory: Path, case: Case, want: Want) -> Outcome:
    """``cat case.tar | tar2tsv``: one whole line per sample that came out."""
    from tarkit.stream.tsv import tsv_lines

    args = " ".join(case.args)
    statuses = shell(directory, f"cat case.tar | tar2tsv {args} 2>err >out.tsv")
    check_err(directory, "tar2tsv", "<stdin>", want)
    out = (directory / "out.tsv").read_bytes()
    # The lines of exactly the wanted samples, whole: then the output is those samples.
    expected = want.output
    assert isinstance(expected, list)
    lines = "".join(tsv_lines(map(to_sample, expected))) if expected or statuses[1] == 0 else ""
    return Outcome(
        statuses[1], expected if out == lines.encode("utf-8", "surrogateescape") else out
    )


def run_tarshow(directory: Path, case: Case, want: Want) -> Outcome:
    """``tarshow case.tar``: the key and field lines of exactly the case's samples."""
    from tarkit.stream.show import describe

    args = " ".join(case.args)
    statuses = shell(directory, f"tarshow {args} case.tar 2>err >out.txt")
    check_err(directory, "tarshow", "case.tar", want)
    out = (directory / "out.txt").read_bytes()
    expected = want.output
    assert isinstance(expected, list)
    lines = "".join("\n".join(describe(to_sample(s))) + "\n" for s in expected)
    return Outcome(
        statuses[0], expected if out == lines.encode("utf-8", "surrogateescape") else out
    )


def run_tarsort(directory: Path, case: Case, want: Want) -> Outcome:
    """``cat case.tar | tarsort | tee out.tar | tar -t``: sorted whole samples."""
    args = " ".join(case.args)
    statuses = shell(directory, f"cat case.tar | tarsort {args} 2>err | tee out.tar | "
                                "tar -tf - >/dev/null 2>&1")  # fmt: skip
    check_err(directory, "tarsort", "<stdin>", want)
    got = archive_samples((directory / "out.tar").read_bytes(), complete=statuses[1] == 0)
    if statuses[1] == 0:
        assert statuses[3] == 0
    return Outcome(statuses[1], got)


def by_key_bytes(samples: Sequence[Expected]) -> list[Expected]:
    return sorted(samples, key=lambda s: s[0].encode("utf-8", "surrogateescape"))


# Sample errors that tarsort does not share or reports at another point: it gathers a
# key's members wherever they are, and writes in key order up to the failing key.
TARSORT_WANTS = {
    "interleaved-keys": (0, list(ALL)),
    "duplicate-field": (2, list(samples(0, 1, 2))),
    "case-only-duplicate-fields": (2, list(ALL)),
}


def tarsort_wants(case: Case) -> Want:
    """Sorted by key bytes; on a reader error nothing, since sorting reads everything first."""
    if case.name in TARSORT_WANTS:
        status, output = TARSORT_WANTS[case.name]
        return Want(status, output, case.error, case.warnings)
    return Want(case.status, by_key_bytes(case.samples) if case.status == 0 else [],
                case.error, case.warnings)  # fmt: skip


def run_tarfirst(directory: Path, case: Case, want: Want) -> Outcome:
    """``tarfirst case.tar > out``: the first sample's first field, reading no further."""
    args = " ".join(case.args)
    statuses = shell(directory, f"tarfirst {args} case.tar 2>err >out")
    check_err(directory, "tarfirst", "case.tar", want)  # nothing found names the input too
    return Outcome(statuses[0], (directory / "out").read_bytes())


NO_SAMPLES = "the input has no samples"


def tarfirst_wants(case: Case) -> Want:
    """The first field of the first sample; it is known whole before any later error."""
    if case.samples:
        return Want(0, case.samples[0][1][0][1], None)
    if case.status == 0:
        return Want(2, b"", NO_SAMPLES, case.warnings)
    return Want(2, b"", case.error, case.warnings)


def run_tarindex(directory: Path, case: Case, want: Want) -> Outcome:
    """``tarindex --offsets case.tar -o m.json``: the manifest only when the shard is whole."""
    statuses = shell(directory, "tarindex --offsets case.tar -o m.json 2>err")
    check_err(directory, "tarindex", "case.tar", want)
    manifest = directory / "m.json"
    if not manifest.exists():
        return Outcome(statuses[0], None)
    (shard,) = json.loads(manifest.read_text())["shards"]
    return Outcome(statuses[0], (shard["samples"], shard["keys"], shard["bytes"], shard["sha256"]))


def tarindex_wants(case: Case) -> Want:
    """Counts, keys, size and hash of a whole shard; no manifest at all for a bad one."""
    if case.status == 2:
        return Want(2, None, case.error, case.warnings)
    keys = [key for key, _ in case.samples]
    digest = hashlib.sha256(case.data).hexdigest()
    return Want(0, (len(keys), keys, len(case.data), digest), None, case.warnings)


def run_tarproc(directory: Path, case: Case, want: Want) -> Outcome:
    """``cat case.tar | tarproc -c true | tee out.tar | tar -t``: samples remade whole."""
    args = " ".join(case.args)
    statuses = shell(directory, f"cat case.tar | tarproc -c true {args} 2>err | tee out.tar | "
                                "tar -tf - >/dev/null 2>&1")  # fmt: skip
    check_err(directory, "tarproc", "<stdin>", want)
    got = archive_samples((directory / "out.tar").read_bytes(), complete=statuses[1] == 0)
    if statuses[1] == 0:
        assert statuses[3] == 0
    return Outcome(statuses[1], got)


def tarproc_wants(case: Case) -> Want:
    """The same samples, remade from the files the command leaves: fields sorted.

    A field that would be an unsafe file name (empty, '/', a leading '-'…) is refused
    with the sample: tarproc never renames fields.
    """
    if case.name == "empty-field":
        error = r"sample 'x': field name '' is empty: unsafe as a file name, .* \(byte 6144, member x\.\)"
        return Want(2, list(samples(0, 1)), error)
    remade = [(key, tuple(sorted(fields))) for key, fields in case.samples]
    return Want(case.status, remade, case.error, case.warnings)


@dataclass(frozen=True)
class Command:
    """A row of the table: how to run a command on a case and what it must do."""

    run: Callable[[Path, Case, Want], Outcome]
    wants: Callable[[Case], Want] = as_case_says
    options: tuple[str, ...] = ("--ignore-zeros",)  # the case options it takes


# Every command that reads tar, by console script.
COMMANDS: dict[str, Command] = {
    "tarcat": Command(run_tarcat),
    "tarsplit": Command(run_tarsplit),
    "tar2tsv": Command(run_tar2tsv),
    "tarshow": Command(run_tarshow),
    "tarsort": Command(run_tarsort, tarsort_wants),
    "tarfirst": Command(run_tarfirst, tarfirst_wants),
    "tarindex": Command(run_tarindex, tarindex_wants, options=()),
    "tarproc": Command(run_tarproc, tarproc_wants),
}


def run_command(name: str, directory: Path, case: Case, reader: str) -> tuple[Want, Outcome]:
    command = COMMANDS[name]
    want = command.wants(case)
    shell_env.set(tuple(reader_env(reader).items()))  # this thread's runs use ``reader``
    return want, command.run(directory, case, want)


# Commands run a few at a time in threads (each one a subprocess pipeline): the runs of
# the next tests selected start while this one's are checked. Starting Python dominates
# the cost of each run.
_POOL = ThreadPoolExecutor(max_workers=3)
_AHEAD = 6  # runs in flight


@dataclass
class Runs:
    root: Path
    planned: list[tuple[str, Case, str]]  # (command, case, reader) selected, in test order
    started: dict[tuple[str, str, str], Future[tuple[Want, Outcome]]] = field(default_factory=dict)

    def outcome(self, command: str, case: Case, reader: str) -> tuple[Want, Outcome]:
        """Run ``command`` on ``case`` with ``reader``, starting the next planned runs too."""
        index = self.planned.index((command, case, reader))
        for name, ahead, how in self.planned[index : index + _AHEAD]:
            if (name, ahead.name, how) not in self.started:
                directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.root))
                (directory / "case.tar").write_bytes(ahead.data)
                future = _POOL.submit(run_command, name, directory, ahead, how)
                self.started[name, ahead.name, how] = future
        return self.started.pop((command, case.name, reader)).result()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    test = test_command_gives_exactly_the_wanted_output_status_and_stderr.__name__
    planned = [
        (
            item.callspec.params["command"],
            item.callspec.params["case"],  # type: ignore[attr-defined]
            item.callspec.params["reader"],
        )  # type: ignore[attr-defined]
        for item in request.session.items
        if getattr(item, "originalname", None) == test
    ]
    return Runs(tmp_path_factory.mktemp("runs"), planned)


def command_params() -> list[object]:
    return [
        param(case, name, name)
        for case in CASES
        for name, command in COMMANDS.items()
        if set(case.args) <= set(command.options)
    ]


@pytest.mark.parametrize("command, case", command_params())
def test_command_gives_exactly_the_wanted_output_status_and_stderr(
    runs: Runs, command: str, case: Case, reader: str
) -> None:
    want, outcome = runs.outcome(command, case, reader)
    assert (outcome.status, outcome.output) == (want.status, want.output)


# --- the library reader and the loader -------------------------------------------------


@pytest.mark.parametrize("case", [param(c, "library") for c in CASES])
def test_library_reader_gives_exactly_the_cases_samples(case: Case) -> None:
    from tarkit.format.compression import open_decompressed
    from tarkit.format.samples import SkipLog

    skips = SkipLog()
    stream = open_decompressed(io.BytesIO(case.data), "case.tar")  # type: ignore[arg-type]
    members = read_members(stream, "case.tar", ignore_zeros="--ignore-zeros" in case.args)
    got: list[Sample] = []
    try:
        got.extend(group_samples(members, "case.tar", skips=skips))
    except InputError as exc:
        assert case.status == 2 and case.error is not None
        what = one_line(str(exc)).removeprefix("case.tar: ")  # as the commands print it
        assert re.fullmatch(case.error, what), what
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


@pytest.mark.parametrize("case", [param(c, "loader") for c in LOADER_CASES])
def test_loader_raises_after_exactly_the_cases_samples(tmp_path: Path, case: Case) -> None:
    from tarkit.loading import ShardDataset

    path = tmp_path / "case.tar"
    path.write_bytes(case.data)
    got: list[dict[str, object]] = []
    if case.status == 2:
        with pytest.raises((InputError, SourceError)) as info:
            got.extend(ShardDataset(str(path), handler="raise"))
        what = one_line(str(info.value)).removeprefix(f"{path}: ")
        assert case.error is not None and re.fullmatch(case.error, what), str(info.value)
    else:
        got.extend(ShardDataset(str(path), handler="raise"))
    assert loader_samples(got) == loader_view(case.samples)


@pytest.mark.parametrize("case", [param(c, "loader") for c in LOADER_CASES])
def test_loader_skip_gives_the_same_samples_and_counts_the_bad_shard(
    tmp_path: Path, case: Case
) -> None:
    from tarkit.loading import ShardDataset

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
