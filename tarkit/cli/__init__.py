"""The command line: one module per command, each a thin layer over the library.

Every command parses its options with typer, calls library functions, and leaves the
mapping of errors to messages and exit statuses to :mod:`tarkit.cli.runner`.
"""
