"""tarkit.stream.filters: the --where grammar and its rules, key lists, seeded fractions."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_tar

from tarkit.errors import InputError, SourceError, UsageError
from tarkit.format.samples import Sample, group_samples
from tarkit.format.tar import read_members
from tarkit.stream.filters import (
    ExpressionError,
    filter_samples,
    keep_fraction,
    key_in,
    read_keys,
    sample_filter,
    where,
)

META = {"height": 300, "meta": {"source": "web", "tags": ["x", "y"]}, "ok": True, "none": None}
SAMPLES = {
    "train/a": {"cls": b"3\n", "json": json.dumps(META).encode(), "txt": b"a cat sat"},
    "train/b": {"cls": b"1", "json": b'{"height": "tall", "ok": 1}', "txt": b"Dogs"},
    "val/c": {"cls": b"dog", "JPG": b"\xff\xd8", "txt": b"\xe9t\xe9 cat"},
    "val/d": {"cls": b" 2.0 ", "meta.json": b'{"source": "book"}', "0.jpg": b"j"},
}


def samples_of(contents: dict[str, dict[str, bytes]]) -> list[Sample]:
    archive = make_tar((f"{k}.{f}", d) for k, fields in contents.items() for f, d in fields.items())
    return list(group_samples(read_members(io.BytesIO(archive), "in.tar"), "in.tar"))


def kept(expression: str, contents: dict[str, dict[str, bytes]] = SAMPLES) -> list[str]:
    return [s.key for s in filter_samples(samples_of(contents), where(expression))]


# --- the grammar, good expressions ------------------------------------------------------


@pytest.mark.parametrize(
    "expression,keys",
    [
        ('key ~ "^train/"', ["train/a", "train/b"]),
        ("key !~ '^train/'", ["val/c", "val/d"]),
        ('key == "val/c"', ["val/c"]),
        ('key >= "train/b"', ["train/b", "val/c", "val/d"]),
        ("cls == 3", ["train/a"]),
        ("cls == 2", ["val/d"]),
        ('cls == "3"', ["train/a"]),
        ('cls == "dog"', ["val/c"]),
        ("cls in (1, 2, 5)", ["train/b", "val/d"]),
        ('cls in (3, "dog",)', ["train/a", "val/c"]),
        ("cls not in (1, 2)", ["train/a", "val/c"]),
        ("cls != 3", ["train/b", "val/c", "val/d"]),
        ("cls > 1.5", ["train/a", "val/d"]),
        ("cls <= -1e3", []),
        ("json.height > 200", ["train/a"]),
        ("json.height != 300", ["train/b"]),
        ('json.meta.source == "web"', ["train/a"]),
        ('json["meta"].tags[0] == "x"', ["train/a"]),
        ("json.meta.tags[-1] == 'y'", ["train/a"]),
        ("json.meta.tags[2] == 'z'", []),
        ("json.ok == true", ["train/a"]),
        ("json.ok == 1", ["train/b"]),
        ("json.none == null", ["train/a"]),
        ("json.height ~ 'tall'", ["train/b"]),
        ('meta.json.source == "book"', ["val/d"]),
        ('`meta.json`.source == "book"', ["val/d"]),
        ("has json.none", ["train/a"]),
        ("has json.meta.tags", ["train/a"]),
        ('txt ~ "cat"', ["train/a", "val/c"]),
        ('txt ~ "(?i)^dogs$"', ["train/b"]),
        ("txt ~ '^\\xe9'", []),
        ("has jpg", ["val/c"]),
        ("has `0.jpg`", ["val/d"]),
        ("has key", ["train/a", "train/b", "val/c", "val/d"]),
        ("not has txt", ["val/d"]),
        ("not not has txt", ["train/a", "train/b", "val/c"]),
        ("cls == 1 or cls == 3 and has jpg", ["train/b"]),
        ("(cls == 1 or cls == 3) and has json", ["train/a", "train/b"]),
        ("not (cls == 1 or json.height > 200)", ["val/c", "val/d"]),
        ("  has   jpg  ", ["val/c"]),
        ("has\tjpg\nor\tcls==2", ["val/c", "val/d"]),
    ],
)
def test_expression_keeps_exactly_these_samples(expression: str, keys: list[str]) -> None:
    assert kept(expression) == keys


def test_missing_values_fail_every_comparison_negations_included() -> None:
    for expression in ("json.width == 1", "json.width != 1", "json.width !~ 'x'",
                       "json.width not in (1)", "jpg != 'x'"):  # fmt: skip
        assert kept(expression, {"k": {"json": b"{}", "cls": b"1"}}) == [], expression
    assert kept("not json.width == 1", {"k": {"json": b"{}"}}) == ["k"]


def test_values_of_another_type_fail_positive_tests_and_pass_negated_ones() -> None:
    contents = {"k": {"json": b'{"h": "300", "b": true, "l": [1], "o": {}}'}}
    for expression in ('json.h > 200', 'json.h == 300', "json.b == 1", "json.l == 1",
                       "json.o ~ ''", 'json.l.x == 1', "json.h[0] == '3'"):  # fmt: skip
        assert kept(expression, contents) == [], expression
    for expression in ("json.h != 300", "json.b not in (1, 0)", "json.l !~ 'x'"):
        assert kept(expression, contents) == ["k"], expression


def test_text_that_is_not_utf8_matches_only_itself_and_is_no_error() -> None:
    assert kept("txt ~ 'cat'", {"k": {"txt": b"\xff cat"}}) == ["k"]
    assert kept("txt == 'x'", {"k": {"txt": b"\xff"}}) == []


def test_field_names_match_case_insensitively_as_dash_f_does() -> None:
    assert kept("jpg == '1' and JSON.A == 2", {"k": {"JPG": b"1", "Json": b'{"A": 2}'}}) == ["k"]


def test_json_field_is_decoded_once_per_sample_however_many_paths_read_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    real = json.loads
    monkeypatch.setattr(json, "loads", lambda data: calls.append(data) or real(data))
    assert kept("json.height > 1 and json.meta.source == 'web' and has json.ok") == ["train/a"]
    assert len(calls) == 2  # train/a and train/b; val/c and val/d have no json field


def test_field_that_is_not_json_is_an_input_error_naming_sample_and_field() -> None:
    samples = samples_of({"a": {"json": b"{}"}, "b": {"cls": b"1", "json": b"{oops"}})
    with pytest.raises(InputError) as info:
        list(filter_samples(samples, where("json.height > 1")))
    assert str(info.value) == (
        "in.tar: sample 'b': field 'json' is not JSON (Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1)), and --where reads json.height from it "
        "(byte 2048, member b.json)"
    )


def test_field_that_is_not_json_is_not_read_when_the_expression_is_decided_without_it() -> None:
    assert kept("cls == 2 and json.x == 1", {"b": {"cls": b"1", "json": b"{oops"}}) == []
    assert kept("cls == 1 or json.x == 1", {"b": {"cls": b"1", "json": b"{oops"}}) == ["b"]


def test_field_without_a_path_is_text_even_when_it_holds_json() -> None:
    assert kept("json ~ '\"height\": 300'") == ["train/a"]


# --- the grammar, bad expressions -------------------------------------------------------


@pytest.mark.parametrize(
    "expression,message",
    [
        ("json.height >", "expected a value after '>' at column 14"),
        ("json.height > and", "expected a value after '>' at column 15, found 'and'"),
        ("cls = 3", "expected a comparison after 'cls' at column 5, found '=' (write '==')"),
        ("cls", "expected a comparison after 'cls' at column 4"),
        ("cls 3", "expected a comparison after 'cls' at column 5, found '3'"),
        ("(cls == 3", "unclosed '(' at column 1"),
        ("((cls == 3) or has x", "unclosed '(' at column 1"),
        ("(cls == 3 has", "expected 'and', 'or' or ')' at column 11, found 'has'"),
        ("cls == 3)", "unmatched ')' at column 9"),
        ("cls == 3 cls == 4", "expected 'and', 'or' or the end at column 10, found 'cls'"),
        ("cls in (1, 2", "unclosed '(' at column 8"),
        ("cls in (1 2)", "expected ',' or ')' at column 11, found '2'"),
        ("cls in ()", "expected a value after '(' at column 9, found ')'"),
        ("cls in 1", "expected '(' after 'in' at column 8, found '1'"),
        ("cls not 3", "expected 'in' after 'not' at column 9, found '3'"),
        ("and cls == 1", "expected a condition at column 1, found 'and'"),
        ("cls == 1 and", "expected a condition at column 13"),
        ("has", "expected a field after 'has' at column 4"),
        ("has 3", "expected a field after 'has' at column 5, found '3'"),
        ("not", "expected a condition at column 4"),
        ("cls == tru", "expected a value after '==' at column 8, found 'tru'"),
        ("cls == 3x", "expected a value after '==' at column 8, found '3x'"),
        ("cls == true", "'cls' is text: true compares only with JSON values at column 8"),
        ("key in (1, null)", "'key' is text: null compares only with JSON values at column 12"),
        ("json.x > true", "expected a number or a string after '>' at column 10, found 'true'"),
        ("cls ~ 3", "expected a string after '~' at column 7, found '3'"),
        ('key ~ "("', "bad regular expression (missing ), unterminated subpattern) at column 7"),
        ('cls == "3', "unterminated string at column 8"),
        ("`cls == 3", "unterminated field name at column 1"),
        ("`` == 3", "empty field name at column 1"),
        ("txt[0] == 'a'", "a path needs a JSON field (json, *.json or a `quoted` name), not 'txt' at column 4"),
        ("json. == 1", "expected a name after '.' at column 7, found '=='"),
        ("json[x] == 1", "expected an index or a string after '[' at column 6, found 'x'"),
        ("json[0 == 1", "expected ']' at column 8, found '=='"),
        ("cls == 1 && has x", "expected 'and', 'or' or the end at column 10, found '&'"),
        ("cls == 'a very long string indeed' x", "expected 'and', 'or' or the end at column 36, found 'x'"),
        ("cls == 1 or verylongfieldname_over_twenty", "expected a comparison after 'verylongfieldname_over_twenty' at column 42"),
        ("x ==", "expected a value after '==' at column 5"),
    ],
)  # fmt: skip
def test_bad_expression_is_a_usage_error_pointing_at_the_column(
    expression: str, message: str
) -> None:
    with pytest.raises(ExpressionError) as info:
        where(expression)
    assert str(info.value) == f"--where: {message}"
    assert isinstance(info.value, UsageError)
    assert info.value.column == int(message.split("at column ")[1].split(",")[0])


def test_long_token_is_shortened_in_the_message() -> None:
    with pytest.raises(ExpressionError, match=r"found 'abcdefghijklmnopq\.\.\.'$"):
        where("cls == 1 abcdefghijklmnopqrstuvwxyz")


@pytest.mark.parametrize("expression", ["", "   "])
def test_empty_expression_is_a_usage_error(expression: str) -> None:
    with pytest.raises(UsageError, match="^--where: the expression is empty$"):
        where(expression)


# --- keys -------------------------------------------------------------------------------


def test_key_list_drops_whitespace_crlf_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    path.write_bytes(b"train/a\r\n\n  val/c  \n\n\nnot-there\n   \n")
    assert read_keys(str(path)) == ["train/a", "val/c", "not-there"]
    assert [s.key for s in filter_samples(samples_of(SAMPLES), key_in(read_keys(str(path))))] == [
        "train/a",
        "val/c",
    ]


def test_key_list_can_come_from_a_command() -> None:
    assert read_keys("pipe:printf 'a\\nb\\n'") == ["a", "b"]


def test_missing_key_list_is_a_source_error_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"^--keys .*/nope\.txt: no such file$"):
        read_keys(str(tmp_path / "nope.txt"))


def test_empty_key_list_keeps_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    keep = sample_filter(keys=str(tmp_path / "empty.txt"))
    assert keep is not None
    assert list(filter_samples(samples_of(SAMPLES), keep)) == []


def test_keys_from_stdin_are_refused_when_the_archives_come_from_stdin_too() -> None:
    for inputs in ([], ["-"], ["a.tar", "-"]):
        with pytest.raises(UsageError, match="^--keys - reads stdin, and so do the archives"):
            sample_filter(keys="-", inputs=inputs)


def test_bad_expression_is_reported_before_the_key_list_is_read(tmp_path: Path) -> None:
    with pytest.raises(ExpressionError):
        sample_filter(expression="cls ==", keys=str(tmp_path / "missing.txt"))


# --- fraction ---------------------------------------------------------------------------


def documented_kept(key: str, seed: int, fraction: float) -> bool:
    """docs/tarcat.md's rule, written out independently of the library."""
    import hashlib

    digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


