"""tarcat --interleave, --mix and -p through real pipes, on archives made by GNU tar."""

from __future__ import annotations

import io
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import make_tar, run, run_shell, tool

from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members
from tarkit.stream.combining import MixSchedule, preview_seed


def keys_of(data: bytes) -> list[str]:
    return [s.key for s in group_samples(read_members(io.BytesIO(data)))]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three archives made by GNU tar: a (4 samples), b (2), c (3), two fields each."""
    base = tmp_path_factory.mktemp("shards")
    paths = []
    for name, count in (("a", 4), ("b", 2), ("c", 3)):
        tree = base / name
        tree.mkdir()
        for i in range(count):
            (tree / f"{name}{i}.txt").write_text(f"{name} {i}")
            (tree / f"{name}{i}.cls").write_text(str(i))
        path = base / f"{name}.tar"
        subprocess.run(
            ["tar", "--sort=name", "--format=gnu", "-cf", str(path), "-C", str(tree), "."],
            check=True,
        )
        paths.append(path)
    return paths


def test_interleave_takes_one_sample_from_each_input_in_turn(shards: list[Path]) -> None:
    result = run(["tarcat", "--interleave", *map(str, shards)])
    assert (result.returncode, result.stderr) == (0, "")
    assert keys_of(result.stdout) == ["./a0", "./b0", "./c0", "./a1", "./b1", "./c1", "./a2",
                                      "./c2", "./a3"]  # fmt: skip
    # Members are GNU tar's, byte for byte.
    members = {m.raw for p in shards for m in read_members(io.BytesIO(p.read_bytes()))}
    assert {m.raw for m in read_members(io.BytesIO(result.stdout))} <= members


def test_mix_is_deterministic_for_a_seed_and_stops_when_an_input_runs_out(tmp_path: Path) -> None:
    for name in ("x", "y"):
        (tmp_path / f"{name}.tar").write_bytes(
            make_tar((f"{name}{i:03d}.txt", b"%d" % i) for i in range(300))
        )
    inputs = [str(tmp_path / "x.tar"), str(tmp_path / "y.tar")]

    def mixed(*args: str) -> bytes:
        result = run(["tarcat", *inputs, *args])
        assert (result.returncode, result.stderr) == (0, "")
        return result.stdout

    first = mixed("--mix", "4,1", "--seed", "11")
    assert first == mixed("--mix", "4,1", "--seed", "11")
    assert first != mixed("--mix", "4,1", "--seed", "12")
    counts = Counter(k[0] for k in keys_of(first))
    length = MixSchedule([4, 1], seed=preview_seed(11)).length([300, 300])
    assert (counts["x"], counts["y"]) == (300, length - 300)  # the loader's rule
    every = keys_of(mixed("--mix", "4,1", "--seed", "11", "--until-all"))
    assert sorted(every) == sorted(
        [f"x{i:03d}" for i in range(300)] + [f"y{i:03d}" for i in range(300)]
    )
    assert keys_of(mixed("--mix", "1,1", "-c", "10")) == keys_of(mixed("--mix", "1,1"))[:10]


def test_mix_through_a_pipe_of_pipe_inputs(shards: list[Path]) -> None:
    a, b, _ = shards
    result = run_shell(
        f"tarcat --mix 1,1 --seed 2 --until-all 'pipe:cat {a}' - < {b} | tarcat | tar -tf - | wc -l"
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.strip() == b"12"


@pytest.fixture
def numbered_alike(tmp_path: Path) -> Path:
    """Inputs whose keys collide: x and y number their samples 000000…000002, z 000002…;
    x1 and y1 hold one sample 000000 each. Two members per sample: 2048 bytes."""

    def write(name: str, numbers: range) -> None:
        (tmp_path / f"{name}.tar").write_bytes(make_tar(
            (f"{i:06d}.{field}", f"{name} {i}".encode()) for i in numbers for field in ("cls", "txt")
        ))  # fmt: skip

    for name, numbers in (("x", range(3)), ("y", range(3)), ("z", range(2, 5))):
        write(name, numbers)
    write("x1", range(1))
    write("y1", range(1))
    return tmp_path


@pytest.mark.parametrize(
    "args, written, key, source, origin",
    [
        (["--interleave", "x.tar", "y.tar"], ("x", 1), "000000", "y.tar", "x.tar"),
        (["x.tar", "z.tar"], ("x", 3), "000002", "z.tar", "x.tar"),
        (
            ["--mix", "1,1", "--until-all", "x1.tar", "y1.tar"],
            ("x1", 1),
            "000000",
            "y1.tar",
            "x1.tar",
        ),
        (["--shuffle", "2", "x1.tar", "y1.tar"], ("x1", 1), "000000", "y1.tar", "x1.tar"),
    ],
    ids=["interleave", "concatenate", "mix", "shuffle"],
)
def test_two_adjacent_samples_with_one_key_exit_2_after_the_whole_samples_before(
    numbered_alike: Path,
    args: list[str],
    written: tuple[str, int],
    key: str,
    source: str,
    origin: str,
) -> None:
    result = run(["tarcat", *args], cwd=numbered_alike)
    assert result.returncode == 2
    assert result.stderr == (
        f"tarcat: error: {source}: sample {key!r} follows a sample with the same key (from "
        f"{origin}), and readers would merge the two: keys must be unique across inputs that "
        "are concatenated or mixed (give each input's keys a prefix of its own, e.g. with "
        f"tarkit map) (byte 0, member {key}.cls)\n"
    )
    # Whole samples, and no end-of-archive marker: the next reader fails too.
    name, count = written
    assert result.stdout == (numbered_alike / f"{name}.tar").read_bytes()[: count * 2048]


def test_same_key_error_crosses_a_pipe_and_leaves_no_output_file(numbered_alike: Path) -> None:
    result = run_shell(
        "tarcat --interleave x.tar y.tar | tarcat -o out.tar; echo ${PIPESTATUS[@]}",
        cwd=numbered_alike,
    )
    assert result.stdout == b"2 2\n"
    first, second = result.stderr.splitlines()
    assert first.startswith("tarcat: error: y.tar: sample '000000' follows a sample with")
    assert second.startswith("tarcat: error: <stdin>: input ends without the end-of-archive")
    assert not (numbered_alike / "out.tar").exists()


def test_a_key_that_comes_again_after_other_keys_is_written(numbered_alike: Path) -> None:
    result = run(["tarcat", "x.tar", "y.tar"], cwd=numbered_alike)
    assert (result.returncode, result.stderr) == (0, "")
    x, y = ((numbered_alike / f"{n}.tar").read_bytes() for n in "xy")
    assert result.stdout == x[:-1024] + y


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mix", "1,1"], "--mix has 2 weights for 3 inputs"),
        (["--mix", "1,0,1"], "--mix '1,0,1': every weight must be a positive number"),
        (["--interleave", "--mix", "1,1,1"], "--interleave and --mix exclude each other"),
        (["--until-all"], "--until-all needs --mix"),
        (
            ["-p", "2", "--interleave"],
            "-p reads inputs ahead in order: it does not combine with --interleave or --mix",
        ),
        (["-p", "0"], "-p must be at least 1 (got 0)"),
    ],
)
def test_contradicting_options_exit_2_with_one_line(
    shards: list[Path], args: list[str], message: str
) -> None:
    result = run(["tarcat", *args, *map(str, shards)])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr == f"tarcat: error: {message}\n"


def test_parallel_reading_gives_the_sequential_bytes(shards: list[Path], tmp_path: Path) -> None:
    # Later inputs come faster than earlier ones.
    inputs = [f"pipe:sleep 0.{3 - n}; cat {p}" for n, p in enumerate(shards)] * 3
    sequential = run(["tarcat", *inputs])
    parallel = run(["tarcat", "-p", "4", *inputs])
    assert sequential.returncode == parallel.returncode == 0
    assert parallel.stdout == sequential.stdout
    assert len(list(read_members(io.BytesIO(parallel.stdout)))) == 9 * 2 * 3


def test_parallel_reading_opens_n_inputs_at_once(shards: list[Path], tmp_path: Path) -> None:
    log, go = tmp_path / "started", tmp_path / "go"
    inputs = [
        f"pipe:echo {n} >> {log}; while [ ! -e {go} ]; do sleep 0.02; done; cat {shards[0]}"
        for n in range(5)
    ]
    process = subprocess.Popen(
        [tool("tarcat"), "-p", "3", *inputs], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            not log.exists() or len(log.read_text().split()) < 3
        ):
            time.sleep(0.02)
        time.sleep(0.2)  # a fourth would have started by now if -p 3 were not kept
        assert sorted(log.read_text().split()) == ["0", "1", "2"]
        go.touch()
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert (process.returncode, err) == (0, b"")
    assert len(list(read_members(io.BytesIO(out)))) == 5 * 4 * 2


def test_parallel_reading_keeps_the_error_where_the_sequential_run_meets_it(
    shards: list[Path], tmp_path: Path
) -> None:
    a, b, c = shards
    cut = tmp_path / "cut.tar"
    cut.write_bytes(b.read_bytes()[:4200])  # cut inside the data of its fourth member
    inputs = [f"pipe:sleep 0.3; cat {a}", str(cut), str(c), "pipe:exit 3"]
    sequential = run(["tarcat", *inputs])
    parallel = run(["tarcat", "-p", "4", *inputs])
    assert sequential.returncode == parallel.returncode == 2
    assert parallel.stderr == sequential.stderr
    assert parallel.stderr.startswith(f"tarcat: error: {cut}: ")
    assert parallel.stdout == sequential.stdout
    assert keys_of(parallel.stdout + bytes(1024))[:4] == ["./a0", "./a1", "./a2", "./a3"]
    failing = run(["tarcat", "-p", "2", str(a), "pipe:exit 3", str(c)])
    assert failing.returncode == 2
    assert failing.stderr == "tarcat: error: pipe:exit 3: command exited with status 3\n"
    assert keys_of(failing.stdout + bytes(1024)) == ["./a0", "./a1", "./a2", "./a3"]


def test_parallel_reading_stops_early_with_count(shards: list[Path]) -> None:
    # Inputs read ahead are stopped too ("exec": a shell's child would outlive it).
    inputs = [str(p) for p in shards] + ["pipe:exec sleep 30"] * 4
    result = run(["tarcat", "-p", "4", "-c", "5", *inputs], timeout=20)
    assert (result.returncode, result.stderr) == (0, "")
    assert keys_of(result.stdout) == ["./a0", "./a1", "./a2", "./a3", "./b0"]
