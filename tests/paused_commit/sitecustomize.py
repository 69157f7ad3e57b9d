"""A pause in the commit of an overwrite, for the commands a test starts with this
directory first on PYTHONPATH (``conftest.paused_commit_env``): once a pending shard has
been moved to its name (a local rename, or fsspec's copy and delete in an object store),
every such move waits until the file ``PAUSED_COMMIT_GATE`` exists (at most a minute), so
that a test can signal or kill a run in the middle of its commit, as a slow disk or store
would let it, then let it go on. Nothing else changes."""

import os
import time

_GATE = os.environ.get("PAUSED_COMMIT_GATE", "")


def _wait_at_gate(source: object) -> None:
    if _GATE and os.fspath(source).endswith(".pending"):  # type: ignore[call-overload]
        deadline = time.monotonic() + 60
        while not os.path.exists(_GATE) and time.monotonic() < deadline:
            time.sleep(0.005)


_replace = os.replace


def _paused_replace(source, target, *args, **kw):  # type: ignore[no-untyped-def]
    _replace(source, target, *args, **kw)
    _wait_at_gate(source)


os.replace = _paused_replace

try:
    from fsspec.spec import AbstractFileSystem
except ImportError:
    pass
else:
    _mv = AbstractFileSystem.mv

    def _paused_mv(self, source, target, *args, **kw):  # type: ignore[no-untyped-def]
        _mv(self, source, target, *args, **kw)
        _wait_at_gate(source)

    AbstractFileSystem.mv = _paused_mv  # type: ignore[method-assign]
