"""tarsplit --overwrite commits a set whole, and --resume keeps only shards the input holds.

An overwrite of 16 one-sample shards by 12 others is stopped in its commit (paused once
the first new shard has its name, ``conftest.paused_commit_env``, signalled, then let go
on): Ctrl-C and SIGTERM give the whole new set; ``kill -9`` or Ctrl-C twice leave a
journal that the next run finishes (``tests/storage/test_commit.py``: whatever its mode),
and that the loader and every other reader refuse to read past meanwhile. ``--resume``
with another input is an error. A journal that someone else wrote is refused whole by
every writer, and an overwrite removes the old set's manifest even when it writes none.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import make_tar, paused_commit_env, run, tool
from random_access import check_random_access

from tarkit import ShardDataset, ShardWriter, read_samples
from tarkit.errors import SourceError

OLD = make_tar((f"o{i:03d}.txt", f"old {i}".encode()) for i in range(16))
NEW = make_tar((f"n{i:03d}.txt", f"new sample {i}".encode()) for i in range(12))
SPLIT = ["-c", "1", "-o", "out/s-%03d.tar", "--manifest", "out/manifest.json"]


def files(directory: Path) -> dict[str, bytes]:
    """Every file in ``directory``, hidden ones included (name → bytes)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    """The whole old set and the whole new set, each written by an uninterrupted run."""
    made = {}
    for name, archive in (("old", OLD), ("new", NEW)):
        where = tmp_path_factory.mktemp(name)
        assert run(["tarsplit", *SPLIT], input=archive, cwd=where).returncode == 0
        made[name] = files(where / "out")
    # the shards, their indexes and the manifest (its JSON and its columns)
    assert len(made["old"]) == 34 and len(made["new"]) == 26
    return made


def overwrite_stopped_in_commit(tmp_path: Path, first_new: bytes, *signals: int) -> int:
    """Write the old set, then overwrite it with the new one, and send ``signals`` once
    the first new shard has its name, then let the commit go on; the overwrite's exit
    status."""
    (tmp_path / "new.tar").write_bytes(NEW)
    assert run(["tarsplit", *SPLIT], input=OLD, cwd=tmp_path).returncode == 0
    process = subprocess.Popen(
        [tool("tarsplit"), "new.tar", *SPLIT, "--overwrite"], cwd=tmp_path,
        env=paused_commit_env(tmp_path / "go"), stderr=subprocess.PIPE,
    )  # fmt: skip
    first = tmp_path / "out" / "s-000.tar"
    deadline = time.monotonic() + 60
    while first.read_bytes() != first_new and process.poll() is None:
        assert time.monotonic() < deadline, "the commit never began"
        time.sleep(0.005)
    assert process.poll() is None, "the run ended before it could be stopped"
    for how in signals:
        process.send_signal(how)
        time.sleep(0.05)  # the signal arrives while the commit is paused
    (tmp_path / "go").touch()
    _, stderr = process.communicate(timeout=60)
    assert b"Traceback" not in stderr, stderr.decode()
    return process.returncode


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_ctrl_c_or_sigterm_in_an_overwrites_commit_leaves_the_whole_new_set(
    tmp_path: Path, sets: dict[str, dict[str, bytes]], how: int
) -> None:
    status = overwrite_stopped_in_commit(tmp_path, sets["new"]["s-000.tar"], how)
    assert status == (130 if how == signal.SIGINT else 143)
    assert files(tmp_path / "out") == sets["new"]  # no pending shard, no journal either


