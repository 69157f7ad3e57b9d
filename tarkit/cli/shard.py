"""tarkit shard: turn a directory, a CSV/TSV plan or a Python Dataset into shards."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Any, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .imports import load_function
from .progress import ShardProgressLine
from .runner import (
    interrupted,
    report_skips,
    run,
    shard_reporter,
    skip_log,
    typer_main,
    warn,
)

app = declare.Typer(add_completion=False, rich_markup_mode=None)


class Layout(str, Enum):
    auto = "auto"
    imagefolder = "imagefolder"
    tree = "tree"


@app.command(
    help="Turn SOURCE into shards: a directory in ImageFolder layout (class_x/xxx.jpg), any "
    "directory tree (files grouped by key, like tarcreate --dir), a CSV/TSV plan (like "
    "tarcreate), or the Dataset returned by --dataset module:function.\n\n"
    "Items are written in a seeded random order (--no-shuffle keeps the source's order), "
    "so that every shard holds a mix of classes; they are read and encoded in -p worker "
    "processes or on a Ray cluster (--engine ray), and the output is the same for any "
    "number of workers or nodes and from run to run. SOURCE may be in an object store "
    "(s3://bucket/train/). "
    "Shards are written under temporary names and renamed when complete. Files that "
    "already match -o are an error: --overwrite replaces them, --resume continues an "
    "interrupted run.\n\n"
    "Example: tarkit shard photos/ -o 'shards/train-%06d.tar' -s 500M "
    "--resize 256x256:crop --format jpg -p 2",
    no_args_is_help=True,
)
def shard(
    ctx: declare.Context,
    source: Annotated[
        Optional[str],
        declare.Argument(
            help="A directory or a .csv/.tsv plan; with --dataset, passed to the function.",
            show_default=False,
        ),
    ] = None,
    output: o.ShardPattern = "shard-%06d.tar",
    dataset: Annotated[
        Optional[str],
        declare.Option(
            "--dataset",
            help="package.module:function returning a map-style Dataset (or an iterable) "
            "of dicts or (x, label) pairs; called with SOURCE if one is given.",
            show_default=False,
        ),
    ] = None,
    layout: Annotated[
        Layout,
        declare.Option(
            "--layout",
            help="How to read a directory SOURCE. auto: ImageFolder when every file is an "
            "image in a class directory, a tree when no class directory holds an image or "
            "the other files belong to the images' samples, else an error (exit 2), as is a "
            "directory of splits (train/ and val/ holding class directories). "
            "imagefolder skips files that are not images in a class directory (exit 1).",
        ),
    ] = Layout.auto,  # fmt: skip
    delimiter: Annotated[
        Optional[str],
        declare.Option(
            "-d",
            "--delimiter",
            help="Plan delimiter (default: from .csv/.tsv).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    key: o.PlanKey = None,
    maxcount: o.MaxCount = 100_000,
    maxsize: o.MaxSize = "1G",
    shuffle: Annotated[
        Optional[bool],
        declare.Option(
            "--shuffle/--no-shuffle",
            help="Write the items in a random order seeded by --seed (the default), or in "
            "the source's order. An iterable --dataset is written in its own order.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    seed: Annotated[int, declare.Option("--seed", help="Seed of the shuffle.")] = 0,
    workers: Annotated[
        int,
        declare.Option(
            "-p",
            "--workers",
            help="local: DataLoader worker processes (0: none); ray: tasks at once (0: as "
            "many as the cluster runs).",
        ),
    ] = 0,
    engine: o.Engine = "local",
    address: o.RayAddress = None,
    num_cpus: o.NumCpus = 1.0,
    retries: Annotated[
        int,
        declare.Option(
            "--retries",
            help="Ray: further attempts for a task whose worker dies or whose shard "
            "cannot be written.",
        ),
    ] = 2,
    resize: Annotated[
        Optional[str],
        declare.Option(
            "--resize",
            help="Resize images: WxH fits inside and WxH^ covers (both keep the aspect "
            "ratio, so sizes differ), WxH:crop covers and crops the centre to exactly WxH (what "
            "batches of tensors need), WxH! stretches to exactly WxH; with --dataset, every "
            "image of every item.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    image_format: Annotated[
        Optional[str],
        declare.Option(
            "--format",
            help="Re-encode images as jpg, png or webp; the field takes the new "
            "extension (with --dataset: every image field, and the image of (x, label) "
            "pairs, else png).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    quality: Annotated[
        int, declare.Option("--quality", help="JPEG/WebP quality for re-encoded images (1-100).")
    ] = 90,
    verify: Annotated[
        bool,
        declare.Option(
            "--verify",
            help="Decode every image even when it is not re-encoded, so that one no reader "
            "can decode is an error (or, with --on-error skip, a reject) now.",
        ),
    ] = False,  # fmt: skip
    on_error: Annotated[
        str,
        declare.Option(
            "--on-error",
            help="An item that cannot be read, decoded or encoded: 'fail' (stop; the "
            "complete shards stay and --resume continues) or 'skip' it, list it in the "
            "rejects file and exit 1 at the end.",
        ),
    ] = "fail",  # fmt: skip
    rejects: Annotated[
        Optional[str],
        declare.Option(
            "--rejects",
            help="With --on-error skip: where to list the skipped items (index, source, "
            "cause; default: beside the shards, train-rejects.tsv for -o train-%06d.tar).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    overwrite: o.Overwrite = False,
    resume: o.Resume = False,
    start: o.FirstShard = 0,
    manifest: o.ManifestOut = None,
    classes: Annotated[
        Optional[str],
        declare.Option(
            "--classes",
            help="Where to save the ImageFolder class list (JSON; "
            "default: classes.json beside the shards).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    strict: Annotated[
        bool,
        declare.Option("--strict", help="Files the layout cannot use are errors, not warnings."),
    ] = False,
    progress: o.ShowProgress = None,
    verbose: o.Verbose = False,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from ..errors import UsageError
        from ..writing.files import NOT_AN_IMAGE
        from ..writing.from_dataset import is_map_style, shard_dataset
        from ..writing.from_files import shard_files
        from ..writing.huggingface import refuse_splits
        from ..writing.items import DatasetFactory
        from ..writing.rejects import Rejected, default_rejects

        rejected: list[Rejected] = []

        def on_reject(reject: Rejected) -> None:
            if not rejected:
                warn(tool, f"skipping item {reject.index} ({reject.source or 'no source'}): "
                           f"{reject.cause}")  # fmt: skip
            rejected.append(reject)

        display = ShardProgressLine(tool, progress)
        options: dict[str, Any] = dict(
            num_workers=workers, seed=seed, maxcount=maxcount, maxsize=maxsize,
            mode=o.write_mode(overwrite, resume), start=start, manifest=manifest,
            classes=classes, quality=quality, verify=verify, on_error=on_error,
            rejects=rejects, on_reject=on_reject, progress=display,
            on_shard=shard_reporter(tool) if verbose else None, engine=engine,
            address=address, num_cpus=num_cpus, retries=retries,
        )  # fmt: skip
        if rejects is not None and on_error != "skip":
            raise UsageError("--rejects goes with --on-error skip")
        skips = skip_log(tool)
        try:
            if dataset is not None:
                if key is not None:
                    raise UsageError("--key makes the keys of plan rows: it takes a .csv/.tsv "
                                     "SOURCE, not --dataset")  # fmt: skip
                factory = load_function("--dataset", dataset)
                # Each node of a cluster calls the function itself (its module must be
                # importable there): the dataset is not sent whole.
                items = DatasetFactory(factory, *([] if source is None else [source]))
                made = items.dataset
                refuse_splits(made)  # before the warning an iterable earns
                if engine == "local":
                    items = made
                order = shuffle
                if shuffle is None and not is_map_style(made):
                    warn(tool, "--dataset gives an iterable: its items are written in its own "
                               "order, not shuffled (return a map-style Dataset to shuffle)")  # fmt: skip
                    order = False
                result = shard_dataset(items, output, resize=resize, image_format=image_format,
                                       shuffle=order is not False, **options)  # fmt: skip
            elif source is None:
                raise UsageError("give a SOURCE directory or plan, or --dataset module:function")
            else:
                result = shard_files(
                    source, output, layout=layout.value, delimiter=delimiter, key_format=key,
                    resize=resize, image_format=image_format, strict=strict, skips=skips,
                    shuffle=shuffle is not False, warn=lambda message: warn(tool, message),
                    **options,
                )  # fmt: skip
        except BaseException:
            if interrupted():  # Ctrl-C or SIGTERM, whatever it raised on its way out
                sys.stderr.write(f"{tool}: {what_was_kept(output, overwrite, resume, start)}\n")
            raise
        finally:
            display.close()
        report_skips(tool, skips)
        if rejected:
            noun = "item" if len(rejected) == 1 else "items"
            where = rejects or default_rejects(output)
            warn(tool, f"skipped {len(rejected)} {noun} that failed (listed in {where})")
        if verbose:
            shards = "shard" if len(result.shards) == 1 else "shards"
            sys.stderr.write(f"{tool}: {result.samples} samples in {len(result.shards)} {shards}\n")
        # Files left out by an explicit --layout imagefolder earn 1, and so do items left
        # out by --on-error skip; what every layout skips (symlinks, files without a
        # field…) is only warned about, as in tarcreate.
        return 1 if skips.counts.get(NOT_AN_IMAGE) or rejected else 0

    run(tool, body)


def what_was_kept(output: str, overwrite: bool, resume: bool, start: int) -> str:
    """What an interrupted run kept (the complete shards under ``output``, as a run with
    --resume finds them) and how to go on from there."""
    from ..errors import TarkitError
    from ..writing.patterns import existing_shards

    if overwrite:
        return ("interrupted: none of this run's shards were kept (--overwrite replaces the "
                "earlier set only once the new one is complete); run the command again")  # fmt: skip
    try:
        kept = existing_shards(output, start)
    except TarkitError as exc:
        return f"interrupted; the complete shards could not be listed ({exc})"
    go_on = "run the same command again" if resume else "add --resume to the same command"
    if not kept:
        return "interrupted before the first shard was complete: nothing was kept"
    shards = f"{len(kept)} complete shards" if len(kept) > 1 else "1 complete shard"
    span = kept[0].url if len(kept) == 1 else f"{kept[0].url} … {kept[-1].url}"
    return f"interrupted: {shards} kept ({span}); {go_on} to continue after them"


def main() -> None:
    typer_main(app, "tarkit shard")
