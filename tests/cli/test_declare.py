"""The quick parser of plain command lines (tarkit/cli/declare.py) against typer itself.

For every command, on command lines made from its own declared options, the quick parser
either leaves the line to typer or gives exactly the arguments typer gives; it never
takes a line typer refuses. A plain run of a shell tool does not import typer at all.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tarkit.cli import declare
from tarkit.cli.main import COMMANDS, build_app

MODULES = sorted({module for _, module, _, _ in COMMANDS})


def command_of(module: str) -> declare.Command:
    return importlib.import_module(f"tarkit.cli.{module}").app.commands[0]  # type: ignore[no-any-return]


def typer_arguments(command: declare.Command, args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments typer calls the command with, or None when it refuses."""
    import click
    import typer
    import typer.main

    real = command.real_callback()
    recorded: dict[str, Any] = {}

    def record(**kwargs: Any) -> None:
        recorded.update(kwargs)

    record.__signature__ = real.__signature__  # type: ignore[attr-defined]
    record.__annotations__ = real.__annotations__
    app = typer.Typer()
    app.command(**{k: v for k, v in command.settings.items() if k == "no_args_is_help"})(record)
    try:
        typer.main.get_command(app).main(args, prog_name="tool", standalone_mode=False)
    except click.ClickException:
        return None
    return recorded


def comparable(arguments: dict[str, Any] | None) -> dict[str, Any] | None:
    """Contexts compared by their command path; values with their types."""
    if arguments is None:
        return None
    return {
        name: ("ctx", value.command_path)
        if hasattr(value, "command_path")
        else (type(value), value)
        for name, value in arguments.items()
    }


def tokens(command: declare.Command) -> st.SearchStrategy[list[str]]:
    """Command lines of the command's own options, values of every type, input names."""
    spec = declare._Spec.of(command)
    assert spec is not None
    hints = command.hints()
    words = st.sampled_from(["a.tar", "-", "x y", "1G", "é.tar", "--", "-5", "5", "0", "1.5",
                             "", "=", "a=b", "--bogus", "-z", "{0..2}.tar", "+3", "1_000"])  # fmt: skip
    pieces: list[st.SearchStrategy[list[str]]] = [words.map(lambda w: [w])]
    for decl, option in spec.options.items():
        hint = hints[option.dest]
        if option.convert is None:
            pieces.append(st.just([decl]))
            continue
        kind = repr(hint.__origin__)
        value = (st.integers(-3, 10**12).map(str) if "int" in kind
                 else st.floats(allow_nan=False, allow_infinity=False).map(repr) if "float" in kind
                 else st.text(max_size=8))  # fmt: skip
        pieces.append(value.map(lambda v, d=decl: [d, v]))
        pieces.append(value.map(lambda v, d=decl: [f"{d}={v}" if d.startswith("--") else d + v]))
        pieces.append(words.map(lambda w, d=decl: [d, w]))
    # What the command requires, so that most lines are complete.
    required = [
        ["a.tar"] if name == spec.inputs else [decls[0], "x"]
        for name in spec.order
        if name not in spec.defaults and name != spec.context
        for decls in [[d for d, o in spec.options.items() if o.dest == name] or ["?"]]
    ]
    return st.lists(st.one_of(pieces), max_size=6).map(lambda parts: sum(parts + required, []))


@pytest.mark.parametrize("module", MODULES)
def test_quick_parser_gives_typers_arguments_or_leaves_the_line_to_typer(module: str) -> None:
    command = command_of(module)
    quick_count = 0

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(tokens(command))
    def check(args: list[str]) -> None:
        nonlocal quick_count
        quick = command.quick_arguments(args, "tool")
        if quick is not None:
            quick_count += 1
            assert comparable(quick) == comparable(typer_arguments(command, args)), args

    check()
    assert quick_count > 5  # plain lines are taken here, not all left to typer


@pytest.mark.parametrize(
    "args",
    [["-c", "10", "-f", "jpg;png cls", "a.tar", "b.tar"], ["--count=3", "-o", "out.tar", "--", "-x.tar"],
     ["--skip", "2", "--slice", "1:5", "--seed", "7", "--shuffle", "100"], []],
)  # fmt: skip
def test_typical_tarcat_lines_are_parsed_without_typer(args: list[str]) -> None:
    command = command_of("tarcat")
    quick = command.quick_arguments(args, "tool")
    assert quick is not None
    assert comparable(quick) == comparable(typer_arguments(command, args))


@pytest.mark.parametrize("args", [["--help"], ["-c"], ["-c", "x"], ["--bogus"], ["-c", "1", "-c", "2"],
                                  ["-c", "-1"], ["--strict=yes"]])  # fmt: skip
def test_other_lines_are_left_to_typer(args: list[str]) -> None:
    assert command_of("tarcat").quick_arguments(args, "tool") is None


def test_the_context_says_which_options_the_line_gave_as_clicks_does() -> None:
    command = command_of("tarsplit")
    args = ["-c", "5", "in.tar"]
    quick = command.quick_arguments(args, "tool")
    assert quick is not None
    real_ctx = typer_context(command, args)
    for name in ("maxcount", "maxsize", "inputs"):
        assert declare.given(quick["ctx"], name) == declare.given(real_ctx, name), name
    assert declare.given(quick["ctx"], "maxcount") and not declare.given(quick["ctx"], "maxsize")


def typer_context(command: declare.Command, args: list[str]) -> Any:
    """The click context typer gives the command for ``args``."""
    import typer
    import typer.main

    real = command.real_callback()
    seen: list[Any] = []

    def record(**kwargs: Any) -> None:
        seen.append(kwargs["ctx"])

    record.__signature__ = real.__signature__  # type: ignore[attr-defined]
    record.__annotations__ = real.__annotations__
    app = typer.Typer()
    app.command()(record)
    typer.main.get_command(app).main(args, prog_name="tool", standalone_mode=False)
    return seen[0]


def test_the_umbrella_runs_a_subcommand_under_its_path() -> None:
    app = build_app()
    assert app.quick_parse([], "tarkit") is None  # help
    assert app.quick_parse(["nope"], "tarkit") is None
    parsed = app.quick_parse(["cat", "-c", "1", "x.tar"], "tarkit")
    assert parsed is not None
    command, arguments = parsed
    assert command.function is command_of("tarcat").function
    assert (arguments["ctx"].command_path, arguments["count"], arguments["inputs"]) == (
        "tarkit cat", 1, ["x.tar"])  # fmt: skip


def test_a_plain_run_of_a_shell_tool_imports_neither_typer_nor_click(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from conftest import make_tar, tool

    (tmp_path / "in.tar").write_bytes(make_tar([("a.txt", b"x")]))
    probe = ("import runpy, sys; sys.argv = [sys.argv[1], *sys.argv[2:]]; "
             "runpy.run_path(sys.argv[0], run_name='__main__')")  # fmt: skip
    script = (
        f"import sys, atexit; atexit.register(lambda: print(sorted(m for m in sys.modules "
        f"if m.split('.')[0] in ('typer', 'click', 'tarkit')), file=sys.stderr)); {probe}"
    )
    result = subprocess.run([sys.executable, "-c", script, tool("tarcat"), "-c", "1", "in.tar"],
                            cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    modules = result.stderr.strip().splitlines()[-1]
    assert "tarkit.cli.tarcat" in modules and "typer" not in modules and "click" not in modules
    helped = subprocess.run([tool("tarcat"), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "Usage: tarcat" in helped.stdout
