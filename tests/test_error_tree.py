"""tarkit.errors: every tarkit error pickles whole, and CarriedError brings an error back
from another process, a tarkit error as itself and any other as its words and traceback."""

from __future__ import annotations

import inspect
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from tarkit import errors
from tarkit.errors import (
    CarriedError,
    CommandFailed,
    CompressionError,
    EngineError,
    ExpressionError,
    HeaderError,
    InputError,
    MapError,
    NotFound,
    OutputError,
    SampleError,
    ShardFailure,
    SourceError,
    StepFailed,
    TarkitError,
    TruncatedError,
    UsageError,
    WorkerTraceback,
)
from tarkit.processing.commands import Rejection
from tarkit.processing.driver import MapResult

FAILURE = ShardFailure("in.tar", "out.tar", "k", "boom", "Traceback…", attempts=3, final=True)
# One of each class of the tree, every attribute set to something other than its default.
EXAMPLES: list[TarkitError] = [
    TarkitError("plain"),
    InputError("bad", source="a.tar", offset=512, member="k.jpg", reason=InputError.MISMATCH),
    TruncatedError("ends early", source="a.tar", offset=1024),
    HeaderError("bad checksum", source="a.tar", offset=0, member="x"),
    SampleError("duplicate field", source="-", member="k.txt"),
    CompressionError("corrupt gzip", source="a.tar.gz", reason=InputError.TRUNCATED),
    SourceError("s3://b/a.tar: no such object", reason=SourceError.MISSING),
    OutputError("out.tar: no space left"),
    UsageError("--slice: expected integers"),
    ExpressionError("expected a value after '>'", 14, "'x'"),
    EngineError("Ray is not installed"),
    CommandFailed(Rejection("k2", "exit 4", "broken", ("broken",)), "in.tar"),
    FAILURE,
    MapError([FAILURE], MapResult(["out.tar", "other.tar"])),
    NotFound("no sample has the field 'json'"),
    StepFailed("step 3 failed (exit 2): tarcat x.tar"),
]


def whole(value: Any) -> Any:
    """What an error is made of, to compare copies: its class, args and attributes,
    the errors among them taken apart too."""
    if isinstance(value, BaseException):
        return type(value), whole(value.args), whole(vars(value)), str(value)
    if isinstance(value, (list, tuple)):
        return [whole(v) for v in value]
    if isinstance(value, dict):
        return {k: whole(v) for k, v in value.items()}
    return value


def test_every_class_of_the_tree_has_an_example() -> None:
    tree = {c for c in vars(errors).values() if inspect.isclass(c) and issubclass(c, TarkitError)}
    assert tree == {type(e) for e in EXAMPLES}


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_every_tarkit_error_pickles_whole_with_its_class_message_and_attributes(
    error: TarkitError,
) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert whole(back) == whole(error)
    assert getattr(back, "reason", None) == getattr(error, "reason", None)


def _carried(what: str) -> CarriedError:
    """Runs in another process: raises ``what`` and carries it back."""
    try:
        if what == "tarkit":
            raise ExpressionError("unclosed '('", 3)
        raise KeyError("missing field")
    except Exception as exc:
        return CarriedError(exc)


@pytest.fixture(scope="module")
def from_a_worker() -> dict[str, CarriedError]:
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return {
            what: pool.submit(_carried, what).result(timeout=60) for what in ("tarkit", "other")
        }


def test_a_tarkit_error_comes_back_from_a_worker_as_itself(from_a_worker, monkeypatch) -> None:
    monkeypatch.delenv("TARKIT_DEBUG", raising=False)
    raised = from_a_worker["tarkit"].raised(OutputError)
    assert type(raised) is ExpressionError
    assert (raised.what, raised.column, raised.found) == ("unclosed '('", 3, None)
    assert str(raised) == "--where: unclosed '(' at column 3"
    assert raised.__cause__ is None and raised.__suppress_context__  # its message is enough


def test_another_error_comes_back_as_its_words_with_the_workers_traceback_as_cause(
    from_a_worker, monkeypatch
) -> None:
    monkeypatch.delenv("TARKIT_DEBUG", raising=False)
    carried = from_a_worker["other"]
    assert (carried.error, carried.message) == (None, "KeyError: 'missing field'")
    raised = carried.raised(lambda text: InputError(f"item 7: {text}", source="dataset"))
    assert type(raised) is InputError
    assert str(raised) == "dataset: item 7: KeyError: 'missing field'"
    cause = raised.__cause__
    assert isinstance(cause, WorkerTraceback) and str(cause).startswith("in the worker:\n")
    assert "in _carried" in str(cause) and "KeyError: 'missing field'" in str(cause)


def test_under_tarkit_debug_a_tarkit_errors_cause_is_the_workers_traceback(
    from_a_worker, monkeypatch
) -> None:
    monkeypatch.setenv("TARKIT_DEBUG", "1")
    raised = from_a_worker["tarkit"].raised(where="the DataLoader worker")
    cause = raised.__cause__
    assert isinstance(cause, WorkerTraceback)
    assert str(cause).startswith("in the DataLoader worker:\nTraceback (most recent call last)")
    assert "in _carried" in str(cause)
