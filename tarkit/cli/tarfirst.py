"""tarfirst: write the bytes of the first matching field to stdout."""

from __future__ import annotations

from typing import Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .runner import report_skips, run, skip_log, typer_main

app = declare.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Write the bytes of the first matching field to stdout, as they are stored.\n\n"
    "Reading stops at the match. Nothing matched is exit status 2 with a message.\n\n"
    "Example: tarfirst -f jpg shard.tar > x.jpg",
)
def tarfirst(
    ctx: declare.Context,
    inputs: o.Inputs = None,
    field: Annotated[
        Optional[str],
        declare.Option(
            "-f",
            "--field",
            help="The field to write, matched case-insensitively; 'jpg;png' takes the first "
            "one present. Default: the sample's first field.",
            show_default=False,
        ),
    ] = None,
    key: Annotated[
        Optional[str],
        declare.Option(
            "--key",
            help="Only the sample with this key. Over an indexed dataset (a manifest or its "
            "directory), or archives with indexes beside them, only that sample is read.",
            show_default=False,
        ),
    ] = None,
    strict: o.Strict = False,
    ignore_zeros: o.IgnoreZeros = False,
    allow_empty: o.AllowEmpty = False,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.storage import stdout_stream

        from ..errors import NotFound, UsageError
        from ..format.field_spec import parse_field_spec
        from ..stream.lookup import first_field
        from ..stream.picking import (
            describe_inputs,
            open_picking,
            sample_with_key,
            whole_archive_options,
        )
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
        # By the indexes: a dataset always, archives indexed alike when --key names one.
        whole = whole_archive_options(ignore_zeros=ignore_zeros, allow_empty=allow_empty)
        picking = open_picking(inputs or [], archives=key is not None, whole=whole)
        if picking is None:
            samples = read_samples(
                inputs or [], strict=strict, skips=skips,
                ignore_zeros=ignore_zeros, allow_empty=allow_empty,
            )  # fmt: skip
        elif key is not None:
            samples = iter([sample_with_key(picking, key, skips=skips, strict=strict)])
        else:  # a dataset's samples in order, each read alone, up to the first match
            shards = picking.shards
            samples = shards.samples(range(len(shards)), skips=skips, strict=strict)
        try:
            found = first_field(samples, alternatives, key)
        except NotFound as exc:
            # Every input was read to its end: name them, as any other error names its source.
            raise NotFound(f"{describe_inputs(inputs or [])}: {exc}") from None
        with output_errors("-"):
            write_all(out, found.data)
        report_skips(tool, skips)
        return 0

    run(tool, body)


def main() -> None:
    typer_main(app, "tarfirst")
