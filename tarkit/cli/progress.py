"""Progress on stderr: one line redrawn in place by tqdm, for every long-running command.

Whether a command shows it is decided once (:func:`wanted`): ``--progress`` or
``--no-progress`` when given, else only when stderr is a terminal and the command's
output does not go to that same terminal. When it is not shown nothing is drawn and tqdm
is not even imported, so start-up and pipes are as they were. A command that ends within
:data:`DELAY` seconds draws nothing either.

Counting is done by the command, in the stream it already has: :meth:`Progress.count`
passes the samples through and tells tqdm only as often as tqdm redraws. The library
reports the rest to callbacks (:class:`~tarkit.processing.driver.MapProgress`,
:class:`~tarkit.writing.from_dataset.ShardProgress`); the callbacks here put it on the line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ..processing.driver import MapProgress
    from ..writing.from_dataset import ShardProgress

T = TypeVar("T")
DELAY = 0.5  # seconds before the line first appears: a quick command draws nothing
REDRAW = 0.2  # seconds between redraws


def wanted(show: bool | None, *, to_stdout: bool = False) -> bool:
    """Whether to draw: ``show`` if the user said, else whether stderr is a terminal
    and (for a command whose output goes to stdout, ``to_stdout``) stdout is not one."""
    if show is not None:
        return show
    if not _isatty(sys.stderr):
        return False
    return not (to_stdout and _isatty(sys.stdout))


def writes_stdout(spec: str | None) -> bool:
    """Whether an output spec (``-o``) is stdout."""
    from tarkit.storage.locations import STDIO, location

    return spec is None or location(spec).kind == STDIO


def _isatty(stream: IO[Any] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (ValueError, OSError):  # closed
        return False


class Progress:
    """A progress line ``<tool>: N samples [elapsed, rate]`` (with a total: a bar, the
    percentage and the time left), or nothing at all when ``shown`` is false.

    While the line is drawn, lines written to ``sys.stderr`` (warnings, ``-v`` reports)
    go above it. :meth:`close` leaves the last state standing (when it was drawn at all)
    and restores ``sys.stderr``; use it as a context manager.
    """

    def __init__(
        self,
        tool: str,
        shown: bool,
        *,
        unit: str = "samples",
        total: int | None = None,
        stage: str | None = None,
    ) -> None:
        self.tool = tool
        self.shown = shown
        self._bar: Any = None
        self._stderr: IO[str] | None = None
        if shown:
            self._stderr = sys.stderr
            self._bar = _new_bar(_label(tool, stage), unit, total, self._stderr)
            sys.stderr = _LinesAbove(self)  # type: ignore[assignment]

    def count(self, items: Iterable[T], weight: Callable[[T], int] | None = None) -> Iterable[T]:
        """``items`` unchanged, each counted (as ``weight(item)`` if given) as it passes."""
        if self._bar is None:
            return items
        return self._counting(items, weight)

    def _counting(self, items: Iterable[T], weight: Callable[[T], int] | None) -> Iterator[T]:
        from ..stream.stages import close_iterator

        bar = self._bar
        done = bar.n
        try:
            for item in items:
                if self._bar is not bar and self._bar is not None:  # a new stage began
                    bar = self._bar
                    done = bar.n
                yield item
                done += 1 if weight is None else weight(item)
                # tqdm's own test, inlined: call it only when a redraw may be due
                # (miniters grows with the rate; tqdm's monitor shrinks it again).
                if done - bar.last_print_n >= bar.miniters:
                    bar.update(done - bar.n)
        finally:
            if done != bar.n:
                bar.update(done - bar.n)
            close_iterator(items)  # stopped early: close the inputs now, as take() does

    def begin_at(self, done: int) -> None:
        """Start the count at ``done`` (work done before this run, left out of the rate)."""
        if self._bar is not None:
            self._bar.n = self._bar.last_print_n = self._bar.initial = done

    def update_to(self, done: int, total: int | None = None) -> None:
        """Set the count (and the total) to these values."""
        if self._bar is not None:
            if total is not None and total != self._bar.total:
                self._bar.total = total
                self._bar.bar_format = _format(total)
            self._bar.update(done - self._bar.n)

    def advance(self, count: int = 1) -> None:
        """Count ``count`` more."""
        if self._bar is not None:
            self._bar.update(count)

    def note(self, text: str) -> None:
        """Show ``text`` after the rate (e.g. ``3 shards``) from the next redraw on."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def phase(self, stage: str, unit: str, total: int | None = None) -> None:
        """Count a new stage from 0 on a new line, ``<tool> (<stage>): …``, in ``unit``
        out of ``total``; the line of the stage before stays if it was drawn (and the
        new one is then drawn at once)."""
        if self._bar is not None and self._stderr is not None:
            drawn = _drawn(self._bar)
            self._bar.close()
            self._bar = _new_bar(_label(self.tool, stage), unit, total, self._stderr,
                                 delay=0 if drawn else DELAY)  # fmt: skip

    def write_above(self, text: str) -> None:
        """Write ``text`` (whole lines) to stderr above the line, if the line is drawn."""
        assert self._stderr is not None
        bar = self._bar
        if bar is None or not _drawn(bar):
            self._stderr.write(text)
            self._stderr.flush()
            return
        with bar.get_lock():
            bar.clear(nolock=True)
            self._stderr.write(text)
            self._stderr.flush()
            bar.refresh(nolock=True)

    def close(self) -> None:
        """Redraw the last state (if drawn at all), move below it, restore stderr."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._stderr is not None:
            sys.stderr = self._stderr
            self._stderr = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _label(tool: str, stage: str | None) -> str:
    return tool if stage is None else f"{tool} ({stage})"


def _drawn(bar: Any) -> bool:
    """Whether ``bar`` was ever drawn (tqdm's own test: its delay has passed)."""
    return bool(bar.last_print_t >= bar.start_t + bar.delay)


def _new_bar(
    label: str, unit: str, total: int | None, stream: IO[str], delay: float = DELAY
) -> Any:
    from tqdm import tqdm

    # A terminal that says it has 0 columns (a fresh pseudo-terminal) would have tqdm
    # cut the line to nothing: draw it as on an 80x24 terminal then.
    known = _width(stream) > 0
    return tqdm(
        desc=label, total=total, unit=f" {unit}", file=stream, bar_format=_format(total),
        delay=delay, mininterval=REDRAW, leave=True,
        dynamic_ncols=known, ncols=None if known else 80, nrows=None if known else 24,
    )  # fmt: skip


def _format(total: int | None) -> str:
    """tqdm's own formats, but the rate always per second (tqdm's default turns a slow
    rate into seconds per item)."""
    if total is None:
        return "{desc}: {n_fmt}{unit} [{elapsed}, {rate_noinv_fmt}{postfix}]"
    return "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"


def _width(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


class _LinesAbove:
    """``sys.stderr`` while a line may be drawn: what is written goes above the line."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress

    def write(self, text: str) -> int:
        self._progress.write_above(text)
        return len(text)

    def flush(self) -> None:
        pass  # write_above flushes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._progress._stderr, name)


class MapProgressLine:
    """``tarkit map``'s display: on a terminal a line of shards done of the total with
    the time left, samples, samples/s and failures; else a summary line at the end.
    Retries and failures are lines of their own."""

    def __init__(self, tool: str, show: bool | None, quiet: bool) -> None:
        self.tool = tool
        self.quiet = quiet
        self.progress = Progress(tool, wanted(False if quiet and show is None else show),
                                 unit="shards")  # fmt: skip
        self.last: MapProgress | None = None

    def __call__(self, progress: MapProgress) -> None:
        self.last = progress
        if progress.event == "retry":
            self._line(f"warning: retrying {progress.message}")
        elif progress.event == "failed":
            self._line(f"failed: {progress.message}")
        elif progress.event == "warning":
            self._line(f"warning: {progress.shard}: {progress.message}")
        if self.progress.shown:
            rate = f", {progress.samples_per_second:.0f} samples/s" if progress.samples else ""
            self.progress.note(f"{progress.samples} samples{rate}, {progress.failed} failed")
            self.progress.update_to(progress.done, progress.total)

    def _line(self, text: str) -> None:
        sys.stderr.write(f"{self.tool}: {text}\n")
        sys.stderr.flush()

    @staticmethod
    def summary(progress: MapProgress) -> str:
        already = f" ({progress.resumed} already complete)" if progress.resumed else ""
        rate = f" ({progress.samples_per_second:.0f} samples/s)" if progress.samples else ""
        again = f", {progress.reconnections} reconnections" if progress.reconnections else ""
        return (
            f"{progress.done}/{progress.total} shards{already}, {progress.samples} samples "
            f"in {progress.seconds:.2f} s{rate}, {progress.failed} failed{again}"
        )

    def close(self) -> None:
        drawn = self.progress.shown
        self.progress.close()
        if not drawn and not self.quiet and self.last is not None:
            self._line(self.summary(self.last))


class ShardProgressLine:
    """``tarkit shard``'s display: samples done (of the total, with the time left when
    the total is known), samples/s, shards done and, on a cluster, tasks retried; a
    retry is also a line of its own, as in ``tarkit map``."""

    def __init__(self, tool: str, show: bool | None) -> None:
        self.tool = tool
        self.progress = Progress(tool, wanted(show))
        self.first = True

    def __call__(self, progress: ShardProgress) -> None:
        if progress.message is not None:
            sys.stderr.write(f"{self.tool}: warning: {progress.message}\n")
            sys.stderr.flush()
        if self.progress.shown:
            if self.first:
                self.progress.begin_at(progress.resumed)
                self.first = False
            shards = "shard" if progress.shards == 1 else "shards"
            retried = f", {progress.retries} retried" if progress.retries else ""
            self.progress.note(f"{progress.shards} {shards} done{retried}")
            self.progress.update_to(progress.samples, progress.total)

    def close(self) -> None:
        self.progress.close()
