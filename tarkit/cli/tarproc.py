"""tarproc: run a shell command on every sample, in parallel, in order."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .progress import Progress, wanted, writes_stdout
from .runner import report_skips, run, skip_log, typer_main, warn

app = declare.Typer(add_completion=False, rich_markup_mode=None)

EXAMPLE = (
    "Each sample is unpacked into an empty private directory as sample.<field> files "
    "(sample.jpg, sample.cls); the command runs there with bash -c, TARKIT_KEY set to the "
    "key; the sample.* files it leaves form the output sample.\n\n"
    "Example: tarproc -p 2 -c 'convert sample.jpg -resize 256x256 sample.jpg' "
    "in.tar -o out.tar"
)


@app.command(
    help="Run a shell command on every sample and write the samples it leaves.\n\n" + EXAMPLE,
    no_args_is_help=False,
)
def tarproc(
    ctx: declare.Context,
    command: Annotated[
        str,
        declare.Option(
            "-c",
            "--command",
            help="Bash command run in each sample's directory.",
            show_default=False,
        ),
    ],  # fmt: skip
    inputs: o.Inputs = None,
    output: o.Output = "-",
    parallel: Annotated[
        int, declare.Option("-p", "--parallel", help="Samples processed at once.")
    ] = 1,
    on_error: Annotated[
        str,
        declare.Option(
            "--on-error",
            help="When the command fails on a sample: 'fail' (stop, exit 2), 'skip' "
            "(leave it out) or 'keep' (pass it through unchanged); skip and keep exit 1 "
            "at the end.",
        ),
    ] = "fail",
    rejects: Annotated[
        Optional[str],
        declare.Option(
            "--rejects",
            help="With --on-error skip|keep: write key<TAB>status<TAB>reason of each "
            "failed sample to this file.",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        Optional[float],
        declare.Option(
            "--timeout",
            help="A command running longer (seconds) fails its sample.",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    multi: Annotated[
        bool,
        declare.Option(
            "--multi",
            help="Files sample-<part>.<field> become separate samples <key>/<part>, in "
            "sorted part order (sample.* files are then ignored).",
        ),
    ] = False,
    unordered: Annotated[
        bool,
        declare.Option("--unordered", help="Write samples as they finish, not in input order."),
    ] = False,
    keep_dirs: Annotated[
        bool,
        declare.Option(
            "--keep-dirs", help="Keep the temporary directories and say where they are."
        ),
    ] = False,
    quiet: Annotated[
        bool, declare.Option("-q", "--quiet", help="Do not show the command's stdout and stderr.")
    ] = False,
    strict: o.Strict = False,
    ignore_zeros: o.IgnoreZeros = False,
    allow_empty: o.AllowEmpty = False,
    progress: o.ShowProgress = None,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.storage import Sink

        from ..errors import UsageError
        from ..processing.commands import (
            Command,
            ProcReport,
            Rejection,
            check_on_error,
        )
        from ..processing.keys import shown_key
        from ..processing.supervisor import map_command
        from ..sizes import check_parallel
        from ..stream.stages import read_samples, write_samples

        check_on_error(on_error)
        if rejects is not None and on_error == "fail":
            raise UsageError("--rejects goes with --on-error skip or keep")
        if rejects == "-":
            raise UsageError("--rejects needs a file: stdout carries the tar stream")
        spec = Command(command, timeout=timeout, multi=multi, quiet=quiet, keep_dirs=keep_dirs)
        spec.check()
        check_parallel(parallel)
        skips = skip_log(tool)
        report = ProcReport()
        rejects_sink = Sink(rejects) if rejects is not None else None
        action = "kept unchanged" if on_error == "keep" else "left out"

        def on_reject(rejection: Rejection) -> None:
            if rejects_sink is not None:
                rejects_sink.stream.write(
                    (rejection.line() + "\n").encode("utf-8", "surrogateescape")
                )
            else:
                warn(tool, f"sample {shown_key(rejection.key)} {action}: {rejection.describe()}")

        samples = read_samples(
            inputs or [], strict=strict, skips=skips,
            ignore_zeros=ignore_zeros, allow_empty=allow_empty,
        )  # fmt: skip
        processed = map_command(
            samples, spec, parallel=parallel, ordered=not unordered, on_error=on_error,
            on_reject=on_reject, report=report,
        )  # fmt: skip
        shown = Progress(tool, wanted(progress, to_stdout=writes_stdout(output)))
        try:
            write_samples(shown.count(processed), Sink(output))
        finally:
            shown.close()
            processed.close()  # type: ignore[attr-defined]
            if rejects_sink is not None:
                rejects_sink.commit()
            if keep_dirs and report.root is not None:
                sys.stderr.write(f"{tool}: temporary directories kept in {report.root}\n")
        report_skips(tool, skips)
        if report.rejected:
            where = f", listed in {rejects}" if rejects is not None else ""
            noun = "sample" if report.rejected == 1 else "samples"
            warn(tool, f"{report.rejected} of {report.samples_in} {noun} failed their "
                       f"command ({action}{where})")  # fmt: skip
            return 1
        return 0

    run(tool, body)


def main() -> None:
    typer_main(app, "tarproc")
