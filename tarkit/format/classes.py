"""``classes.json``: a dataset's class names, saved beside its shards by the writers
(``tarkit shard``, :func:`~tarkit.shard_dataset`) and read, by
:func:`tarkit.storage.classes.load_class_names` alone, for ``tarkit stats``, ``tarkit
view`` and ``tarshow --caption``.

It holds a list of names, name ``i`` being that of the class whose ``cls`` field is
``i``; or, for a dataset with several class fields (``<column>.cls``, as Hugging Face
datasets with several ``ClassLabel`` columns give), an object of such lists by column.

>>> names = parse_class_names(class_names_json(["cat", "dog"]).decode())
>>> names, names_for("cls", names), names_for("label.cls", names)
(['cat', 'dog'], ['cat', 'dog'], None)
>>> names_for("label.cls", parse_class_names('{"label": ["no", "yes"]}'))
['no', 'yes']
"""

from __future__ import annotations

import json
from typing import TypeAlias, Union

from ..errors import InputError

CLASSES_FILE = "classes.json"
ClassNames: TypeAlias = Union[list[str], dict[str, list[str]]]


def class_names_json(names: ClassNames) -> bytes:
    """The file's bytes for ``names`` (what every writer of it writes)."""
    return (json.dumps(names, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def parse_class_names(text: str, source: str = CLASSES_FILE) -> ClassNames:
    """The names ``text`` holds; :class:`~tarkit.errors.InputError` naming ``source``
    when it is not a list of names or an object of such lists."""

    def names(value: object) -> bool:
        return isinstance(value, list) and all(isinstance(name, str) for name in value)

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc.msg} at line {exc.lineno}", source=source) from None
    if names(value) or isinstance(value, dict) and all(names(v) for v in value.values()):
        return value  # type: ignore[no-any-return]
    raise InputError(
        "not a list of class names (nor an object of such lists by column)", source=source
    )


def names_for(field: str, class_names: ClassNames | None) -> list[str] | None:
    """The list that names the values of class field ``field``: the list itself for
    ``cls``, the column's for ``<column>.cls``; None when there is none."""
    if isinstance(class_names, dict):
        column, dot, _ = field.rpartition(".")
        return class_names.get(column) if dot else None
    return class_names if field == "cls" else None
