"""How a shard's samples are mapped: the shard mappers of :func:`tarkit.map_shards`.

A shard mapper (:class:`ShardMapper`) turns the samples
of one input shard into (output samples, metadata row) pairs. When mapping a sample
fails it raises :class:`~tarkit.errors.ShardFailure` naming the sample (any other
exception fails the shard at the sample last read).

- :class:`SampleMapper` applies a Python function to each sample (``map_shards(fn, …)``).
- :class:`ShellCommand` runs tarproc's model, :func:`~tarkit.processing.supervisor.map_command`,
  on the samples of each shard, so that every output shard holds exactly the bytes
  ``tarproc -c CMD`` writes for that shard: same temporary directories, same
  ``--on-error`` policies, same ``--multi``.

Metadata of a shell command: when ``metadata_field`` is set (``tarkit map -c …
--metadata FILE`` sets ``meta.json``), a command that writes ``sample.meta.json`` gives
that sample's metadata row: the field is taken out of the output sample and must hold a
JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from ..errors import CommandFailed, ShardFailure
from ..format.samples import Sample
from ..sizes import check_parallel
from .commands import Command, Rejection, check_on_error
from .supervisor import map_command

METADATA_FIELD = "meta.json"
Row = dict[str, Any]  # a metadata row: JSON values
Outputs = list[Any]  # output samples: dicts as ShardWriter takes them, or Samples


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
    field. It returns a sample, a list of samples, None, or ``(samples, metadata_row)``.
    An exception it raises fails the shard, naming the sample, with its traceback.
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
                outputs, row = split_result(fn(item))
                for output in outputs:
                    if not isinstance(output, (Mapping, Sample)):
                        raise TypeError(
                            f"the function returned a {type(output).__name__}, not a sample "
                            "dict (or a list of them, None, or (samples, metadata row))"
                        )
            except Exception as exc:
                raise ShardFailure.of(exc, source, key=sample.key) from exc
            yield outputs, row

    def take_rejects(self) -> list[str]:
        """None: a function has no reject policy (its exceptions fail the shard)."""
        return []


def split_result(result: Any) -> tuple[Outputs, Row | None]:
    """Normalize what a map function returned into (output samples, metadata row).

    A tuple of two whose second item is a dict without ``__key__`` is
    ``(samples, metadata)``; a list is several samples; None is none.

    >>> split_result(None)
    ([], None)
    >>> split_result(({"__key__": "a", "txt": "x"}, {"n": 1}))
    ([{'__key__': 'a', 'txt': 'x'}], {'n': 1})
    >>> split_result([{"__key__": "a"}, {"__key__": "b"}])[0]
    [{'__key__': 'a'}, {'__key__': 'b'}]
    """
    row = None
    if (
        isinstance(result, tuple)
        and len(result) == 2
        and (result[1] is None or (isinstance(result[1], Mapping) and "__key__" not in result[1]))
    ):
        result, row = result
        if row is not None:
            row = dict(row)
    if result is None:
        return [], row
    if isinstance(result, (list, tuple)):
        return list(result), row
    return [result], row


class ShellCommand:
    """Run ``command`` on every sample of a shard, ``parallel`` at once, in order.

    ``on_error`` is ``fail`` (the shard fails, naming the sample), ``skip`` or ``keep``
    (the sample is left out or passed through; its ``key<TAB>status<TAB>reason`` line is
    reported as a reject). ``timeout``, ``multi`` and ``quiet`` are tarproc's.
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
        metadata_field: str | None = None,
    ) -> None:
        self.command = Command(command, timeout=timeout, multi=multi, quiet=quiet)
        self.command.check()
        self.on_error = check_on_error(on_error)
        self.parallel = check_parallel(parallel)
        self.metadata_field = metadata_field
        self._rejects: list[str] = []

    def map_shard(
        self, samples: Iterator[Sample], source: str
    ) -> Iterator[tuple[Outputs, Row | None]]:
        """Yield ([output sample], metadata row or None) for each sample the command left."""
        self._rejects = []

        def on_reject(rejection: Rejection) -> None:
            self._rejects.append(rejection.line())

        processed = map_command(
            samples, self.command, parallel=self.parallel, on_error=self.on_error,
            on_reject=on_reject,
        )  # fmt: skip
        try:
            for sample in processed:
                if self.metadata_field is None:
                    yield [sample], None
                else:
                    yield self._take_metadata(sample, source)
        except CommandFailed as exc:
            rejection = exc.rejection
            raise ShardFailure(source, "", rejection.key, rejection.describe()) from None
        finally:
            processed.close()  # type: ignore[attr-defined]

    def take_rejects(self) -> list[str]:
        """The reject lines of the last shard, in order."""
        rejects, self._rejects = self._rejects, []
        return rejects

    def _take_metadata(self, sample: Sample, source: str) -> tuple[Outputs, Row | None]:
        field = self.metadata_field
        if field not in sample.fields:
            return [sample], None
        index = sample.fields.index(field)  # type: ignore[arg-type]
        try:
            row: Any = json.loads(sample.members[index].data)
        except (ValueError, UnicodeDecodeError) as exc:
            row = exc
        if not isinstance(row, dict):
            what = f"the command's sample.{field} does not hold a JSON object"
            raise ShardFailure(source, "", sample.key, what)
        fields = sample.fields[:index] + sample.fields[index + 1 :]
        members = sample.members[:index] + sample.members[index + 1 :]
        outputs = [Sample(sample.key, fields, members, sample.source)] if fields else []
        return outputs, row
