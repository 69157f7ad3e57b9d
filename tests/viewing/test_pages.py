"""The viewer's pages over real shards: by index and read in order (compressed shards),
the same samples at the same positions as tarcat, filters with tarcat's grammar, keys,
fields, and a search that stops at its deadline and goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from viewed_shards import HOSTILE, sample_fields, write_dataset

import tarkit
from tarkit.errors import InputError, NotFound, UsageError
from tarkit.format.classes import parse_class_names
from tarkit.stream.filters import ExpressionError
from tarkit.viewing import open_samples, pages
from tarkit.viewing.pages import Pages

SAMPLES = 10


@pytest.fixture(scope="module", params=["indexed", "streamed"])
def dataset(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same samples as indexed .tar shards, or as .tar.gz shards read in order."""
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "indexed":
        return write_dataset(root, SAMPLES, hostile=True)
    return write_dataset(root, SAMPLES, hostile=True, indexed=False, suffix=".tar.gz")


def open_pages(manifest: Path, **options: object) -> Pages:
    samples = open_samples([str(manifest)])
    names = parse_class_names((manifest.parent / "classes.json").read_text())
    return Pages(samples, source=str(manifest), class_names=names, **options)  # type: ignore[arg-type]


def keys(page: dict) -> list[str]:
    return [s["key"] for s in page["samples"]]


def test_positions_are_tarcats_order_whether_indexed_or_read_in_order(dataset: Path) -> None:
    shards = sorted(str(p) for p in dataset.parent.glob("d-*") if not p.name.endswith(".idx"))
    expected = [s.key for s in tarkit.read_samples(shards)]  # what tarcat reads
    viewed = open_pages(dataset)
    assert viewed.samples.indexed == dataset.parent.name.startswith("indexed")
    first = viewed.page(0, 4)
    assert keys(first) == expected[:4] and [s["position"] for s in first["samples"]] == [0, 1, 2, 3]
    assert (first["next"], first["end"], first["total"]) == (4, False, SAMPLES)
    # Forward, back (a reader in order starts again), across shards, to the end.
    assert keys(viewed.page(6, 3)) == expected[6:9]
    assert keys(viewed.page(1, 2)) == expected[1:3]
    last = viewed.page(8, 4)
    assert keys(last) == expected[8:] and (last["next"], last["end"]) == (None, True)
    assert viewed.page(SAMPLES, 4)["samples"] == []
    viewed.close()


def test_each_field_is_described_as_what_it_is(dataset: Path) -> None:
    viewed = open_pages(dataset)
    first, second = viewed.page(0, 2)["samples"]
    described = {f["name"]: f for f in first["fields"]}
    assert described["jpg"]["kind"] == "image" and described["svg"]["kind"] == "image"
    assert described["cls"] == {"name": "cls", "size": 1, "url": "/field/0/cls",
                                "kind": "class", "text": "0", "label": "cat"}  # fmt: skip
    assert {f["name"]: f.get("label") for f in second["fields"]}["cls"] == "dog"
    assert json.loads(described["json"]["text"]) == {"position": 0, "width": 64}
    assert described["json"]["text"].startswith('{\n "position": 0')  # pretty
    # Markup in a field is text for the page, as it is in the shard.
    assert described["txt"]["text"] == HOSTILE["txt"].decode()
    assert described["html"] == {"name": "html", "size": len(HOSTILE["html"]),
                                 "url": "/field/0/html", "kind": "text",
                                 "text": HOSTILE["html"].decode()}  # fmt: skip
    assert [f["name"] for f in first["fields"]] == list(sample_fields(0, hostile=True))
    viewed.close()


def test_where_keeps_what_tarcat_keeps_and_reports_errors_as_tarcat_words_them(
    dataset: Path,
) -> None:
    viewed = open_pages(dataset)
    kept = viewed.page(0, 3, "cls == 1 and json.width > 66")
    assert keys(kept) == ["k003", "k005", "k007"] and kept["next"] == 8
    rest = viewed.page(kept["next"], 3, "cls == 1 and json.width > 66")
    assert keys(rest) == ["k009"] and (rest["next"], rest["end"]) == (None, True)
    with pytest.raises(ExpressionError) as bad:
        viewed.page(0, 3, "json.width >")
    assert str(bad.value) == "--where: expected a value after '>' at column 13"
    with pytest.raises(InputError, match="field 'txt' is not JSON"):
        viewed.page(0, 3, "txt.json.a == 1 or `txt`.a == 1")
    viewed.close()


def test_a_search_stops_at_its_deadline_and_goes_on_from_where_it_stopped(
    dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "SEARCH_SECONDS", -1.0)  # every search stops after a sample
    viewed = open_pages(dataset)
    found, start = [], 0
    for _ in range(SAMPLES + 1):
        page = viewed.page(start, 5, "cls == 1")
        found += keys(page)
        assert page["scanned"] == 1
        if page["next"] is None:
            break
        start = page["next"]
    assert found == [f"k{p:03d}" for p in range(1, SAMPLES, 2)]
    steps, start, position = 0, 0, None
    while position is None and start is not None and steps <= SAMPLES:
        answer = viewed.find("k009", start)
        position, start, steps = answer["position"], answer["next"], steps + 1
    assert position == 9 and steps > 1
    viewed.close()


def test_keys_fields_and_samples_no_longer_kept_are_read_again(
    dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "KEPT_BYTES", 1)  # only the last page's samples are kept
    viewed = open_pages(dataset)
    assert viewed.find("k006") == {"position": 6, "next": None}
    assert viewed.find("nothing") == {"position": None, "next": None}
    viewed.page(0, 2)
    viewed.page(8, 2)
    assert viewed.field(9, "json") == ("k009", "json", sample_fields(9)["json"])
    assert viewed.field(1, "jpg") == ("k001", "jpg", sample_fields(1)["jpg"])  # read again
    assert viewed.field(0, "svg")[2] == HOSTILE["svg"]
    with pytest.raises(NotFound, match="has no field png"):
        viewed.field(1, "png")
    with pytest.raises(NotFound, match="no sample 10"):
        viewed.field(SAMPLES, "jpg")
    viewed.close()


def test_a_shard_that_does_not_hold_its_manifests_count_is_an_error(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path, 6, 3, indexed=False, suffix=".tar.gz")
    document = json.loads(manifest.read_text())
    document["shards"][0]["samples"] = 2
    document["samples"] = 5
    manifest.write_text(json.dumps(document))
    viewed = open_pages(manifest)
    with pytest.raises(InputError, match="more than 2 samples, its manifest says 2") as error:
        viewed.page(0, 5)
    assert error.value.reason == InputError.MISMATCH
    viewed.close()


def test_stdin_and_bad_settings_are_refused(dataset: Path) -> None:
    with pytest.raises(UsageError, match="not from stdin"):
        open_samples(["-"])
    with pytest.raises(ExpressionError):
        open_pages(dataset, where="cls ==")
    with pytest.raises(UsageError, match="--per-page must be between 1 and 1000"):
        open_pages(dataset, per_page=0)
