"""tarcreate: build a shard from a CSV/TSV plan or from a directory tree."""

from __future__ import annotations

from typing import Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .progress import Progress, wanted, writes_stdout
from .runner import report_skips, run, skip_log, typer_main, warn

app = declare.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Build a shard from a CSV/TSV plan (one sample per row) or from a directory tree "
    "(--dir), with deterministic headers and the fields of each sample sorted: the same "
    "plan or tree always gives the same bytes.\n\n"
    "A plan's header names the fields; a column '@field' holds paths of files (relative "
    "to the plan) whose contents become that field; other columns are text; a __key__ "
    "column sets the keys, else they are the row number, 000000000, 000000001… Every row "
    "is checked before anything is written.\n\n"
    "Example: tarcreate plan.csv -o shard.tar; tarcreate --dir scans/ -o scans.tar",
)
def tarcreate(
    ctx: declare.Context,
    plan: Annotated[
        Optional[str],
        declare.Argument(help="The plan: a .csv or .tsv file (or -d).", show_default=False),
    ] = None,
    output: o.Output = "-",
    directory: Annotated[
        Optional[str],
        declare.Option(
            "--dir",
            help="Pack this directory tree instead: files grouped by key (the path up to "
            "the first dot of the file name), in sorted key order.",
            show_default=False,
        ),
    ] = None,
    delimiter: Annotated[
        Optional[str],
        declare.Option(
            "-d",
            "--delimiter",
            help="The plan's delimiter ('tab' for a tab); default from its ending: .csv "
            "comma, .tsv tab.",
            show_default=False,
        ),
    ] = None,
    key: o.PlanKey = None,
    dereference: Annotated[
        bool,
        declare.Option(
            "-L",
            "--dereference",
            help="With --dir: read a symlink to a regular file as that file (else symlinks "
            "are skipped with a warning).",
        ),
    ] = False,
    strict: Annotated[
        bool,
        declare.Option(
            "--strict",
            help="With --dir: make files that are skipped with a warning (no dot in the "
            "name, symlinks, FIFOs, devices) errors.",
        ),
    ] = False,
    progress: o.ShowProgress = None,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.storage import Sink

        from ..errors import UsageError
        from ..stream.stages import write_members
        from ..writing.files import TreeSample, list_tree, tree_members
        from ..writing.plan import PlanRow, plan_members, read_plan

        if (plan is None) == (directory is None):
            raise UsageError("give a PLAN file or --dir DIR (one of them)")
        skips = skip_log(tool)
        tree: list[TreeSample] = []
        rows: list[PlanRow] = []
        if directory is not None:
            if key is not None or delimiter is not None:
                raise UsageError("--key and -d are for plans, not --dir")
            tree = list_tree(directory, strict=strict, skips=skips, dereference=dereference)
        else:
            if dereference:
                raise UsageError("-L is for --dir")
            rows = read_plan(plan, delimiter, key_format=key,  # type: ignore[arg-type]
                             warn=lambda message: warn(tool, message))  # fmt: skip
        shown = wanted(progress, to_stdout=writes_stdout(output))
        with Progress(tool, shown, total=len(tree) + len(rows)) as line:
            if directory is not None:
                members = tree_members(directory, line.count(tree))
            else:
                members = plan_members(line.count(rows))
            write_members(members, Sink(output))
        report_skips(tool, skips)
        return 0

    run(tool, body)


def main() -> None:
    typer_main(app, "tarcreate")
