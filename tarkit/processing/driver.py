"""Process whole datasets shard by shard: :func:`map_shards`, on local processes or Ray.

Each input shard becomes one output shard: the function maps every sample of it to
zero, one or several output samples, and may return a metadata row per input sample or
per output sample. One
task per shard (:mod:`tarkit.processing.shard_task`) runs on an engine
(:mod:`tarkit.engines`); the function becomes a shard mapper
(:mod:`tarkit.processing.mappers`).
"""

from __future__ import annotations

import glob as globbing
import json
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engines import check_engine, start_engine
from ..engines.local import default_workers
from ..engines.running import DONE, RETRY, Outcome, TaskRunner
from ..errors import MapError, OutputError, ShardFailure, UsageError
from ..format.compression import compression_for
from ..format.manifest import ShardInfo
from ..sizes import check_parallel
from ..storage import (
    PIPE,
    check_local_files,
    expand_inputs,
    index_places,
    list_files,
    location,
    manifest_files,
    publish,
    save_manifest,
)
from ..writing.patterns import CREATE, OVERWRITE, RESUME, check_mode
from .mappers import Row, SampleMapper, ShardMapper, made_by
from .output_set import abandon_pending, commit_outputs, settle_outputs
from .records import check_made_by, recorded_outputs
from .shard_task import ShardResult, ShardTask

__all__ = ["MapError", "MapProgress", "MapResult", "ShardFailure", "map_shards"]

_TICK = 0.5  # seconds between progress calls while waiting


@dataclass
class MapResult:
    """What a run did. ``shards`` are the finished outputs' entries, in output order."""

    outputs: list[str]
    shards: list[ShardInfo] = field(default_factory=list)
    processed: int = 0
    resumed: int = 0
    samples_in: int = 0
    rows: int = 0
    rejects: list[str] = field(default_factory=list)
    seconds: float = 0.0
    reconnections: int = 0  # remote inputs' reads that reconnected at the byte reached
    finished_commit: bool = False  # an earlier overwrite's, stopped midway, was finished

    @property
    def samples(self) -> int:
        """Output samples in the finished shards."""
        return sum(s.samples for s in self.shards)


@dataclass
class MapProgress:
    """Handed to the ``progress`` callback at each event and every half second.

    ``event`` is ``tick``, ``done`` (a shard mapped), ``resumed`` (found complete),
    ``retry`` (an attempt failed, ``message`` says why), ``failed`` (no attempts left),
    ``warning`` (a shard was mapped but members were skipped; or, before any, the commit
    of an earlier overwrite that was stopped midway was finished) or ``finished``.
    ``samples`` counts the input samples of the shards mapped so far; on the local
    engine, also those read so far by shards still running (reported every half second).
    ``reconnections`` counts the times the mapped shards' remote inputs reconnected at
    the byte reached (a shard that reconnected also gets a ``warning``).
    """

    total: int
    done: int = 0
    resumed: int = 0
    failed: int = 0
    retries: int = 0
    reconnections: int = 0
    samples: int = 0
    seconds: float = 0.0
    event: str = "tick"
    shard: str | None = None
    message: str | None = None

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


