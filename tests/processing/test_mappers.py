"""The shard mappers' contracts: what a map function may return, and what makes the outputs."""

from __future__ import annotations

import functools

import map_functions as fns
import pytest

from tarkit.processing.mappers import SampleMapper, ShellCommand, made_by, split_result


@pytest.mark.parametrize(
    "returned, shape",
    [
        ("text", "a str"),
        ([{"__key__": "a"}, 3], "a list holding an int"),
        (([{"__key__": "a"}], [{"n": 1}]), "(list, list)"),
        (({"__key__": "a"}, "row"), "(dict, str)"),
        ((None, [{"n": 1}]), "(NoneType, list)"),
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


def test_made_by_names_the_function_or_the_command_and_the_options_that_shape_outputs() -> None:
    assert made_by(SampleMapper(fns.shout)) == {"function": "map_functions:shout"}
    one, other = (SampleMapper(functools.partial(fns.burn, n)) for n in (1, 2))
    assert made_by(one)["function"] == "map_functions:burn"
    assert made_by(one)["arguments"] != made_by(other)["arguments"]
    assert made_by(ShellCommand("gzip sample.txt", parallel=4, quiet=True)) == {
        "command": "gzip sample.txt",
        "options": {"multi": False, "on_error": "fail", "timeout": None},
    }
