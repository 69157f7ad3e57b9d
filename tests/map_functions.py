"""Map functions for the map_shards tests: importable by worker processes and Ray workers.

Behaviour that must differ between attempts is driven by marker files in a directory
named by ``TARKIT_TEST_MARKS`` (visible to every worker on this machine).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any


def shout(sample: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Upper-case ``txt``; the metadata row has the key and the text's length."""
    text = sample["txt"].decode("utf-8")
    _log_call(sample)
    return (
        {"__key__": sample["__key__"], "txt": text.upper(), "cls": len(text)},
        {"key": sample["__key__"], "length": len(text), "shard": Path(sample["__url__"]).name},
    )


def split_words(sample: dict[str, Any]) -> list[dict[str, Any]] | None:
    """One output sample per word, keys ``KEY/N``; no output for an empty text."""
    words = sample["txt"].decode("utf-8").split()
    if not words:
        return None
    return [{"__key__": f"{sample['__key__']}/{i}", "txt": w} for i, w in enumerate(words)]


def fail_on_bad(sample: dict[str, Any]) -> dict[str, Any]:
    """Raise for a sample whose text is ``bad``, every time."""
    if sample["txt"] == b"bad":
        raise ValueError(f"cannot map {sample['__key__']}")
    return shout(sample)[0]


def fail_once(sample: dict[str, Any]) -> dict[str, Any]:
    """Raise on the first attempt at the first sample of each shard, then succeed."""
    if _first_time(sample, "fail"):
        raise RuntimeError("transient failure")
    return shout(sample)[0]


def die_once(sample: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Kill the worker process itself (SIGKILL) at the first attempt of marked shards.

    A shard is marked when ``<marks>/die-<shard name>`` exists; the mark is consumed.
    """
    mark = _marks() / f"die-{Path(sample['__url__']).name}"
    try:
        mark.unlink()
    except FileNotFoundError:
        return shout(sample)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def exit_once(sample: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Like :func:`die_once` but the worker leaves with ``os._exit(1)``."""
    mark = _marks() / f"die-{Path(sample['__url__']).name}"
    try:
        mark.unlink()
    except FileNotFoundError:
        return shout(sample)
    os._exit(1)


def hang_once(sample: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Like :func:`shout`, but the first attempt at a marked sample hangs (30 s).

    A sample is marked when ``<marks>/hang-<key>`` exists; the mark is consumed and the
    worker's process id written to ``<marks>/hanging`` for the test to kill it.
    """
    mark = _marks() / f"hang-{sample['__key__']}"
    try:
        mark.unlink()
    except FileNotFoundError:
        return shout(sample)
    (_marks() / "hanging.tmp").write_text(str(os.getpid()))
    os.replace(_marks() / "hanging.tmp", _marks() / "hanging")
    time.sleep(30)
    raise AssertionError("the worker was not killed")


def where(sample: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Like :func:`shout`, and the row names the Ray node and the process that ran it."""
    import ray

    time.sleep(0.05)  # long enough that both nodes get shards
    out, row = shout(sample)
    row["node"] = ray.get_runtime_context().get_node_id()
    row["pid"] = os.getpid()
    return out, row


def slow(sample: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Like :func:`shout`, slowly: long enough to interrupt a run in the middle."""
    time.sleep(float(os.environ.get("TARKIT_TEST_DELAY", "0.3")))
    return shout(sample)


def burn(sample: dict[str, Any]) -> dict[str, Any]:
    """CPU-bound work: hash the text many times."""
    import hashlib

    data = sample["txt"]
    for _ in range(int(os.environ.get("TARKIT_TEST_ROUNDS", "20000"))):
        data = hashlib.sha256(data).digest()
    return {"__key__": sample["__key__"], "txt": data.hex()}


def as_image(sample: dict[str, Any]) -> dict[str, Any]:
    """A PIL image out (encoded by field extension): a grey square of the text's length."""
    from PIL import Image

    size = 4 + len(sample["txt"])
    return {"__key__": sample["__key__"], "png": Image.new("L", (size, size), 128)}


def json_meta(sample: dict[str, Any]) -> tuple[None, dict[str, Any]]:
    """No output sample; a metadata row with awkward characters."""
    return None, {"key": sample["__key__"], "text": sample["txt"].decode() + "\tand\nmore"}


SHARDS, PER_SHARD = 4, 5


def write_inputs(directory: Path, shards: int = SHARDS, per_shard: int = PER_SHARD) -> str:
    """Input shards in-0.tar…: sample ``s<S>-<II>`` has a text of II+1 words and a cls.

    Returns the brace pattern of the inputs.
    """
    from conftest import make_tar

    directory.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        members = []
        for i in range(per_shard):
            key = f"s{s}-{i:02d}"
            members += [(f"{key}.txt", " ".join(["word"] * (i + 1)).encode())]
            members += [(f"{key}.cls", str(i).encode())]
        (directory / f"in-{s}.tar").write_bytes(make_tar(members))
    return str(directory / f"in-{{0..{shards - 1}}}.tar")


def text_only(sample: dict[str, Any]) -> str:
    """Wrong: returns the text instead of a sample."""
    return sample["txt"].decode()


def word_rows(sample: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One output sample per word, keys ``KEY/N``, each with its metadata row."""
    key = sample["__key__"]
    words = sample["txt"].decode("utf-8").split()
    samples = [{"__key__": f"{key}/{i}", "txt": f"{word}{i}"} for i, word in enumerate(words)]
    return samples, [{"key": f"{key}/{i}", "word": i} for i in range(len(words))]


def rows_short(sample: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Wrong: two output samples and a list of one metadata row."""
    key = sample["__key__"]
    return [{"__key__": f"{key}/0", "txt": "a"}, {"__key__": f"{key}/1", "txt": "b"}], [{"k": key}]


def _marks() -> Path:
    return Path(os.environ["TARKIT_TEST_MARKS"])


def _first_time(sample: dict[str, Any], what: str) -> bool:
    """True once per shard (atomically, across processes), via an exclusive create."""
    mark = _marks() / f"{what}-{Path(sample['__url__']).name}"
    try:
        with open(mark, "x"):
            return True
    except FileExistsError:
        return False


def _log_call(sample: dict[str, Any]) -> None:
    """Append ``shard key`` to ``<marks>/calls`` when marks are set (O_APPEND lines)."""
    marks = os.environ.get("TARKIT_TEST_MARKS")
    if marks:
        line = f"{Path(sample['__url__']).name} {sample['__key__']}\n".encode()
        fd = os.open(os.path.join(marks, "calls"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def calls(marks: Path) -> list[tuple[str, str]]:
    """The (shard name, key) of every call :func:`shout` logged."""
    path = Path(marks) / "calls"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [(shard, key) for shard, key in (line.split(" ", 1) for line in lines)]


def rows_of(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON Lines file."""
    return [json.loads(line) for line in open(path, encoding="utf-8")]
