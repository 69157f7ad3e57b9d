"""The command line: one module per command, each a thin layer over the library.

Every command declares its options in typer's terms through :mod:`tarkit.cli.declare`
(the quick parser: typer itself is imported only for ``--help``, a mistake or anything
unusual), composes library functions in its body, and leaves the mapping of errors to
messages and exit statuses to :mod:`tarkit.cli.runner`. No library code lives here, and
nothing outside this folder prints or exits.
"""
