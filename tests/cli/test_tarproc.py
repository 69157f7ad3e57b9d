"""tarproc through real pipes: real commands, failure policies, hostile archives, signals."""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import wave
from pathlib import Path

import pytest
from conftest import (
    LONG_KEY,
    LONG_KEY_PROBLEM,
    assert_all_gone,
    assert_gone,
    make_tar,
    run,
    run_shell,
    samples_of,
    tool,
    webdataset_samples,
    write_long_key_archive,
)

from tarkit.errors import InputError
from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members


def archive_of(count: int, fields: tuple[str, ...] = ("txt", "cls")) -> bytes:
    return make_tar(
        (f"s{i:02d}.{field}", f"{field} {i}\n".encode()) for i in range(count) for field in fields
    )


def samples_before_error(data: bytes) -> list[tuple[str, dict[str, bytes]]]:
    """The samples of an archive cut short after whole samples (no end-of-archive marker)."""
    members = []
    try:
        for member in read_members(io.BytesIO(data)):
            members.append(member)
    except InputError as error:
        assert "end-of-archive" in str(error), error
        return [(s.key, s.data()) for s in group_samples(iter(members))]
    raise AssertionError("the archive is complete: expected it cut short")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """TMPDIR pointing at a directory of the test; each test checks it is left empty."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    yield dict(os.environ, TMPDIR=str(tmpdir))
    assert not os.listdir(tmpdir), f"left behind: {os.listdir(tmpdir)}"


# --- real commands ----------------------------------------------------------------------

RESIZE = (
    f"{shlex.quote(sys.executable)} -c 'from PIL import Image; "
    'Image.open("sample.png").resize((8, 6)).save("sample.png")\''
)


def png(width: int, height: int, shade: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (shade, 0, 0)).save(out, format="PNG")
    return out.getvalue()


def test_resizes_every_image_with_pillow_through_a_pipe_and_keeps_the_metadata(
    tmp_path: Path, env: dict[str, str]
) -> None:
    from PIL import Image

    source = tmp_path / "in.tar"
    source.write_bytes(
        make_tar(
            member
            for i in range(6)
            for member in ((f"img{i}.cls", str(i).encode()), (f"img{i}.png", png(40 + i, 30, i)))
        )
    )
    result = run_shell(f"cat {source} | tarproc -p 2 -c {shlex.quote(RESIZE)} | cat > {tmp_path}/out.tar", env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = webdataset_samples(tmp_path / "out.tar")
    assert [key for key, _ in out] == [f"img{i}" for i in range(6)]
    for i, (_, fields) in enumerate(out):
        assert fields["cls"] == str(i).encode()
        image = Image.open(io.BytesIO(fields["png"]))
        assert image.size == (8, 6) and image.getpixel((0, 0)) == (i, 0, 0)


def test_resizes_with_imagemagick_as_in_the_docs(tmp_path: Path, env: dict[str, str]) -> None:
    # bin/setup dev installs ImageMagick (a stand-in `convert` without `identify` is not it).
    assert shutil.which("identify"), "ImageMagick is missing: run bin/setup dev"
    from PIL import Image

    source = tmp_path / "in.tar"
    source.write_bytes(make_tar((f"img{i}.png", png(300 + i, 200, i)) for i in range(3)))
    script = "convert sample.png -resize 64x64^ -gravity center -extent 64x64 sample.png"
    result = run(["tarproc", "-p", "2", "-c", script, str(source)], env=env)
    assert result.returncode == 0, result.stderr
    sizes = [Image.open(io.BytesIO(f["png"])).size for _, f in samples_of(result.stdout)]
    assert sizes == [(64, 64)] * 3


def test_deletes_and_adds_fields_and_gnu_tar_lists_the_output(
    tmp_path: Path, env: dict[str, str]
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(3))
    script = 'rm sample.cls; wc -c < sample.txt > sample.size.txt; echo "$TARKIT_KEY" > sample.key'
    result = run_shell(f"tarproc -c {shlex.quote(script)} < {source} | tar -tvf -", env=env)
    assert result.returncode == 0, result.stderr
    names = [line.split()[-1] for line in result.stdout.decode().splitlines()]
    assert names == [f"s{i:02d}.{f}" for i in range(3) for f in ("key", "size.txt", "txt")]
    assert all(line.startswith("-r--r--r-- 0/0") for line in result.stdout.decode().splitlines())


def test_command_output_goes_to_stderr_and_the_tar_stream_stays_clean(
    tmp_path: Path, env: dict[str, str]
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(2))
    script = 'echo "stdout of $TARKIT_KEY"; echo "stderr of $TARKIT_KEY" >&2'
    result = run(["tarproc", "-c", script, str(source)], env=env)
    assert result.returncode == 0
    assert samples_of(result.stdout) == samples_of(source.read_bytes())
    assert result.stderr.splitlines() == [
        "stdout of s00", "stderr of s00", "stdout of s01", "stderr of s01"
    ]  # fmt: skip
    quiet = run(["tarproc", "-q", "-c", script, str(source)], env=env)
    assert (quiet.returncode, quiet.stderr) == (0, "")
    assert quiet.stdout == result.stdout


def test_multi_splits_audio_into_clips_with_sox(tmp_path: Path, env: dict[str, str]) -> None:
    if shutil.which("sox") is None:
        pytest.skip("sox is not installed (bin/setup dev installs it)")
    audio = io.BytesIO()
    with wave.open(audio, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000)
        w.writeframes(bytes(2 * 8000 * 5 // 2))  # 2.5 s
    source = tmp_path / "in.tar"
    source.write_bytes(make_tar([("talk.json", b'{"lang": "en"}'), ("talk.wav", audio.getvalue())]))
    script = (
        "sox sample.wav sample-.wav trim 0 1 : newfile : restart && "
        'for f in sample-*.wav; do cp sample.json "${f%.wav}.json"; done'
    )
    result = run(["tarproc", "-q", "--multi", "-c", script, str(source)], env=env)
    assert result.returncode == 0, result.stderr
    clips = samples_of(result.stdout)
    assert [key for key, _ in clips] == ["talk/001", "talk/002", "talk/003"]
    seconds = []
    for _, fields in clips:
        assert fields["json"] == b'{"lang": "en"}'
        with wave.open(io.BytesIO(fields["wav"])) as clip:
            seconds.append(clip.getnframes() / clip.getframerate())
    assert seconds == [1.0, 1.0, 0.5]


def test_multi_parts_become_samples_key_slash_part_in_sorted_order(
    tmp_path: Path, env: dict[str, str]
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(2))
    script = "split -l 1 -d -a 2 <(printf 'a\\nb\\nc\\n') part && for p in part*; do mv $p sample-${p#part}.txt; done"
    result = run(["tarproc", "--multi", "-c", script, str(source)], env=env)
    assert result.returncode == 0, result.stderr
    assert samples_of(result.stdout) == [
        (f"s{i:02d}/{p:02d}", {"txt": letter.encode() + b"\n"})
        for i in range(2)
        for p, letter in enumerate("abc")
    ]


# --- order and parallelism --------------------------------------------------------------


def test_four_at_once_keeps_input_order(tmp_path: Path, env: dict[str, str]) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(24))
    script = "n=${TARKIT_KEY#s}; sleep 0.0$(( (24 - 10#$n) % 6 )); echo $n > sample.n"
    ordered = run(["tarproc", "-p", "4", "-c", script, str(source)], env=env)
    assert ordered.returncode == 0, ordered.stderr
    assert [key for key, _ in samples_of(ordered.stdout)] == [f"s{i:02d}" for i in range(24)]


def wait_for(pid_file: Path) -> str:
    """Bash that waits (10 s at most) until another sample's command has written its pid."""
    return f"for i in $(seq 1000); do [ -s {pid_file} ] && break; sleep 0.01; done"


