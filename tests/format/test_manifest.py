"""The manifest is read from files anyone may write: every entry is checked before the
loader makes its plans from it."""

from __future__ import annotations

import json

import pytest

from tarkit.errors import InputError
from tarkit.format.manifest import Manifest, ShardInfo, parse

GOOD = {"url": "s-0.tar", "samples": 2, "bytes": 2048, "sha256": "ab", "keys": ["a", "b"],
        "offsets": [0, 1024]}  # fmt: skip


def text(*shards: object) -> str:
    return json.dumps({"format": "tarkit-manifest", "version": 1, "shards": list(shards)})


def test_a_manifest_reads_back_what_was_written() -> None:
    manifest = Manifest([ShardInfo(**GOOD)])  # type: ignore[arg-type]
    assert parse(manifest.dumps()).shards == manifest.shards


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"samples": -5}, "a negative count"),
        ({"bytes": -1}, "a negative count"),
        ({"samples": 2.5}, '"samples" is 2.5'),
        ({"samples": True}, '"samples" is True'),
        ({"samples": "2"}, "\"samples\" is '2'"),
        ({"url": 7}, '"url" is 7'),
        ({"url": None}, '"url" is None'),
        ({"sha256": 12}, '"sha256" is not text'),
        ({"keys": "ab"}, '"keys" is not a list of text'),
        ({"offsets": [0, -1024]}, '"offsets" is not a list of byte offsets'),
        ({"offsets": {"0": 0}}, '"offsets" is not a list of byte offsets'),
    ],
)
def test_a_malformed_entry_is_an_input_error_naming_it(change: dict, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        parse(text(GOOD, dict(GOOD, **change)), "m.json")
    assert str(caught.value) == f"m.json: malformed shard entry 1 ({problem})"


@pytest.mark.parametrize(
    "shards, message",
    [
        ('"shards": {"url": "s-0.tar"}', 'm.json: "shards" is not a list'),
        ('"shards": [["s-0.tar", 1, 512]]', "m.json: malformed shard entry 0 (not an object)"),
        ('"shards": [{"url": "s-0.tar", "bytes": 512}]',
         'm.json: malformed shard entry 0 (no "samples")'),
    ],
)  # fmt: skip
def test_shards_that_are_not_a_list_of_entries_are_an_input_error(
    shards: str, message: str
) -> None:
    with pytest.raises(InputError) as caught:
        parse('{"format": "tarkit-manifest", "version": 1, ' + shards + "}", "m.json")
    assert str(caught.value) == message
