"""Options shared by every command that reads tar, declared once."""

from __future__ import annotations

from typing import Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed

Inputs = Annotated[
    Optional[list[str]],
    declare.Argument(
        help="Input files or URLs: paths, '-' for stdin, pipe:CMD, http(s)://, s3://. "
        "Brace patterns like data-{000..009}.tar are expanded. None means stdin.",
        show_default=False,
    ),
]
Output = Annotated[
    str,
    declare.Option("-o", "--output", help="Output file ('-' is stdout). Compressed by its ending."),
]
Strict = Annotated[
    bool,
    declare.Option(
        "--strict",
        help="Make members without a field (no dot in the file name) and non-regular "
        "members (links, devices, FIFOs) errors instead of warnings.",
    ),
]
IgnoreZeros = Annotated[
    bool,
    declare.Option(
        "--ignore-zeros",
        help="Read past zero blocks, like tar -i: concatenated archives are read whole.",
    ),
]
AllowEmpty = Annotated[
    bool, declare.Option("--allow-empty", help="Accept an empty input (0 bytes) as no samples.")
]
Count = Annotated[
    Optional[int],
    declare.Option(
        "-c", "--count", help="Stop after N samples (and stop reading).", show_default=False
    ),
]
Fields = Annotated[
    Optional[str],
    declare.Option(
        "-f",
        "--fields",
        help="Fields to keep, e.g. 'jpg;png cls': spaces separate fields, ';' separates "
        "alternatives (the first one present is kept).",
        show_default=False,
    ),
]
MaxCount = Annotated[
    int, declare.Option("-c", "--maxcount", help="At most this many samples per shard.")
]
MaxSize = Annotated[
    str,
    declare.Option(
        "-s",
        "--maxsize",
        help="At most this many bytes per shard file on disk, headers, padding and end "
        "marker included (compressed shards too): 1e9, 500M, 1G, 64K. A single larger "
        "sample gets a shard of its own.",
    ),
]
ShardPattern = Annotated[
    str,
    declare.Option(
        "-o",
        "--output",
        help="Shard name pattern with %06d or {shard:06d}; a .gz/.bz2/.xz/.zst ending "
        "compresses each shard; s3://… and other fsspec URLs are uploaded when complete.",
    ),
]
FirstShard = Annotated[int, declare.Option("--start", help="Number of the first shard.")]
ManifestOut = Annotated[
    Optional[str],
    declare.Option(
        "--manifest",
        help="Write the JSON manifest of the shards (name, samples, bytes, sha256), and "
        "each uncompressed shard's index beside it: random access to any sample.",
        show_default=False,
    ),
]
Verbose = Annotated[
    bool, declare.Option("-v", "--verbose", help="Print each finished shard on stderr.")
]
PlanKey = Annotated[
    Optional[str],
    declare.Option(
        "--key",
        help="Make keys of plan rows from this format: {row} (from 0) and text columns, "
        "e.g. 'train/{row:06d}' or '{class.txt}/{row:06d}'. Default: {row:09d}.",
        show_default=False,
    ),
]
Overwrite = Annotated[
    bool,
    declare.Option(
        "--overwrite",
        help="Replace the files that already match the output pattern (without it they are "
        "an error): the new shards take their names when all are complete, then the other "
        "matching files are removed; a run that fails leaves the old ones as they were.",
    ),
]
Resume = Annotated[
    bool,
    declare.Option(
        "--resume",
        help="Keep the complete shards of an interrupted run with the same input and "
        "options, and continue after them.",
    ),
]


def write_mode(overwrite: bool, resume: bool = False) -> str:
    """The writers' ``mode`` for --overwrite and --resume (at most one of them)."""
    from ..errors import UsageError

    if overwrite and resume:
        raise UsageError("--overwrite and --resume exclude each other")
    return "overwrite" if overwrite else "resume" if resume else "create"


ShowProgress = Annotated[
    Optional[bool],
    declare.Option(
        "--progress/--no-progress",
        help="A progress line on stderr: the rate, and the time left when the total is "
        "known (default: when stderr is a terminal that the output does not go to).",
        show_default=False,
    ),
]
Engine = Annotated[
    str,
    declare.Option(
        "--engine",
        help="Where the work runs: 'local' (processes of this machine) or 'ray' (a Ray "
        "cluster; pip install 'tarkit[ray]').",
    ),
]
RayAddress = Annotated[
    Optional[str],
    declare.Option(
        "--address",
        help="Ray cluster address (default: RAY_ADDRESS, else the "
        "cluster started on this machine, else a local Ray).",
        show_default=False,
    ),
]
NumCpus = Annotated[float, declare.Option("--num-cpus", help="Ray: CPUs each task asks for.")]
ClassNames = Annotated[
    Optional[str],
    declare.Option(
        "--classes",
        help="The class names (a JSON list, as tarkit shard writes; default: "
        "classes.json beside the shards, else beside the manifest).",
        show_default=False,
    ),
]