def bare(keys: list[str]) -> list[Sample]:
    return [Sample(k, [], [], "-") for k in keys]


def test_fraction_keeps_exactly_the_documented_samples_near_the_share() -> None:
    keys = [f"{i:06d}" for i in range(20000)]
    for seed, fraction in [(0, 0.1), (7, 0.5), (-3, 0.01)]:
        keep = keep_fraction(fraction, seed)
        chosen = [s.key for s in bare(keys) if keep(s)]
        assert chosen == [k for k in keys if documented_kept(k, seed, fraction)]
        # Exact, so it cannot flake; the bound says the documented rule is a fair draw.
        assert abs(len(chosen) - fraction * len(keys)) < 5 * (len(keys) * fraction) ** 0.5


def test_fraction_decision_depends_on_the_key_not_the_position() -> None:
    keys = [f"k{i}" for i in range(500)]
    keep = keep_fraction(0.3, seed=5)
    forward = {s.key for s in bare(keys) if keep(s)}
    backward = {s.key for s in bare(keys[::-1]) if keep(s)}
    assert forward == backward
    assert {s.key for s in bare(keys[:250]) if keep(s)} | {
        s.key for s in bare(keys[250:]) if keep(s)
    } == forward


def test_smaller_fraction_keeps_a_subset_and_another_seed_another_draw() -> None:
    samples = bare([f"k{i}" for i in range(2000)])
    small = {s.key for s in samples if keep_fraction(0.1, 1)(s)}
    large = {s.key for s in samples if keep_fraction(0.4, 1)(s)}
    other = {s.key for s in samples if keep_fraction(0.4, 2)(s)}
    assert small < large
    assert other != large


