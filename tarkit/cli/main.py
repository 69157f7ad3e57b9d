"""The umbrella command: ``tarkit <command>``, where ``tarkit cat`` is ``tarcat``."""

from __future__ import annotations

import importlib

from . import declare  # the quick parser; typer itself only when needed

# (subcommand, module under tarkit.cli, function in it, one-line help)
COMMANDS = [
    ("cat", "tarcat", "tarcat", "Concatenate samples of shards into one archive (tarcat)."),
    ("split", "tarsplit", "tarsplit", "Cut a stream into shards at sample boundaries (tarsplit)."),
    ("tsv", "tar2tsv", "tar2tsv", "One TSV line per sample (tar2tsv)."),
    ("show", "tarshow", "tarshow", "Show samples: fields, sizes, previews (tarshow)."),
    ("proc", "tarproc", "tarproc", "Run a shell command on every sample (tarproc)."),
    ("create", "tarcreate", "tarcreate", "Build a shard from a plan or a directory (tarcreate)."),
    (
        "sort",
        "tarsort",
        "tarsort",
        "Sort samples by key or field, repairing interleaving (tarsort).",
    ),
    ("first", "tarfirst", "tarfirst", "Write the bytes of the first matching field (tarfirst)."),
    ("index", "tarindex", "tarindex", "Write the dataset manifest of shards (tarindex)."),
    ("verify", "verify", "verify", "Check that shards read whole and match their manifest."),
    ("stats", "stats", "stats", "Summarize shards: samples, fields, sizes, classes, images."),
    ("view", "view", "view", "Look at shards in a web browser: samples, fields, a filter."),
    ("shard", "shard", "shard", "Turn a directory, plan or Dataset into shards."),
    ("map", "map", "map_command", "Process many shards in parallel, locally or on Ray."),
    ("demo", "demo", "demo", "Run the end-to-end demo on a real dataset."),
]


def build_app() -> declare.Typer:
    """The umbrella app: each command module's command under its subcommand name."""
    app = declare.Typer(
        add_completion=False,
        rich_markup_mode=None,
        no_args_is_help=True,
        help="tarkit: tools for datasets stored as WebDataset tar shards.",
    )
    for name, module, function, summary in COMMANDS:
        try:
            command_module = importlib.import_module(f"tarkit.cli.{module}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tarkit.cli.{module}":
                continue
            raise
        callback = getattr(command_module, function)
        info = command_module.app.commands[0]
        app.command(name, help=info.settings.get("help"), short_help=summary)(callback)
    return app


def main() -> None:
    from .runner import typer_main

    typer_main(build_app(), "tarkit")
