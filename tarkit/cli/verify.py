"""tarkit verify: read every shard to its end and check it against its manifest."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .progress import Progress, wanted
from .runner import one_line, report_skips, run, skip_log, typer_main

if TYPE_CHECKING:
    from tarkit.writing.verify import ShardCheck, Summary

app = declare.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Check that shards are intact: read each one to its end with the strict reader "
    "and compare its sample count, keys and offsets, byte size and sha256 with its "
    "manifest (one given, one read as a source, or manifest.json beside the shards when it "
    "lists exactly them). A bad shard does not stop the check: every shard is read, one "
    "line on stdout names each bad one, what is wrong and where (byte offset in the tar, "
    "member, sample), and a summary ends the report. Exit status 0 when every shard is "
    "good, 2 otherwise.\n\n"
    "Example: tarkit verify shards/manifest.json -p 2",
    no_args_is_help=True,
)
def verify(
    ctx: declare.Context,
    sources: Annotated[
        list[str],
        declare.Argument(
            help="Shards (paths, http(s)://, s3://, brace patterns), manifests, or "
            "directories holding shards (and their manifest.json).",
            show_default=False,
        ),
    ],
    manifest: Annotated[
        Optional[str],
        declare.Option(
            "--manifest",
            help="Check the shards given against this manifest (each must be listed in "
            "it), e.g. a few shards of a larger set.",
            show_default=False,
        ),
    ] = None,
    parallel: Annotated[
        int,
        declare.Option(
            "-p",
            "--parallel",
            help="Check N shards at once (threads); the report is the same as with -p 1, "
            "in the same order.",
        ),
    ] = 1,
    as_json: Annotated[
        bool,
        declare.Option(
            "--json",
            help="Write one JSON object per line: one for every shard (good ones too), "
            'then {"summary": …}.',
        ),
    ] = False,
    verbose: Annotated[
        bool, declare.Option("-v", "--verbose", help="Write a line for good shards too.")
    ] = False,
    strict: o.Strict = False,
    progress: o.ShowProgress = None,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        import json

        from tarkit.storage import stdout_stream
        from tarkit.stream.stages import output_errors
        from tarkit.writing.verify import verify_shards

        out = stdout_stream()
        skips = skip_log(tool)
        verification = verify_shards(sources, manifest=manifest, parallel=parallel, strict=strict)
        with Progress(tool, wanted(progress, to_stdout=True), unit="shards",
                      total=len(verification)) as shown, output_errors("-"):  # fmt: skip
            for check in verification:
                skips.merge(check.skips)
                if as_json:
                    line = json.dumps(check.to_json()) + "\n"  # ASCII: any name stays valid
                elif verbose or not check.ok:
                    line = shard_line(check)
                else:
                    line = ""
                if line:
                    out.write(line.encode("utf-8", "surrogateescape"))
                    out.flush()
                shown.note(f"{verification.summary.samples} samples")
                shown.advance()
            summary = verification.summary
            if as_json:
                line = json.dumps({"summary": summary.to_json()}) + "\n"
            else:
                line = summary_line(summary)
            out.write(line.encode("utf-8"))
            out.flush()
        report_skips(tool, skips)
        if summary.bad:
            from tarkit.errors import TarkitError

            noun = "shard" if summary.shards == 1 else "shards"
            raise TarkitError(f"{summary.bad} of {summary.shards} {noun} failed verification")
        return 0

    run(tool, body)


def shard_line(check: ShardCheck) -> str:
    """``url: OK: N samples, SIZE`` or ``url: FAILED: what (where)``, one line."""
    from tarkit.sizes import format_size

    if check.problem is None:
        found = check.found
        assert found is not None
        noun = "sample" if found.samples == 1 else "samples"
        return (
            one_line(f"{check.url}: OK: {found.samples} {noun}, {format_size(found.bytes)}") + "\n"
        )
    where = [check.problem.where()] if check.problem.where() else []
    if check.found is None and check.samples_read:  # reading stopped: how far it got
        noun = "sample" if check.samples_read == 1 else "samples"
        where.append(f"after {check.samples_read} whole {noun}")
    suffix = f" ({', '.join(where)})" if where else ""
    return one_line(f"{check.url}: FAILED: {check.problem.what}{suffix}") + "\n"


def summary_line(summary: Summary) -> str:
    """``checked N shards …: G good, B bad; S samples, SIZE in T s``."""
    from tarkit.sizes import format_size

    noun = "shard" if summary.shards == 1 else "shards"
    if summary.with_manifest == summary.shards:
        against = " against its manifest" if summary.shards == 1 else " against their manifest"
    elif summary.with_manifest == 0:
        against = " without a manifest (each read to its end; no counts or sha256 to compare)"
    else:
        against = f", {summary.with_manifest} against a manifest"
    rate = summary.bytes / summary.seconds if summary.seconds else 0
    return (
        f"checked {summary.shards} {noun}{against}: {summary.good} good, {summary.bad} bad; "
        f"{summary.samples} samples, {format_size(summary.bytes)} in {summary.seconds:.2f} s "
        f"({format_size(int(rate))}/s)\n"
    )


def main() -> None:
    typer_main(app, "tarkit verify")
