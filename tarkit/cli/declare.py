"""The quick parser: commands declared in typer's terms, with typer behind it.

Importing typer (and click under it) takes longer than everything else a shell tool does
to start, so the command modules declare their options with this module's stand-ins
(``from . import declare``, then ``declare.Typer``, ``declare.Option``,
``declare.Argument``, ``declare.Context``: each records its settings and reads as typer's
own). :meth:`Typer.quick_call` parses a plain command line (known options with their
values, flags, input names) from those declarations and calls the command function
directly, without importing typer. Anything else (``--help``, a mistake, an option given
twice, a ``--flag/--no-flag`` or a type this parser does not convert, shell completion) is
left to the real typer app that :meth:`Typer.real` builds from the same declarations, which
runs the command or prints the help or the error (``cli/runner.py`` ``typer_main``). The
options are declared once; tests/cli/test_declare.py holds the two parsers to the same
arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin, get_type_hints

# Option settings that change nothing about how a given value is parsed.
_NEUTRAL = {"help", "show_default", "metavar", "hidden", "rich_help_panel"}
_TYPES: dict[Any, Callable[[str], Any]] = {int: int, float: float, str: str}


class _Parameter:
    """The stand-in for ``typer.Option(...)`` or ``typer.Argument(...)``: the declaration,
    recorded."""

    real_name = ""

    def __init__(self, *param_decls: str, **settings: Any) -> None:
        self.param_decls = param_decls
        self.settings = settings

    def real(self) -> Any:
        import typer

        return getattr(typer, self.real_name)(*self.param_decls, **self.settings)


class Option(_Parameter):
    real_name = "Option"


class Argument(_Parameter):
    real_name = "Argument"


class Context:
    """What a command function gets as ``ctx`` from the quick parser: its path, and
    which parameters the command line gave (:func:`given`)."""

    def __init__(self, command_path: str, given: frozenset[str] = frozenset()) -> None:
        self.command_path = command_path
        self.given = given


def given(ctx: Any, name: str) -> bool:
    """Whether the command line gave parameter ``name``, rather than its default; for
    the quick parser's context and for click's alike."""
    if isinstance(ctx, Context):
        return name in ctx.given
    from click.core import ParameterSource

    return bool(ctx.get_parameter_source(name) != ParameterSource.DEFAULT)


class Command:
    """One command: its function and the settings given to ``app.command``."""

    def __init__(self, name: str | None, settings: dict[str, Any], function: Callable[..., Any]):
        self.name = name or function.__name__.replace("_", "-")
        self.settings = settings
        self.function = function

    def hints(self) -> dict[str, Any]:
        return get_type_hints(self.function, include_extras=True)

    def real_callback(self) -> Callable[..., Any]:
        """The function with typer's own declarations in its annotations."""
        import functools
        import inspect

        hints = self.hints()
        signature = inspect.signature(self.function)
        parameters = [p.replace(annotation=_real(hints.get(p.name, p.annotation)))
                      for p in signature.parameters.values()]  # fmt: skip

        @functools.wraps(self.function)
        def callback(*args: Any, **kwargs: Any) -> Any:
            return self.function(*args, **kwargs)

        callback.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        callback.__annotations__ = {p.name: p.annotation for p in parameters}
        return callback

    def quick_arguments(self, args: list[str], command_path: str) -> dict[str, Any] | None:
        """The keyword arguments typer would call the function with, or None when the
        command line is one for typer to parse (or to refuse)."""
        spec = _Spec.of(self)
        if spec is None or (not args and self.settings.get("no_args_is_help")):
            return None
        values: dict[str, Any] = {}
        positional: list[str] = []
        index = 0
        while index < len(args):
            arg = args[index]
            index += 1
            if arg == "--":
                positional.extend(args[index:])
                break
            if not arg.startswith("-") or arg == "-":
                positional.append(arg)
                continue
            if arg.startswith("--"):
                name, equals, value = arg.partition("=")
                given: str | None = value if equals else None
            else:
                name, value = arg[:2], arg[2:]
                given = value or None
            option = spec.options.get(name)
            if option is None or option.dest in values:
                return None  # unknown here, or given twice: typer decides
            dest, convert = option.dest, option.convert
            if convert is None:  # a flag
                if given is not None:
                    return None
                values[dest] = True
                continue
            if given is None:
                if index >= len(args) or (args[index].startswith("-") and args[index] != "-"):
                    return None
                given = args[index]
                index += 1
            try:
                values[dest] = convert(given)
            except ValueError:
                return None
        if positional:
            if spec.inputs is None or (len(positional) > 1 and not spec.variadic):
                return None
            values[spec.inputs] = positional if spec.variadic else positional[0]
        parsed = frozenset(values)
        for name in spec.order:
            if name == spec.context:
                values[name] = Context(command_path, parsed)
            elif name not in values:
                if name not in spec.defaults:
                    return None  # required and missing: typer says so
                values[name] = spec.defaults[name]
        return values


