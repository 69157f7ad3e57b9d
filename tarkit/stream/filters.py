"""Keeping samples: by an expression over their fields, by a list of keys, by a seeded share.

Each filter is a *predicate*, a function of a :class:`~tarkit.format.samples.Sample` that
says whether to keep it; :func:`filter_samples` applies one to a stream, as the stages of
:mod:`tarkit.stream.stages` do. ``tarcat --where``, ``--keys`` and ``--fraction`` (``--invert``)
are :func:`where`, :func:`key_in` and :func:`keep_fraction`, combined by :func:`sample_filter`.
The grammar of :func:`where` and every rule below are in ``docs/tarcat.md``.

An expression is compiled once into nested closures (no ``eval``); a sample's fields are
read only when the expression reaches them, and a JSON field is decoded at most once
per sample. A malformed expression raises :class:`~tarkit.errors.ExpressionError` pointing at it:

>>> where("json.height >")
Traceback (most recent call last):
...
tarkit.errors.ExpressionError: --where: expected a value after '>' at column 14
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ..errors import ExpressionError, InputError, SourceError, UsageError
from ..format.samples import Sample, split_name
from ..storage import expand_inputs, open_source
from .stages import close_iterator

Predicate = Callable[[Sample], bool]
_Node = Callable[[Sample, dict], bool]  # a compiled condition: (sample, JSON cache) -> kept
_Getter = Callable[[Sample, dict], Any]  # a value, or _MISSING

_MISSING: Any = object()
_UNREAD = object()
_KEYWORDS = {"and", "or", "not", "in", "has", "key", "true", "false", "null"}
_NAME = re.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+)*", re.ASCII)
_SPACE = re.compile(r"\s*")
_PART = re.compile(r"[\w-]+", re.ASCII)
_NUMBER_TEXT = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
_NUMBER = re.compile(_NUMBER_TEXT)
_TEXT_NUMBER = re.compile(rf"\s*({_NUMBER_TEXT})\s*")
_STRING = re.compile(r""""((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'""", re.DOTALL)
_UNESCAPE = re.compile(r"""\\(["'\\])""")
_OPERATOR = re.compile(r"==|!=|<=|>=|<|>|!~|~")
_FOUND = re.compile(r"""[\w.-]+|"[^"]*"?|'[^']*'?|`[^`]*`?|[=!<>]=?|\S""")
_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_LITERALS = {"true": True, "false": False, "null": None}
_WANTED: dict[tuple[type, ...], str] = {(str,): "a string", (int, str): "an index or a string"}


def where(expression: str) -> Predicate:
    """The predicate of a ``--where`` expression, e.g. ``where("json.height > 200")``.

    Raises :class:`~tarkit.errors.ExpressionError` for a malformed expression. The predicate raises
    :class:`~tarkit.errors.InputError` for a field that is not JSON when the expression
    asks a JSON path of it; a missing field or path, or a value of another type, makes a
    comparison false and is never an error.
    """
    node = _Parser(expression).parse()
    return lambda sample: node(sample, {})


def key_in(keys: Iterable[str]) -> Predicate:
    """Keep the samples whose key is one of ``keys``."""
    wanted = frozenset(keys)
    return lambda sample: sample.key in wanted


def read_keys(spec: str) -> list[str]:
    """The keys listed in ``spec``, one per line (a path, ``-``, ``pipe:CMD``, a URL),
    each once, in the order listed. Whitespace around a key is dropped, and blank lines
    are skipped. Raises
    :class:`~tarkit.errors.SourceError` naming ``--keys`` when ``spec`` cannot be read.
    """
    try:
        with open_source(spec) as source:
            data = source.stream.read()
    except SourceError as exc:
        raise SourceError(f"--keys {exc}") from None
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    return [key for key in dict.fromkeys(line.strip() for line in lines) if key]


def keep_fraction(fraction: float, seed: int = 0, invert: bool = False) -> Predicate:
    """Keep each sample with probability ``fraction``, decided by its key and ``seed``
    (:func:`tarkit.seeds.in_split`, the rule ``ShardDataset(split=)`` shares); with
    ``invert``, keep exactly the samples it drops.

    The same key gets the same decision in any order, shard or run, and a smaller
    fraction keeps a subset of what a larger one keeps with the same seed.

    >>> from tarkit.format.samples import Sample
    >>> keep, rest = keep_fraction(0.6, seed=1), keep_fraction(0.6, seed=1, invert=True)
    >>> [(keep(Sample(k, [], [], "-")), rest(Sample(k, [], [], "-"))) for k in "ab"]
    [(True, False), (False, True)]
    """
    from ..seeds import KeySplit  # imported here: tarcat --where starts without hashlib

    try:
        split = KeySplit(fraction, seed, invert)
    except UsageError:
        raise UsageError(f"--fraction must be between 0 and 1 (got {fraction})") from None
    keeps = split.test()
    return lambda sample: keeps(sample.key)