def map_shards(
    fn: Callable[[dict[str, Any]], Any] | ShardMapper,
    inputs: str | Sequence[str],
    outputs: str | Sequence[str],
    *,
    engine: str = "local",
    workers: int | None = None,
    retries: int = 2,
    metadata: str | None = None,
    mode: str = RESUME,
    address: str | None = None,
    num_cpus: float = 1,
    manifest: str | None = None,
    progress: Callable[[MapProgress], object] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> MapResult:
    """Map every input shard to its output shard with ``fn``; one task per shard.

    ``inputs`` and ``outputs`` are brace patterns (``"in-{000..099}.tar"``) or lists,
    of equal length; ``outputs`` may also be a directory ending in ``/``, where outputs
    keep the inputs' file names. ``fn(sample)`` gets a dict with ``__key__``,
    ``__url__`` and the bytes of each field, and returns a sample dict (values encoded
    by field extension, as :class:`~tarkit.writing.shard_writer.ShardWriter` does), a list of them,
    None, or ``(samples, metadata_row)`` with one row (a dict) per input sample, or
    ``(samples, rows)`` with a list of rows, one per output sample; anything else (rows
    that do not match the samples one for one, too) fails its shard at once, naming the
    function. ``fn`` may also be a shard mapper
    (an object with ``map_shard(samples, source)`` and ``take_rejects()``: a
    :class:`~tarkit.processing.mappers.ShardMapper`, like
    :class:`~tarkit.processing.mappers.ShellCommand`).
    In worker processes ``fn`` must be importable: a module-level function.

    ``engine`` is ``"local"`` (``workers`` processes, default one per core) or
    ``"ray"`` (one task per shard with ``num_cpus`` each, on the cluster at ``address``
    or ``RAY_ADDRESS``, else a local Ray; ``workers`` then limits tasks in flight).

    Outputs are written atomically with a record beside each (``.NAME.map.json``:
    its manifest entry, what made it and its metadata rows). ``mode`` says what to do
    with outputs already there: ``"resume"`` (default) keeps those whose record matches
    the file and redoes the others, and refuses to start (:class:`UsageError`) when one
    was made by another function or command (or its options differ); ``"overwrite"``
    redoes every one, under pending names, and commits the new set whole once every
    shard is done (:mod:`tarkit.processing.output_set`: a run that fails or is stopped
    leaves the old set whole, one stopped in its commit is finished by the next run,
    ``finished_commit`` in the result); ``"create"`` refuses to start when any exists.
    An earlier run's outputs that match the output pattern (a brace pattern's braces as
    ``*``, or the directory) but are not outputs of this run are refused, but with
    ``"overwrite"``, whose commit removes them (and their records): outputs read by
    pattern never mix two runs. Local inputs that do not exist (or are directories, or
    part of a set stopped in its commit: :func:`~tarkit.storage.check_local_files`)
    raise :class:`~tarkit.errors.SourceError` before anything runs. A shard that fails
    is tried ``retries`` more times (not when its input is a local file that tarkit
    cannot read, nor when ``fn`` returned something it may not: that would fail again);
    when attempts are exhausted the other shards still run, and then
    :class:`MapError` is raised, naming the shards, samples and errors. Only when every
    shard is done are ``metadata`` (rows in input order; ``.jsonl`` or ``.tsv``) and
    ``manifest`` written (version 2; each uncompressed output then gets its shard index,
    made as it is written: beside it, ``<output>.idx``, when the outputs are named by
    one numbered pattern, else in ``index/`` beside the manifest). ``progress`` is
    called with a :class:`MapProgress`.
    ``storage_options`` go to fsspec for remote inputs and outputs; a remote input that
    drops mid-shard reconnects at the byte reached (``TARKIT_RETRIES``,
    ``TARKIT_TIMEOUT``; docs/remote.md), counted in ``reconnections``.
    """
    started = time.monotonic()
    input_list = _expand(inputs, "inputs")
    if isinstance(outputs, str) and outputs.endswith("/"):
        output_list = [outputs + _basename(source) for source in input_list]
    else:
        output_list = _expand(outputs, "outputs")
    _check_plan(input_list, output_list)
    check_mode(mode)
    options = dict(storage_options) if storage_options else None
    earlier = _earlier_outputs(outputs, output_list)
    places = _index_places(manifest, output_list)
    indexes = [place for place in places if place is not None]
    settled = settle_outputs(output_list, earlier, indexes, mode == OVERWRITE, options)
    if settled is not None and progress is not None:
        progress(MapProgress(len(output_list), event="warning", shard=output_list[0],
                             message=settled))  # fmt: skip
    _check_earlier(outputs, output_list, mode)
    if metadata is not None:
        metadata_format(metadata)
    if retries < 0:
        raise UsageError(f"retries must not be negative (got {retries})")
    if workers is not None:
        check_parallel(workers, "workers")
    if not num_cpus >= 0:
        raise UsageError(f"num_cpus must not be negative (got {num_cpus})")
    mapper = _as_mapper(fn, engine)
    check_local_files(input_list)

    maker = made_by(mapper)
    if mode == RESUME:
        check_made_by(output_list, maker, options)
    tasks = [
        ShardTask(i, source, output, maker, mode == RESUME, storage_options=options,
                  index_place=place, staged=mode == OVERWRITE)
        for i, (source, output, place) in enumerate(zip(input_list, output_list, places,
                                                         strict=True))
    ]  # fmt: skip
    state = MapProgress(total=len(tasks))
    result = MapResult(output_list, finished_commit=settled is not None)
    results: dict[int, ShardResult] = {}
    failures: dict[int, ShardFailure] = {}

    def report(event: str, shard: str | None = None, message: str | None = None) -> None:
        if progress is not None:
            state.seconds = time.monotonic() - started
            state.samples = result.samples_in + engine_used.samples_read()
            state.event, state.shard, state.message = event, shard, message
            progress(state)

    if engine == "local":
        workers = min(workers or default_workers(), max(len(tasks), 1))
    engine_used = start_engine(engine, mapper, workers=workers, address=address,
                               num_cpus=num_cpus)  # fmt: skip
    runner = TaskRunner(engine_used, retries, _judge)
    for task in tasks:
        runner.add(task)
    finished = False
    try:
        while runner.busy():
            outcomes = runner.poll(_TICK)
            if not outcomes:
                report("tick")
            for outcome in outcomes:
                task, done = outcome.task, outcome.result
                if outcome.event == DONE:
                    results[task.index] = done
                    _count(state, result, done)
                    report("resumed" if done.resumed else "done", task.input)
                    if done.skipped_members:
                        report("warning", task.input, done.skipped_members)
                    if done.reconnections:
                        n = done.reconnections
                        what = f"{n} reconnection{'s' * (n > 1)} while reading, each at the byte reached"
                        report("warning", task.input, what)
                    continue
                failure = _failure_of(task, outcome)
                if outcome.event == RETRY:
                    state.retries += 1
                    report("retry", task.input, str(failure))
                else:
                    failures[task.index] = failure
                    state.failed += 1
                    report("failed", task.input, str(failure))
        finished = True
    finally:
        runner.close(cancel=not finished)
        if mode == OVERWRITE and (failures or not finished):
            abandon_pending(output_list, indexes, options)  # the old set stays whole

    ordered = [results[i] for i in sorted(results)]
    result.shards = [r.info for r in ordered if r.info is not None]
    result.rejects = [reject for r in ordered for reject in r.rejects]
    result.seconds = time.monotonic() - started
    if failures:
        report("finished")
        raise MapError([failures[i] for i in sorted(failures)], result)
    rows = [row for r in ordered for row in r.rows]
    result.rows = len(rows)
    if mode == OVERWRITE:  # the set commits whole, the manifest last
        staged = [(place, r.index_bytes) for place, r in zip(places, ordered, strict=True)
                  if place is not None and r.index_bytes is not None]  # fmt: skip
        commit_outputs(result.shards, [r.record_bytes for r in ordered], earlier, staged,
                       manifest, metadata, options)  # fmt: skip
    if metadata is not None:
        text = format_metadata(rows, metadata_format(metadata))
        publish(metadata, text.encode("utf-8"), options)
    if manifest is not None and mode != OVERWRITE:
        indexed = any(place is not None for place in places)
        save_manifest(manifest_files(manifest, result.shards, indexed), options)
    report("finished")
    return result


def _index_places(manifest: str | None, outputs: list[str]) -> list[str | None]:
    """Where the index of each output goes (:func:`~tarkit.storage.index_places`): with
    a manifest, for uncompressed outputs; None for the others."""
    if manifest is None:
        return [None] * len(outputs)
    places = index_places(manifest, outputs)
    return [None if compression_for(o) else p for o, p in zip(outputs, places, strict=True)]


def _judge(result: ShardResult) -> tuple[str, bool] | None:
    """Why a shard task failed and whether another attempt may succeed; None: it did not."""
    failure = result.failure
    return None if failure is None else (str(failure), not failure.final)


def _failure_of(task: ShardTask, outcome: Outcome) -> ShardFailure:
    """The failure of an attempt: the task's own, or its worker's death."""
    if outcome.result is not None and outcome.result.failure is not None:
        return outcome.result.failure  # type: ignore[no-any-return]
    return ShardFailure(task.input, task.output, None, outcome.reason, "", task.attempt)


def _count(state: MapProgress, result: MapResult, outcome: ShardResult) -> None:
    state.done += 1
    state.reconnections += outcome.reconnections
    result.reconnections += outcome.reconnections
    if outcome.resumed:
        state.resumed += 1
        result.resumed += 1
    else:
        result.processed += 1
        result.samples_in += outcome.samples_in


def _expand(spec: str | Sequence[str], what: str) -> list[str]:
    if isinstance(spec, str):
        items = expand_inputs([spec])
    else:
        items = [str(s) for s in spec]
    if not items:
        raise UsageError(f"no {what} given")
    return items


def _basename(url: str) -> str:
    """The file name of an input URL, for an output directory.

    >>> _basename("s3://b/x/in-000.tar?v=1"), _basename("in/a.tar.gz")
    ('in-000.tar', 'a.tar.gz')
    """
    name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    if not name or location(url).kind == PIPE:
        raise UsageError(f"input {url!r} has no file name to reuse: name the outputs")
    return name


def _check_plan(inputs: list[str], outputs: list[str]) -> None:
    if len(inputs) != len(outputs):
        raise UsageError(
            f"{len(inputs)} inputs but {len(outputs)} outputs: each input shard needs "
            "its own output (in-{000..009}.tar → out-{000..009}.tar)"
        )
    seen: set[str] = set()
    for output in outputs:
        if output in seen:
            raise UsageError(f"output {output!r} is named twice: outputs must differ")
        if output == "-":
            raise UsageError("map_shards writes output files, not stdout")
        seen.add(output)
    clash = seen.intersection(inputs)
    if clash:
        raise UsageError(f"output {sorted(clash)[0]!r} is also an input")


def output_glob(outputs: str | Sequence[str]) -> str | None:
    """The glob of the outputs an earlier run may have left: the directory's files, or
    the brace pattern with each brace group as ``*``; None for a list of outputs.

    >>> output_glob("out/"), output_glob("o/x-{000..009}-{a,b}.tar"), output_glob(["a.tar"])
    ('out/*', 'o/x-*-*.tar', None)
    """
    if not isinstance(outputs, str):
        return None
    if outputs.endswith("/"):
        return globbing.escape(outputs) + "*"
    parts, depth, literal = [], 0, ""
    for char in outputs:
        if char == "{":
            if depth == 0:
                parts.append(globbing.escape(literal) + "*")
                literal = ""
            depth += 1
        elif char == "}" and depth:
            depth -= 1
        elif depth == 0:
            literal += char
    return "".join(parts) + globbing.escape(literal)


def _earlier_outputs(outputs: str | Sequence[str], output_list: list[str]) -> list[str]:
    """Outputs of an earlier map run that match the output pattern but are not this run's."""
    pattern = output_glob(outputs)
    if pattern is None:
        return []
    ours = set(output_list)
    return [found for found in recorded_outputs(pattern) if found not in ours]


def _check_earlier(outputs: str | Sequence[str], output_list: list[str], mode: str) -> None:
    """Refuse what ``mode`` does not take: earlier outputs that are not this run's, and
    (``create``) any output that exists."""
    earlier = [] if mode == OVERWRITE else _earlier_outputs(outputs, output_list)
    if earlier:
        n = len(earlier)
        raise OutputError(
            f"{outputs}: {n} earlier output{'s' if n != 1 else ''} of tarkit map "
            f"{'match' if n != 1 else 'matches'} the output pattern but "
            f"{'are' if n != 1 else 'is'} not of this run, first {earlier[0]}: outputs "
            "read by pattern would mix two runs. Pass --overwrite (mode='overwrite') to redo "
            "every shard and remove them once this run is complete"
        )
    if mode == CREATE:
        present = [o for o in output_list if list_files(globbing.escape(o))]
        if present:
            n = len(present)
            raise OutputError(
                f"{n} output{'s already exist' if n != 1 else ' already exists'}, first "
                f"{present[0]}: "
                "pass mode='resume' to keep the complete ones or mode='overwrite' to redo them"
            )


def _as_mapper(fn: Callable[[dict[str, Any]], Any] | ShardMapper, engine: str) -> ShardMapper:
    check_engine(engine)
    mapper: ShardMapper
    if isinstance(fn, ShardMapper):
        mapper = fn
    elif callable(fn):
        mapper = SampleMapper(fn)
    else:
        raise UsageError(f"fn must be a function of one sample, not {type(fn).__name__}")
    if engine == "local":
        try:
            pickle.dumps(mapper)
        except Exception as exc:
            name = getattr(fn, "__qualname__", repr(fn))
            raise UsageError(
                f"the function {name} cannot be sent to worker processes ({exc}): "
                "define it at the top level of a module"
            ) from None
    return mapper


# ---------------------------------------------------------------------------------------
# Metadata


def metadata_format(location: str) -> str:
    """``jsonl`` or ``tsv``, from the ending of the metadata file name.

    >>> metadata_format("meta.tsv"), metadata_format("s3://b/meta.jsonl")
    ('tsv', 'jsonl')
    """
    lower = location.lower()
    if lower.endswith((".jsonl", ".ndjson", ".jsonlines")):
        return "jsonl"
    if lower.endswith((".tsv", ".tab")):
        return "tsv"
    raise UsageError(f"metadata file {location!r}: name it .jsonl (JSON Lines) or .tsv")


def format_metadata(rows: list[Row], kind: str) -> str:
    r"""The metadata rows as JSON Lines, or as TSV with a header of every column seen.

    TSV cells escape backslash, tab and newline; values that are not strings are JSON.

    >>> format_metadata([{"key": "a", "n": 1}, {"key": "b\tc", "ok": True}], "tsv")
    'key\tn\tok\na\t1\t\nb\\tc\t\ttrue\n'
    """
    if kind == "jsonl":
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    lines = ["\t".join(_tsv_cell(c) for c in columns)]
    for row in rows:
        lines.append("\t".join(_tsv_cell(row.get(c)) for c in columns))
    return "".join(line + "\n" for line in lines) if rows else ""


def _tsv_cell(value: object) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
