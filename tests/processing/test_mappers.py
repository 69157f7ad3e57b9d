"""The shard mappers' contracts: what a map function may return, and what makes the outputs."""

from __future__ import annotations

import functools
from pathlib import Path

import map_functions as fns
import pytest

from tarkit.processing.mappers import SampleMapper, ShellCommand, made_by, split_result


@pytest.mark.parametrize(
    "returned, shape",
    [
        ("text", "a str"),
        ([{"__key__": "a"}, 3], "a list holding an int"),
        (([{"__key__": "a"}], [{"__key__": "b"}]), "(list, list)"),
        (([{"__key__": "a"}], [{"n": 1}, {"n": 2}]), "1 sample and 2 rows"),
        ((None, [{"n": 1}]), "0 samples and 1 row"),
        (({"__key__": "a"}, "row"), "(dict, str)"),
    ],
)
def test_a_return_value_that_is_not_samples_is_a_type_error_saying_what_it_is(
    returned: object, shape: str
) -> None:
    with pytest.raises(TypeError) as caught:
        split_result(returned)
    assert str(caught.value) == shape


def test_two_sample_dicts_in_a_tuple_are_two_samples_not_a_sample_and_a_row() -> None:
    a, b = {"__key__": "a"}, {"__key__": "b"}
    assert split_result((a, b)) == ([a, b], None)
    assert split_result((None, {"n": 1})) == ([], {"n": 1})


def test_a_list_of_rows_gives_each_output_sample_its_row_in_order(tmp_path: Path) -> None:
    from conftest import make_tar

    from tarkit import read_samples

    shard = tmp_path / "in.tar"
    shard.write_bytes(make_tar([("k1.txt", b"a b"), ("k2.txt", b"c")]))
    mapped = list(SampleMapper(fns.word_rows).map_shard(read_samples([str(shard)]), "in.tar"))
    assert [([s["__key__"] for s in outputs], row) for outputs, row in mapped] == [
        (["k1/0"], {"key": "k1/0", "word": 0}),
        (["k1/1"], {"key": "k1/1", "word": 1}),
        (["k2/0"], {"key": "k2/0", "word": 0}),
    ]


def test_made_by_names_the_function_or_the_command_and_the_options_that_shape_outputs() -> None:
    assert made_by(SampleMapper(fns.shout)) == {"function": "map_functions:shout"}
    one, other = (SampleMapper(functools.partial(fns.burn, n)) for n in (1, 2))
    assert made_by(one)["function"] == "map_functions:burn"
    assert made_by(one)["arguments"] != made_by(other)["arguments"]
    assert made_by(ShellCommand("gzip sample.txt", parallel=4, quiet=True)) == {
        "command": "gzip sample.txt",
        "options": {"multi": False, "on_error": "fail", "timeout": None},
    }
