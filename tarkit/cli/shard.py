"""tarkit shard: turn a directory, a CSV/TSV plan or a Python Dataset into shards."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Optional

import typer

from . import options as o
from .runner import run, typer_main, warn

app = typer.Typer(add_completion=False, rich_markup_mode=None)


class Layout(str, Enum):
    auto = "auto"
    imagefolder = "imagefolder"
    tree = "tree"


@app.command(
    help="Turn SOURCE into shards: a directory in ImageFolder layout (class_x/xxx.jpg), any "
    "directory tree (files grouped by key, like tarcreate --dir), a CSV/TSV plan (like "
    "tarcreate), or the Dataset returned by --dataset module:function.\n\n"
    "Items are read and encoded in -p worker processes; the output is the same for any "
    "number of workers and from run to run. Shards are written under temporary names and "
    "renamed when complete; --resume continues an interrupted run.\n\n"
    "Example: tarkit shard photos/ -o 'shards/train-%06d.tar' -s 500M --shuffle "
    "--resize 256x256^ --format jpg -p 2",
    no_args_is_help=True,
)
def shard(
    ctx: typer.Context,
    source: Annotated[
        Optional[str],
        typer.Argument(
            help="A directory or a .csv/.tsv plan; with --dataset, passed to the function.",
            show_default=False,
        ),
    ] = None,
    output: o.ShardPattern = "shard-%06d.tar",
    dataset: Annotated[
        Optional[str],
        typer.Option(
            "--dataset",
            help="package.module:function returning a map-style Dataset (or an iterable) "
            "of dicts or (x, label) pairs; called with SOURCE if one is given.",
            show_default=False,
        ),
    ] = None,
    layout: Annotated[
        Layout,
        typer.Option(
            "--layout",
            help="How to read a directory SOURCE. auto: ImageFolder when every file is an "
            "image in a class directory, a tree when no class directory holds an image or "
            "the other files belong to the images' samples, else an error (exit 2). "
            "imagefolder skips files that are not images in a class directory (exit 1).",
        ),
    ] = Layout.auto,  # fmt: skip
    delimiter: Annotated[
        Optional[str],
        typer.Option(
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
        bool, typer.Option("--shuffle", help="Write the items in a seeded random order.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed for --shuffle.")] = 0,
    workers: Annotated[
        int, typer.Option("-p", "--workers", help="DataLoader worker processes (0: none).")
    ] = 0,
    resize: Annotated[
        Optional[str],
        typer.Option(
            "--resize",
            help="Resize images: WxH fits inside, WxH! exactly, WxH^ "
            "covers (keeps the aspect ratio); with --dataset, every image of every item.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    image_format: Annotated[
        Optional[str],
        typer.Option(
            "--format",
            help="Re-encode images as jpg, png or webp; the field takes the new "
            "extension (with --dataset: every image field, and the image of (x, label) "
            "pairs, else png).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    quality: Annotated[
        int, typer.Option("--quality", help="JPEG/WebP quality for re-encoded images (1-100).")
    ] = 90,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Keep the complete shards of an interrupted run with "
            "the same options and continue after them.",
        ),
    ] = False,  # fmt: skip
    start: o.FirstShard = 0,
    manifest: o.ManifestOut = None,
    classes: Annotated[
        Optional[str],
        typer.Option(
            "--classes",
            help="Where to save the ImageFolder class list (JSON; "
            "default: classes.json beside the shards).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Files the layout cannot use are errors, not warnings."),
    ] = False,
    progress: Annotated[
        Optional[bool],
        typer.Option(
            "--progress/--no-progress",
            help="Progress line on stderr (default: when stderr is a terminal).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    verbose: o.Verbose = False,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        import os

        from ..errors import UsageError
        from ..format.encoding import ImageTransform
        from ..writing.from_dataset import shard_dataset
        from .tarsplit import shard_reporter

        # Files read from SOURCE are transformed as they are read; a Dataset's items by
        # shard_dataset, after they become samples.
        transform = ImageTransform(resize, image_format, quality)
        status = 0
        if key is not None and (dataset is not None or (source and os.path.isdir(source))):
            raise UsageError("--key makes the keys of plan rows: it takes a .csv/.tsv SOURCE")
        if dataset is not None:
            items = load_factory(dataset, source)
        elif source is None:
            raise UsageError("give a SOURCE directory or plan, or --dataset module:function")
        else:
            items = open_files(source, layout.value, transform, delimiter, key)
            status = _report_skipped(tool, source, items, strict)
        result = shard_dataset(
            items, output, num_workers=workers, shuffle=shuffle, seed=seed, maxcount=maxcount,
            maxsize=maxsize, resume=resume, start=start, manifest=manifest, quality=quality,
            resize=resize if dataset is not None else None,
            image_format=image_format if dataset is not None else None,
            progress=progress, on_shard=shard_reporter(tool) if verbose else None,
        )  # fmt: skip
        class_names = getattr(items, "classes", None)
        if isinstance(class_names, list):
            save_classes(class_names, classes or classes_beside(output))
        if verbose:
            import sys

            shards = "shard" if len(result.shards) == 1 else "shards"
            sys.stderr.write(f"{tool}: {result.samples} samples in {len(result.shards)} {shards}\n")
        return status

    run(tool, body)


def open_files(
    source: str, layout: str, transform: Any, delimiter: str | None, key: str | None = None
) -> Any:
    """The dataset for a directory or plan SOURCE (``key``: the plan's key format)."""
    import os

    from ..errors import SourceError
    from ..writing.file_datasets import FileTree, ImageFolder, PlanDataset, detect_layout

    if os.path.isdir(source):
        if layout == "auto":
            layout = detect_layout(source)
        if layout == "imagefolder":
            return ImageFolder(source, transform)
        return FileTree(source, transform)
    if not os.path.exists(source):
        raise SourceError(f"{source}: no such file or directory")
    return PlanDataset(source, transform, delimiter, key_format=key)


def load_factory(spec: str, source: str | None) -> Any:
    """Import ``package.module:function`` (the current directory first on the path) and
    call it, with ``source`` when one is given."""
    import importlib
    import os
    import sys

    from ..errors import UsageError

    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise UsageError(f"--dataset {spec!r}: expected package.module:function")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--dataset {spec!r}: cannot import {module_name}: {exc}") from None
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise UsageError(f"--dataset {spec!r}: {module_name} has no function {function_name}")
    return factory(source) if source is not None else factory()


def _report_skipped(tool: str, source: str, items: Any, strict: bool) -> int:
    """Warn about the files the layout leaves out; the exit status they earn.

    A tree skips files without a field (no dot in the name), with a warning, as
    ``tarcreate --dir`` does (status 0). ImageFolder, only ever chosen by an explicit
    ``--layout imagefolder`` when there are such files, skips the files that are not
    images in a class directory: counted, reported, status 1. ``--strict`` makes
    either an error.
    """
    from ..writing.file_datasets import ImageFolder

    skipped = getattr(items, "skipped", [])
    if not skipped:
        return 0
    from ..errors import InputError

    image_folder = isinstance(items, ImageFolder)
    why = "not an image in a class directory" if image_folder else "no dot in the name: no field"
    count = len(skipped)
    files = "file" if count == 1 else "files"
    if strict:
        raise InputError(f"{skipped[0]}: {why} ({count} such {files}); --strict makes that "
                         "an error", source=source)  # fmt: skip
    warn(tool, f"{source}: skipping {count} {files} ({why}), the first: {skipped[0]}")
    return 1 if image_folder else 0


def classes_beside(pattern: str) -> str:
    """``classes.json`` in the directory of the shards.

    >>> classes_beside("out/train-%06d.tar"), classes_beside("s3://b/d/s-%d.tar")
    ('out/classes.json', 's3://b/d/classes.json')
    """
    import posixpath

    head = posixpath.dirname(pattern)
    return posixpath.join(head, "classes.json") if head else "classes.json"


def save_classes(names: list[str], location: str) -> None:
    """Save the class list (index order) as JSON, atomically."""
    import json

    from tarkit.storage import publish

    publish(location, (json.dumps(names, ensure_ascii=False, indent=1) + "\n").encode("utf-8"))


def main() -> None:
    typer_main(app, "tarkit shard")
