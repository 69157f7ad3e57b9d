"""tarsort: sort samples by key or by a field, regrouping interleaved members."""

from __future__ import annotations

from typing import Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .progress import Progress, wanted, writes_stdout
from .runner import report_skips, run, skip_log, typer_main

app = declare.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Sort the samples of all inputs by key, or by a field's text or number, stably.\n\n"
    "Members of a key are gathered wherever they are, so tarsort repairs archives whose "
    "members are interleaved (made without tar --sort=name). Memory stays within "
    "--memory for inputs of any size: sorted runs are spilled to a private temporary "
    "directory (under -T, else $TMPDIR, else /tmp) that is always removed.\n\n"
    "Example: tarsort --memory 1G unsorted.tar -o sorted.tar",
)
def tarsort(
    ctx: declare.Context,
    inputs: o.Inputs = None,
    output: o.Output = "-",
    field: Annotated[
        Optional[str],
        declare.Option(
            "-k",
            "--field",
            help="Sort by this field's text (surrounding whitespace stripped) instead of the "
            "key. The name matches case-insensitively; a sample without it is an error.",
            show_default=False,
        ),
    ] = None,
    numeric: Annotated[
        bool, declare.Option("-n", "--numeric", help="Compare the -k field as a number.")
    ] = False,
    reverse: Annotated[bool, declare.Option("-r", "--reverse", help="Reverse the order.")] = False,
    shuffle: Annotated[
        bool,
        declare.Option(
            "--shuffle",
            help="A deterministic global shuffle: order by a keyed hash of (seed, key).",
        ),
    ] = False,
    seed: Annotated[
        Optional[int],
        declare.Option("--seed", help="Seed for --shuffle (default 0).", show_default=False),
    ] = None,  # fmt: skip
    memory: Annotated[
        str,
        declare.Option("-m", "--memory", help="Memory for sorting: 256M, 1G, 2e9…"),
    ] = "256M",
    tempdir: Annotated[
        Optional[str],
        declare.Option(
            "-T",
            "--temporary-directory",
            help="Directory for the sorted runs (default: $TMPDIR, else /tmp).",
            show_default=False,
        ),
    ] = None,
    strict: o.Strict = False,
    ignore_zeros: o.IgnoreZeros = False,
    allow_empty: o.AllowEmpty = False,
    progress: o.ShowProgress = None,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.storage import Sink

        from ..errors import UsageError
        from ..sizes import parse_size
        from ..stream.sorting import SortOrder, sort_samples
        from ..stream.stages import close_iterator, write_samples

        if seed is not None and not shuffle:
            raise UsageError("--seed needs --shuffle")
        order = SortOrder(
            field=field, numeric=numeric, reverse=reverse,
            shuffle_seed=(seed or 0) if shuffle else None,
        )  # fmt: skip
        skips = skip_log(tool)
        shown = Progress(tool, wanted(progress, to_stdout=writes_stdout(output)),
                         unit="members", stage="reading")  # fmt: skip

        def on_read(members: int, finished: bool) -> None:
            shown.update_to(members)
            if finished:
                shown.phase("writing", "members", members)

        samples = sort_samples(
            inputs or [], order, memory=parse_size(memory, "--memory"), strict=strict,
            skips=skips, ignore_zeros=ignore_zeros, allow_empty=allow_empty, tempdir=tempdir,
            on_read=on_read if shown.shown else None,
        )  # fmt: skip
        try:
            write_samples(shown.count(samples, lambda s: len(s.members)), Sink(output))
        finally:
            shown.close()
            close_iterator(samples)  # removes the temporary runs on every way out
        report_skips(tool, skips)
        return 0

    run(tool, body)


def main() -> None:
    typer_main(app, "tarsort")
