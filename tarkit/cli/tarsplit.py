"""tarsplit: cut a stream of samples into shards at sample boundaries."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import options as o
from .runner import report_skips, run, skip_log, typer_main

app = typer.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Cut the samples of all inputs into shards of at most N samples and SIZE bytes.\n\n"
    "Each shard is written under a temporary name and renamed when complete; no empty "
    "shard is ever written. On an input error the complete shards stay, the unfinished "
    "one is removed, and the exit status is 2.\n\n"
    "Example: tarcat data-*.tar | tarsplit -s 500M -o 'out/train-%06d.tar' "
    "--manifest out/manifest.json",
    no_args_is_help=False,
)
def tarsplit(
    ctx: typer.Context,
    inputs: o.Inputs = None,
    output: Annotated[
        str,
        typer.Option(
            "-o",
            "--output",
            help="Shard name pattern with %06d or {shard:06d}; a .gz/.bz2/.xz/.zst ending "
            "compresses each shard; s3://… and other fsspec URLs are uploaded when complete.",
        ),
    ] = "shard-%06d.tar",
    maxcount: Annotated[
        int, typer.Option("-c", "--maxcount", help="At most this many samples per shard.")
    ] = 100_000,
    maxsize: Annotated[
        str,
        typer.Option(
            "-s",
            "--maxsize",
            help="At most this many bytes per shard, headers, padding and end marker "
            "included (uncompressed tar bytes for compressed shards): 1e9, 500M, 1G, 64K. "
            "A single larger sample gets a shard of its own.",
        ),
    ] = "1G",
    maxshards: Annotated[
        Optional[int],
        typer.Option(
            "--maxshards",
            help="Fail (exit 2) when the input needs more than N shards; the first N stay.",
            show_default=False,
        ),
    ] = None,
    start: Annotated[int, typer.Option("--start", help="Number of the first shard.")] = 0,
    post: Annotated[
        Optional[str],
        typer.Option(
            "--post",
            help="Bash command run after each shard is complete, {} replaced by its "
            "shell-quoted path, e.g. 'gsutil cp {} gs://b/ && rm {}'. A failure stops "
            "with exit 2.",
            show_default=False,
        ),
    ] = None,
    manifest: Annotated[
        Optional[str],
        typer.Option(
            "--manifest",
            help="Write the JSON manifest of the shards (name, samples, bytes, sha256).",
            show_default=False,
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Print each finished shard on stderr.")
    ] = False,
    strict: o.Strict = False,
    ignore_zeros: o.IgnoreZeros = False,
    allow_empty: o.AllowEmpty = False,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        import sys

        from ..manifest import ShardInfo
        from ..pipeline import read_samples
        from ..shards import ShardWriter
        from ..sizes import format_size

        def report(shard: ShardInfo) -> None:
            noun = "sample" if shard.samples == 1 else "samples"
            size = format_size(shard.bytes)
            sys.stderr.write(f"{tool}: {shard.url}: {shard.samples} {noun}, {size}\n")
            sys.stderr.flush()

        writer = ShardWriter(
            output, maxcount=maxcount, maxsize=maxsize, maxshards=maxshards, start=start,
            post=post, manifest=manifest, on_shard=report if verbose else None,
        )  # fmt: skip
        skips = skip_log(tool)
        samples = read_samples(
            inputs or [], strict=strict, skips=skips,
            ignore_zeros=ignore_zeros, allow_empty=allow_empty,
        )  # fmt: skip
        with writer:
            writer.write_all(samples)
        report_skips(tool, skips)
        return 0

    run(tool, body)


def main() -> None:
    typer_main(app, "tarsplit")