def test_fraction_zero_keeps_nothing_and_one_keeps_everything() -> None:
    samples = bare([f"k{i}" for i in range(1000)])
    assert not any(keep_fraction(0.0)(s) for s in samples)
    assert all(keep_fraction(1.0)(s) for s in samples)


@pytest.mark.parametrize("fraction", [-0.1, 1.01, float("nan")])
def test_fraction_outside_zero_to_one_is_a_usage_error(fraction: float) -> None:
    with pytest.raises(UsageError, match="^--fraction must be between 0 and 1"):
        keep_fraction(fraction)


# --- streams ----------------------------------------------------------------------------


def test_filters_given_together_must_all_hold(tmp_path: Path) -> None:
    (tmp_path / "keys.txt").write_text("train/a\ntrain/b\nval/c\n")
    keep = sample_filter(expression="has txt and not has jpg", keys=str(tmp_path / "keys.txt"))
    assert keep is not None
    assert [s.key for s in filter_samples(samples_of(SAMPLES), keep)] == ["train/a", "train/b"]
    assert sample_filter() is None


def test_closing_the_filtered_stream_closes_its_source() -> None:
    closed = []

    def source() -> Iterator[Sample]:
        try:
            yield from samples_of(SAMPLES)
        finally:
            closed.append(True)

    stream = filter_samples(source(), where("has txt"))
    assert next(stream).key == "train/a"
    stream.close()
    assert closed == [True]