class _Quick:
    """An option the quick parser takes: where it goes and how its value converts
    (None for a flag)."""

    def __init__(self, dest: str, convert: Callable[[str], Any] | None) -> None:
        self.dest = dest
        self.convert = convert


class _Spec:
    """A command's parameters as the quick parser sees them."""

    def __init__(self) -> None:
        self.options: dict[str, _Quick] = {}
        self.inputs: str | None = None  # the parameter taking the input names
        self.variadic = False  # whether it takes any number of them, or one
        self.context: str | None = None
        self.defaults: dict[str, Any] = {}
        self.order: list[str] = []

    @classmethod
    def of(cls, command: Command) -> _Spec | None:
        """The spec, or None when the command takes parameters this parser does not."""
        spec = cls()
        code = command.function.__code__
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        defaults = command.function.__defaults__ or ()
        spec.defaults = dict(zip(names[code.co_argcount - len(defaults) :], defaults, strict=True))
        spec.defaults.update(command.function.__kwdefaults__ or {})
        hints = command.hints()
        for name in names:
            spec.order.append(name)
            hint: Any = hints.get(name)
            if hint is Context:
                spec.context = name
                continue
            if get_origin(hint) is not Annotated:
                return None
            kind, declaration = hint.__origin__, hint.__metadata__[0]
            optional = get_origin(kind) is not None and type(None) in get_args(kind)
            base = (
                next((a for a in get_args(kind) if a is not type(None)), kind) if optional else kind
            )
            if isinstance(declaration, Argument):
                spec.variadic = get_origin(base) is list
                if spec.inputs is not None or set(declaration.settings) - _NEUTRAL:
                    return None
                if (get_args(base) if spec.variadic else (base,)) != (str,):
                    return None
                if spec.defaults.get(name) is not None:
                    return None
                spec.inputs = name
                continue
            if not isinstance(declaration, Option):
                return None
            neutral = not set(declaration.settings) - _NEUTRAL
            decls = declaration.param_decls or (f"--{name.replace('_', '-')}",)
            if base is bool and not optional and spec.defaults.get(name) is False:
                convert = None
            elif base in _TYPES and neutral:
                convert = _TYPES[base]
                if name in spec.defaults and spec.defaults[name] is not None:
                    spec.defaults[name] = convert(spec.defaults[name])  # as click does
            else:
                convert = _unsupported
            if any("/" in decl for decl in decls):  # --flag/--no-flag: typer's own
                convert, decls = _unsupported, tuple(n for d in decls for n in d.split("/"))
            for decl in decls:
                if not decl.strip().startswith("-"):
                    return None
                spec.options[decl.strip()] = _Quick(name, convert if neutral else _unsupported)
        return spec


def _unsupported(value: str) -> Any:
    raise ValueError("for typer")


def _real(hint: Any) -> Any:
    """A recorded annotation turned into typer's own."""
    import typer

    if hint is Context:
        return typer.Context
    if get_origin(hint) is Annotated and isinstance(hint.__metadata__[0], _Parameter):
        return Annotated[hint.__origin__, hint.__metadata__[0].real()]  # type: ignore[name-defined]
    return hint


class Typer:
    """The stand-in for ``typer.Typer(...)``: the app's settings and its commands, recorded."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.commands: list[Command] = []

    def command(
        self, name: str | None = None, **settings: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            self.commands.append(Command(name, settings, function))
            return function

        return register

    def real(self) -> Any:
        """The typer app these declarations describe."""
        import typer

        app = typer.Typer(**self.settings)
        for command in self.commands:
            app.command(command.name, **command.settings)(command.real_callback())
        return app

    def quick_parse(self, args: list[str], tool: str) -> tuple[Command, dict[str, Any]] | None:
        """The command the command line ``args`` runs and its keyword arguments, when
        the line is plain enough to parse here; None when it is for typer."""
        if not args and self.settings.get("no_args_is_help"):
            return None
        if len(self.commands) == 1:
            command, path = self.commands[0], tool
        else:
            found = [c for c in self.commands if args and c.name == args[0]]
            if not found:
                return None
            command, path, args = found[0], f"{tool} {args[0]}", args[1:]
        arguments = command.quick_arguments(args, path)
        return None if arguments is None else (command, arguments)

    def quick_call(self, args: list[str], tool: str) -> Callable[[], Any] | None:
        """:meth:`quick_parse` as a call of the command function, or None."""
        parsed = self.quick_parse(args, tool)
        if parsed is None:
            return None
        function, arguments = parsed[0].function, parsed[1]
        return lambda: function(**arguments)