def all_of(*predicates: Predicate) -> Predicate:
    """Keep a sample when every predicate does, asked in order until one says no."""
    return predicates[0] if len(predicates) == 1 else lambda s: all(p(s) for p in predicates)


def sample_filter(
    *,
    expression: str | None = None,
    keys: str | None = None,
    fraction: float | None = None,
    seed: int = 0,
    invert: bool = False,
    inputs: Sequence[str] = (),
) -> Predicate | None:
    """tarcat's filter: ``keys`` (a file, as :func:`read_keys` reads it), then ``fraction``
    (its complement with ``invert``), then the ``--where`` ``expression``; None when none
    is given. ``inputs`` are the archives read: ``keys="-"`` (stdin) is a usage error
    when they read stdin too, and so is ``invert`` without ``fraction``.

    A sample must pass all of them; the cheaper checks come first, so ``--where`` never
    reads a sample the others dropped. The expression is parsed and the key list read
    here, before any input is opened.
    """
    matches = where(expression) if expression is not None else None  # usage errors first
    if invert and fraction is None:
        raise UsageError("--invert keeps the samples --fraction drops: give --fraction too")
    share = keep_fraction(fraction, seed, invert) if fraction is not None else None
    if keys is not None and _stdin(keys) and any(map(_stdin, expand_inputs(inputs))):
        raise UsageError("--keys - reads stdin, and so do the archives: name them instead")
    listed = key_in(read_keys(keys)) if keys is not None else None
    predicates = [p for p in (listed, share, matches) if p is not None]
    return all_of(*predicates) if predicates else None


def _stdin(spec: str) -> bool:
    from ..storage.locations import STDIO, location

    return location(spec).kind == STDIO


def filter_samples(samples: Iterable[Sample], predicate: Predicate) -> Iterator[Sample]:
    """The samples ``predicate`` keeps, in order; closing it closes ``samples``."""
    iterator = iter(samples)
    try:
        yield from filter(predicate, iterator)
    finally:
        close_iterator(iterator)


# --- values ---------------------------------------------------------------------------


def _text_number(text: str) -> int | float | None:
    """The number a text spells (JSON's syntax, whitespace around it allowed), or None."""
    if text.isdigit() and text.isascii():  # a label: skip the regular expression
        return int(text)
    match = _TEXT_NUMBER.fullmatch(text)
    return None if match is None else _number(match[1])


def _number(text: str) -> int | float:
    return int(text) if text.lstrip("-").isdigit() else float(text)


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float  # not bool: true is not 1


def _load_json(sample: Sample, field: str, shown: str) -> Any:
    import json  # here, not at the top: tarcat starts without it

    index = sample.field_index(field)
    if index is None:
        return _MISSING
    try:
        return json.loads(sample.data_at(index))
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        member = sample.members[index]
        name = split_name(member.name)[1]  # type: ignore[index]
        raise InputError(
            f"sample {sample.key!r}: field {name!r} is not JSON ({reason}), "
            f"and --where reads {shown} from it",
            source=sample.source,
            offset=member.offset,
            member=member.name,
        ) from None


class _Reference:
    """What a condition reads: the key or a field's text (kind ``text``), or a JSON value."""

    def __init__(self, kind: str, get: _Getter, present: _Node, shown: str) -> None:
        self.kind, self.get, self.present, self.shown = kind, get, present, shown


def _text_reference(field: str, shown: str) -> _Reference:
    def get(sample: Sample, cache: dict) -> Any:
        index = sample.field_index(field)  # its bytes without making member objects
        if index is None:
            return _MISSING
        return sample.data_at(index).decode("utf-8", "surrogateescape")

    return _Reference("text", get, lambda s, c: s.field_index(field) is not None, shown)


def _json_reference(field: str, steps: Sequence[str | int], shown: str) -> _Reference:
    def get(sample: Sample, cache: dict) -> Any:
        value = cache.get(field, _UNREAD)
        if value is _UNREAD:
            value = cache[field] = _load_json(sample, field, shown)
        for step in steps:
            if type(step) is str:
                value = value.get(step, _MISSING) if type(value) is dict else _MISSING
            elif type(value) is list and -len(value) <= step < len(value):  # type: ignore[operator]
                value = value[step]  # type: ignore[index]
            else:
                return _MISSING
            if value is _MISSING:
                return _MISSING
        return value

    return _Reference("json", get, lambda s, c: get(s, c) is not _MISSING, shown)


