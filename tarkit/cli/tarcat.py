"""tarcat: concatenate the samples of tar shards into one archive."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .progress import Progress, wanted, writes_stdout
from .runner import report_skips, run, skip_log, typer_main

if TYPE_CHECKING:
    from ..stream.picking import Picking

app = declare.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Concatenate the samples of all inputs, in order, into one tar archive.\n\n"
    "Example: tarcat -c 100 -f 'jpg;png cls' data-{000..009}.tar -o small.tar",
    no_args_is_help=False,
)
def tarcat(
    ctx: declare.Context,
    inputs: o.Inputs = None,
    output: o.Output = "-",
    count: o.Count = None,
    skip: Annotated[int, declare.Option("--skip", help="Skip the first N samples.")] = 0,
    slice_: Annotated[
        Optional[str],
        declare.Option(
            "--slice",
            help="Python slice START:STOP[:STEP] on the sample index.",
            show_default=False,
        ),
    ] = None,
    fields: o.Fields = None,
    shuffle: Annotated[
        int, declare.Option("--shuffle", help="Shuffle with a buffer of this many samples.")
    ] = 0,
    seed: Annotated[
        int, declare.Option("--seed", help="Seed for --shuffle, --mix and --fraction.")
    ] = 0,
    where: Annotated[
        Optional[str],
        declare.Option(
            "--where",
            metavar="EXPR",
            help="Keep the samples for which this expression holds, e.g. "
            "'cls in (1, 2) and json.height > 200' or 'key ~ \"^train/\"' "
            "(grammar in docs/tarcat.md). --where, --keys and --fraction apply before "
            "--skip, --slice, -f, --shuffle and -c.",
            show_default=False,
        ),
    ] = None,
    keys: Annotated[
        Optional[str],
        declare.Option(
            "--keys",
            metavar="FILE",
            help="Keep the samples whose key is listed in this file, one per line "
            "('-' for stdin when the archives come from elsewhere). Over an indexed "
            "dataset (a manifest or its directory), or archives with indexes beside them, "
            "only the listed samples are read.",
            show_default=False,
        ),
    ] = None,
    allow_missing: Annotated[
        bool,
        declare.Option(
            "--allow-missing",
            help="With --keys over a dataset: leave out listed keys that no sample has "
            "instead of failing (archives always leave them out).",
        ),
    ] = False,
    fraction: Annotated[
        Optional[float],
        declare.Option(
            "--fraction",
            metavar="F",
            help="Keep each sample with this probability (0 to 1), drawn from a hash of "
            "--seed and its key alone: the same samples in every run, in any order and "
            "however the shards are cut.",
            show_default=False,
        ),
    ] = None,
    invert: Annotated[
        bool,
        declare.Option(
            "--invert",
            help="With --fraction: keep exactly the samples it drops instead (the other "
            "side of a split: --fraction 0.9 --seed 1 for train, add --invert for val).",
        ),
    ] = False,
    interleave: Annotated[
        bool,
        declare.Option(
            "--interleave",
            help="Take one sample from each input in turn (round robin) until all are done, "
            "instead of one input after the other.",
        ),
    ] = False,
    mix: Annotated[
        Optional[str],
        declare.Option(
            "--mix",
            help="Weights W1,W2,… one per input: draw each sample from an input chosen at "
            "random (seeded by --seed) in proportion to its weight, until one input runs out.",
            show_default=False,
        ),
    ] = None,
    until_all: Annotated[
        bool, declare.Option("--until-all", help="With --mix: go on until every input runs out.")
    ] = False,
    parallel: Annotated[
        int,
        declare.Option(
            "-p",
            "--parallel",
            help="Read N inputs at once (threads reading ahead); the output is the same as "
            "with -p 1.",
        ),
    ] = 1,
    strict: o.Strict = False,
    ignore_zeros: o.IgnoreZeros = False,
    allow_empty: o.AllowEmpty = False,
    progress: o.ShowProgress = None,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.storage import Sink

        from ..errors import UsageError
        from ..format.field_spec import parse_field_spec, select_fields
        from ..stream.combining import combine_inputs
        from ..stream.picking import whole_archive_options
        from ..stream.stages import shuffle_samples, slice_samples, take, write_samples

        if skip < 0:
            raise UsageError("--skip must not be negative")
        skips = skip_log(tool)
        picking = _picking(inputs or [], keys, whole_archive_options(
            interleave=interleave, mix=mix is not None, ignore_zeros=ignore_zeros,
            allow_empty=allow_empty,
        ))  # fmt: skip
        keep = None
        if where is not None or keys is not None or fraction is not None or invert:
            from ..stream.filters import sample_filter

            keep = sample_filter(expression=where, keys=None if picking else keys,
                                 fraction=fraction, seed=seed, invert=invert,
                                 inputs=inputs or [])  # fmt: skip
        if picking is not None:
            from ..stream.filters import read_keys
            from ..stream.picking import listed_samples

            assert keys is not None
            samples = listed_samples(picking, read_keys(keys), missing_ok=allow_missing,
                                     skips=skips, strict=strict)  # fmt: skip
        else:
            samples = combine_inputs(
                inputs or [], interleaved=interleave, weights=mix, seed=seed,
                until_all=until_all, parallel=parallel, strict=strict, skips=skips,
                ignore_zeros=ignore_zeros, allow_empty=allow_empty,
            )  # fmt: skip
        if keep is not None:
            from ..stream.filters import filter_samples

            samples = filter_samples(samples, keep)
        if skip:
            samples = slice_samples(samples, slice(skip, None))
        if slice_:
            samples = slice_samples(samples, slice_)
        if fields:
            spec = parse_field_spec(fields)
            samples = (s for s in map(lambda s: select_fields(s, spec), samples) if s.fields)
        if shuffle:
            samples = shuffle_samples(samples, shuffle, seed)
        samples = take(samples, count)
        with Progress(tool, wanted(progress, to_stdout=writes_stdout(output)),
                      total=count) as shown:  # fmt: skip
            write_samples(shown.count(samples), Sink(output))
        report_skips(tool, skips)
        return 0

    run(tool, body)


def _picking(inputs: list[str], keys: str | None, whole: list[str]) -> Picking | None:
    """The inputs opened to read the samples ``--keys`` lists alone (docs/tarcat.md,
    "Random access"), or None to read them as streams; a dataset without --keys is
    refused."""
    from ..errors import UsageError
    from ..stream.picking import named_dataset, open_picking

    if keys is None:
        dataset = named_dataset(inputs)
        if dataset is not None:
            raise UsageError(
                f"{dataset}: tarcat reads a dataset (a manifest or its directory) by its "
                "index, with --keys FILE; to read all of it, name its shards"
            )
        return None
    return open_picking(inputs, whole=whole)


def main() -> None:
    typer_main(app, "tarcat")
