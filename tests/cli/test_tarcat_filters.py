"""tarcat --where, --keys and --fraction (--invert) through real pipes, with the other options, and
the examples of docs/tarcat.md and docs/processing.md run as they are written."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT, make_tar, run, run_shell
from tarfiles import END

from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members

N = 60


def sample_fields(i: int) -> dict[str, bytes]:
    """Sample i of the test set: every 3rd has a jpg, every 4th no json, cls is i % 7."""
    fields = {"cls": b"%d\n" % (i % 7), "txt": b"a cat" if i % 2 else b"a dog"}
    if i % 3 == 0:
        fields["jpg"] = b"\xff\xd8" + bytes([i])
    if i % 4:
        meta = {"source": "web" if i % 5 else "book", "flagged": i % 6 == 0}
        fields["json"] = json.dumps({"height": 100 + 10 * i, "meta": meta}).encode()
    return fields


def key_of(i: int) -> str:
    return f"train/{i:03d}" if i < 40 else f"val/{i:03d}"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test set as GNU tar writes it (pax, sorted names)."""
    root = tmp_path_factory.mktemp("filters")
    tree = root / "tree"
    for i in range(N):
        for field, content in sample_fields(i).items():
            path = tree / f"{key_of(i)}.{field}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    archive = root / "data.tar"
    subprocess.run(
        [
            "tar",
            "--format=pax",
            "--sort=name",
            "-cf",
            str(archive),
            "-C",
            str(tree),
            "train",
            "val",
        ],
        check=True,
    )
    return archive


def samples(archive: bytes) -> list:
    return list(group_samples(read_members(io.BytesIO(archive))))


def keys(archive: bytes) -> list[str]:
    return [s.key for s in samples(archive)]


def expected(condition: Callable[[int, dict[str, bytes]], bool]) -> list[str]:
    return [key_of(i) for i in range(N) if condition(i, sample_fields(i))]


def height(fields: dict[str, bytes]) -> int | None:
    return json.loads(fields["json"])["height"] if "json" in fields else None


def tarcat(*args: str, input: bytes | None = None) -> bytes:
    result = run(["tarcat", *args], input=input)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return result.stdout


# --- --where ----------------------------------------------------------------------------


def test_where_keeps_the_matching_samples_of_a_gnu_tar_archive_byte_for_byte(data: Path) -> None:
    out = tarcat("--where", 'cls in (1, 3) and json.height > 200 or key == "val/059"', str(data))
    want = expected(lambda i, f: (i % 7 in (1, 3) and (height(f) or 0) > 200) or i == 59)
    assert keys(out) == want and len(want) > 5
    by_key = {s.key: s for s in samples(tarcat(str(data)))}
    assert [m.raw for s in samples(out) for m in s.members] == [
        m.raw for k in want for m in by_key[k].members
    ]
    assert out.endswith(END)


@pytest.mark.parametrize(
    "expression,condition",
    [
        ('key ~ "^val/"', lambda i, f: i >= 40),
        ("cls == 3", lambda i, f: i % 7 == 3),
        ('json.meta.source == "book"', lambda i, f: "json" in f and i % 5 == 0),
        ("json.meta.flagged == true", lambda i, f: "json" in f and i % 6 == 0),
        ('txt ~ "cat"', lambda i, f: i % 2 == 1),
        ("has jpg and not has json", lambda i, f: i % 3 == 0 and i % 4 == 0),
        ("json.height != 200", lambda i, f: "json" in f and i != 10),
        ("not json.height == 200", lambda i, f: i != 10),
    ],
)
def test_where_semantics_through_tarcat(
    data: Path, expression: str, condition: Callable[[int, dict[str, bytes]], bool]
) -> None:
    assert keys(tarcat("--where", expression, str(data))) == expected(condition)


def test_bad_expression_exits_2_with_one_line_before_any_input_is_opened(
    data: Path, tmp_path: Path
) -> None:
    opened = tmp_path / "opened"
    result = run(["tarcat", "--where", "json.height >", f"pipe:touch {opened}; cat {data}"])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == "tarcat: error: --where: expected a value after '>' at column 14\n"
    assert not opened.exists()


def test_field_that_is_not_json_exits_2_after_the_samples_before_it(tmp_path: Path) -> None:
    archive = make_tar([("a.json", b'{"h": 5}'), ("b.json", b"{oops"), ("c.json", b"{}")])
    result = run(["tarcat", "--where", "json.h > 1"], input=archive)
    assert result.returncode == 2
    assert result.stderr == (
        "tarcat: error: <stdin>: sample 'b': field 'json' is not JSON (Expecting property "
        "name enclosed in double quotes: line 1 column 2 (char 1)), and --where reads json.h "
        "from it (byte 1024, member b.json)\n"
    )
    assert result.stdout == archive[:1024]  # sample a, and no end-of-archive marker


