"""tarsplit: cut a stream of samples into shards at sample boundaries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .progress import Progress, wanted
from .runner import report_skips, run, shard_reporter, skip_log, typer_main, warn

if TYPE_CHECKING:
    from tarkit.format.manifest import ShardInfo

app = declare.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Cut the samples of all inputs into shards of at most N samples and SIZE bytes.\n\n"
    "Each shard is written under a temporary name and renamed when complete; no empty "
    "shard is ever written. On an input error the complete shards stay, the unfinished "
    "one is removed (a warning names it and the complete samples it held), and the exit "
    "status is 2. Files that already match -o are an error: --overwrite replaces them, "
    "--resume continues an interrupted run.\n\n"
    "With --num-shards N and --total (a count, or the manifest of the inputs) the "
    "samples are cut into exactly N shards of equal counts instead.\n\n"
    "Example: tarcat data-*.tar | tarsplit -s 500M -o 'out/train-%06d.tar' "
    "--manifest out/manifest.json",
    no_args_is_help=False,
)
def tarsplit(
    ctx: declare.Context,
    inputs: o.Inputs = None,
    output: o.ShardPattern = "shard-%06d.tar",
    maxcount: o.MaxCount = 100_000,
    maxsize: o.MaxSize = "1G",
    maxshards: Annotated[
        Optional[int],
        declare.Option(
            "--maxshards",
            help="Fail (exit 2) when the input needs more than N shards; the first N stay.",
            show_default=False,
        ),
    ] = None,
    num_shards: Annotated[
        Optional[int],
        declare.Option(
            "--num-shards",
            help="Cut into exactly N shards of equal sample counts (the first ones one "
            "larger when N does not divide the total); needs --total, and takes the place "
            "of -c and -s.",
            show_default=False,
        ),
    ] = None,
    total: Annotated[
        Optional[str],
        declare.Option(
            "--total",
            metavar="N|MANIFEST",
            help="How many samples the inputs hold: a number, or a manifest of the inputs "
            "(from tarindex or --manifest) whose counts add up to it. Checked: another "
            "count is an error (exit 2). Also gives the progress line its time left.",
            show_default=False,
        ),
    ] = None,
    start: o.FirstShard = 0,
    post: Annotated[
        Optional[str],
        declare.Option(
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
    progress: o.ShowProgress = None,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.storage import location

        from ..errors import InputError, SourceError, UsageError
        from ..stream.stages import read_samples
        from ..writing.equal_shards import UNLIMITED_SIZE, checked_total, write_equal_shards
        from ..writing.patterns import finished_earlier
        from ..writing.shard_writer import ShardWriter

        mode = o.write_mode(overwrite, resume)
        expected = None if total is None else input_total(total)
        if num_shards is not None and mode == "resume":
            raise UsageError("--num-shards cuts the whole input at once: it does not resume")
        if num_shards is not None:
            if expected is None:
                raise UsageError(
                    "--num-shards needs --total N or --total MANIFEST: a stream cannot be "
                    "cut into equal shards before its length is known"
                )
            given = [name for name, option in (("-c", "maxcount"), ("-s", "maxsize"))
                     if declare.given(ctx, option)]  # fmt: skip
            if given:
                raise UsageError(f"--num-shards sets the shards' counts: leave out {given[0]}")
        reporter = shard_reporter(tool) if verbose else None
        shown = Progress(tool, wanted(progress), total=expected)
        shards = 0

        def on_shard(shard: ShardInfo) -> None:
            nonlocal shards
            shards += 1
            shown.note(f"{shards} shard{'' if shards == 1 else 's'}")
            if reporter is not None:
                reporter(shard)

        writer = ShardWriter(
            output, maxcount=maxcount, maxsize=UNLIMITED_SIZE if num_shards else maxsize,
            maxshards=maxshards, start=start, post=post, manifest=manifest, on_shard=on_shard,
            # only a manifest shows them (a resumed one lists the kept shards too)
            checksums=manifest is not None, mode=mode,
        )  # fmt: skip
        if writer.finished_commit:
            warn(tool, finished_earlier(writer.pattern))
        skips = skip_log(tool)
        samples = shown.count(read_samples(
            inputs or [], strict=strict, skips=skips,
            ignore_zeros=ignore_zeros, allow_empty=allow_empty,
        ))  # fmt: skip
        source = "the inputs" if inputs and len(inputs) > 1 else location((inputs or ["-"])[0]).name
        try:
            with shown, writer:
                if num_shards is not None:
                    write_equal_shards(writer, samples, expected, num_shards, source)  # type: ignore[arg-type]
                else:
                    if expected is not None:
                        samples = checked_total(samples, expected, source)
                    # --resume: the samples of the kept shards are read again and checked,
                    # not written
                    writer.write_all(writer.skip_kept(samples))
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


def input_total(spec: str) -> int:
    """--total: a number of samples, or the sum of a manifest's counts."""
    from ..errors import UsageError

    try:
        number = int(spec)
    except ValueError:
        from tarkit.storage import load_manifest

        return load_manifest(spec).samples
    if number < 0:
        raise UsageError(f"--total must not be negative (got {number})")
    return number


def main() -> None:
    typer_main(app, "tarsplit")
