"""How a shard's samples are mapped: the shard mappers of :func:`tarkit.map_shards`.

A shard mapper (:class:`ShardMapper`) turns the samples
of one input shard into (output samples, metadata row) pairs (a function that gives a row
per output sample gives a pair per output sample). When mapping a sample
fails it raises :class:`~tarkit.errors.ShardFailure` naming the sample (any other
exception fails the shard at the sample last read).

- :class:`SampleMapper` applies a Python function to each sample (``map_shards(fn, …)``).
- :class:`ShellCommand` runs tarproc's model, :func:`~tarkit.processing.supervisor.map_command`,
  on the samples of each shard, so that every output shard holds exactly the bytes
  ``tarproc -c CMD`` writes for that shard: same temporary directories, same
  ``--on-error`` policies, same ``--multi``.

Metadata of a shell command: a command that leaves a file ``tarkit.metadata.json``
(:data:`~tarkit.processing.commands.METADATA_FILE`) in its directory gives that sample's
metadata row; the file must hold a JSON object. Fields arrive as ``sample.*`` files, so
no input field is ever taken for a row.

:func:`made_by` says what makes a mapper's outputs, for the records that ``resume``
compares (:mod:`tarkit.processing.records`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from ..errors import CommandFailed, ShardFailure
from ..format.samples import Sample
from ..sizes import check_parallel
from .commands import Command, ProcReport, Rejection, check_on_error
from .supervisor import map_command

Row = dict[str, Any]  # a metadata row: JSON values
Outputs = list[Any]  # output samples: dicts as ShardWriter takes them, or Samples
Maker = dict[str, Any]  # what makes a mapper's outputs (JSON): see made_by

RETURNS = (
    "a sample dict, a list of them, None, or (samples, row) with row a dict (one metadata "
    "row per input sample) or a list of dicts (one row per output sample)"
)


@runtime_checkable
class ShardMapper(Protocol):
    """Maps the samples of one shard: :class:`SampleMapper` (a function per sample) and
    :class:`ShellCommand` (tarproc's command) are the two there are."""

    def map_shard(
        self, samples: Iterator[Sample], source: str
    ) -> Iterator[tuple[Outputs, Row | None]]:
        """Yield (output samples, metadata row or None) for each sample of ``source``.

        A sample that cannot be mapped raises :class:`~tarkit.errors.ShardFailure` naming
        it (``output`` may be left empty: the task fills it in).
        """
        ...

    def take_rejects(self) -> list[str]:
        """The ``key<TAB>status<TAB>reason`` lines of the samples the last shard left out
        or kept unchanged, in order (then forgotten)."""
        ...


class SampleMapper:
    """Applies a per-sample function to a shard's samples (see :func:`tarkit.map_shards`).

    ``fn`` gets a dict: ``__key__``, ``__url__`` (the input shard) and the bytes of each
    field. It returns what :data:`RETURNS` says. An exception it raises fails the shard,
    naming the sample, with its traceback (and is retried: it may be transient); a
    return value of another kind fails it for good (it would come back the same).
    """

    def __init__(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        self.fn = fn

    def map_shard(
        self, samples: Iterator[Sample], source: str
    ) -> Iterator[tuple[Outputs, Row | None]]:
        """Yield (output samples, metadata row or None) for each sample."""
        fn = self.fn
        for sample in samples:
            item: dict[str, Any] = {"__key__": sample.key, "__url__": source}
            item.update(sample.data())
            try:
                result = fn(item)
            except Exception as exc:
                raise ShardFailure.of(exc, source, key=sample.key) from exc
            try:
                outputs, rows = split_result(result)
            except TypeError as exc:
                what = f"the function {function_name(fn)} returned {exc}; it may return {RETURNS}"
                raise ShardFailure(source, "", sample.key, what, final=True) from None
            if isinstance(rows, list):  # one row per output sample, each after its sample
                for output, row in zip(outputs, rows, strict=True):
                    yield [output], row
            else:
                yield outputs, rows

    def take_rejects(self) -> list[str]:
        """None: a function has no reject policy (its exceptions fail the shard)."""
        return []

    def made_by(self) -> Maker:
        """The function's ``module:qualname``; for a :func:`functools.partial`, also a
        digest of its arguments."""
        import functools

        maker: Maker = {"function": function_name(self.fn)}
        if isinstance(self.fn, functools.partial):
            maker["arguments"] = _digest((self.fn.args, sorted(self.fn.keywords.items())))
        return maker


def split_result(result: Any) -> tuple[Outputs, Row | list[Row] | None]:
    """Normalize what a map function returned into (output samples, metadata rows).

    A tuple of two whose second item is a dict without ``__key__`` (or None) is
    ``(samples, row)``, one row for the input sample; whose second item is a list of
    such dicts, ``(samples, rows)``, one row per output sample (given as a list); a list
    is several samples; None is none. Raises TypeError saying what ``result`` is when it
    is none of :data:`RETURNS`, or how many samples and rows it holds when they differ.

    >>> split_result(None)
    ([], None)
    >>> split_result(({"__key__": "a", "txt": "x"}, {"n": 1}))
    ([{'__key__': 'a', 'txt': 'x'}], {'n': 1})
    >>> split_result([{"__key__": "a"}, {"__key__": "b"}])[0]
    [{'__key__': 'a'}, {'__key__': 'b'}]
    >>> split_result(([{"__key__": "a"}, {"__key__": "b"}], [{"n": 1}, {"n": 2}]))[1]
    [{'n': 1}, {'n': 2}]
    >>> split_result(([{"__key__": "a"}], [{"n": 1}, {"n": 2}]))
    Traceback (most recent call last):
    ...
    TypeError: 1 sample and 2 rows
    """
    row: Row | list[Row] | None = None
    if isinstance(result, tuple) and len(result) == 2 and _is_rows(result[1]):
        result, given = result
        if isinstance(given, list):
            row = [dict(each) for each in given]
        elif given is not None:
            row = dict(given)
    if result is None:
        outputs = []
    elif isinstance(result, (list, tuple)):
        outputs = list(result)
    else:
        outputs = [result]
    if not all(isinstance(output, (Mapping, Sample)) for output in outputs):
        raise TypeError(_shape(result))
    if isinstance(row, list) and len(row) != len(outputs):
        samples = "sample" if len(outputs) == 1 else "samples"
        raise TypeError(f"{len(outputs)} {samples} and {len(row)} row{'s' * (len(row) != 1)}")
    return outputs, row


def _is_rows(value: Any) -> bool:
    """Whether ``value`` is what a ``(samples, row)`` pair holds second: None, a row (a
    dict without ``__key__``) or a list of rows."""
    if isinstance(value, list):
        return all(_is_row(each) for each in value)
    return value is None or _is_row(value)


def _is_row(value: Any) -> bool:
    return isinstance(value, Mapping) and "__key__" not in value


def _shape(value: Any) -> str:
    """What a wrong return value is, for a message: ``a str``, ``(list, list)``.

    >>> _shape("x"), _shape(([], [])), _shape([{}, 3])
    ('a str', '(list, list)', 'a list holding an int')
    """
    if isinstance(value, tuple) and 1 < len(value) <= 4:
        return "(" + ", ".join(type(item).__name__ for item in value) + ")"
    if isinstance(value, (list, tuple)):
        wrong = next(v for v in value if not isinstance(v, (Mapping, Sample)))
        return f"{_a(type(value).__name__)} holding {_a(type(wrong).__name__)}"
    return _a(type(value).__name__)


def _a(name: str) -> str:
    return f"{'an' if name[:1] in 'aeiouAEIOU' else 'a'} {name}"


def function_name(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a function (of the one a :func:`functools.partial` wraps,
    of the class of another callable object).

    >>> import json, functools
    >>> function_name(json.dumps), function_name(functools.partial(json.dumps, indent=1))
    ('json:dumps', 'json:dumps')
    """
    import functools

    while isinstance(fn, functools.partial):
        fn = fn.func
    named: Any = fn if getattr(fn, "__qualname__", None) else type(fn)
    return f"{getattr(named, '__module__', None) or '?'}:{named.__qualname__}"


def _digest(value: Any) -> str:
    """A short sha256 of ``value``'s pickle (of its repr when it does not pickle)."""
    import hashlib
    import pickle

    try:
        data = pickle.dumps(value, protocol=4)
    except Exception:  # anything may fail to pickle
        data = repr(value).encode("utf-8", "surrogatepass")
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]


def made_by(mapper: ShardMapper) -> Maker:
    """What makes the outputs of ``mapper`` (JSON): ``{"function": "module:qualname"}``,
    ``{"command": CMD, "options": {…}}`` (the options that shape its outputs), or, for
    a shard mapper of another kind, ``{"mapper": "module:qualname"}`` of its class."""
    if isinstance(mapper, (SampleMapper, ShellCommand)):
        return mapper.made_by()
    return {"mapper": function_name(type(mapper))}


class ShellCommand:
    """Run ``command`` on every sample of a shard, ``parallel`` at once, in order.

    ``on_error`` is ``fail`` (the shard fails, naming the sample), ``skip`` or ``keep``
    (the sample is left out or passed through; its ``key<TAB>status<TAB>reason`` line is
    reported as a reject). ``timeout``, ``multi`` and ``quiet`` are tarproc's. A sample's
    metadata row is the ``tarkit.metadata.json`` its command leaves (a file that is not
    a JSON object is a bad output, which ``on_error`` decides on).
    """

    def __init__(
        self,
        command: str,
        *,
        parallel: int = 1,
        on_error: str = "fail",
        timeout: float | None = None,
        multi: bool = False,
        quiet: bool = False,
    ) -> None:
        self.command = Command(command, timeout=timeout, multi=multi, quiet=quiet, rows=True)
        self.command.check()
        self.on_error = check_on_error(on_error)
        self.parallel = check_parallel(parallel)
        self._rejects: list[str] = []

    def map_shard(
        self, samples: Iterator[Sample], source: str
    ) -> Iterator[tuple[Outputs, Row | None]]:
        """Yield ([output sample], None) for each sample the command left, and ([], row)
        for each metadata row, before the outputs of its sample."""
        self._rejects = []

        def on_reject(rejection: Rejection) -> None:
            self._rejects.append(rejection.line())

        report = ProcReport()
        processed = map_command(
            samples, self.command, parallel=self.parallel, on_error=self.on_error,
            on_reject=on_reject, report=report,
        )  # fmt: skip
        try:
            for sample in processed:
                yield from _take_rows(report)
                yield [sample], None
            yield from _take_rows(report)
        except CommandFailed as exc:
            rejection = exc.rejection
            raise ShardFailure(source, "", rejection.key, rejection.describe()) from None
        finally:
            processed.close()  # type: ignore[attr-defined]

    def take_rejects(self) -> list[str]:
        """The reject lines of the last shard, in order."""
        rejects, self._rejects = self._rejects, []
        return rejects

    def made_by(self) -> Maker:
        """The command and the options that shape its outputs (not ``parallel`` nor
        ``quiet``, which do not)."""
        command = self.command
        options = {"multi": command.multi, "on_error": self.on_error, "timeout": command.timeout}
        return {"command": command.text, "options": options}


def _take_rows(report: ProcReport) -> Iterator[tuple[Outputs, Row | None]]:
    """The rows gathered in ``report`` so far, each as ([], row); then they are gone."""
    rows, report.rows = report.rows, []
    for row in rows:
        yield [], row