def _equals(literals: list[Any]) -> Callable[[Any], bool]:
    """value -> whether it is one of ``literals``: same type (true is not 1) and value."""
    numbers = {v for v in literals if _is_number(v)}
    strings = {v for v in literals if type(v) is str}
    constants = [v for v in literals if v is None or type(v) is bool]

    def equals(value: Any) -> bool:
        if _is_number(value):
            return value in numbers
        if type(value) is str:
            return value in strings
        return any(value is c for c in constants)

    return equals


def _ordered(op: str, literal: Any) -> Callable[[Any], bool]:
    """value -> ``value op literal``, false unless both are numbers or both are strings."""
    compare = _ORDER[op]
    if _is_number(literal):
        return lambda value: _is_number(value) and compare(value, literal)
    return lambda value: type(value) is str and compare(value, literal)


def _on_text(test: Callable[[Any], bool], literals: list[Any]) -> Callable[[str], bool]:
    """``test`` applied to a text: as the number it spells when compared with a number,
    else as a string, without whitespace around it."""
    numbers = any(_is_number(v) for v in literals)
    if numbers and any(type(v) is str for v in literals):
        return lambda text: test(_text_number(text)) or test(text.strip())
    if numbers:
        return lambda text: test(_text_number(text))
    return lambda text: test(text.strip())


def _searches(search: Callable[[str], Any]) -> Callable[[Any], bool]:
    return lambda value: type(value) is str and search(value) is not None


def _condition(get: _Getter, test: Callable[[Any], bool], negated: bool) -> _Node:
    """A missing value fails every condition, negated ones too; else ``test`` (negated)."""

    def node(sample: Sample, cache: dict) -> bool:
        value = get(sample, cache)
        return value is not _MISSING and test(value) is not negated

    return node


# --- the parser -----------------------------------------------------------------------