def test_unordered_writes_samples_in_the_order_they_finish(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # s00 ends only once s01 is finished (reaped: gone from /proc), so s01 comes first.
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(2))
    pid = tmp_path / "s01.pid"
    script = f"""case $TARKIT_KEY in
      s00) {wait_for(pid)}
           while [ -e /proc/$(cat {pid}) ]; do sleep 0.01; done;;
      s01) echo $$ > {pid};;
    esac"""
    unordered = run(["tarproc", "-p", "2", "--unordered", "-c", script, str(source)], env=env)
    assert unordered.returncode == 0, unordered.stderr
    assert [key for key, _ in samples_of(unordered.stdout)] == ["s01", "s00"]


# --- failures ---------------------------------------------------------------------------

FAIL_TWO = (
    'case $TARKIT_KEY in s04|s07) echo "cannot read sample.txt" >&2; exit 3;; esac; sleep 0.02'
)


def test_fail_exits_2_naming_key_status_and_stderr_after_the_samples_before_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(10))
    result = run(["tarproc", "-q", "-c", FAIL_TWO, str(source)], env=env)
    assert result.returncode == 2
    assert result.stderr == (
        f"tarproc: error: {source}: sample 's04': command exited with status 3: "
        "cannot read sample.txt\n"
    )
    assert [key for key, _ in samples_before_error(result.stdout)] == ["s00", "s01", "s02", "s03"]
    to_file = run(["tarproc", "-q", "-c", FAIL_TWO, str(source), "-o", f"{tmp_path}/out.tar"], env=env)  # fmt: skip
    assert to_file.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.tar", "tmpdir"]


