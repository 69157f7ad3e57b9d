"""The one loader of a user's ``package.module:function`` (``tarkit map --fn``,
``tarkit shard --dataset``)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from ..errors import UsageError


def load_function(option: str, spec: str) -> Callable[..., Any]:
    """Import ``package.module:function`` (the current directory is searched first) and
    return the function; ``function`` may be a dotted path (``Class.method``).

    Raises :class:`UsageError` naming ``option`` and ``spec`` when the spec is
    malformed, the module cannot be imported, or the name is missing or not callable.
    """
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise UsageError(f"{option} {spec!r}: expected package.module:function")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{option} {spec!r}: cannot import {module_name}: {exc}") from None
    function: Any = module
    for part in name.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise UsageError(f"{option} {spec!r}: {module_name} has no {name}")
    if not callable(function):
        raise UsageError(f"{option} {spec!r}: {name} is not a function")
    return function  # type: ignore[no-any-return]