def test_samples_without_the_field_or_path_are_dropped_without_an_error(data: Path) -> None:
    out = tarcat("--where", "json.meta.width > 0 or jpg == 'x'", str(data))
    assert keys(out) == []


# --- --keys -----------------------------------------------------------------------------


def test_keys_file_keeps_listed_keys_in_input_order(data: Path, tmp_path: Path) -> None:
    listed = tmp_path / "keys.txt"
    listed.write_bytes(b"val/050\r\n\n  train/002 \nnot/there\n\n")
    assert keys(tarcat("--keys", str(listed), str(data))) == ["train/002", "val/050"]


def test_keys_from_stdin_with_named_archives(data: Path) -> None:
    assert keys(tarcat("--keys", "-", str(data), input=b"train/007\nval/041\n")) == [
        "train/007",
        "val/041",
    ]


def test_keys_from_stdin_with_the_archive_on_stdin_is_a_usage_error(data: Path) -> None:
    result = run(["tarcat", "--keys", "-"], input=data.read_bytes())
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == (
        "tarcat: error: --keys - reads stdin, and so do the archives: name them instead\n"
    )


def test_missing_keys_file_exits_2_and_writes_nothing(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.tar"
    result = run(["tarcat", "--keys", "nope.txt", str(data), "-o", str(out)], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "tarcat: error: --keys nope.txt: no such file\n"
    assert not out.exists()


# --- --fraction -------------------------------------------------------------------------


def documented_rule() -> Callable[[str, int, float], bool]:
    """The `kept` function docs/tarcat.md shows, run as it is written."""
    (block,) = [b for lang, b in code_blocks("tarcat.md", "### `--fraction F`") if lang == "python"]
    namespace: dict = {}
    exec(block, namespace)
    return namespace["kept"]


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("many") / "many.tar"
    path.write_bytes(make_tar((f"s{i:05d}.cls", b"%d" % (i % 10)) for i in range(20000)))
    return path


def test_fraction_keeps_exactly_the_documented_samples_near_f(many: Path) -> None:
    kept = documented_rule()
    all_keys = [f"s{i:05d}" for i in range(20000)]
    out = tarcat("--fraction", "0.1", "--seed", "3", str(many))
    want = [k for k in all_keys if kept(k, 3, 0.1)]
    assert keys(out) == want
    # Exact, so it cannot flake; the bound checks the documented rule is a fair draw.
    assert abs(len(want) - 2000) < 5 * (20000 * 0.1 * 0.9) ** 0.5
    assert tarcat("--fraction", "0.1", "--seed", "3", str(many)) == out


def test_fraction_draw_follows_the_key_whatever_the_order_or_sharding(
    data: Path, tmp_path: Path
) -> None:
    plain = keys(tarcat("--fraction", "0.5", "--seed", "9", str(data)))
    reshuffled = keys(tarcat("--fraction", "0.5", "--seed", "9", "-", input=tarcat(
        "--shuffle", "50", "--seed", "4", str(data))))  # fmt: skip
    assert set(reshuffled) == set(plain) and reshuffled != plain
    shuffled = keys(tarcat("--shuffle", "50", "--fraction", "0.5", "--seed", "9", str(data)))
    assert set(shuffled) == set(plain)
    first, second = tmp_path / "a.tar", tmp_path / "b.tar"
    first.write_bytes(tarcat("--slice", ":25", str(data)))
    second.write_bytes(tarcat("--slice", "25:", str(data)))
    apart = keys(tarcat("--fraction", "0.5", "--seed", "9", str(first))) + keys(
        tarcat("--fraction", "0.5", "--seed", "9", str(second))
    )
    assert apart == plain


def test_fraction_zero_writes_an_empty_archive_and_one_everything(data: Path) -> None:
    assert tarcat("--fraction", "0", str(data)) == END
    assert tarcat("--fraction", "1", str(data)) == tarcat(str(data))


@pytest.mark.parametrize("value", ["1.5", "-0.2", "nan"])
def test_fraction_outside_zero_to_one_exits_2(data: Path, value: str) -> None:
    result = run(["tarcat", "--fraction", value, str(data)])
    assert (result.returncode, result.stdout) == (2, b"")
    assert (
        result.stderr == f"tarcat: error: --fraction must be between 0 and 1 (got {float(value)})\n"
    )


# --- --invert: the other side of a split ----------------------------------------------


def test_invert_writes_exactly_the_samples_fraction_drops_byte_for_byte(
    data: Path, tmp_path: Path
) -> None:
    kept = documented_rule()
    other = tarcat("--fraction", "0.7", "--seed", "-3", "--invert", str(data))
    rest = expected(lambda i, f: not kept(key_of(i), -3, 0.7))
    assert keys(other) == rest and 0 < len(rest) < N  # in the input's order
    listed = tmp_path / "rest.txt"
    listed.write_text("".join(f"{k}\n" for k in rest))
    assert other == tarcat("--keys", str(listed), str(data))  # the members, byte for byte


def test_invert_turns_only_the_fraction_around(data: Path) -> None:
    kept = documented_rule()
    out = tarcat("--fraction", "0.5", "--seed", "2", "--invert", "--where", "cls == 3", str(data))
    assert keys(out) == expected(lambda i, f: i % 7 == 3 and not kept(key_of(i), 2, 0.5))


def test_invert_without_fraction_exits_2_and_writes_nothing(data: Path) -> None:
    result = run(["tarcat", "--invert", "--where", "cls == 3", str(data)])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == (
        "tarcat: error: --invert keeps the samples --fraction drops: give --fraction too\n"
    )


def test_a_split_is_the_same_however_the_shards_are_cut_ordered_or_read(
    data: Path, tmp_path: Path
) -> None:
    for size in ("7", "13"):
        result = run(["tarsplit", "-c", size, "-o", str(tmp_path / f"c{size}-%02d.tar"), str(data)])
        assert result.returncode == 0, result.stderr
    sevens = sorted(str(p) for p in tmp_path.glob("c7-*.tar"))
    thirteens = sorted(str(p) for p in tmp_path.glob("c13-*.tar"))
    assert len(sevens) == 9 and len(thirteens) == 5
    kept = documented_rule()
    side = expected(lambda i, f: kept(key_of(i), 5, 0.7))
    assert keys(tarcat("--fraction", "0.7", "--seed", "5", *thirteens)) == side
    other = keys(tarcat("--fraction", "0.7", "--seed", "5", "--invert", "-p", "2", *sevens[::-1]))
    assert sorted(other) == sorted(set(expected(lambda i, f: True)) - set(side))


# --- with the other options -------------------------------------------------------------


def test_count_counts_matching_samples(data: Path) -> None:
    out = tarcat("-c", "4", "--where", "cls == 2", str(data))
    assert keys(out) == expected(lambda i, f: i % 7 == 2)[:4]


def test_skip_and_slice_index_the_samples_that_passed(data: Path) -> None:
    matching = expected(lambda i, f: i % 2 == 0)
    assert (
        keys(tarcat("--skip", "3", "-c", "2", "--where", "txt ~ 'dog'", str(data)))
        == (matching[3:5])
    )
    assert keys(tarcat("--slice", "1::4", "--where", "txt ~ 'dog'", str(data))) == matching[1::4]
    assert keys(tarcat("--slice", "-2:", "--where", "txt ~ 'dog'", str(data))) == matching[-2:]


def test_where_sees_fields_that_dash_f_drops(data: Path) -> None:
    out = samples(tarcat("-f", "jpg", "--where", "cls == 3", str(data)))
    assert [s.key for s in out] == expected(lambda i, f: i % 7 == 3 and "jpg" in f)
    assert {tuple(s.fields) for s in out} == {("jpg",)}


def test_shuffle_shuffles_the_samples_that_passed(data: Path) -> None:
    matching = expected(lambda i, f: i % 7 == 3)
    out = keys(tarcat("--shuffle", "100", "--seed", "2", "--where", "cls == 3", str(data)))
    assert sorted(out) == matching and out != matching


def test_all_filters_together_must_all_hold(data: Path, tmp_path: Path) -> None:
    listed = tmp_path / "keys.txt"
    listed.write_text("".join(f"{key_of(i)}\n" for i in range(0, N, 2)))
    kept = documented_rule()
    out = tarcat("--keys", str(listed), "--fraction", "0.6", "--seed", "1",
                 "--where", "has json", str(data))  # fmt: skip
    assert keys(out) == expected(
        lambda i, f: i % 2 == 0 and "json" in f and kept(key_of(i), 1, 0.6)
    )


def test_filter_applies_to_the_mixed_stream(data: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.tar"
    other.write_bytes(make_tar((f"x{i:03d}.cls", b"%d" % (i % 7)) for i in range(30)))
    mixed = keys(tarcat("--interleave", str(data), str(other)))
    out = keys(tarcat("--interleave", "--where", "cls == 3", str(data), str(other)))
    by_key = {s.key: s.get("cls") for s in samples(tarcat("--interleave", str(data), str(other)))}
    assert out == [k for k in mixed if int(by_key[k] or b"") == 3]


def test_count_stops_reading_once_enough_samples_matched(data: Path) -> None:
    start = time.monotonic()
    # The command's sleep would hold tarcat's stderr, and so this test, open: not with 2>.
    out = tarcat("-c", "2", "--where", "cls == 1", f"pipe:cat {data}; sleep 30 2>/dev/null")
    assert keys(out) == expected(lambda i, f: i % 7 == 1)[:2]
    assert time.monotonic() - start < 15


def test_help_describes_the_filter_options() -> None:
    result = run(["tarcat", "--help"])
    text = result.stdout.decode()
    for option in ("--where", "--keys", "--fraction", "--invert"):
        assert option in text
    assert "Seed for --shuffle, --mix and --fraction" in text


# --- the docs' examples, run as written -------------------------------------------------


def code_blocks(page: str, heading: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced block in the section under ``heading``."""
    level = len(heading.split(" ")[0])
    blocks: list[tuple[str, str]] = []
    inside, language, lines = False, None, ""
    for line in (ROOT / "docs" / page).read_text().splitlines(keepends=True):
        if line.startswith("```"):
            if language is None:
                language, lines = line[3:].strip(), ""
                continue
            if inside:
                blocks.append((language, lines))
            language = None
        elif language is not None:
            lines += line
        elif re.match(r"#+ ", line):
            if inside and len(line.split(" ")[0]) <= level:
                break
            inside = inside or line.rstrip("\n") == heading
    return blocks


def docs_data() -> bytes:
    """data.tar for the examples: keys train/… and val/…, cls, json, txt, some jpg."""
    members = []
    for i in range(200):
        key = f"train/{i:04d}" if i < 150 else f"val/{i:04d}"
        meta = {
            "height": 150 + i,
            "meta": {"source": ["web", "book"][i % 2], "flagged": i % 9 == 0},
        }
        members += [(f"{key}.cls", b"%d" % (i % 10))]
        if i % 4:
            members += [(f"{key}.jpg", b"\xff\xd8")]
        members += [(f"{key}.json", json.dumps(meta).encode())]
        members += [(f"{key}.txt", [b"A Cat", b"the cats", b"dogs"][i % 3])]
    return make_tar(members)


def test_tarcat_filtering_examples_run_as_written(tmp_path: Path) -> None:
    (tmp_path / "data.tar").write_bytes(docs_data())
    blocks = code_blocks("tarcat.md", "## Filtering samples")
    shell = [b for lang, b in blocks if lang == "bash"]
    assert len(shell) == 1
    result = run_shell("set -euo pipefail\n" + shell[0], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert keys((tmp_path / "train.tar").read_bytes())[-1] == "train/0149"
    assert len(keys((tmp_path / "ten-sevens.tar").read_bytes())) == 10
    assert set(keys((tmp_path / "twentieth.tar").read_bytes())) < set(
        keys((tmp_path / "fifth.tar").read_bytes())
    )
    assert keys((tmp_path / "cats.tar").read_bytes())[:2] == ["train/0000", "train/0001"]


def test_tarcat_python_example_prints_the_kept_keys(tmp_path: Path) -> None:
    (tmp_path / "data.tar").write_bytes(docs_data())
    blocks = code_blocks("tarcat.md", "### `--where EXPR`")
    (example,) = [b for lang, b in blocks if lang == "python"]
    result = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, capture_output=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().split() == [f"train/{i:04d}" for i in range(51, 150)] + [
        f"val/{i:04d}" for i in range(150, 200)
    ]


def test_error_lines_the_docs_show_are_what_tarcat_prints(data: Path) -> None:
    blocks = code_blocks("tarcat.md", "### `--where EXPR`")
    shown = [b for lang, b in blocks if lang == "" and b.startswith("tarcat: error:")]
    assert shown, "the error block is gone"
    printed = "".join(
        run(["tarcat", "--where", e, str(data)]).stderr
        for e in ("json.height >", "cls = 3", "(cls == 3")
    )
    assert printed == shown[0]


def test_processing_filter_example_runs_as_written(tmp_path: Path) -> None:
    (module,), (command,) = (
        [b for lang, b in code_blocks("processing.md", "## Filtering with `tarkit map --fn`")
         if lang == want] for want in ("python", "bash")
    )  # fmt: skip
    name = module.splitlines()[0].removeprefix("# ")
    (tmp_path / name).write_text(module)
    (tmp_path / "data").mkdir()
    for n in range(4):
        (tmp_path / "data" / f"train-{n:03d}.tar").write_bytes(make_tar(
            (f"{n}{i:03d}.{f}", d) for i in range(10)
            for f, d in (("cls", b"1"), ("json", json.dumps({"height": 150 + 20 * i}).encode()))
        ))  # fmt: skip
    result = run_shell(command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for n in range(4):
        out = (tmp_path / "tall" / f"train-{n:03d}.tar").read_bytes()
        assert keys(out) == [f"{n}{i:03d}" for i in range(3, 10)]
    where = run(["tarcat", "--where", "json.height > 200", *sorted(
        str(p) for p in (tmp_path / "data").iterdir())])  # fmt: skip
    assert keys(where.stdout) == [f"{n}{i:03d}" for n in range(4) for i in range(3, 10)]
