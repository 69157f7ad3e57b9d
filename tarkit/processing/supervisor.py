"""Run tarproc's command on samples: a process supervisor without threads.

:func:`map_command` runs the command (:mod:`tarkit.processing.commands` says what it sees
and must leave) on up to N samples at once and yields the output samples in input order.
Each command is a :class:`~tarkit.processing.jobs.Job`, watched through pidfds from the
calling thread; each of the N slots has a :class:`~tarkit.processing.commands.Workspace`
that is emptied and reused from one sample to the next, unless the command left
processes behind (they are killed, and the slot gets a new directory: nothing of one
sample's command writes into the next sample's). :func:`run_sample` does one sample and
is all another process needs.

Every command runs in a session (process group) of its own, marked, and while commands
run this process adopts the orphans (:mod:`tarkit.engines.leftovers`): what a command
leaves, even in sessions of its own, is killed when it ends. In a map worker each
running command is recorded in the :mod:`~tarkit.engines.ledger`.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence

from ..engines.ledger import ledger_directory
from ..engines.leftovers import adopting, command_mark, run_mark
from ..errors import CommandFailed, TarkitError
from ..format.samples import Sample
from ..format.tar_writer import default_mtime
from ..sizes import check_parallel
from ..storage.scratch import remove_tree
from .commands import (
    Command,
    FieldData,
    ProcReport,
    Rejection,
    SampleOutcome,
    Workspace,
    check_fields,
    check_on_error,
    make_root,
    output_sample,
)
from .jobs import Job, kill_leftovers, wait_any
from .keys import BAD_KEY, key_error, key_problem, key_room

# Samples handed to the pool per worker: enough to keep every worker busy while the
# main thread writes, few enough that memory stays bounded on any stream.
IN_FLIGHT_PER_WORKER = 2

_RUNS = itertools.count()  # numbers the runs of this process, for the commands' marks


def run_sample(
    command: Command, index: int, key: str, fields: Sequence[tuple[str, FieldData]], root: str
) -> SampleOutcome:
    """Run ``command`` on one sample in a fresh directory ``root/<index>``; wait for it.

    ``fields`` are (field, bytes) pairs whose names passed
    :func:`~tarkit.processing.commands.check_fields`. Returns the output samples (key,
    sorted (field, bytes) pairs), or a ``Rejection`` when the command failed or its key
    cannot be passed to it: never raises for a failure of the command; raises
    :class:`~tarkit.errors.OutputError` when the directory cannot be written (naming the
    file system when it is full).
    Everything is removed before returning unless ``command.keep_dirs``; an exception
    (KeyboardInterrupt included) kills the command first. Usable in any process.
    """
    env = dict(os.environ)
    problem = key_problem(key, key_room(env, command.text))
    if problem is not None:
        return SampleOutcome(index, key, rejection=Rejection(key, BAD_KEY, problem))
    workspace = Workspace(os.path.join(root, f"{index:06d}"))
    registry: dict[int, Job] = {}
    with adopting():
        try:
            Job(command, index, None, key, fields, workspace, env, registry,
                command_mark(next(_RUNS), index))  # fmt: skip
            job = registry[index]
            while True:
                ended, late = wait_any([job])
                if ended or late:
                    return job.finish(timed_out=not ended)
        except BaseException:
            for job in registry.values():
                job.discard()
            raise
        finally:
            workspace.close(remove=not command.keep_dirs)


def map_command(
    samples: Iterable[Sample],
    command: Command,
    *,
    parallel: int = 1,
    ordered: bool = True,
    on_error: str = "fail",
    on_reject: Callable[[Rejection], object] | None = None,
    report: ProcReport | None = None,
    tmpdir: str | None = None,
) -> Iterator[Sample]:
    """Run ``command`` on every sample, ``parallel`` at a time; yield the output samples.

    Output is in input order unless ``ordered`` is False (then in order of
    completion). At most ``IN_FLIGHT_PER_WORKER * parallel`` samples are held at
    once. A failed sample follows ``on_error``: ``"fail"`` kills every running
    command at once (those of samples before it too), yields the samples that had
    already finished as far as they follow on from what went out (in input order; in
    order of completion when unordered), and raises :class:`~tarkit.errors.CommandFailed`;
    ``"skip"`` leaves it out and ``"keep"`` yields it unchanged, both calling
    ``on_reject`` in output order. With ``command.rows``, each sample's metadata row
    joins ``report.rows`` before its outputs go out. A key too long to pass to the command in its
    environment fails its sample as bad input: under ``"fail"`` it raises
    :class:`~tarkit.errors.InputError` naming the input and the member. A field name
    unsafe as a file name raises :class:`~tarkit.errors.InputError`; that and any other
    error reading ``samples`` is raised once the samples before it are out.

    Samples' directories live in a private directory under ``tmpdir`` (default
    ``$TMPDIR``), named in ``report.root`` once the generator has started. It is
    removed when the generator finishes or is closed (close it to stop early: running
    commands are killed), unless ``command.keep_dirs``. Runs in the calling thread:
    the commands are the only other processes. While it runs, this process is a child
    subreaper (Linux): orphans below it become its children, and those out of its session
    are reaped by it (:func:`~tarkit.engines.leftovers.reap_adopted`).
    """
    command.check()
    check_on_error(on_error)
    check_parallel(parallel)
    report = report if report is not None else ProcReport()
    return _CommandMap(command, parallel, ordered, on_error, on_reject, report).run(samples, tmpdir)


class _CommandMap:
    """One run of :func:`map_command`: reads samples, runs their commands, hands out results.

    Up to ``parallel`` commands run; finished samples wait in ``done`` until their turn
    (input order, or at once when unordered), and at most ``IN_FLIGHT_PER_WORKER *
    parallel`` samples are running or waiting.
    """

    def __init__(
        self, command: Command, parallel: int, ordered: bool, on_error: str,
        on_reject: Callable[[Rejection], object] | None, report: ProcReport,
    ) -> None:  # fmt: skip
        self.command = command
        self.parallel = parallel
        self.ordered = ordered
        self.on_error = on_error
        self.on_reject = on_reject
        self.report = report
        self.number = next(_RUNS)  # in the commands' marks
        self.root = ""  # these four are set when iteration starts
        self.mtime = 0
        self.env: dict[str, str] = {}
        self.key_room = 0
        # Each running command has a workspace, reused from one sample to the next
        # (except with keep_dirs, where each sample keeps its own, and after a command
        # that left processes behind, whose workspace is removed).
        self.spare: list[Workspace] = []
        self.workspaces: list[Workspace] = []
        self.made = 0  # workspaces made: each has a name of its own
        self.running: dict[int, Job] = {}
        self.done: dict[int, tuple[Sample, SampleOutcome]] = {}
        self.reading = True
        self.next_out = 0  # ordered: the index of the next sample to go out
        self.input_error: TarkitError | None = None

    def run(self, samples: Iterable[Sample], tmpdir: str | None) -> Iterator[Sample]:
        """The output samples; the private directory is made when iteration starts."""
        where = tmpdir if tmpdir is not None else ledger_directory()
        self.root = self.report.root = make_root(where)
        self.mtime = default_mtime()
        self.env = dict(os.environ)
        self.key_room = key_room(self.env, self.command.text)
        iterator = iter(samples)
        with adopting():
            try:
                while True:
                    self._start_more(iterator)
                    ready = self._in_turn()
                    if ready:
                        for index in ready:
                            yield from self._results(*self.done.pop(index))
                            self.next_out = index + 1
                        continue
                    if not self.running:
                        if self.input_error is not None:
                            raise self.input_error
                        break
                    self._collect()
                    if self.on_error == "fail":
                        yield from self._stop_at_failure()
            finally:
                self._finish(iterator)

    def _start_more(self, iterator: Iterator[Sample]) -> None:
        """Start commands on the next samples while there is room."""
        limit = self.parallel * IN_FLIGHT_PER_WORKER
        while (
            self.reading
            and len(self.running) < self.parallel
            and (len(self.running) + len(self.done) < limit)
        ):
            try:
                sample = next(iterator, None)
                if sample is not None:
                    check_fields(sample)
            except TarkitError as error:
                # Like every tool: the samples before the bad input still go out.
                self.input_error, self.reading = error, False
                return
            if sample is None:
                self.reading = False
                return
            fields = [
                (f, memoryview(m.raw)[m.data_start : m.data_start + m.size])
                for f, m in zip(sample.fields, sample.members, strict=True)
            ]
            index = self.report.samples_in
            self.report.samples_in += 1
            problem = key_problem(sample.key, self.key_room)
            if problem is not None:
                if self.on_error == "fail":  # bad input: after the samples before it
                    self.input_error, self.reading = key_error(sample, problem), False
                    return
                rejection = Rejection(sample.key, BAD_KEY, problem)
                self.done[index] = (sample, SampleOutcome(index, sample.key, rejection=rejection))
                continue
            workspace = self._workspace_for(index)
            mark = command_mark(self.number, index)
            Job(self.command, index, sample, sample.key, fields, workspace, self.env,
                self.running, mark)  # fmt: skip

    def _workspace_for(self, index: int) -> Workspace:
        if self.command.keep_dirs:
            workspace = Workspace(os.path.join(self.root, f"{index:06d}"))
        elif self.spare:
            return self.spare.pop()
        else:
            workspace = Workspace(os.path.join(self.root, f"command-{self.made}"))
            self.made += 1
        self.workspaces.append(workspace)
        return workspace

    def _release(self, job: Job) -> None:
        """Once ``job`` is reaped: its workspace is free, or removed if the command left
        processes that might still write into it."""
        del self.running[job.index]
        if self.command.keep_dirs:
            return
        if job.left_behind:
            self.workspaces.remove(job.workspace)
            job.workspace.close(remove=True)
        else:
            self.spare.append(job.workspace)

    def _in_turn(self) -> list[int]:
        """The finished samples that may go out now, in the order they go."""
        if not self.ordered:
            return sorted(self.done)
        ready: list[int] = []
        while self.next_out + len(ready) in self.done:
            ready.append(self.next_out + len(ready))
        return ready

    def _collect(self) -> None:
        """Wait until commands end or time out; their outcomes join ``done``."""
        ended, late = wait_any(self.running.values())
        for job in ended + late:
            outcome = job.finish(timed_out=job in late)
            self._release(job)
            self.done[job.index] = (job.sample, outcome)  # type: ignore[assignment]

    def _stop_at_failure(self) -> Iterator[Sample]:
        """Under ``fail``, once a sample failed: kill every command still running, whatever
        its place; yield what had finished as far as it is contiguous; raise."""
        failed = [i for i, (_, outcome) in self.done.items() if outcome.rejection is not None]
        if not failed:
            return
        self.reading = False
        for job in list(self.running.values()):
            job.discard()
            self._release(job)
        first = min(failed)
        if self.ordered:
            while self.next_out in self.done and self.next_out < first:
                yield from self._results(*self.done.pop(self.next_out))
                self.next_out += 1
        else:
            for index in sorted(i for i in self.done if i != first):
                if self.done[index][1].rejection is None:
                    yield from self._results(*self.done.pop(index))
        yield from self._results(*self.done.pop(first))

    def _results(self, sample: Sample, outcome: SampleOutcome) -> Iterator[Sample]:
        """What a finished sample gives, by the policy; raises CommandFailed under ``fail``."""
        report = self.report
        if outcome.rejection is None:
            if outcome.row is not None:
                report.rows.append(outcome.row)
            for key, fields in outcome.outputs:
                report.samples_out += 1
                yield output_sample(key, fields, sample.source, self.mtime)
            return
        if self.on_error == "fail":
            raise CommandFailed(outcome.rejection, sample.source)
        report.rejected += 1
        if self.on_reject is not None:
            self.on_reject(outcome.rejection)
        if self.on_error == "keep":
            report.samples_out += 1
            yield sample

    def _finish(self, iterator: Iterator[Sample]) -> None:
        """Kill what still runs, remove the directories, close the input; every step is tried.

        A Ctrl-C or SIGTERM (any BaseException that is not an Exception) arriving
        meanwhile is held back until the cleanup is done.
        """
        from ..stream.stages import close_iterator

        interrupted: BaseException | None = None
        jobs = list(self.running.values())
        steps: list[Callable[[], object]] = [job.kill for job in jobs]
        steps += [job.discard for job in jobs]
        steps.append(functools.partial(kill_leftovers, run_mark(self.number)))
        steps += [functools.partial(w.close, remove=False) for w in self.workspaces]
        if not self.command.keep_dirs:
            steps.append(functools.partial(remove_tree, self.root))
        steps.append(functools.partial(close_iterator, iterator))
        error: Exception | None = None
        for step in steps:
            while True:
                try:
                    step()
                    break
                except Exception as exc:
                    error = error or exc
                    break
                except BaseException as exc:
                    interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted
        if error is not None:
            raise error
