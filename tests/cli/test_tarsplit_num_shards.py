"""tarsplit --num-shards N --total N|MANIFEST: exactly N shards of equal counts, the
total checked against the stream."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_tar, run, samples_of

from tarkit.storage import load_table


def numbered(count: int, first: int = 0) -> bytes:
    return make_tar(
        (f"{i:04d}.{field}", f"{field} {i}".encode())
        for i in range(first, first + count)
        for field in ("cls", "txt")
    )


def shard_counts(directory: Path) -> list[int]:
    return [len(samples_of(p.read_bytes())) for p in sorted(directory.glob("s-*.tar"))]


def test_num_shards_cuts_exactly_n_shards_larger_first_in_input_order(tmp_path: Path) -> None:
    result = run(["tarsplit", "--num-shards", "4", "--total", "10", "-o", "out/s-%d.tar",
                  "--manifest", "out/m.json"], input=numbered(10), cwd=tmp_path)  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    assert shard_counts(tmp_path / "out") == [3, 3, 2, 2]
    keys = [
        k for p in sorted((tmp_path / "out").glob("s-*.tar")) for k, _ in samples_of(p.read_bytes())
    ]
    assert keys == [f"{i:04d}" for i in range(10)]
    assert [s.samples for s in load_table(str(tmp_path / "out" / "m.json"))] == [3, 3, 2, 2]


def test_the_total_can_come_from_a_manifest_of_the_inputs(tmp_path: Path) -> None:
    (tmp_path / "a.tar").write_bytes(numbered(7))
    (tmp_path / "b.tar").write_bytes(numbered(6, first=7))
    index = run(["tarindex", "a.tar", "b.tar", "-o", "in.json"], cwd=tmp_path)
    assert index.returncode == 0, index.stderr
    result = run(["tarsplit", "a.tar", "b.tar", "--num-shards", "3", "--total", "in.json",
                  "-o", "out/s-%d.tar"], cwd=tmp_path)  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    assert shard_counts(tmp_path / "out") == [5, 4, 4]


def test_num_shards_without_a_total_is_refused_before_reading(tmp_path: Path) -> None:
    result = run(["tarsplit", "--num-shards", "4", "-o", "out/s-%d.tar"], input=numbered(10),
                 cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        "tarsplit: error: --num-shards needs --total N or --total MANIFEST: a stream cannot "
        "be cut into equal shards before its length is known\n"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option", [["-c", "5"], ["-s", "1M"]])
def test_num_shards_with_a_count_or_size_limit_is_refused(
    tmp_path: Path, option: list[str]
) -> None:
    result = run(["tarsplit", "--num-shards", "2", "--total", "10", *option], input=numbered(10),
                 cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        f"tarsplit: error: --num-shards sets the shards' counts: leave out {option[0]}\n"
    )


def test_more_shards_than_samples_is_refused(tmp_path: Path) -> None:
    result = run(["tarsplit", "--num-shards", "5", "--total", "3"], input=numbered(3), cwd=tmp_path)
    assert result.returncode == 2
    assert "3 samples cannot fill 5 shards (no shard is ever left empty)" in result.stderr


@pytest.mark.parametrize(
    "samples,message",
    [
        (12, "tarsplit: error: <stdin>: more than the 10 samples given as the total\n"),
        (8, "tarsplit: error: <stdin>: 8 samples, not the 10 given as the total\n"),
    ],
)
def test_a_stream_of_another_length_fails_keeping_only_complete_shards(
    tmp_path: Path, samples: int, message: str
) -> None:
    result = run(["tarsplit", "--num-shards", "2", "--total", "10", "-o", "out/s-%d.tar",
                  "--manifest", "out/m.json"], input=numbered(samples), cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.endswith(message)
    # The first shard (5 samples) was complete; the second is removed, no manifest.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["s-0.tar", "s-0.tar.idx"]
    assert shard_counts(tmp_path / "out") == [5]


def test_a_total_alone_is_checked_and_shards_are_cut_as_usual(tmp_path: Path) -> None:
    good = run(["tarsplit", "--total", "10", "-c", "4", "-o", "out/s-%d.tar"],
               input=numbered(10), cwd=tmp_path)  # fmt: skip
    assert (good.returncode, good.stderr) == (0, "")
    assert shard_counts(tmp_path / "out") == [4, 4, 2]
    bad = run(["tarsplit", "--total", "11", "-o", "bad/s-%d.tar"], input=numbered(10),
              cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.endswith("<stdin>: 10 samples, not the 11 given as the total\n")


@pytest.mark.parametrize("total", ["-3", "nowhere.json"])
def test_a_bad_total_is_an_error_of_one_line(tmp_path: Path, total: str) -> None:
    result = run(["tarsplit", "--num-shards", "2", "--total", total], input=numbered(4),
                 cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("tarsplit: error: ") and result.stderr.count("\n") == 1
