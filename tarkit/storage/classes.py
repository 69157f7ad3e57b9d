"""``classes.json`` at its location: the one reader of a dataset's class names.

The file's format is :mod:`tarkit.format.classes`; writers publish it with
:func:`~tarkit.storage.outputs.publish`. Its readers (``tarkit stats``, ``tarkit view``,
``tarshow --caption``) each choose where to look: beside the shards, beside a manifest,
or a file the user names.
"""

from __future__ import annotations

from ..errors import SourceError
from ..format.classes import ClassNames, parse_class_names
from .filesystems import StorageOptions
from .sources import RECORD_LIMIT, read_bytes


def load_class_names(
    place: str, storage_options: StorageOptions | None = None, *, required: bool = False
) -> ClassNames | None:
    """The class names in the file at ``place``; None when there is none there.

    Raises :class:`~tarkit.errors.SourceError` (reason ``MISSING``) for a ``required``
    file that does not exist, or for one that cannot be read or holds more than
    :data:`~tarkit.storage.sources.RECORD_LIMIT` bytes, and
    :class:`~tarkit.errors.InputError` naming ``place`` for one that is not a list of
    names (nor an object of such lists by column).
    """
    data = read_bytes(place, storage_options, limit=RECORD_LIMIT)
    if data is None:
        if required:
            raise SourceError(f"{place}: no such file", reason=SourceError.MISSING)
        return None
    return parse_class_names(data.decode("utf-8", "replace"), place)
