"""classes.json read from its location: one reader for stats, view and tarshow."""

from __future__ import annotations

import pytest

from tarkit.errors import InputError, SourceError
from tarkit.storage.classes import load_class_names


def test_class_names_are_read_or_none_when_absent_unless_required(tmp_path) -> None:
    place = tmp_path / "classes.json"
    assert load_class_names(str(place)) is None
    with pytest.raises(SourceError) as missing:
        load_class_names(str(place), required=True)
    assert missing.value.reason == SourceError.MISSING
    assert str(missing.value) == f"{place}: no such file"
    place.write_text('{"label": ["no", "yes"]}')
    assert load_class_names(str(place), required=True) == {"label": ["no", "yes"]}
    place.write_text('["cat", 3]')
    with pytest.raises(InputError, match="not a list of class names") as bad:
        load_class_names(str(place))
    assert str(bad.value).startswith(str(place))
