"""A pause in the commit of an overwrite, for the commands a test starts with this
directory first on PYTHONPATH (``conftest.paused_commit_env``): once a pending shard has
been renamed to its name, every such rename waits until the file ``PAUSED_COMMIT_GATE``
exists (at most a minute), so that a test can signal or kill a run in the middle of its
commit, as a slow or busy disk would let it, then let it go on. Nothing else changes."""

import os
import time

_replace = os.replace
_GATE = os.environ.get("PAUSED_COMMIT_GATE", "")


def _paused_replace(source, target, *args, **kw):  # type: ignore[no-untyped-def]
    _replace(source, target, *args, **kw)
    if _GATE and os.fspath(source).endswith(".pending"):
        deadline = time.monotonic() + 60
        while not os.path.exists(_GATE) and time.monotonic() < deadline:
            time.sleep(0.005)


os.replace = _paused_replace
