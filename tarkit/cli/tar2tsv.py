"""tar2tsv: one TSV line per sample, ``__key__`` then the fields."""

from __future__ import annotations

from typing import Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .progress import Progress, wanted
from .runner import report_skips, run, skip_log, typer_main

app = declare.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Write one TSV line per sample: __key__, then one cell per field.\n\n"
    "Text is UTF-8 with tab, newline, carriage return and backslash escaped as "
    "\\t \\n \\r \\\\; a value that is not text is written as <N bytes>; a missing "
    "field is an empty cell. Without -f: the fields of the first sample.\n\n"
    "Example: tar2tsv -c 5 -f 'txt;caption cls' data-000.tar",
)
def tar2tsv(
    ctx: declare.Context,
    inputs: o.Inputs = None,
    fields: Annotated[
        Optional[str],
        declare.Option(
            "-f",
            "--fields",
            help="Columns, e.g. 'txt;caption cls': spaces separate columns, ';' separates "
            "alternatives (the first one present fills the cell).",
            show_default=False,
        ),
    ] = None,
    count: o.Count = None,
    no_header: Annotated[
        bool, declare.Option("--no-header", help="Leave out the header line.")
    ] = False,
    no_key: Annotated[
        bool, declare.Option("--no-key", help="Leave out the __key__ column.")
    ] = False,
    strict: o.Strict = False,
    ignore_zeros: o.IgnoreZeros = False,
    allow_empty: o.AllowEmpty = False,
    progress: o.ShowProgress = None,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.storage import stdout_stream

        from ..format.field_spec import parse_field_spec
        from ..stream.stages import output_errors, read_samples, take
        from ..stream.tsv import tsv_lines, write_lines

        out = stdout_stream()
        columns = parse_field_spec(fields) if fields is not None else None
        skips = skip_log(tool)
        samples = read_samples(
            inputs or [], strict=strict, skips=skips,
            ignore_zeros=ignore_zeros, allow_empty=allow_empty,
        )  # fmt: skip
        samples = take(samples, count)
        with Progress(tool, wanted(progress, to_stdout=True), total=count) as shown:
            lines = tsv_lines(shown.count(samples), columns, header=not no_header,
                              key=not no_key)  # fmt: skip
            with output_errors("-"):
                write_lines(lines, out)
        report_skips(tool, skips)
        return 0

    run(tool, body)


def main() -> None:
    typer_main(app, "tar2tsv")