def test_fail_kills_the_command_of_an_earlier_sample_and_exits_2_at_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # s01 would sleep 30 s; s02 fails as soon as s01 runs and s00 is finished (reaped,
    # gone from /proc): the output is s00 alone, s01's command is killed, no waiting.
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(6))
    first, slow = tmp_path / "s00.pid", tmp_path / "s01.pid"
    script = f"""case $TARKIT_KEY in
      s00) echo $$ > {first};;
      s01) echo $$ > {slow}; sleep 30;;
      s02) {wait_for(first)}; {wait_for(slow)}
           while [ -e /proc/$(cat {first}) ]; do sleep 0.01; done; exit 4;;
    esac"""
    result = run(["tarproc", "-q", "-p", "3", "-c", script, str(source)], env=env, timeout=10)
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr == f"tarproc: error: {source}: sample 's02': command exited with status 4\n"
    )
    assert [key for key, _ in samples_before_error(result.stdout)] == ["s00"]
    assert_gone(int(slow.read_text()))


def test_skip_leaves_failures_out_lists_them_and_exits_1(
    tmp_path: Path, env: dict[str, str]
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(10))
    rejects = tmp_path / "rejects.tsv"
    result = run(["tarproc", "-q", "-p", "3", "--on-error", "skip", "--rejects", str(rejects),
                  "-c", FAIL_TWO, str(source)], env=env)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == (
        f"tarproc: warning: 2 of 10 samples failed their command (left out, listed in {rejects})\n"
    )
    keys = [key for key, _ in samples_of(result.stdout)]
    assert keys == [f"s{i:02d}" for i in range(10) if i not in (4, 7)]
    assert rejects.read_text() == (
        "s04\texit 3\tcannot read sample.txt\ns07\texit 3\tcannot read sample.txt\n"
    )


def test_skip_without_rejects_file_warns_for_each_failed_sample(
    tmp_path: Path, env: dict[str, str]
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(10))
    result = run(["tarproc", "-q", "--on-error", "skip", "-c", FAIL_TWO, str(source)], env=env)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "tarproc: warning: sample 's04' left out: command exited with status 3: cannot read sample.txt",
        "tarproc: warning: sample 's07' left out: command exited with status 3: cannot read sample.txt",
        "tarproc: warning: 2 of 10 samples failed their command (left out)",
    ]
    assert len(samples_of(result.stdout)) == 8


def test_keep_passes_failed_samples_through_unchanged_and_exits_1(
    tmp_path: Path, env: dict[str, str]
) -> None:
    source = tmp_path / "in.tar"
    original = archive_of(10)
    source.write_bytes(original)
    rejects = tmp_path / "rejects.tsv"
    script = "echo changed > sample.txt; " + FAIL_TWO
    result = run(["tarproc", "-q", "-p", "2", "--on-error", "keep", "--rejects", str(rejects),
                  "-c", script, str(source)], env=env)  # fmt: skip
    assert result.returncode == 1
    assert "2 of 10 samples failed their command (kept unchanged" in result.stderr
    out = samples_of(result.stdout)
    assert [key for key, _ in out] == [f"s{i:02d}" for i in range(10)]
    assert [fields["txt"] for _, fields in out] == [
        f"txt {i}\n".encode() if i in (4, 7) else b"changed\n" for i in range(10)
    ]
    # The kept samples are the input's members, byte for byte.
    for sample in group_samples(read_members(io.BytesIO(original))):
        if sample.key in ("s04", "s07"):
            assert sample.raw in result.stdout
    assert len(rejects.read_text().splitlines()) == 2


