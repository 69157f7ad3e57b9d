"""tarfirst: write the bytes of the first matching field to stdout."""

from __future__ import annotations

from typing import Annotated, Optional

from . import declare as typer  # typer itself only when needed: declare.py
from . import options as o
from .runner import report_skips, run, skip_log, typer_main

app = typer.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Write the bytes of the first matching field to stdout, as they are stored.\n\n"
    "Reading stops at the match. Nothing matched is exit status 2 with a message.\n\n"
    "Example: tarfirst -f jpg shard.tar > x.jpg",
)
def tarfirst(
    ctx: typer.Context,
    inputs: o.Inputs = None,
    field: Annotated[
        Optional[str],
        typer.Option(
            "-f",
            "--field",
            help="The field to write, matched case-insensitively; 'jpg;png' takes the first "
            "one present. Default: the sample's first field.",
            show_default=False,
        ),
    ] = None,
    key: Annotated[
        Optional[str],
        typer.Option("--key", help="Only the sample with this key.", show_default=False),
    ] = None,
    strict: o.Strict = False,
    ignore_zeros: o.IgnoreZeros = False,
    allow_empty: o.AllowEmpty = False,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.storage import display_name, expand_inputs, stdout_stream

        from ..errors import NotFound, UsageError
        from ..format.samples import parse_field_spec
        from ..stream.lookup import first_field
        from ..stream.stages import output_errors, read_samples, write_all

        alternatives = None
        if field is not None:
            columns = parse_field_spec(field)
            if len(columns) != 1:
                raise UsageError(f"-f {field!r}: tarfirst writes one field ('jpg;png' for "
                                 "alternatives)")  # fmt: skip
            alternatives = columns[0]
        out = stdout_stream()
        skips = skip_log(tool)
        samples = read_samples(
            inputs or [], strict=strict, skips=skips,
            ignore_zeros=ignore_zeros, allow_empty=allow_empty,
        )  # fmt: skip
        try:
            found = first_field(samples, alternatives, key)
        except NotFound as exc:
            # Every input was read to its end: name them, as any other error names its source.
            names = [display_name(spec) for spec in expand_inputs(inputs or [])]
            if len(names) > 3:
                names = [f"{names[0]} … {names[-1]} ({len(names)} inputs)"]
            raise NotFound(f"{', '.join(names)}: {exc}") from None
        with output_errors("-"):
            write_all(out, found.data)
        report_skips(tool, skips)
        return 0

    run(tool, body)


def main() -> None:
    typer_main(app, "tarfirst")
