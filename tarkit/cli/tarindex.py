"""tarindex: write the dataset manifest of shards (counts, sizes, sha256), and with -o their
shard indexes: any shards made random-access ready."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .progress import Progress, wanted, writes_stdout
from .runner import report_skips, run, skip_log, typer_main

if TYPE_CHECKING:
    from tarkit.format.manifest import ShardInfo

app = declare.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Write the manifest of the shards: for each, its URL or path, sample count, byte "
    "size and sha256. With -o FILE, also the index of every uncompressed shard, so that "
    "any sample can be read alone (the manifest is then version 2, with a columns file "
    "beside it). Each shard is read whole, once; one that does not read cleanly is an "
    "error and no manifest is written.\n\n"
    "Example: tarindex 'shards/train-{000000..000099}.tar' -o shards/manifest.json",
    no_args_is_help=True,
)
def tarindex(
    ctx: declare.Context,
    shards: Annotated[
        list[str],
        declare.Argument(
            help="Shards: paths, pipe:CMD, http(s)://, s3:// (brace patterns are expanded).",
            show_default=False,
        ),
    ],
    output: Annotated[
        Optional[str],
        declare.Option(
            "-o",
            "--output",
            help="Write the manifest here (atomically; s3:// and other fsspec URLs are "
            "uploaded) instead of stdout, with the shards' indexes: beside the shards when "
            "they are one numbered pattern beside or below it, else in index/ beside it. "
            "Local shards beside or below it are named relative to it.",
            show_default=False,
        ),
    ] = None,
    offsets: Annotated[
        bool,
        declare.Option(
            "--offsets",
            help="Record each sample's key and the byte offset of its first header in the "
            "uncompressed tar, so loaders can start reading mid-shard: a version 1 "
            "manifest, without indexes.",
        ),
    ] = False,
    strict: o.Strict = False,
    progress: o.ShowProgress = None,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.storage import Sink, expand_inputs, written_in_place
        from tarkit.stream.stages import output_errors, write_all
        from tarkit.writing.index import index_set, index_shards

        skips = skip_log(tool)
        with Progress(tool, wanted(progress, to_stdout=writes_stdout(output)), unit="shards",
                      total=len(expand_inputs(shards))) as shown:  # fmt: skip
            samples = 0

            def on_shard(shard: ShardInfo) -> None:
                nonlocal samples
                samples += shard.samples
                shown.note(f"{samples} samples")
                shown.advance()

            told = on_shard if shown.shown else None
            if output is not None and not offsets and not written_in_place(output):
                index_set(shards, output, strict=strict, skips=skips, on_shard=told)
                report_skips(tool, skips)
                return 0
            manifest = index_shards(shards, offsets=offsets, manifest_path=output,
                                    strict=strict, skips=skips, on_shard=told)  # fmt: skip
        # Version 1 (stdout cannot carry a columns file): a file or object appears whole;
        # a FIFO or device is written in place.
        sink = Sink(output)
        try:
            with output_errors(sink):
                write_all(sink.stream, manifest.to_bytes())
                sink.commit()
        except BaseException:
            sink.abort()
            raise
        report_skips(tool, skips)
        return 0

    run(tool, body)


def main() -> None:
    typer_main(app, "tarindex")
