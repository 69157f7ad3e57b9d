"""tarkit stats: what is in these shards — samples, bytes, fields, classes, image sizes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .progress import Progress, wanted
from .runner import report_skips, run, skip_log, typer_main

if TYPE_CHECKING:
    from tarkit.stream.distribution import Spread
    from tarkit.stream.summary import ClassHistogram, DatasetStats, Tally

app = declare.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Summarize shards: samples, shards and bytes; for each field, how many samples "
    "have it and its sizes (min, median, max); a histogram of each class field (cls, "
    "*.cls), named from classes.json beside the shards; image widths and heights, read "
    "from the images' headers without decoding them; and keys found in more than one "
    "shard.\n\n"
    "Samples, shards and bytes (and duplicate keys, when it lists keys) come from the "
    "manifest with --no-read, without reading a shard; every other figure needs a read of "
    "the shards, which is the default.\n\n"
    "Example: tarkit stats 'shards/train-{000000..000099}.tar'",
)
def stats(
    ctx: declare.Context,
    sources: Annotated[
        Optional[list[str]],
        declare.Argument(
            help="Shards (paths, http(s)://, s3://, pipe:CMD; brace patterns are expanded), "
            "a manifest (.json), or a directory (its manifest.json, else its shards). None, "
            "or '-': the stream on stdin.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, declare.Option("--json", help="Write the summary as one JSON object, for scripts.")
    ] = False,
    no_read: Annotated[
        bool,
        declare.Option(
            "--no-read",
            help="Read no shard: only what the manifest says (samples, shards, bytes, and "
            "duplicate keys when it lists keys). An error without a manifest.",
        ),
    ] = False,
    parallel: Annotated[
        int,
        declare.Option(
            "-p",
            "--parallel",
            help="Read N shards at once, in worker processes (worth it when reading takes "
            "more than a few seconds); the summary is the same as with -p 1.",
        ),
    ] = 1,
    classes: o.ClassNames = None,
    top: Annotated[
        int,
        declare.Option(
            "--top", help="Show at most N values of each class field, the most common (0: all)."
        ),
    ] = 20,
    strict: o.Strict = False,
    progress: o.ShowProgress = None,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.errors import UsageError
        from tarkit.processing.stats import dataset_stats
        from tarkit.storage import stdout_stream
        from tarkit.stream.stages import output_errors, write_all

        if top < 0:
            raise UsageError(f"--top must not be negative (got {top})")
        out = stdout_stream()
        skips = skip_log(tool)
        with Progress(tool, wanted(progress, to_stdout=True), unit="shards") as shown:
            samples = 0

            def on_shard(tally: Tally) -> None:
                nonlocal samples
                samples += tally.samples
                shown.note(f"{samples} samples")
                shown.advance()

            summary = dataset_stats(
                sources or [], read=not no_read, workers=parallel, classes=classes,
                strict=strict, skips=skips, on_shard=on_shard if shown.shown else None,
            )  # fmt: skip
        if as_json:
            import json

            text = json.dumps(summary.to_json(), indent=1) + "\n"
        else:
            text = "\n".join(summary_lines(summary, top)) + "\n"
        with output_errors("-"):
            write_all(out, text.encode("utf-8", "surrogateescape"))
        report_skips(tool, skips)
        return 0

    run(tool, body)


def summary_lines(summary: DatasetStats, top: int) -> list[str]:
    """The summary as aligned text, a section after another."""
    from tarkit.sizes import format_size
    from tarkit.stream.tsv import escape

    lines = []
    per_shard = summary.samples_per_shard
    shards = f"{summary.shards:,}"
    if per_shard is not None and summary.shards > 1:
        if per_shard.min == per_shard.max:
            shards += f" ({per_shard.min:,} samples a shard)"
        else:
            median = _approx(per_shard, f"{per_shard.median:,}")
            shards += f" ({per_shard.min:,} to {per_shard.max:,} samples a shard, median {median})"
    keys = "not known (the manifest lists none: leave out --no-read)"
    if summary.duplicate_keys is not None:
        checked = f"{summary.keys_checked:,} keys"
        if summary.keys_checked < summary.samples:
            checked = f"the first {checked}"
        keys = f"none among {checked}"
        if summary.duplicate_keys:
            keys = f"{summary.duplicate_keys:,} in more than one shard, among {checked}: "
            keys += ", ".join(escape(k) for k in summary.duplicate_examples)
            if summary.duplicate_keys > len(summary.duplicate_examples):
                keys += ", …"
    lines += _table(
        [
            ["shards", shards],
            ["samples", f"{summary.samples:,}"],
            ["bytes", f"{summary.bytes:,} ({format_size(summary.bytes)})"],
            ["duplicate keys", keys],
        ],
        right=(),
    )
    if not summary.read:
        lines += ["", "From the manifest alone: fields, classes and image sizes need a read "
                  "of the shards (leave out --no-read)."]  # fmt: skip
        return lines
    if summary.fields:
        rows = [["field", "samples", "share", "min size", "median", "max size", "total"]]
        for field in summary.fields:
            size = field.size
            rows.append([escape(field.name), f"{field.samples:,}", _share(field.samples, summary.samples),
                         format_size(size.min), _approx(size, format_size(size.median)),
                         format_size(size.max), format_size(size.total)])  # fmt: skip
        lines += ["", *_table(rows)]
    images = [f for f in summary.fields if f.images is not None]
    if images:
        rows = [["image", "images", "width min", "median", "max", "height min", "median", "max",
                 "no size"]]  # fmt: skip
        for field in images:
            assert field.images is not None
            width, height = field.images.width, field.images.height
            row = [escape(field.name), f"{field.images.images:,}"]
            for side in (width, height):
                row += ["", "", ""] if side is None else _sides(side)
            rows.append([*row, f"{field.images.unread:,}"])
        lines += ["", *_table(rows)]
    for histogram in summary.classes:
        lines += ["", *_histogram_lines(histogram, top)]
    return lines


def _histogram_lines(histogram: ClassHistogram, top: int) -> list[str]:
    from tarkit.stream.summary import LABEL_BYTES, LABEL_LIMIT
    from tarkit.stream.tsv import escape

    name = escape(histogram.field)
    if histogram.distinct is None:
        return [f"{name}: not a class field (more than {LABEL_LIMIT:,} distinct values, or one "
                f"longer than {LABEL_BYTES} bytes): no histogram"]  # fmt: skip
    counts = histogram.counts
    total = sum(c.samples for c in counts)
    shown = counts
    heading = f"{name}: {len(counts):,} values"
    if 0 < top < len(counts):
        shown = sorted(counts, key=lambda c: -c.samples)[:top]
        heading += f", the {top} most common"
    rows = [["value", "name", "samples", "share"]]
    named = any(c.name is not None for c in counts)
    for count in shown:
        rows.append([escape(count.label), escape(count.name or ""), f"{count.samples:,}",
                     _share(count.samples, total)])  # fmt: skip
    right = (2, 3)
    if not named:
        rows, right = [[row[0], *row[2:]] for row in rows], (1, 2)
    lines = [heading, *_table(rows, right)]
    if len(shown) < len(counts):
        rest = total - sum(c.samples for c in shown)
        lines.append(f"… {len(counts) - len(shown):,} more values, {rest:,} samples "
                     "(--top 0 shows them all)")  # fmt: skip
    return lines


def _table(rows: list[list[str]], right: tuple[int, ...] | None = None) -> list[str]:
    """Rows of cells as aligned lines: the first column to the left, the others to the
    right (or those in ``right``)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            at_right = i > 0 if right is None else i in right
            cells.append(cell.rjust(widths[i]) if at_right else cell.ljust(widths[i]))
        lines.append("  ".join(cells).rstrip())
    return lines


def _sides(spread: Spread) -> list[str]:
    return [f"{spread.min:,}", _approx(spread, f"{spread.median:,}"), f"{spread.max:,}"]


def _approx(spread: Spread, text: str) -> str:
    """``text`` (a median) marked as an estimate when it is one."""
    return text if spread.exact else f"≈{text}"


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def main() -> None:
    typer_main(app, "tarkit stats")
