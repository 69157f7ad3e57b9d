"""Seeded mutation fuzzing in CI: a short bounded run of fuzz/mutations.py, library and CLI.

The seed is recorded here, so every run checks the same cases; ``fuzz/run_mutations.py``
runs the same generator for as long as one likes (docs/robustness.md records the long
run). The oracle: a tarkit error, or an output that tarfile and tarkit read back as
exactly the members and samples written, the same on a second run; no other exception,
no run over the time limit. Through ``tarcat``: exit 0 and a clean archive that GNU tar
lists, or exit 2 with one error line, no traceback, and exactly the whole samples the
library read before the error, without an end-of-archive marker.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, tool
from outputs import archive_samples, as_expected, check_stderr

sys.path.insert(0, str(ROOT / "fuzz"))

import mutations  # noqa: E402

from tarkit.cli.runner import one_line  # noqa: E402
from tarkit.format import scanner  # noqa: E402

# Every test here runs with the compiled scanner and with the pure-Python reader.
pytestmark = pytest.mark.usefixtures("reader")

CI_SEED = 20240917
CI_CASES = 3000  # about a millisecond each
CLI_CASES = 40  # each a tarcat process


def test_short_seeded_run_has_no_crash_hang_or_misread() -> None:
    failures = [str(f) for _, f in mutations.run(CI_SEED, CI_CASES) if f is not None]
    assert failures == []


def test_the_run_reaches_past_the_checksum_and_succeeds_often_enough() -> None:
    """A fuzzer that only ever trips the checksum check would test nothing."""
    errors: dict[str, int] = {}
    clean = 0
    for index in range(1000):
        output, _, error = mutations.read_and_write(mutations.make_case(CI_SEED, index).data)
        if error is None:
            clean += 1
        else:
            what = error.split(": ", 1)[1].split(" (")[0]
            errors[what] = errors.get(what, 0) + 1
    assert clean > 150
    assert len(errors) > 15, errors  # many different checks were reached


def test_cases_are_the_same_bytes_for_the_same_seed_and_index() -> None:
    assert mutations.make_case(5, 17) == mutations.make_case(5, 17)
    assert mutations.make_case(5, 17).data != mutations.make_case(6, 17).data


def test_oracle_reports_crashes_hangs_and_misreads(monkeypatch: pytest.MonkeyPatch) -> None:
    data = mutations.SEEDS["ustar"]
    assert mutations.check(0, data) is None

    def crash(*args: object, **kw: object) -> None:
        raise ValueError("boom")

    def loop(*args: object, **kw: object) -> None:
        while True:
            pass

    def cut_output(data: bytes) -> tuple[bytes, list, None]:
        output, samples, _ = original(data)
        assert output is not None
        return output[:-2000] + bytes(1024), samples, None

    original = mutations.read_and_write
    with monkeypatch.context() as patch:
        patch.setattr(mutations, "read_members", crash)
        failure = mutations.check(1, data)
        assert failure is not None and failure.kind == "crash" and "boom" in failure.detail
    with monkeypatch.context() as patch:
        patch.setattr(mutations, "read_members", loop)
        failure = mutations.check(2, data, time_limit=0.2)
        assert failure is not None and failure.kind == "hang"
    with monkeypatch.context() as patch:
        patch.setattr(mutations, "read_and_write", cut_output)
        failure = mutations.check(3, data)
        assert failure is not None and failure.kind == "misread"
    if scanner.compiled is not None:
        with monkeypatch.context() as patch:
            patch.setattr(scanner, "compiled", LosesLastSample(scanner.compiled))
            failure = mutations.check(4, data)
            assert failure is not None and failure.kind == "disagreement", failure


class LosesLastSample:
    """The compiled scanner with a bug: it drops the last sample of each buffer it scans."""

    def __init__(self, compiled: object) -> None:
        self.compiled = compiled

    def __getattr__(self, name: str) -> object:
        return getattr(self.compiled, name)

    def scan_samples(self, buf: bytes, pos: int, base: int, state: object, out: list) -> int:
        pos = self.compiled.scan_samples(buf, pos, base, state, out)  # type: ignore[attr-defined]
        if out:
            out.pop()
        return pos


def cli_cases() -> list[int]:
    """Case numbers for tarcat: the first ones of the CI run."""
    return list(range(CLI_CASES))


@pytest.mark.parametrize("index", cli_cases())
def test_tarcat_on_a_mutant_exits_0_with_a_clean_archive_or_2_with_whole_samples(
    tmp_path: Path, index: int
) -> None:
    mutant = mutations.make_case(CI_SEED, index)
    output, samples, error = mutations.read_and_write(mutant.data)
    (tmp_path / "case.tar").write_bytes(mutant.data)
    runs = [
        subprocess.run([tool("tarcat"), "case.tar"], cwd=tmp_path, capture_output=True, timeout=30)
        for _ in range(2)
    ]
    first, second = runs
    assert (first.returncode, first.stdout) == (second.returncode, second.stdout)
    stderr = first.stderr.decode("utf-8", "replace")
    if error is None:
        assert first.returncode == 0, stderr
        assert first.stdout == output
        listing = subprocess.run(["tar", "-tf", "-"], input=first.stdout, capture_output=True)
        assert listing.returncode == 0, listing.stderr
        assert archive_samples(first.stdout, complete=True) == as_expected(samples)
        check_stderr(stderr, "tarcat", "case.tar", 0, None, warnings=len(skipped(mutant.data)))
    else:
        assert first.returncode == 2
        what = re.escape(one_line(error).removeprefix("case: "))  # the library's message
        check_stderr(stderr, "tarcat", "case.tar", 2, what, warnings=None)
        assert first.stdout == b"".join(s.raw for s in samples)
        assert archive_samples(first.stdout, complete=False) == as_expected(samples)


def skipped(data: bytes) -> list[str]:
    """Members the commands skip with a warning when reading ``data``."""
    from tarkit.format.compression import open_decompressed
    from tarkit.format.samples import SkipLog, group_samples
    from tarkit.format.tar import read_members

    skips = SkipLog()
    stream = open_decompressed(io.BytesIO(data), "case")  # type: ignore[arg-type]
    for _ in group_samples(read_members(stream, "case"), "case", skips=skips):
        pass
    return [reason for reason, n in skips.counts.items() for _ in range(n)]


def test_the_atheris_target_runs_its_seeds_and_thousands_of_mutants_cleanly(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    target = ROOT / "fuzz" / "fuzz_reader.py"
    seeds = tmp_path / "seeds"
    subprocess.run([sys.executable, str(target), "--write-seeds", str(seeds)], check=True)
    assert len(list(seeds.iterdir())) == len(mutations.SEEDS)
    result = subprocess.run(
        [sys.executable, str(target), str(seeds), "-runs=5000", "-seed=1", "-max_len=65536"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done 5000 runs" in result.stderr
    assert not list(tmp_path.glob("crash-*"))
