"""A slow disk for the commands a test starts with this directory first on PYTHONPATH
(``conftest.slow_renames_env``): each rename of a pending shard to its name takes
``SLOW_RENAMES`` seconds more, so that a test can signal or kill a run in the middle of
the commit of an overwrite, as a slow or busy disk would let it. Nothing else changes."""

import os
import time

_replace = os.replace
_DELAY = float(os.environ.get("SLOW_RENAMES", "0"))


def _slow_replace(source, target, *args, **kw):  # type: ignore[no-untyped-def]
    _replace(source, target, *args, **kw)
    if os.fspath(source).endswith(".pending"):
        time.sleep(_DELAY)


os.replace = _slow_replace