class _Parser:
    """Recursive descent over the text itself, so that every error knows its column."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def parse(self) -> _Node:
        if not self.text.strip():
            raise UsageError("--where: the expression is empty")
        node = self._or()
        if self._more():
            if self._symbol(")"):
                raise self._error("unmatched ')'", at=self.pos - 1, found=False)
            raise self._error("expected 'and', 'or' or the end")
        return node

    def _or(self) -> _Node:
        parts = [self._and()]
        while self._symbol("or"):
            parts.append(self._and())
        return parts[0] if len(parts) == 1 else lambda s, c: any(p(s, c) for p in parts)

    def _and(self) -> _Node:
        parts = [self._not()]
        while self._symbol("and"):
            parts.append(self._not())
        return parts[0] if len(parts) == 1 else lambda s, c: all(p(s, c) for p in parts)

    def _not(self) -> _Node:
        if self._symbol("not"):
            inner = self._not()
            return lambda s, c: not inner(s, c)
        return self._primary()

    def _primary(self) -> _Node:
        if self._symbol("("):
            start = self.pos - 1
            node = self._or()
            if not self._symbol(")"):
                raise self._unclosed(start, "expected 'and', 'or' or ')'")
            return node
        if self._symbol("has"):
            return self._reference("expected a field after 'has'").present
        ref = self._reference("expected a condition")
        op = self._operator(ref)
        if op in ("~", "!~"):
            self._more()
            column = self.pos + 1
            try:
                search = re.compile(self._value(op, (str,))).search
            except re.error as exc:
                raise ExpressionError(f"bad regular expression ({exc.msg})", column) from None
            literals: list[Any] = []
            test = _searches(search)
        elif op in _ORDER:
            literals = [self._value(op, (int, float, str))]
            test = _ordered(op, literals[0])
        else:
            literals = self._list(op, ref) if op.endswith("in") else [self._value(op, ref=ref)]
            test = _equals(literals)
        if ref.kind == "text" and op not in ("~", "!~"):
            test = _on_text(test, literals)
        return _condition(ref.get, test, negated=op in ("!=", "!~", "not in"))

    def _operator(self, ref: _Reference) -> str:
        self._more()
        match = _OPERATOR.match(self.text, self.pos)
        if match is not None:
            self.pos = match.end()
            return match[0]
        if self._symbol("in"):
            return "in"
        if self._symbol("not"):
            if not self._symbol("in"):
                raise self._error("expected 'in' after 'not'")
            return "not in"
        hint = " (write '==')" if self.text.startswith("=", self.pos) else ""
        raise self._error(f"expected a comparison after '{ref.shown}'", hint=hint)

    def _list(self, op: str, ref: _Reference) -> list[Any]:
        if not self._symbol("("):
            raise self._error(f"expected '(' after '{op}'")
        start = self.pos - 1
        values = [self._value("(", ref=ref)]
        while not self._symbol(")"):
            if not self._symbol(","):
                raise self._unclosed(start, "expected ',' or ')'")
            if self._symbol(")"):
                break
            values.append(self._value(",", ref=ref))
        return values

    def _reference(self, expected: str) -> _Reference:
        self._more()
        text, start = self.text, self.pos
        steps: list[str | int] = []
        if text.startswith("`", start):
            end = text.find("`", start + 1)
            if end <= start + 1:
                what = "unterminated field name" if end < 0 else "empty field name"
                raise self._error(what, at=start, found=False)
            self.pos, field, json_field = end + 1, text[start + 1 : end], True
        else:
            match = _NAME.match(text, start)
            if match is None or match[0] in _KEYWORDS - {"key"}:
                raise self._error(expected)
            self.pos = match.end()
            if match[0] == "key":
                return _Reference("text", lambda s, c: s.key, lambda s, c: True, "key")
            parts = match[0].split(".")
            lowered = [p.lower() for p in parts]
            json_field = "json" in lowered
            cut = lowered.index("json") + 1 if json_field else len(parts)
            field, steps = ".".join(parts[:cut]), [*parts[cut:]]
        while self.pos < len(text) and text[self.pos] in ".[":
            if not json_field:
                what = "a path needs a JSON field (json, *.json or a `quoted` name)"
                raise self._error(f"{what}, not '{text[start : self.pos]}'", found=False)
            self.pos += 1
            if text[self.pos - 1] == "[":
                steps.append(self._value("[", (int, str)))
                if not self._symbol("]"):
                    raise self._error("expected ']'")
            elif match := _PART.match(text, self.pos):
                steps.append(match[0])
                self.pos = match.end()
            else:
                raise self._error("expected a name after '.'")
        shown = text[start : self.pos]
        if not steps:
            return _text_reference(field.lower(), shown)
        return _json_reference(field.lower(), steps, shown)

    def _value(
        self, after: str, allowed: tuple[type, ...] | None = None, ref: _Reference | None = None
    ) -> Any:
        """A literal: a string, a number, true, false or null (of the ``allowed`` types)."""
        self._more()
        text, start = self.text, self.pos
        value: Any = None
        if text.startswith(('"', "'"), start):
            match = _STRING.match(text, start)
            if match is None:
                raise self._error("unterminated string", found=False)
            value = _UNESCAPE.sub(r"\1", match[1] if match[1] is not None else match[2])
        elif (match := _NUMBER.match(text, start)) and not _PART.match(text, match.end()):
            value = _number(match[0])
        elif (match := _NAME.match(text, start)) and match[0] in _LITERALS:
            value = _LITERALS[match[0]]
            if ref is not None and ref.kind == "text":
                what = f"'{ref.shown}' is text: {match[0]} compares only with JSON values"
                raise self._error(what, found=False)
        else:
            match = None
        if match is None or (allowed is not None and type(value) not in allowed):
            wanted = _WANTED.get(
                allowed or (), "a value" if match is None else "a number or a string"
            )
            raise self._error(f"expected {wanted} after '{after}'")
        self.pos = match.end()
        return value

    def _more(self) -> bool:
        """Skip whitespace; whether any text is left."""
        self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
        return self.pos < len(self.text)

    def _symbol(self, symbol: str) -> bool:
        """Take ``symbol`` if it comes next; a keyword only as a whole name (not ``notes``)."""
        self._more()
        match = _NAME.match(self.text, self.pos) if symbol.isalpha() else None
        if (match[0] if match else self.text[self.pos : self.pos + len(symbol)]) != symbol:
            return False
        self.pos += len(symbol)
        return True

    def _unclosed(self, start: int, expected: str) -> ExpressionError:
        if self._more():
            return self._error(expected)
        return self._error("unclosed '('", at=start, found=False)

    def _error(
        self, what: str, *, at: int | None = None, found: bool = True, hint: str = ""
    ) -> ExpressionError:
        """An error at ``at`` (default: the next token), naming that token if ``found``."""
        self._more()
        match = _FOUND.match(self.text, self.pos) if found else None
        shown = None
        if match is not None:
            token = match[0] if len(match[0]) <= 20 else match[0][:17] + "..."
            shown = f"'{token}'{hint}"
        return ExpressionError(what, (self.pos if at is None else at) + 1, shown)