def test_timeout_fails_a_sample_that_runs_too_long(tmp_path: Path, env: dict[str, str]) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(4))
    rejects = tmp_path / "rejects.tsv"
    script = '[ "$TARKIT_KEY" = s02 ] && sleep 60; true'
    started = time.monotonic()
    result = run(["tarproc", "-p", "2", "--timeout", "0.5", "--on-error", "skip",
                  "--rejects", str(rejects), "-c", script, str(source)], env=env)  # fmt: skip
    assert time.monotonic() - started < 30
    assert result.returncode == 1, result.stderr
    assert [key for key, _ in samples_of(result.stdout)] == ["s00", "s01", "s03"]
    assert rejects.read_text() == "s02\ttimeout\tran longer than 0.5 s (--timeout) and was killed\n"
    failing = run(["tarproc", "--timeout", "0.5", "-c", script, str(source)], env=env)
    assert failing.returncode == 2
    assert (
        "sample 's02': command ran longer than 0.5 s (--timeout) and was killed" in failing.stderr
    )


def test_what_a_timed_out_command_left_in_other_sessions_is_killed_and_misses_the_next_sample(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # s00 starts two processes that leave its session, one of them writing into its
    # directory all the time, then hangs; s01 runs next, in the same slot (-p 1).
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(2))
    pids = tmp_path / "pids"
    script = (
        'if [ "$TARKIT_KEY" = s00 ]; then '
        "setsid bash -c 'while :; do echo leak > sample.leak; sleep 0.02; done' & "
        f"echo $! >> {pids}; (setsid sleep 60 & echo $! >> {pids}); sleep 30; fi; sleep 0.3"
    )
    result = run(["tarproc", "--timeout", "1", "--on-error", "skip", "-c", script,
                  str(source)], env=env)  # fmt: skip
    assert_all_gone(map(int, pids.read_text().split()))
    assert result.returncode == 1, result.stderr
    assert "sample 's00' left out: command ran longer than 1 s" in result.stderr
    assert samples_of(result.stdout) == [("s01", {"cls": b"cls 1\n", "txt": b"txt 1\n"})]


def test_a_tarproc_run_by_a_timed_out_command_loses_its_commands_and_what_they_left(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # The inner tarproc is killed with the outer command's group; its command (a session
    # of its own) and what that left (another) carry both marks, and go too.
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(1))
    pids = tmp_path / "pids"
    inner = f"setsid sleep 30 & echo $$ $! > {pids}.tmp && mv {pids}.tmp {pids}; sleep 30"
    outer = f"TMPDIR=$PWD {tool('tarproc')} -q -c {shlex.quote(inner)} {source} > /dev/null"
    result = run(["tarproc", "--timeout", "2", "--on-error", "skip", "-c", outer,
                  str(source)], env=env)  # fmt: skip
    assert_all_gone(map(int, pids.read_text().split()))
    assert result.returncode == 1, result.stderr
    assert "sample 's00' left out: command ran longer than 2 s" in result.stderr


def test_a_key_too_long_for_the_environment_is_an_input_error_of_its_sample(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # tarcat reads a key of 200 KB; TARKIT_KEY cannot hold it (one environment string
    # is at most 128 KiB), so its sample fails as bad input, which --on-error governs.
    long, problem = LONG_KEY, LONG_KEY_PROBLEM
    source = tmp_path / "in.tar"
    write_long_key_archive(source)
    assert [key for key, _ in samples_of(run(["tarcat", str(source)]).stdout)] == ["a", long, "c"]
    shown = f"'{long[:40]}…{long[:20]}' (200000 bytes)"

    fail = run(["tarproc", "-c", "true", str(source)], env=env)
    assert fail.returncode == 2
    assert fail.stderr.startswith(f"tarproc: error: {source}: sample {shown}: {problem} ")
    assert fail.stderr.endswith(f" bytes) (byte 1024, member {long[:40]}…{long[:16]}.txt)\n")
    assert len(fail.stderr.splitlines()) == 1
    assert samples_before_error(fail.stdout) == [("a", {"txt": b"1"})]

    skip = run(["tarproc", "-c", "true", "--on-error", "skip", str(source)], env=env)
    assert skip.returncode == 1
    assert [key for key, _ in samples_of(skip.stdout)] == ["a", "c"]
    warning, summary = skip.stderr.splitlines()
    assert warning.startswith(f"tarproc: warning: sample {shown} left out: {problem} ")
    assert summary.startswith("tarproc: warning: 1 of 3 sample")

    keep = run(["tarproc", "-c", "true", "--on-error", "keep", str(source)], env=env)
    assert keep.returncode == 1
    assert [key for key, _ in samples_of(keep.stdout)] == ["a", long, "c"]


def test_a_command_killed_by_a_signal_is_a_failure(tmp_path: Path, env: dict[str, str]) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(2))
    result = run(["tarproc", "-c", "kill -SEGV $$", str(source)], env=env)
    assert result.returncode == 2
    assert result.stderr.endswith("sample 's00': command was killed by SIGSEGV\n")


