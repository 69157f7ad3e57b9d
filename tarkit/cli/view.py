"""tarkit view: look at shards in a web browser, served from this machine."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

from . import declare  # the quick parser; typer itself only when needed
from . import options as o
from .runner import run, skip_log, typer_main, warn

app = declare.Typer(add_completion=False, rich_markup_mode=None)


@app.command(
    help="Look at shards in a web browser: a grid of samples, page by page, each field "
    "shown as what it is (images; audio and video players; text; pretty JSON; a class "
    "with its name from classes.json; an array's dtype and shape; other bytes in hex), a "
    "--where filter box (tarcat's grammar), a jump to an index or a key, and the tarkit "
    "stats summary.\n\n"
    "Indexed shards (a manifest and tarindex's indexes) are read by position, any page at "
    "once; others are read in order, a little ahead of the page shown. The page is served "
    "on 127.0.0.1 (this machine only) at the address printed, and opened in the browser "
    "when there is a display. Field contents are never trusted: shown as text, served "
    "with their extension's type and a policy under which no script runs. Ctrl-C stops "
    "the server.\n\n"
    "Example: tarkit view shards/manifest.json",
    no_args_is_help=True,
)
def view(
    ctx: declare.Context,
    sources: Annotated[
        list[str],
        declare.Argument(
            help="Shards (paths, http(s)://, s3://, pipe:CMD; brace patterns are expanded), "
            "a manifest (.json), or a directory (its manifest.json, else its shards).",
            show_default=False,
        ),
    ],
    host: Annotated[
        str,
        declare.Option(
            "--host",
            help="The address to serve on. Another than 127.0.0.1 (0.0.0.0: every "
            "interface) lets anyone who can reach it read the data: a warning says so.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, declare.Option("--port", help="The port to serve on (0: any free port, printed).")
    ] = 0,
    no_browser: Annotated[
        bool, declare.Option("--no-browser", help="Do not open the page in a web browser.")
    ] = False,
    where: Annotated[
        Optional[str],
        declare.Option(
            "--where",
            help="Start with the samples this expression keeps, as tarcat --where (grammar "
            "in docs/tarcat.md); the page's filter box changes it.",
            show_default=False,
        ),
    ] = None,
    per_page: Annotated[
        int, declare.Option("--per-page", help="Samples on a page (1 to 1000).")
    ] = 48,
    classes: o.ClassNames = None,
    strict: o.Strict = False,
) -> None:
    tool = ctx.command_path

    def body() -> int:
        from tarkit.errors import UsageError
        from tarkit.viewing import open_view

        if not 0 <= port <= 65535:
            raise UsageError(f"--port must be between 0 and 65535 (got {port})")
        server = open_view(
            sources, host=host, port=port, where=where, per_page=per_page, classes=classes,
            strict=strict, skips=skip_log(tool), report=lambda line: warn(tool, line),
        )  # fmt: skip
        try:
            if not server.loopback:
                warn(tool, f"serving on {host}: anyone who can reach this machine on port "
                           f"{server.server_address[1]} can read the data (no password)")  # fmt: skip
            note = server.pages.samples.note
            if note is not None:
                warn(tool, f"reading the shards in order, without random access: {note}")
            sys.stdout.write(f"{tool}: serving {server.pages.source} at {server.url} "
                             "(Ctrl-C to stop)\n")  # fmt: skip
            sys.stdout.flush()
            if not no_browser and _has_display():
                _open_browser(server.url)
            server.serve_forever()
        finally:
            server.server_close()
            server.close()
        return 0

    run(tool, body)


def _has_display() -> bool:
    """Whether a browser can show a window here: always on macOS and Windows, with an X
    or Wayland display elsewhere (without one, ``webbrowser`` would start a text browser
    in this terminal)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _open_browser(url: str) -> None:
    """Open ``url`` in a thread of its own: some browsers take a while to start."""
    import threading
    import webbrowser

    threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()


def main() -> None:
    typer_main(app, "tarkit view")
