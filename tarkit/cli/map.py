"""tarkit map: process many shards in parallel, one task per shard, locally or on Ray."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Annotated, Any, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .imports import load_function
from .progress import MapProgressLine
from .runner import run, typer_main, warn

app = declare.Typer(add_completion=False, rich_markup_mode=None)

EXAMPLE = (
    "Examples:\n\n"
    "  tarkit map -c 'convert sample.jpg -resize 256x256 sample.jpg' "
    "'in-{000..099}.tar' -o 'out-{000..099}.tar' -j 2 -p 2\n\n"
    "  tarkit map --fn mypackage.prep:resize 'in-{000..099}.tar' -o out/ "
    "--metadata meta.jsonl --engine ray --address HEAD:6379"
)


@app.command(
    help="Map every input shard to an output shard, in parallel, with a shell command run "
    "on every sample (-c, tarproc's model: sample.<field> files in a private temporary "
    "directory) or a Python function (--fn package.module:function). Each output is "
    "written atomically with a record beside it; a re-run skips outputs that are complete "
    "(--overwrite redoes them); "
    "a failed shard is retried, then reported, after the other shards are done.\n\n" + EXAMPLE,
    no_args_is_help=True,
)
def map_command(
    ctx: declare.Context,
    inputs: Annotated[
        list[str],
        declare.Argument(
            help="Input shards: paths, URLs (s3://, http(s)://) or brace patterns like "
            "in-{000..099}.tar.",
            show_default=False,
        ),
    ],
    output: Annotated[
        str,
        declare.Option(
            "-o",
            "--output",
            help="Output shards: a brace pattern with one name per input "
            "(out-{000..099}.tar), or a directory ending in '/' (outputs keep the input "
            "names). Compressed by their ending.",
            show_default=False,
        ),
    ],  # fmt: skip
    command: Annotated[
        Optional[str],
        declare.Option(
            "-c",
            "--command",
            help="Bash command run on every sample, in its "
            "temporary directory (TARKIT_KEY is the sample's key).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    fn: Annotated[
        Optional[str],
        declare.Option(
            "--fn",
            help="Python function package.module:function mapping a sample "
            "dict to a sample, a list, None, or (samples, metadata row dict, or a list of "
            "rows: one per output sample).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    engine: o.Engine = "local",
    shards_at_once: Annotated[
        Optional[int],
        declare.Option(
            "-j",
            "--jobs",
            help="Shards at once (local: processes, default one per "
            "core; ray: tasks in flight, default all).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    samples_at_once: Annotated[
        int, declare.Option("-p", "--parallel", help="With -c: samples at once in each shard.")
    ] = 1,
    retries: Annotated[
        int, declare.Option("--retries", help="Further attempts for a shard that fails.")
    ] = 2,
    metadata: Annotated[
        Optional[str],
        declare.Option(
            "--metadata",
            help="Write the metadata rows, in input order, to this file: .jsonl or .tsv. "
            "With -c, a sample's row is the JSON object its command writes to "
            "tarkit.metadata.json.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    manifest: Annotated[
        Optional[str],
        declare.Option(
            "--manifest",
            help="Write the manifest of the output shards here, and the index of each "
            "uncompressed output (beside it, or in index/ beside the manifest).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    address: o.RayAddress = None,
    num_cpus: o.NumCpus = 1.0,
    on_error: Annotated[
        str,
        declare.Option(
            "--on-error",
            help="With -c, a sample whose command fails: 'fail' the "
            "shard, 'skip' it, or 'keep' it unchanged (both exit 1 at the end).",
        ),
    ] = "fail",  # fmt: skip
    rejects: Annotated[
        Optional[str],
        declare.Option(
            "--rejects",
            help="With -c: write key<TAB>status<TAB>reason of each skipped or kept sample here.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    timeout: Annotated[
        Optional[float],
        declare.Option(
            "--timeout",
            help="With -c: a command running longer fails its sample.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    multi: Annotated[
        bool,
        declare.Option(
            "--multi",
            help="With -c: sample-<part>.<field> files become separate samples <key>/<part>.",
        ),
    ] = False,  # fmt: skip
    overwrite: Annotated[
        bool,
        declare.Option(
            "--overwrite",
            help="Redo every shard, even complete ones, and remove the outputs of an earlier "
            "run that match -o but are not outputs of this one (without it they are an "
            "error) once every shard is done.",
        ),
    ] = False,  # fmt: skip
    quiet: Annotated[
        bool, declare.Option("-q", "--quiet", help="No progress; with -c, no command output.")
    ] = False,
    progress: o.ShowProgress = None,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from ..errors import MapError, UsageError
        from ..processing.driver import map_shards
        from ..processing.mappers import ShardMapper

        if (command is None) == (fn is None):
            raise UsageError("give either -c COMMAND or --fn package.module:function")
        mapper: Callable[[dict[str, Any]], Any] | ShardMapper
        if fn is not None:
            if samples_at_once != 1 or on_error != "fail" or rejects or timeout or multi:
                raise UsageError("-p, --on-error, --rejects, --timeout and --multi go with -c")
            mapper = load_function("--fn", fn)
        else:
            from ..processing.mappers import ShellCommand

            if rejects is not None and on_error == "fail":
                raise UsageError("--rejects goes with --on-error skip or keep")
            mapper = ShellCommand(
                command,  # type: ignore[arg-type]
                parallel=samples_at_once, on_error=on_error, timeout=timeout, multi=multi,
                quiet=quiet,
            )  # fmt: skip
        from tarkit.storage import expand_inputs

        display = MapProgressLine(tool, progress, quiet)
        try:
            result = map_shards(
                mapper, expand_inputs(inputs), output, engine=engine, workers=shards_at_once,
                retries=retries, metadata=metadata, mode="overwrite" if overwrite else "resume",
                address=address,
                num_cpus=num_cpus, manifest=manifest, progress=display,
            )  # fmt: skip
        except MapError as exc:
            if os.environ.get("TARKIT_DEBUG"):
                for failure in exc.failures:
                    sys.stderr.write(failure.traceback)
            raise
        finally:
            display.close()
        if rejects is not None:
            from tarkit.storage import publish

            publish(rejects, "".join(line + "\n" for line in result.rejects).encode("utf-8"))
        if result.rejects:
            warn(tool, f"{len(result.rejects)} samples failed their command "
                       f"({'kept unchanged' if on_error == 'keep' else 'left out'})")  # fmt: skip
            return 1
        return 0

    run(tool, body)


def main() -> None:
    typer_main(app, "tarkit map")
