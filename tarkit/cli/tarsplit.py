"""tarsplit: cut a stream of samples into shards at sample boundaries."""

from __future__ import annotations

from typing import Annotated, Optional

from . import declare as typer  # typer itself only when needed: declare.py
from . import options as o
from .runner import report_skips, run, shard_reporter, skip_log, typer_main, warn

app = typer.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Cut the samples of all inputs into shards of at most N samples and SIZE bytes.\n\n"
    "Each shard is written under a temporary name and renamed when complete; no empty "
    "shard is ever written. On an input error the complete shards stay, the unfinished "
    "one is removed (a warning names it and the complete samples it held), and the exit "
    "status is 2. Files that already match -o are an error: --overwrite replaces them, "
    "--resume continues an interrupted run.\n\n"
    "Example: tarcat data-*.tar | tarsplit -s 500M -o 'out/train-%06d.tar' "
    "--manifest out/manifest.json",
    no_args_is_help=False,
)
def tarsplit(
    ctx: typer.Context,
    inputs: o.Inputs = None,
    output: o.ShardPattern = "shard-%06d.tar",
    maxcount: o.MaxCount = 100_000,
    maxsize: o.MaxSize = "1G",
    maxshards: Annotated[
        Optional[int],
        typer.Option(
            "--maxshards",
            help="Fail (exit 2) when the input needs more than N shards; the first N stay.",
            show_default=False,
        ),
    ] = None,
    start: o.FirstShard = 0,
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
    manifest: o.ManifestOut = None,
    overwrite: o.Overwrite = False,
    resume: o.Resume = False,
    verbose: o.Verbose = False,
    strict: o.Strict = False,
    ignore_zeros: o.IgnoreZeros = False,
    allow_empty: o.AllowEmpty = False,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        import itertools

        from ..errors import InputError, SourceError
        from ..stream.stages import read_samples
        from ..writing.shard_writer import ShardWriter

        mode = o.write_mode(overwrite, resume)
        writer = ShardWriter(
            output, maxcount=maxcount, maxsize=maxsize, maxshards=maxshards, start=start,
            post=post, manifest=manifest, on_shard=shard_reporter(tool) if verbose else None,
            # only a manifest shows them (a resumed one lists the kept shards too)
            checksums=manifest is not None, mode=mode,
        )  # fmt: skip
        skips = skip_log(tool)
        samples = read_samples(
            inputs or [], strict=strict, skips=skips,
            ignore_zeros=ignore_zeros, allow_empty=allow_empty,
        )  # fmt: skip
        try:
            with writer:
                # --resume: the samples of the complete shards are read again, not written
                writer.write_all(itertools.islice(samples, writer.samples_done, None))
        except (InputError, SourceError):
            # The complete samples of the removed shard are lost to this run: say so,
            # above the error line.
            if writer.discarded is not None and writer.discarded.samples:
                warn(tool, writer.discarded.describe(writer.samples_done))
            elif mode == "overwrite":
                warn(tool, "the new shards were removed: the files that matched "
                           f"{output} are as they were")  # fmt: skip
            raise
        report_skips(tool, skips)
        return 0

    run(tool, body)


def main() -> None:
    typer_main(app, "tarsplit")
