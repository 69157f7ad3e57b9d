"""tarshow: per sample, the key and a line per field (name, size, preview); or a contact sheet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

from ..stream.show import IMAGE_EXTENSIONS
from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .runner import report_skips, run, skip_log, typer_main

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..format.samples import Sample, SkipLog

app = declare.Typer(add_completion=False, rich_markup_mode=None)

GRID_COUNT = 16
DRAWING_COLUMNS = 60


@app.command(
    help="Show samples: the key, then per field its name, size and a preview (text: the "
    "first 60 characters, escaped; JSON: compact; image: WIDTHxHEIGHT MODE; other "
    "bytes: the first 16 in hex).\n\n"
    f"Image fields are recognised by their last extension ({', '.join(IMAGE_EXTENSIONS)}).\n\n"
    "Examples: tarshow -c 3 data-000.tar; tarshow --grid sheet.png data-000.tar; "
    "tarshow --grid sheet.png --caption 'cls txt' data-000.tar",
)
def tarshow(
    ctx: declare.Context,
    inputs: o.Inputs = None,
    count: Annotated[
        Optional[int],
        declare.Option(
            "-c",
            "--count",
            help=f"Stop after N samples (and stop reading); with --grid, default {GRID_COUNT}.",
            show_default=False,
        ),
    ] = None,
    fields: o.Fields = None,
    position: Annotated[
        Optional[int],
        declare.Option(
            "--position",
            metavar="N",
            help="Show only sample N (from 0; negative from the end). Over an indexed "
            "dataset (a manifest or its directory), or archives with indexes beside them, "
            "only that sample is read.",
            show_default=False,
        ),
    ] = None,
    key: Annotated[
        Optional[str],
        declare.Option(
            "--key",
            help="Show only the (first) sample with this key, read alone when indexed as "
            "for --position.",
            show_default=False,
        ),
    ] = None,
    grid: Annotated[
        Optional[str],
        declare.Option(
            "--grid",
            metavar="OUT.png",
            help="Write a contact sheet of the first image of each sample, captioned with "
            "its key, instead of the text ('-' is stdout).",
            show_default=False,
        ),
    ] = None,
    caption: Annotated[
        Optional[str],
        declare.Option(
            "--caption",
            metavar="FIELDS",
            help="With --grid: caption each tile with these fields, a line each, instead of "
            "the key (e.g. 'cls txt'; ';' separates alternatives, __key__ is the key); a "
            "class (cls) is named from classes.json beside the first input.",
            show_default=False,
        ),
    ] = None,
    classes: Annotated[
        Optional[str],
        declare.Option(
            "--classes",
            metavar="FILE",
            help="The class names for --caption (a JSON list; default: classes.json beside "
            "the first input, when there is one).",
            show_default=False,
        ),
    ] = None,
    images: Annotated[
        bool,
        declare.Option(
            "--images",
            help="Draw image fields in the terminal (24-bit colour, Unicode half blocks).",
        ),
    ] = False,
    strict: o.Strict = False,
    ignore_zeros: o.IgnoreZeros = False,
    allow_empty: o.AllowEmpty = False,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        import shutil

        from tarkit.storage import stdout_stream

        from ..errors import UsageError
        from ..format.field_spec import parse_field_spec, select_fields
        from ..stream.stages import output_errors, take

        if grid is not None and images:
            raise UsageError("--grid and --images do not go together")
        if grid is None and (caption is not None or classes is not None):
            raise UsageError("--caption and --classes go with --grid")
        if position is not None and key is not None:
            raise UsageError("--position and --key each name one sample: give one of them")
        skips = skip_log(tool)
        samples = _samples(inputs or [], position, key, skips, strict=strict,
                           ignore_zeros=ignore_zeros, allow_empty=allow_empty)  # fmt: skip
        spec = parse_field_spec(fields) if fields is not None else None
        if grid is not None:
            from ..stream.show import caption_classes, extension
            from ..stream.show import grid as write_grid

            columns = parse_field_spec(caption) if caption is not None else None
            names = None
            if classes is not None or any(extension(f) == "cls" for c in columns or [] for f in c):
                names = caption_classes(inputs or [], classes)
            # -f picks the image; captions are taken from the whole sample.
            write_grid(take(samples, GRID_COUNT if count is None else count), grid,
                       image_fields=spec, caption=columns, class_names=names)  # fmt: skip
        else:
            from ..stream.show import describe
            from ..stream.tsv import write_lines

            if spec is not None:
                samples = (select_fields(s, spec) for s in samples)
            out = stdout_stream()
            width = max(1, min(DRAWING_COLUMNS, shutil.get_terminal_size().columns - 2))
            # One string per sample, so a sample is written whole or not at all.
            lines = (
                "".join(line + "\n" for line in describe(sample, images=images, columns=width))
                for sample in take(samples, count)
            )
            with output_errors("-"):
                write_lines(lines, out)
        report_skips(tool, skips)
        return 0

    run(tool, body)


def _samples(
    inputs: list[str],
    position: int | None,
    key: str | None,
    skips: SkipLog,
    *,
    strict: bool,
    ignore_zeros: bool,
    allow_empty: bool,
) -> Iterator[Sample]:
    """The samples to show: all of them, or the one ``position`` or ``key`` names, read
    by the indexes where there are some (a dataset always; archives for one sample)."""
    from ..stream.picking import (
        describe_inputs,
        open_picking,
        pick_from_stream,
        sample_at,
        sample_with_key,
        whole_archive_options,
    )
    from ..stream.stages import read_samples

    one = position is not None or key is not None
    whole = whole_archive_options(ignore_zeros=ignore_zeros, allow_empty=allow_empty)
    picking = open_picking(inputs, archives=one, whole=whole)
    if picking is None:
        samples = read_samples(inputs, strict=strict, skips=skips, ignore_zeros=ignore_zeros,
                               allow_empty=allow_empty)  # fmt: skip
        if not one:
            return samples
        return iter([pick_from_stream(samples, describe_inputs(inputs), position=position,
                                      key=key)])  # fmt: skip
    if position is not None:
        return iter([sample_at(picking, position, skips=skips, strict=strict)])
    if key is not None:
        return iter([sample_with_key(picking, key, skips=skips, strict=strict)])
    shards = picking.shards  # a dataset's samples in order, each read alone
    return shards.samples(range(len(shards)), skips=skips, strict=strict)


def main() -> None:
    typer_main(app, "tarshow")
