"""Run the benchmarks and write docs/performance.md.

    python bench/run.py                  # everything, 5 runs per figure
    python bench/run.py --quick          # small data, 1 run: checks the harness works
    python bench/run.py --only tools     # one module; the other sections are kept
    python bench/run.py --repeat 9       # more runs per median

Every ``bench/bench_*.py`` module defines ``TITLE: str`` and
``run(workdir: pathlib.Path, quick: bool) -> str`` returning a markdown section (without
its ``##`` heading), and optionally ``ORDER: int`` (lower comes first, default 100).
A module that fails does not stop the others: its section says what went wrong and the
exit status is 1.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from importlib import metadata
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import data  # noqa: E402

ROOT = BENCH.parent
DEFAULT_OUTPUT = ROOT / "docs" / "performance.md"
SECTION = re.compile(
    r"<!-- bench-section (?P<name>\S+) (?P<mode>quick|full) -->\n"
    r"(?P<body>.*?)<!-- /bench-section (?P=name) -->\n",
    re.S,
)
QUICK_NOTE = (
    "> **Figures from a quick run** (`--quick`: reduced data sets, one run each) on a shared "
    "machine, to check that the harness works end to end. They are not the measured "
    "performance and are to be replaced by a full run (`python bench/run.py`) on a quiet "
    "machine.\n"
)


def discover() -> dict[str, Path]:
    """Benchmark modules by name (``bench_tools.py`` → ``tools``)."""
    return {p.stem.removeprefix("bench_"): p for p in sorted(BENCH.glob("bench_*.py"))}


def module_order(path: Path) -> int:
    """A module's ``ORDER = N`` (read from its source, so that it need not be imported)."""
    match = re.search(r"^ORDER\s*=\s*(\d+)", path.read_text(encoding="utf-8"), re.M)
    return int(match[1]) if match else 100


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_module(name: str, path: Path, quick: bool) -> tuple[str, str, bool]:
    """Run one module in a fresh scratch directory: (title, markdown body, succeeded)."""
    title = f"bench_{name}.py"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"tarkit-bench-{name}-") as workdir:
        try:
            module = load(name, path)
            title = module.TITLE
            print(f"bench: {name}: {title} …", file=sys.stderr, flush=True)
            body = module.run(Path(workdir), quick).strip() + "\n"
            ok = True
        except Exception:
            body = (
                f"**This benchmark failed** (`{path.name}`):\n\n```\n"
                f"{traceback.format_exc().strip()}\n```\n"
            )
            ok = False
            print(f"bench: {name} failed:\n{traceback.format_exc()}", file=sys.stderr)
    elapsed = time.perf_counter() - started
    mode = "quick run" if quick else f"median of {data.SETTINGS.repeat} runs"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body += f"\n_`bench/{path.name}`, {mode}, {when}, took {elapsed:.0f} s._\n"
    return title, body, ok


def section(name: str, title: str, body: str, quick: bool) -> str:
    mode = "quick" if quick else "full"
    return (
        f"<!-- bench-section {name} {mode} -->\n## {title}\n\n{body}"
        f"<!-- /bench-section {name} -->\n"
    )


def _command_line(args: list[str]) -> str:
    try:
        result = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "not found"
    lines = (result.stdout or result.stderr).strip().splitlines()
    return lines[0] if lines else "?"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.0f} GiB"
    except OSError:
        pass
    return "?"


def _git_commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "?"
    return f"{head}{' (with uncommitted changes)' if dirty else ''}" if head else "?"


def header(quick: bool, load_before: float, load_after: float) -> str:
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    versions = ", ".join(
        f"{p} {_version(p)}" for p in ("tarkit", "webdataset", "torch", "pillow", "numpy", "typer")
    )
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Performance",
        "",
        *([QUICK_NOTE] if quick else []),
        "All figures come from `bench/` (see `bench/README.md`): real commands through real "
        "pipes, timed as wall-clock medians, with data generated from a fixed seed.",
        "",
        "## Machine",
        "",
        f"- CPU: {_cpu_model()}, {cores} cores ({usable} usable), {_memory()} memory",
        f"- Python {platform.python_version()} on {platform.system()} {platform.release()}",
        f"- {versions}",
        f"- {_command_line(['tar', '--version'])}",
        f"- tarkit checkout: {_git_commit()}",
        f"- Load average (1 min) before and after: {load_before:.2f}, {load_after:.2f}",
        f"- Date: {now}",
        "",
        "## How to reproduce",
        "",
        "<!-- not run: the benchmarks take minutes -->",
        "```sh",
        "bin/setup                      # .venv with tarkit, torch, webdataset (see README)",
        ". .venv/bin/activate",
        "python bench/run.py            # all sections; data is generated into bench/data/",
        "python bench/run.py --only tools --repeat 9   # one section, more runs",
        "```",
        "",
        "Run it on a quiet machine: other processes on the same cores change the figures.",
        "",
    ]
    return "\n".join(lines)


def existing_sections(output: Path) -> dict[str, tuple[str, bool]]:
    """Sections already in ``output``: name → (text, from a quick run)."""
    if not output.exists():
        return {}
    return {
        m["name"]: (m.group(0), m["mode"] == "quick")
        for m in SECTION.finditer(output.read_text(encoding="utf-8"))
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small data, one run per figure")
    parser.add_argument(
        "--only", action="append", metavar="NAME", help="run only this module (repeatable)"
    )
    parser.add_argument("--repeat", type=int, help="runs per median (default 5, quick 1)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown file")
    args = parser.parse_args(argv)

    data.SETTINGS.quick = args.quick
    data.SETTINGS.repeat = args.repeat or (1 if args.quick else 5)
    modules = discover()
    wanted = [n.removeprefix("bench_").removesuffix(".py") for n in args.only or modules]
    unknown = [n for n in wanted if n not in modules]
    if unknown:
        parser.error(f"no module bench_{unknown[0]}.py; have: {', '.join(modules)}")
    order = {name: module_order(path) for name, path in modules.items()}

    sections = existing_sections(args.output) if args.only else {}
    load_before = os.getloadavg()[0]
    ok = True
    for name in sorted(wanted, key=lambda n: (order[n], n)):
        title, body, succeeded = run_module(name, modules[name], args.quick)
        sections[name] = (section(name, title, body, args.quick), args.quick)
        ok &= succeeded
    load_after = os.getloadavg()[0]

    any_quick = any(quick for _, quick in sections.values())
    ordered = sorted(sections, key=lambda n: (order.get(n, 100), n))
    text = (
        header(any_quick, load_before, load_after)
        + "\n"
        + "\n".join(sections[n][0] for n in ordered)
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    temp = args.output.with_name(f".{args.output.name}.tmp")
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, args.output)
    print(f"bench: wrote {args.output}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
