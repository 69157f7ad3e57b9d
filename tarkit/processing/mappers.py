"""A shell command as the map of :func:`tarkit.map_shards`: tarproc's model, shard by shard.

:class:`ShellCommand` runs :func:`tarkit.processing.commands.map_command` on the samples of each
shard, so that every output shard holds exactly the bytes ``tarproc -c CMD`` writes for
that shard: same temporary directories, same ``--on-error`` policies, same ``--multi``.

Metadata: when ``metadata_field`` is set (``tarkit map -c … --metadata FILE`` sets
``meta.json``), a command that writes ``sample.meta.json`` gives that sample's metadata
row: the field is taken out of the output sample and must hold a JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..errors import TarkitError, UsageError
from ..format.samples import Sample
from .commands import ON_ERROR, Command, CommandFailed, Rejection, map_command
from .shard_task import Outputs, Row, SampleFailed

METADATA_FIELD = "meta.json"


class CommandError(TarkitError):
    """The command failed on a sample (the message says how; the shard and key are known)."""


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
        if on_error not in ON_ERROR:
            raise UsageError(f"--on-error must be one of {', '.join(ON_ERROR)} (got {on_error!r})")
        if parallel < 1:
            raise UsageError(f"-p must be at least 1 (got {parallel})")
        self.parallel = parallel
        self.on_error = on_error
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
                    yield self._take_metadata(sample)
        except CommandFailed as exc:
            raise SampleFailed(exc.rejection.key, CommandError(exc.rejection.describe())) from None
        finally:
            processed.close()  # type: ignore[attr-defined]

    def take_rejects(self) -> list[str]:
        """The reject lines of the last shard, in order."""
        rejects, self._rejects = self._rejects, []
        return rejects

    def _take_metadata(self, sample: Sample) -> tuple[Outputs, Row | None]:
        field = self.metadata_field
        if field not in sample.fields:
            return [sample], None
        index = sample.fields.index(field)  # type: ignore[arg-type]
        try:
            row: Any = json.loads(sample.members[index].data)
        except (ValueError, UnicodeDecodeError) as exc:
            row = exc
        if not isinstance(row, dict):
            raise SampleFailed(
                sample.key,
                CommandError(f"the command's sample.{field} does not hold a JSON object"),
            )
        fields = sample.fields[:index] + sample.fields[index + 1 :]
        members = sample.members[:index] + sample.members[index + 1 :]
        outputs = [Sample(sample.key, fields, members, sample.source)] if fields else []
        return outputs, row
