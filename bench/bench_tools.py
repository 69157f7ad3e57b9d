"""Issue 2: the shell tools against cat, split, GNU tar, tarfile and webdataset.

Every figure is a real shell pipeline on the small-sample and large-sample sets (see
``data.py``), timed by :func:`data.timeit_command`; the targets are the issue's.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from data import (
    BENCH,
    SETTINGS,
    CommandFailed,
    imported_modules,
    large_shard,
    median,
    run_command,
    sample_count,
    small_shard,
    timeit_command,
    timeit_reported,
    tiny_shard,
    tool_available,
)

TITLE = "Shell tools: tarcat, tarsplit, tar2tsv, tarshow (issues 2 and 16)"
ORDER = 10

NOT_BUILT = "not built yet"
HEAVY_MODULES = ("torch", "numpy")


@dataclass(frozen=True)
class Case:
    """One timed pipeline: ``{f}`` input shard, ``{out}`` output file, ``{dir}`` output dir."""

    name: str
    shown: str
    command: str
    tool: str | None = None
    setup: str | None = None
    reported: bool = False  # time as reported by the command itself (import excluded)


CLEAN_OUT = "rm -f {out}"
CLEAN_DIR = "rm -rf {dir} && mkdir {dir}"
CASES = [
    Case("cat", "cat f | cat > out", "cat {f} | cat > {out}", setup=CLEAN_OUT),
    # The shell user's case: a pipe on both sides, no file write slowing the baseline.
    Case("cat_pipe", "cat < f | cat > /dev/null", "cat < {f} | cat > /dev/null"),
    Case(
        "split", "cat f | split -b 100M", "cat {f} | split -b 100M - {dir}/part-", setup=CLEAN_DIR
    ),
    Case("gnutar", "tar -xOf - < f > /dev/null", "tar -xOf - < {f} > /dev/null"),
    Case(
        "tarfile",
        "tarfile stream copy (r| → w|) < f > out",
        "python {bench}/baselines.py tarfile-copy < {f} > {out}",
        setup=CLEAN_OUT,
    ),
    Case(
        "webdataset",
        "webdataset.WebDataset: iterate all samples (whole command)",
        "python {bench}/baselines.py webdataset {f}",
    ),
    Case(
        "webdataset_loop",
        "webdataset.WebDataset: iteration only, import excluded",
        "python {bench}/baselines.py webdataset {f}",
        reported=True,
    ),
    Case("tarcat", "tarcat < f > out", "tarcat < {f} > {out}", "tarcat", CLEAN_OUT),
    Case(
        "tarcat_where",
        "tarcat --where 'cls >= 0' < f > out (reads cls, keeps every sample)",
        "tarcat --where 'cls >= 0' < {f} > {out}",
        "tarcat",
        CLEAN_OUT,
    ),
    Case(
        "tarcat_pipe",
        "cat f | tarcat | cat > out",
        "cat {f} | tarcat | cat > {out}",
        "tarcat",
        CLEAN_OUT,
    ),  # fmt: skip
    Case(
        "tarsplit",
        "tarsplit -c 1000 -o dir/shard-%06d.tar < f",
        "tarsplit -c 1000 -o {dir}/shard-%06d.tar < {f}",
        "tarsplit",
        CLEAN_DIR,
    ),
    Case(
        "tar2tsv", "tar2tsv -f cls < f > out", "tar2tsv -f cls < {f} > {out}", "tar2tsv", CLEAN_OUT
    ),
    Case("tarshow", "tarshow -c 1 f", "tarshow -c 1 {f} > /dev/null", "tarshow"),
    Case(
        "tarcat_to_pipe",
        "tarcat < f | cat > /dev/null",
        "tarcat < {f} | cat > /dev/null",
        "tarcat",
    ),  # fmt: skip
    Case(
        "tar2tsv_to_pipe",
        "tar2tsv -f cls < f | cat > /dev/null",
        "tar2tsv -f cls < {f} | cat > /dev/null",
        "tar2tsv",
    ),  # fmt: skip
]
# The same tools with the pure-Python reader (issue 16: both implementations side by side).
PURE = "TARKIT_PURE=1"
CASES += [
    Case(f"{case.name}_pure", f"{PURE} {case.shown}", f"{PURE} {case.command}", case.tool,
         case.setup)
    for case in CASES
    if case.name in ("tarcat", "tarsplit", "tar2tsv", "tarcat_to_pipe")
]  # fmt: skip

STARTUP_CASES = [
    Case("bash", "`true` (bash start-up, in every figure)", "true"),
    Case("python", "python -c pass (interpreter floor)", "python -c pass"),
    Case("tarcat_stdin", "tarcat < tiny.tar > /dev/null", "tarcat < {f} > /dev/null", "tarcat"),
    Case("webdataset_import", 'python -c "import webdataset"', 'python -c "import webdataset"'),
    Case("tarcat", "tarcat -c 1 tiny.tar", "tarcat -c 1 {f} > /dev/null", "tarcat"),
    Case("tarkit_cat", "tarkit cat -c 1 tiny.tar", "tarkit cat -c 1 {f} > /dev/null", "tarcat"),
    Case("tar2tsv", "tar2tsv -c 1 tiny.tar", "tar2tsv -c 1 {f} > /dev/null", "tar2tsv"),
    Case("tarshow", "tarshow -c 1 tiny.tar", "tarshow -c 1 {f} > /dev/null", "tarshow"),
    Case(
        "tarsplit",
        "tarsplit -c 1 tiny.tar",
        "tarsplit -c 1 -o {dir}/s-%06d.tar {f}",
        "tarsplit",
        CLEAN_DIR,
    ),
]

# (tool, command on the tiny shard, whether Pillow is forbidden too)
IMPORT_CHECKS = [
    ("tarcat", "tarcat -c 1 {f} > /dev/null", True),
    ("tarsplit", "tarsplit -c 1 -o {dir}/s-%06d.tar {f}", True),
    ("tar2tsv", "tar2tsv -c 1 {f} > /dev/null", True),
    ("tarshow", "tarshow -c 1 {f} > /dev/null", False),
]


@dataclass
class Result:
    """Timings of one case, or why there are none."""

    times: list[float] | None = None
    note: str = ""

    @property
    def seconds(self) -> float | None:
        return median(self.times) if self.times else None


def measure(case: Case, workdir: Path, shard: Path, repeat: int, warmup: int = 1) -> Result:
    """Time one case on one shard; a missing tool or a failing command is noted, not raised."""
    if case.tool and not tool_available(case.tool):
        return Result(note=NOT_BUILT)
    values = {
        "f": shlex.quote(str(shard)),
        "out": shlex.quote(str(workdir / "out")),
        "dir": shlex.quote(str(workdir / "outdir")),
        "bench": shlex.quote(str(BENCH)),
    }
    setup = case.setup.format(**values) if case.setup else None
    try:
        timer = timeit_reported if case.reported else timeit_command
        return Result(timer(case.command.format(**values), repeat, setup=setup, warmup=warmup))
    except CommandFailed as exc:
        return Result(note=f"failed: {exc}")
    finally:
        run_command(f"rm -rf {values['out']} {values['dir']}")


def measure_all(cases: list[Case], workdir: Path, shard: Path, repeat: int) -> dict[str, Result]:
    """Time every case ``repeat`` times round-robin, one run of each in turn after a warm-up
    run of each: a busy moment of a shared machine then falls on all of them alike, and the
    ratios between them hold better than the times."""
    results = {case.name: measure(case, workdir, shard, 0) for case in cases}
    for _ in range(repeat):
        for case in cases:
            result = results[case.name]
            if result.note:
                continue
            once = measure(case, workdir, shard, 1, warmup=0)
            if once.times:
                result.times = [*(result.times or []), *once.times]
            else:
                results[case.name] = once
    return results


def run(workdir: Path, quick: bool) -> str:
    repeat = SETTINGS.repeat
    sets = {"small": small_shard(workdir), "large": large_shard(workdir)}
    results = {label: measure_all(CASES, workdir, shard, repeat) for label, shard in sets.items()}
    tiny = tiny_shard(workdir)
    startup_repeat = max(3, repeat) if quick else max(20, repeat * 4)
    startup = measure_all(STARTUP_CASES, workdir, tiny, startup_repeat)
    imports = check_imports(workdir, tiny)

    parts = [
        "Each figure is the median wall-clock time of real shell pipelines (`bash -o "
        "pipefail -c`, the venv first on `PATH`, `.pyc` files in use) after one untimed "
        "warm-up run, with input from the page cache; `out` is a file on the same disk. "
        "The commands of a table run round-robin (one run of each in turn), so that a busy "
        "moment falls on all of them alike. MB/s and samples/s are of the input shard.",
        "",
    ]
    if quick:
        parts += [
            "**Quick run:** the data sets are 10× smaller, so start-up (~0.1–0.2 s per "
            "Python command) dominates the ratios below; their PASS/MISS verdicts mean "
            "something only after a full run.",
            "",
        ]
    for label, shard in sets.items():
        parts += throughput_table(label, shard, results[label])
    parts += targets_table(results, startup, imports)
    parts += per_member_table(sets["small"], repeat)
    parts += startup_table(startup, startup_repeat)
    parts += imports_table(imports)
    return "\n".join(parts)


def throughput_table(label: str, shard: Path, results: dict[str, Result]) -> list[str]:
    size, count = shard.stat().st_size, sample_count(shard)
    rows = [
        f"### {label.capitalize()} samples: {count:,} samples, {size / 1e6:.1f} MB "
        f"(`{shard.name}`, {size / count / 1e3:.1f} KB per sample)",
        "",
        "| pipeline | median s | MB/s | samples/s | runs |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for case in CASES:
        result = results[case.name]
        shown = _cell(f"`{case.shown}`")
        if result.seconds is None:
            rows.append(f"| {shown} | {_cell(result.note)} | | | |")
            continue
        s = result.seconds
        rows.append(
            f"| {shown} | {s:.3f} | {size / 1e6 / s:,.0f} | {count / s:,.0f} | {len(result.times or [])} |"
        )
    return [*rows, ""]


@dataclass(frozen=True)
class Target:
    """A ratio from the issue: measured value against a bound."""

    measure: str
    value: Callable[[], float | None]
    unit: str
    bound: float | None  # None: shown for information only
    at_most: bool = True


def targets_table(
    results: dict[str, dict[str, Result]],
    startup: dict[str, Result],
    imports: dict[str, tuple[set[str] | None, str]],
) -> list[str]:
    def ratio(label: str, a: str, b: str) -> Callable[[], float | None]:
        def value() -> float | None:
            x, y = results[label][a].seconds, results[label][b].seconds
            return x / y if x is not None and y else None

        return value

    def startup_ms() -> float | None:
        s = startup["tarcat"].seconds
        return None if s is None else s * 1000

    def heavy_imports() -> float | None:
        found, _ = imports["tarcat"]
        return None if found is None else float(len(found & set(HEAVY_MODULES)))

    def startup_ratio(name: str) -> Callable[[], float | None]:
        def value() -> float | None:
            x, y = startup[name].seconds, startup["python"].seconds
            return x / y if x is not None and y else None

        return value

    pure = f"with `{PURE}`"
    pipe = "`cat < f | cat > /dev/null`"
    targets = [
        Target(f"`tarcat < f | cat > /dev/null` ÷ {pipe}, small (issue 25)",
               ratio("small", "tarcat_to_pipe", "cat_pipe"), "×", 2),
        Target(f"the same, {pure}", ratio("small", "tarcat_to_pipe_pure", "cat_pipe"), "×", None),
        Target(f"`tar2tsv -f cls < f | cat > /dev/null` ÷ {pipe}, small (issue 25)",
               ratio("small", "tar2tsv_to_pipe", "cat_pipe"), "×", 2),
        Target(f"`tarcat < f | cat > /dev/null` ÷ {pipe}, large (issue 25)",
               ratio("large", "tarcat_to_pipe", "cat_pipe"), "×", 1.1),
        Target("start-up: `tarcat < tiny.tar > /dev/null` ÷ `python -c pass` (issue 25)",
               startup_ratio("tarcat_stdin"), "×", 2),
        Target("`tarcat < f > out` ÷ `cat f | cat`, small", ratio("small", "tarcat", "cat"), "×", 2),
        Target(f"the same, {pure}", ratio("small", "tarcat_pure", "cat"), "×", None),
        Target(
            "`tarsplit -c 1000` ÷ `cat | split -b 100M`, small",
            ratio("small", "tarsplit", "split"),
            "×",
            2,
        ),
        Target(f"the same, {pure}", ratio("small", "tarsplit_pure", "split"), "×", None),
        Target("`tar2tsv -f cls < f > out` ÷ `cat f | cat`, small", ratio("small", "tar2tsv", "cat"), "×", 2),
        Target(f"the same, {pure}", ratio("small", "tar2tsv_pure", "cat"), "×", None),
        *[
            Target(f"start-up: `{case.shown}` ÷ `python -c pass`", startup_ratio(case.name), "×", 3)
            for case in STARTUP_CASES
            if case.tool
        ],
        Target("`tarcat < f > out` ÷ `cat f | cat`, large", ratio("large", "tarcat", "cat"), "×", 1),
        Target(
            "`tarcat` speed-up over `tarfile` copy, small",
            ratio("small", "tarfile", "tarcat"),
            "×",
            10,
            at_most=False,
        ),
        Target(
            "`tarcat --where 'cls >= 0'` ÷ `tarcat`, small (issue 13)",
            ratio("small", "tarcat_where", "tarcat"),
            "×",
            1.5,
        ),
        Target("start-up: `tarcat -c 1 tiny.tar`", startup_ms, "ms", 150),
        Target("modules of torch, numpy imported by `tarcat -c 1`", heavy_imports, "", 0),
        Target("`cat f | tarcat | cat` ÷ `cat f | cat`, small", ratio("small", "tarcat_pipe", "cat"), "×", None),
        Target("`cat f | tarcat | cat` ÷ `cat f | cat`, large", ratio("large", "tarcat_pipe", "cat"), "×", None),
        Target("`tarcat` ÷ GNU `tar -xOf -`, small", ratio("small", "tarcat", "gnutar"), "×", None),
        Target(
            "`tarcat` speed-up over `webdataset` iteration (its import excluded), small",
            ratio("small", "webdataset_loop", "tarcat"),
            "×",
            None,
            at_most=False,
        ),
        Target(
            "`tarcat` speed-up over `tarfile` copy, large",
            ratio("large", "tarfile", "tarcat"),
            "×",
            None,
            at_most=False,
        ),
    ]  # fmt: skip
    rows = [
        "### Targets",
        "",
        "| measure | value | target | result |",
        "| --- | ---: | ---: | --- |",
    ]
    for target in targets:
        value = target.value()
        if target.bound is None:
            bound, verdict = "—", "info"
        else:
            bound = f"{'≤' if target.at_most else '≥'} {target.bound:g}{target.unit}"
            verdict = "—"
        if value is None:
            shown = "not measured"
        else:
            shown = f"{value:.0f}" if target.unit == "ms" or not target.unit else f"{value:.2f}"
            shown += target.unit
            if target.bound is not None:
                ok = value <= target.bound if target.at_most else value >= target.bound
                verdict = "PASS" if ok else "MISS"
        rows.append(f"| {_cell(target.measure)} | {shown} | {bound} | {verdict} |")
    return [
        *rows,
        "",
        "`not measured`: a tool not built yet or a failed run (see above).",
        "",
        "What sets `tarsplit`'s ratio: `cat | split` is two processes copying in parallel "
        "and never syncing; `tarsplit` reads, checks and groups, then writes each sample "
        "through `ShardWriter` (a Python call per sample: the count and size limits are "
        "checked sample by sample), and publishes each shard atomically: a temporary file, "
        "`fsync`, rename (20 shards here, a few ms of `fsync` each on this disk; they run "
        "on another thread while the next shard is written, and the last one is waited "
        "for).",
        "",
    ]


def per_member_table(shard: Path, repeat: int) -> list[str]:
    """Where tarcat's time goes on small members: each stage in this process, per member,
    with the compiled scanner and with the pure-Python reader."""
    import io
    import time

    from tarkit.format import scanner
    from tarkit.format.samples import group_samples
    from tarkit.format.tar import read_members
    from tarkit.storage import Sink
    from tarkit.stream.stages import write_samples

    data = shard.read_bytes()
    members = sum(1 for _ in read_members(io.BytesIO(data)))
    out = shard.parent / "per-member-out.tar"

    def best(stage: Callable[[], object]) -> float:
        times = []
        for _ in range(max(3, repeat)):
            start = time.perf_counter()
            stage()
            times.append(time.perf_counter() - start)
        return min(times)

    def stages() -> list[float]:
        read = best(lambda: sum(1 for _ in read_members(io.BytesIO(data))))
        grouped = best(lambda: sum(1 for _ in group_samples(read_members(io.BytesIO(data)))))
        whole = best(
            lambda: write_samples(group_samples(read_members(io.BytesIO(data))), Sink(str(out)))
        )
        return [read, grouped, whole]

    compiled = scanner.compiled
    figures = {"compiled": stages() if compiled is not None else None}
    scanner.compiled = None
    try:
        figures["pure"] = stages()
    finally:
        scanner.compiled = compiled
    out.unlink()
    names = [
        "read and check headers (`read_members`)",
        "read and group into samples (`group_samples(read_members(…))`)",
        "read, group and write to a file (`write_samples`)",
    ]
    rows = [
        "### Where the time goes on small members",
        "",
        f"In this process, best of {max(3, repeat)}, on the small set ({members:,} members, "
        f"{len(data) / members:,.0f} bytes each on average), start-up excluded; each stage "
        "includes the ones above it (grouping is done by the scanner while it reads, so it "
        "has no figure of its own). The file write includes its `fsync`.",
        "",
        "| stage | compiled: µs per member | ms | pure Python: µs per member | ms |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for index, name in enumerate(names):
        cells = []
        for figure in (figures["compiled"], figures["pure"]):
            if figure is None:
                cells += ["not built", ""]
            else:
                cells += [f"{figure[index] / members * 1e6:.2f}", f"{figure[index] * 1e3:.0f}"]
        rows.append(f"| {name} | {' | '.join(cells)} |")
    rows += [
        "",
        "The pure-Python reader costs a few microseconds per member (about 35 steps of header "
        "checking and bookkeeping, none dominant), where `cat` moves a small member in well "
        "under one; the compiled scanner does that work in C and hands back runs of samples "
        "that are written as slices of the read buffer.",
        "",
    ]
    return rows


def startup_table(startup: dict[str, Result], repeat: int) -> list[str]:
    floor = startup["python"].seconds
    rows = [
        f"### Start-up (median of {repeat} runs, three-sample shard)",
        "",
        "A plain command line is parsed without importing typer (`tarkit/cli/declare.py`); "
        "`--help` and mistakes go to typer. `import tarkit` and `tarkit.storage` import "
        "their names on first use, and nothing on a stream tool's way imports `dataclasses` "
        "(with `inspect` and `ast`), `hashlib`, `json` or the commit machinery "
        "(tests/cli/test_startup.py), so a tool loads only the modules it runs.",
        "",
        "| command | median ms | ÷ `python -c pass` |",
        "| --- | ---: | ---: |",
    ]
    for case in STARTUP_CASES:
        result = startup[case.name]
        shown = _cell(case.shown if case.shown.startswith("`") else f"`{case.shown}`")
        if result.seconds is None:
            rows.append(f"| {shown} | {_cell(result.note)} | |")
            continue
        times = f"{result.seconds / floor:.1f}" if floor else ""
        rows.append(f"| {shown} | {result.seconds * 1000:.0f} | {times} |")
    return [*rows, ""]


def check_imports(workdir: Path, tiny: Path) -> dict[str, tuple[set[str] | None, str]]:
    """tool → (top-level modules it imported, or None, and why not)."""
    found: dict[str, tuple[set[str] | None, str]] = {}
    outdir = workdir / "imports"
    outdir.mkdir(exist_ok=True)
    for tool, command, _ in IMPORT_CHECKS:
        if not tool_available(tool):
            found[tool] = (None, NOT_BUILT)
            continue
        shell = command.format(f=shlex.quote(str(tiny)), dir=shlex.quote(str(outdir)))
        try:
            found[tool] = (imported_modules(shell), "")
        except CommandFailed as exc:
            found[tool] = (None, f"failed: {exc}")
    return found


def imports_table(imports: dict[str, tuple[set[str] | None, str]]) -> list[str]:
    rows = [
        "### Heavy imports (`PYTHONPROFILEIMPORTTIME`, on the three-sample shard)",
        "",
        "The shell tools must never import torch or numpy, and Pillow only to show images.",
        "",
        "| command | torch | numpy | Pillow | result |",
        "| --- | --- | --- | --- | --- |",
    ]
    for tool, command, no_pillow in IMPORT_CHECKS:
        modules, note = imports[tool]
        shown = "`" + command.format(f="tiny.tar", dir="dir").replace(" > /dev/null", "") + "`"
        if modules is None:
            rows.append(f"| {shown} | | | | {_cell(note)} |")
            continue
        forbidden = set(HEAVY_MODULES) | ({"PIL"} if no_pillow else set())
        cells = ["yes" if m in modules else "no" for m in ("torch", "numpy", "PIL")]
        verdict = "MISS" if modules & forbidden else "PASS"
        rows.append(f"| {shown} | {' | '.join(cells)} | {verdict} |")
    return [*rows, ""]


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell, kept short."""
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 160 else text[:157] + "…"