@pytest.mark.parametrize(
    ("signals", "status"),
    [((signal.SIGKILL,), -signal.SIGKILL), ((signal.SIGINT, signal.SIGINT), 130)],
    ids=["kill-9", "ctrl-c-twice"],
)
def test_a_commit_killed_midway_is_refused_by_the_loader_and_finished_by_resume(
    tmp_path: Path, sets: dict[str, dict[str, bytes]], signals: tuple[int, ...], status: int
) -> None:
    assert overwrite_stopped_in_commit(tmp_path, sets["new"]["s-000.tar"], *signals) == status
    out = tmp_path / "out"
    shown = {n: d for n, d in files(out).items() if not n.startswith(".")}
    assert shown != sets["new"] and shown != sets["old"]  # stopped midway: a mix on disk
    with pytest.raises(SourceError, match="a mix of two runs: run the writer again"):
        ShardDataset(str(out))
    if signals == (signal.SIGKILL,):  # every reader of the files refuses them too
        journal = out / ".s-%03d.tar.commit.json"
        mix = f"part of a set whose commit was stopped midway ({journal}), so the files there"
        for tool_name, *args in (("tarcat", "out/s-001.tar"), ("tarindex", "out/s-{001..011}.tar"),
                                 ("tarkit map", "-c", "true", "out/s-001.tar", "-o", "other/")):  # fmt: skip
            refused = run([*tool_name.split(), *args], cwd=tmp_path)
            assert (refused.returncode, refused.stdout) == (2, b""), refused.stderr
            assert refused.stderr.startswith(f"{tool_name}: error: out/s-001.tar: {mix}")
        checked = run(["tarkit", "verify", "out/s-{000..011}.tar"], cwd=tmp_path)
        assert checked.returncode == 2
        assert f"out/s-001.tar: FAILED: {mix}" in checked.stdout.decode()
    resumed = run(["tarsplit", "new.tar", *SPLIT, "--resume"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr == (
        "tarsplit: warning: finished the commit of an earlier overwrite into out/s-%03d.tar "
        "that was stopped midway (out/.s-%03d.tar.commit.json): its new set is in place\n"
    )
    assert files(out) == sets["new"]  # each shard with its own index: none of the old set's
    assert check_random_access(out / "manifest.json").samples == 12


def test_resume_with_a_shorter_input_is_a_usage_error_naming_the_shard(tmp_path: Path) -> None:
    # 20 kept shards of 10 samples (a run stopped by a truncated input), then 50 samples
    first = make_tar((f"k{i:03d}.txt", b"x") for i in range(220))
    split = ["-c", "10", "-o", "out/s-%03d.tar", "--manifest", "out/manifest.json"]
    assert run(["tarsplit", *split], input=first[: 202 * 1024], cwd=tmp_path).returncode == 2
    before = files(tmp_path / "out")
    assert len(before) == 40  # 20 shards and their indexes
    shorter = first[: 50 * 1024] + bytes(1024)
    result = run(["tarsplit", *split, "--resume"], input=shorter, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        "tarsplit: error: out/s-005.tar: the input is not the one this kept shard was written "
        "from: it holds 10 samples, keys 'k050' to 'k059', the input ends after 50 samples. "
        "--resume (mode='resume') continues a run with the same input; pass --overwrite "
        "(mode='overwrite') to write the set anew from this input\n"
    )
    assert files(tmp_path / "out") == before  # nothing written, no manifest


def test_resume_with_a_total_skips_the_kept_samples(tmp_path: Path) -> None:
    archive = make_tar((f"k{i:03d}.txt", b"x") for i in range(10))
    (tmp_path / "in.tar").write_bytes(archive)
    split = ["-c", "2", "-o", "out/s-%03d.tar"]
    assert run(["tarsplit", *split], input=archive[: 5 * 1024], cwd=tmp_path).returncode == 2
    result = run(["tarsplit", *split, "--resume", "--total", "10", "in.tar"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with ShardWriter(str(tmp_path / "clean" / "s-%03d.tar"), maxcount=2) as writer:
        writer.write_all(read_samples([str(tmp_path / "in.tar")]))
    assert files(tmp_path / "out") == files(tmp_path / "clean")


def hostile_journal(tmp_path: Path, kind: str) -> Path:
    """An output directory holding a journal someone else wrote (``kind`` says what it
    does), a link to a directory outside, and a file of the user's; the journal."""
    out, victim = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    (out / "home").symlink_to(victim)
    (out / "notes.txt").write_text("mine")
    (out / ".notes.txt.pending").write_text("theirs")
    manifest = '{"format": "tarkit-manifest", "version": 1, "shards": [{"url": "s-000.tar", '
    manifest += '"samples": 1, "bytes": 1024}]}'
    entries: dict[str, object] = {"moves": [], "remove": [], "manifest": None}
    if kind == "a removal through a link":  # the reviewer's: rm ~/keep.txt, write ~/evil.sh
        entries.update(remove=["home/keep.txt"], manifest=["home/evil.sh", "echo pwned"])
    elif kind == "a removal of a file of the user's":
        entries["remove"] = ["notes.txt"]
    elif kind == "a manifest over a file of the user's":
        entries["manifest"] = ["notes.txt", manifest]
    elif kind == "a move onto a file of the user's":
        entries["moves"] = [[".notes.txt.pending", "notes.txt", 6]]
    else:  # a shard's name given to a file that is not its staged copy
        entries["moves"] = [["notes.txt", "s-000.tar", 4]]
    journal = out / ".s-%03d.tar.commit.json"
    journal.write_text(json.dumps({"format": "tarkit-commit", "version": 1, **entries}))
    return journal


@pytest.mark.parametrize(
    "kind",
    ["a removal through a link", "a removal of a file of the user's",
     "a manifest over a file of the user's", "a move onto a file of the user's",
     "a shard from a file that is not its staged copy"],
)  # fmt: skip
def test_a_journal_someone_else_wrote_is_refused_whole_and_touches_nothing(
    tmp_path: Path, kind: str
) -> None:
    journal = hostile_journal(tmp_path, kind)
    before = {p: p.read_bytes() for p in [*(tmp_path / "out").iterdir(), tmp_path / "victim" / "keep.txt"]
              if p.is_file()}  # fmt: skip
    result = run(["tarsplit", "-c", "1", "-o", "out/s-%03d.tar"], input=NEW, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"tarsplit: error: out/{journal.name}: not followed: it")
    assert result.stderr.endswith(", which the commit of these files never does. Someone else "
                                  "wrote this journal? Remove it by hand (after a look at what "
                                  "it names)\n")  # fmt: skip
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in (tmp_path / "victim").iterdir()) == ["keep.txt"]
    assert not list((tmp_path / "out").glob("s-*.tar"))


@pytest.mark.parametrize(
    "writer",
    [["tarsplit", "-c", "1", "-o", "out/s-%03d.tar", "--overwrite"],
     ["tarsplit", "-c", "1", "-o", "out/s-%03d.tar", "--resume"],
     ["tarkit", "shard", "files/", "-c", "1", "-o", "out/s-%03d.tar"]],
    ids=["overwrite", "resume", "tarkit shard"],
)  # fmt: skip
def test_every_writer_in_every_mode_refuses_a_journal_someone_else_wrote(
    tmp_path: Path, writer: list[str]
) -> None:
    hostile_journal(tmp_path, "a removal through a link")
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.txt").write_text("a")
    result = run(writer, input=NEW, cwd=tmp_path)
    assert result.returncode == 2
    assert ": error: out/.s-%03d.tar.commit.json: not followed: it removes " in result.stderr
    assert (tmp_path / "victim" / "keep.txt").read_text() == "keep"
    assert not (tmp_path / "victim" / "evil.sh").exists()


def test_an_overwrite_without_a_manifest_removes_the_manifest_of_the_old_set(
    tmp_path: Path, sets: dict[str, dict[str, bytes]]
) -> None:
    assert run(["tarsplit", *SPLIT], input=OLD, cwd=tmp_path).returncode == 0
    out = tmp_path / "out"
    assert (out / "manifest.columns").exists()  # (version 2: its columns file beside it)
    listed = [
        {"url": url, "samples": 1, "bytes": 1024} for url in ("s-000.tar", "../elsewhere.tar")
    ]
    mixed = {"format": "tarkit-manifest", "version": 1, "shards": listed}
    (out / "other.json").write_text(json.dumps(mixed))  # lists more than the set: stays
    (out / "notes.json").write_text("{}")
    result = run(["tarsplit", "-c", "1", "-o", "out/s-%03d.tar", "--overwrite"], input=NEW,
                 cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    shown = {name: data for name, data in files(out).items() if name.endswith(".tar")}
    assert shown == {n: d for n, d in sets["new"].items() if n.endswith(".tar")}
    assert sorted(name for name in files(out) if name.endswith(".json")) == [
        "notes.json", "other.json"
    ]  # fmt: skip
    assert not (out / "manifest.columns").exists()  # gone with its manifest
    assert len(list(ShardDataset(str(out)))) == 12  # the new set, with no stale manifest
