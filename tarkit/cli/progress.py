"""Progress on stderr: one status line redrawn in place, for ``tarkit map`` and ``tarkit shard``.

The library reports progress to a callback (:class:`~tarkit.processing.driver.MapProgress`,
:class:`~tarkit.writing.from_dataset.ShardProgress`); these callbacks put it into words.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..processing.driver import MapProgress
    from ..writing.from_dataset import ShardProgress

REDRAW = 0.2  # seconds between redraws of the status line


class StatusLine:
    """``<tool>: <text>`` on stderr, redrawn in place at most five times a second; lines
    of their own go above it."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.shown = 0.0
        self.width = 0

    def draw(self, text: str, *, now: bool = False) -> None:
        """Redraw the status line with ``text`` (``now``: even if it was drawn just now)."""
        moment = time.monotonic()
        if not now and moment - self.shown < REDRAW:
            return
        self.shown = moment
        line = f"{self.tool}: {text}"
        sys.stderr.write("\r" + line.ljust(self.width))
        sys.stderr.flush()
        self.width = len(line)

    def line(self, text: str) -> None:
        """Print ``<tool>: <text>`` as a line of its own, clearing the status line first."""
        if self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            self.width = 0
        sys.stderr.write(f"{self.tool}: {text}\n")
        sys.stderr.flush()

    @property
    def drawn(self) -> bool:
        return self.width > 0

    def end(self) -> None:
        """Leave a drawn status line as it is and move below it."""
        if self.width:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.width = 0


class MapProgressLine:
    """``tarkit map``'s display: on a terminal an updating line (shards done/total,
    samples/s, failures), else a summary line at the end; retries and failures as lines
    of their own."""

    def __init__(self, tool: str, quiet: bool) -> None:
        self.status = StatusLine(tool)
        self.quiet = quiet
        self.terminal = sys.stderr.isatty()
        self.last: MapProgress | None = None

    def __call__(self, progress: MapProgress) -> None:
        self.last = progress
        if progress.event == "retry":
            self.status.line(f"warning: retrying {progress.message}")
        elif progress.event == "failed":
            self.status.line(f"failed: {progress.message}")
        elif progress.event == "warning":
            self.status.line(f"warning: {progress.shard}: {progress.message}")
        if not self.quiet and self.terminal:
            self.status.draw(self.summary(progress), now=progress.event == "finished")

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
        if self.status.drawn:
            self.status.end()
        elif not self.quiet and self.last is not None:
            self.status.line(self.summary(self.last))


class ShardProgressLine:
    """``tarkit shard``'s display: an updating line of samples done (of the total, with
    the time left when the total is known), shards done and samples/s."""

    def __init__(self, tool: str, show: bool | None) -> None:
        self.status = StatusLine(tool)
        self.show = sys.stderr.isatty() if show is None else show

    def __call__(self, progress: ShardProgress) -> None:
        if self.show:
            self.status.draw(self.summary(progress), now=progress.finished)

    @staticmethod
    def summary(progress: ShardProgress) -> str:
        samples, total, rate = progress.samples, progress.total, progress.samples_per_second
        if total is None:
            text = f"{samples} samples"
        else:
            percent = 100 * samples / total if total else 100.0
            text = f"{samples}/{total} samples ({percent:.0f}%)"
            if rate > 0 and total > samples:
                left = int((total - samples) / rate)
                text += f", {left // 60}:{left % 60:02d} left"
        shards = "shard" if progress.shards == 1 else "shards"
        return f"{text}, {progress.shards} {shards} done, {rate:.0f} samples/s"

    def close(self) -> None:
        self.status.end()