# --- safety -----------------------------------------------------------------------------


def hostile_archive() -> bytes:
    """Traversal and absolute names, links and a device, made by Python's tarfile."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def add(name: str, data: bytes = b"", **attributes: object) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for key, value in attributes.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data))

        add("../../escape.txt", b"up")
        add("/abs/evil.txt", b"absolute")
        add("link.txt", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add("link.txt2", type=tarfile.LNKTYPE, linkname="../../escape.txt")
        add("dir.d", type=tarfile.DIRTYPE)
        add("dev.null", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        add("ok.txt", b"fine")
    return out.getvalue()


def tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def test_hostile_names_and_links_create_nothing_outside_the_temporary_directory(
    tmp_path: Path, env: dict[str, str]
) -> None:
    work = tmp_path / "deep" / "er" / "work"
    work.mkdir(parents=True)
    (work / "in.tar").write_bytes(hostile_archive())
    before = tree(tmp_path)
    script = 'ls -la >&2; for f in sample.*; do cat "$f" > /dev/null; done; echo seen > sample.seen'
    result = run(["tarproc", "-c", script, "in.tar", "-o", "out.tar"], cwd=work, env=env)
    assert result.returncode == 0, result.stderr
    assert tree(tmp_path) - before == {"deep/er/work/out.tar"}
    assert not Path("/abs/evil.txt").exists()
    # Links and the device are skipped (as every tarkit command does), never created.
    assert "skipping symlink member: link.txt" in result.stderr
    assert "skipping hard link member: link.txt2" in result.stderr
    assert "skipping character device member: dev.null" in result.stderr
    out = samples_of((work / "out.tar").read_bytes())
    assert out == [
        ("../../escape", {"seen": b"seen\n", "txt": b"up"}),
        ("/abs/evil", {"seen": b"seen\n", "txt": b"absolute"}),
        ("ok", {"seen": b"seen\n", "txt": b"fine"}),
    ]
    strict = run(["tarproc", "--strict", "-c", "true", "in.tar"], cwd=work, env=env)
    assert strict.returncode == 2
    assert "symlink member is not allowed with --strict" in strict.stderr


@pytest.mark.parametrize(
    "name, why",
    [
        ("x..profile", "starts with '.'"),
        ("x.-rf", "starts with '-'"),
        ("x.a\tb", "contains a control character"),
    ],
)
def test_an_unsafe_field_name_is_refused_naming_the_key_and_nothing_runs(
    tmp_path: Path, env: dict[str, str], name: str, why: str
) -> None:
    marker = tmp_path / "ran"
    source = tmp_path / "in.tar"
    source.write_bytes(make_tar([("first.txt", b"1"), (name, b"2")]))
    result = run(["tarproc", "-c", f"touch {marker}", str(source)], env=env)
    assert result.returncode == 2
    field = name.split(".", 1)[1]
    assert result.stderr.startswith(
        f"tarproc: error: {source}: sample 'x': field name {field!r} {why}"
    )
    assert len(result.stderr.splitlines()) == 1
    # The sample before it ran and went out, as with any input error.
    assert marker.exists()
    assert samples_before_error(result.stdout) == [("first", {"txt": b"1"})]


# --- signals, pipes, temporary directories ----------------------------------------------


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_mid_run_kills_commands_and_leaves_no_temporary_directory(
    tmp_path: Path, env: dict[str, str], signum: signal.Signals, status: int
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(10))
    pids = tmp_path / "pids"
    script = f"echo $$ >> {pids}; sleep 60"
    process = subprocess.Popen(
        [tool("tarproc"), "-p", "2", "-c", script, str(source), "-o", str(tmp_path / "out.tar")],
        env=env, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while (not pids.exists() or len(pids.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == status, stderr
    assert stderr == b""
    for pid in pids.read_text().split():
        assert_gone(int(pid))
    assert not (tmp_path / "out.tar").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.tar")]


def test_a_closed_output_pipe_is_quiet_and_leaves_no_temporary_directory(
    tmp_path: Path, env: dict[str, str]
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(make_tar((f"s{i:03d}.bin", bytes(20000)) for i in range(200)))
    result = run_shell(
        f"tarproc -p 2 -c true {source} | head -c 1000 > /dev/null; echo ${{PIPESTATUS[0]}}",
        env=env,
    )
    assert result.stdout == b"141\n"
    assert result.stderr == ""


def test_keep_dirs_keeps_the_directories_and_says_where(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(2))
    result = run(["tarproc", "--keep-dirs", "-c", "echo x > sample.new", str(source)],
                 env=dict(os.environ, TMPDIR=str(tmp_path)))  # fmt: skip
    assert result.returncode == 0
    line = result.stderr.strip()
    assert line.startswith(f"tarproc: temporary directories kept in {tmp_path}/tarproc-")
    kept = Path(line.rsplit(" ", 1)[1])
    assert sorted(os.listdir(kept / "000001")) == ["sample.cls", "sample.new", "sample.txt"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--on-error", "retry"], "--on-error must be one of fail, skip, keep (got 'retry')"),
        (["--rejects", "r.tsv"], "--rejects goes with --on-error skip or keep"),
        (["--on-error", "skip", "--rejects", "-"], "--rejects needs a file"),
        (["-p", "0"], "-p must be at least 1 (got 0)"),
        (["--timeout", "0"], "the timeout must be positive (got 0.0)"),
    ],
)
def test_bad_options_are_one_line_usage_errors(
    tmp_path: Path, env: dict[str, str], args: list[str], message: str
) -> None:
    result = run(["tarproc", "-c", "true", *args], input=archive_of(1), env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and message in result.stderr


def test_missing_command_is_a_usage_error() -> None:
    result = run(["tarproc"], input=archive_of(1))
    assert result.returncode == 2
    assert result.stderr.startswith("tarproc: error: missing option '-c'")


def test_tarkit_proc_is_tarproc(tmp_path: Path, env: dict[str, str]) -> None:
    result = run(["tarkit", "proc", "-c", "echo hi > sample.hi"], input=archive_of(2), env=env)
    assert result.returncode == 0, result.stderr
    assert [fields["hi"] for _, fields in samples_of(result.stdout)] == [b"hi\n", b"hi\n"]


def test_truncated_input_exits_2_after_the_samples_before_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    whole = archive_of(6)
    members = list(read_members(io.BytesIO(whole)))
    cut = members[8].offset + 520  # inside the data of s04.txt
    result = run(["tarproc", "-p", "3", "-c", "echo x > sample.x"], input=whole[:cut], env=env)
    assert result.returncode == 2
    assert (
        result.stderr.startswith("tarproc: error: <stdin>: input ends inside")
        and len(result.stderr.splitlines()) == 1
    )
    assert [key for key, _ in samples_before_error(result.stdout)] == ["s00", "s01", "s02", "s03"]
    assert all(fields["x"] == b"x\n" for _, fields in samples_before_error(result.stdout))


def test_a_full_tmpdir_is_named_not_the_output(tmp_path: Path, small_disk: Path) -> None:
    # The samples' files go to $TMPDIR, which fills; the output's disk has room.
    (tmp_path / "in.tar").write_bytes(make_tar([("s0.bin", bytes(600_000))]))
    result = run(["tarproc", "-c", "cp sample.bin sample.out", "in.tar", "-o", "out.tar"],
                 cwd=tmp_path, env=dict(os.environ, TMPDIR=str(small_disk)))  # fmt: skip
    assert result.returncode == 2
    assert re.fullmatch(
        "tarproc: error: in.tar: sample 's0': cannot write its files for the command: no space "
        rf"left on the file system of \$TMPDIR \({re.escape(str(small_disk))}, [\d.]+ \w+ free\)\n",
        result.stderr,
    ), result.stderr
    assert not (tmp_path / "out.tar").exists()
    assert [p.name for p in small_disk.iterdir()] == []
