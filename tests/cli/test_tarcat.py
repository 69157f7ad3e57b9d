"""tarcat through real pipes: peer shards, GNU tar and bsdtar archives, every option.

Also checks that every tar-reading command present reads the webdataset peer shards.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, ROOT, make_tar, run, run_shell, webdataset_samples
from tarfiles import COMPRESSIONS, END, expected_samples, make_archive, wide_members

from tarkit.format.compression import open_decompressed
from tarkit.format.samples import group_samples
from tarkit.format.tar import FILE, read_members

PEER_SHARDS = sorted(
    p for p in (DATA / "peer-shards").iterdir() if ".tar" in p.name or p.suffix == ".tgz"
)


def members_of(data: bytes) -> list:
    return list(read_members(open_decompressed(io.BytesIO(data), "-")))  # type: ignore[arg-type]


def keys_of(data: bytes) -> list[str]:
    return [s.key for s in group_samples(read_members(io.BytesIO(data)))]


def lowered(samples: list[tuple[str, dict[str, bytes]]]) -> list[tuple[str, dict[str, bytes]]]:
    return [(k, {f.lower(): d for f, d in fields.items()}) for k, fields in samples]


@pytest.fixture
def numbered(tmp_path: Path) -> Path:
    """20 samples 00..19 with fields bin, cls and (every third) txt."""
    path = tmp_path / "in.tar"
    path.write_bytes(
        make_tar(
            (f"{i:02d}.{field}", f"{field}{i}".encode() * (i + 1))
            for i in range(20)
            for field in ("bin", "cls", "txt")
            if field != "txt" or i % 3 == 0
        )
    )
    return path


# --- peer shards ----------------------------------------------------------------------


def test_peer_shards_are_present_with_their_licence() -> None:
    assert len(PEER_SHARDS) == 5
    assert (DATA / "peer-shards" / "LICENSE-webdataset").exists()


@pytest.mark.parametrize("shard", PEER_SHARDS, ids=lambda p: p.name)
def test_tarcat_passes_peer_shard_through_byte_for_byte_with_webdatasets_samples(
    tmp_path: Path, shard: Path
) -> None:
    result = run(["tarcat", str(shard)])
    assert (result.returncode, result.stderr) == (0, "")
    written = members_of(result.stdout)
    files = [m for m in members_of(shard.read_bytes()) if m.kind is FILE]
    assert [m.raw for m in written] == [m.raw for m in files]
    assert result.stdout.endswith(END)
    out = tmp_path / "out.tar"
    out.write_bytes(result.stdout)
    for lister in (["tar", "-tvf"], ["bsdtar", "-tvf"]):
        listed = subprocess.run([*lister, str(out)], capture_output=True, text=True)
        assert (listed.returncode, listed.stderr) == (0, ""), lister
        assert len(listed.stdout.splitlines()) == len(files)
    want = webdataset_samples(shard)
    assert len(want) >= 3
    assert webdataset_samples(out) == want
    tarkit = [(s.key, s.data()) for s in group_samples(iter(files))]
    assert lowered(tarkit) == want


# (command, module, arguments after the input; {tmp} is a scratch directory)
READERS = [
    ("tarcat", ["-o", "{tmp}/out.tar"]),
    ("tarsplit", ["-o", "{tmp}/s-%06d.tar"]),
    ("tar2tsv", []),
    ("tarshow", []),
    ("tarsort", ["-o", "{tmp}/sorted.tar"]),
    ("tarindex", ["-o", "{tmp}/manifest.json"]),
    ("tarproc", ["-c", "true", "-o", "{tmp}/proc.tar"]),
]


@pytest.mark.parametrize("shard", PEER_SHARDS, ids=lambda p: p.name)
@pytest.mark.parametrize("command, args", READERS, ids=[r[0] for r in READERS])
def test_every_command_present_reads_peer_shard_with_exit_0(
    tmp_path: Path, command: str, args: list[str], shard: Path
) -> None:
    if importlib.util.find_spec(f"tarkit.cli.{command}") is None:
        pytest.skip(f"{command} is not built yet")
    result = run([command, str(shard), *(a.format(tmp=tmp_path) for a in args)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr and "error" not in result.stderr


# --- archives made by GNU tar and bsdtar --------------------------------------------------

KINDS = ["gnu-ustar", "gnu-gnu", "gnu-pax", "gnu-v7", "bsdtar-pax", "bsdtar-gnutar"]


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("real")


def check_output_lists_cleanly_and_reads_in_webdataset(
    out: Path, source: Path, stderr: str
) -> None:
    # The tree holds a symlink and a README: one warning each, then the summary.
    assert "skipping member without a field (no dot in the file name): ./README" in stderr
    assert "skipping symlink member: ./link.jpg" in stderr
    assert len(stderr.splitlines()) == 3
    for lister in (["tar", "-tvf"], ["bsdtar", "-tvf"]):
        listed = subprocess.run([*lister, str(out)], capture_output=True, text=True)
        assert (listed.returncode, listed.stderr) == (0, ""), lister
        assert len(listed.stdout.splitlines()) == len(members_of(out.read_bytes()))
    assert webdataset_samples(out) == expected_samples(source)


@pytest.mark.parametrize("kind", KINDS)
def test_real_archive_through_tarcat_lists_cleanly_and_keeps_its_samples(
    archives: Path, kind: str
) -> None:
    source = make_archive(archives, kind)
    out = archives / f"{kind}.out.tar"
    result = run_shell(f"tarcat < {source} > {out}")
    assert result.returncode == 0
    check_output_lists_cleanly_and_reads_in_webdataset(out, source, result.stderr)
    # Every regular member with a field came through unchanged.
    kept = [m.raw for m in members_of(source.read_bytes()) if m.kind is FILE and "." in m.name[2:]]
    assert [m.raw for m in members_of(out.read_bytes())] == kept


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_compressed_real_archive_through_tarcat(archives: Path, compression: str) -> None:
    source = make_archive(archives, "gnu-pax", compression)
    out = archives / f"{compression}.out.tar"
    result = run(["tarcat", str(source), "-o", str(out)])
    assert result.returncode == 0
    check_output_lists_cleanly_and_reads_in_webdataset(
        out, make_archive(archives, "gnu-pax"), result.stderr
    )


def test_unsorted_archive_with_interleaved_keys_fails_and_says_to_sort(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for name in ["a.jpg", "b.jpg", "a.cls"]:
        (tmp_path / "d" / name).write_bytes(name.encode())
    listed = "d/a.jpg d/b.jpg d/a.cls"
    result = run_shell(f"tar -cf - --no-recursion {listed} | tarcat | tar -t", cwd=tmp_path)
    assert "tarcat: error: <stdin>: key 'd/a' comes back after other keys" in result.stderr
    assert "sort the input" in result.stderr
    sorted_run = run_shell("tar -cf - --sort=name d | tarcat | tar -t", cwd=tmp_path)
    assert (sorted_run.returncode, sorted_run.stderr) == (0, "")
    assert sorted_run.stdout.decode().split() == ["d/a.cls", "d/a.jpg", "d/b.jpg"]


# --- options ----------------------------------------------------------------------------


def test_without_options_tarcat_copies_the_archive_exactly(numbered: Path) -> None:
    result = run(["tarcat"], input=numbered.read_bytes())
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == numbered.read_bytes()


@pytest.mark.parametrize("count", [0, 1, 7, 20, 50])
def test_count_keeps_the_first_n_samples(numbered: Path, count: int) -> None:
    result = run(["tarcat", "-c", str(count), str(numbered)])
    assert result.returncode == 0
    assert keys_of(result.stdout) == [f"{i:02d}" for i in range(min(count, 20))]
    assert result.stdout.endswith(END)


def test_count_stops_reading_a_never_ending_pipe(tmp_path: Path) -> None:
    # `yes | tar -T -` archives a.txt, b.txt, a.txt… forever; only an early stop ends it.
    (tmp_path / "a.txt").write_bytes(b"a")
    (tmp_path / "b.txt").write_bytes(b"b")
    producer = (
        "yes \"$(printf 'a.txt\\nb.txt')\" | tar -cf - -T - --hard-dereference; echo $? > status"
    )
    result = run(["tarcat", "-c", "1", f"pipe:{producer}"], cwd=tmp_path, timeout=60)
    assert (result.returncode, result.stderr) == (0, "")
    assert keys_of(result.stdout) == ["a"]
    assert (tmp_path / "status").read_text() == "141\n"  # tar was ended by SIGPIPE


def test_zeros_without_end_after_the_end_marker_stop_tarcat_with_exit_2(numbered: Path) -> None:
    # A producer that pads without end (`cat /dev/zero`, a stuck server) used to keep
    # tarcat reading forever; past 64 MiB of zeros it is an error naming the byte.
    source = f"pipe:cat {numbered} /dev/zero"
    result = run(["tarcat", source], timeout=30)
    size = numbered.stat().st_size
    assert (result.returncode, result.stderr) == (2, (
        f"tarcat: error: {source}: more than 64 MiB of zeros after the end-of-archive marker "
        f"(no tar writer pads an archive that much: see docs/format.md) (byte {size + (64 << 20)})\n"
    ))  # fmt: skip
    # As for any error after the end marker, the samples before the last, no marker.
    last = next(m.offset for m in members_of(numbered.read_bytes()) if m.name.startswith("19."))
    assert result.stdout == numbered.read_bytes()[:last]


@pytest.mark.parametrize("archiver", ["tar -b 131072", "bsdtar -b 8192"])
def test_the_largest_records_of_gnu_tar_and_bsdtar_are_read_whole(
    tmp_path: Path, archiver: str
) -> None:
    # 64 MiB and 4 MiB of zeros after the end marker: read to the end, so the writer
    # never meets a closed pipe (GNU tar -t stops after one record and leaves it SIGPIPE).
    (tmp_path / "a.txt").write_bytes(b"a")
    result = run_shell(f"set -o pipefail; {archiver} -cf - -C {tmp_path} a.txt | tarcat | tar -t")
    assert (result.returncode, result.stdout, result.stderr) == (0, b"a.txt\n", "")


def test_samples_of_20000_fields_take_a_second_not_a_minute() -> None:
    # The compiled scanner compared every two fields of a sample (20 to 40 s for these
    # two samples); the limit is generous, the old way cannot meet it.
    data = make_tar(wide_members(2, 20_000))
    result = run(["tarcat"], input=data, timeout=10)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == data


def test_skip_drops_the_first_n_samples(numbered: Path) -> None:
    result = run(["tarcat", "--skip", "15", str(numbered)])
    assert keys_of(result.stdout) == ["15", "16", "17", "18", "19"]
    result = run(["tarcat", "--skip", "3", "-c", "2", str(numbered)])
    assert keys_of(result.stdout) == ["03", "04"]


@pytest.mark.parametrize(
    "spec", ["2:5", "::3", "-3:", ":-17", "1:-1:4", "-5:-2", "5", "-1", "-20", "18:100", "30:"]
)
def test_slice_follows_python_slicing(numbered: Path, spec: str) -> None:
    keys = [f"{i:02d}" for i in range(20)]
    parts = [int(p) if p else None for p in spec.split(":")]
    want = [keys[parts[0]]] if len(parts) == 1 else keys[slice(*parts)]  # type: ignore[index]
    result = run(["tarcat", f"--slice={spec}", str(numbered)])
    assert result.returncode == 0, result.stderr
    assert keys_of(result.stdout) == want


def test_fields_keep_the_named_fields_and_the_first_alternative(numbered: Path) -> None:
    result = run(["tarcat", "-f", "txt;bin cls", str(numbered)])
    samples = [(s.key, s.fields) for s in group_samples(read_members(io.BytesIO(result.stdout)))]
    assert samples == [
        (f"{i:02d}", ["cls", "txt"] if i % 3 == 0 else ["bin", "cls"]) for i in range(20)
    ]


def test_fields_drop_samples_that_have_none_of_them(numbered: Path) -> None:
    result = run(["tarcat", "-f", "txt", str(numbered)])
    assert result.returncode == 0
    assert keys_of(result.stdout) == [f"{i:02d}" for i in range(0, 20, 3)]


def test_shuffle_with_a_seed_is_a_reproducible_permutation(numbered: Path) -> None:
    first = run(["tarcat", "--shuffle", "5", "--seed", "3", str(numbered)]).stdout
    again = run(["tarcat", "--shuffle", "5", "--seed", "3", str(numbered)]).stdout
    other = run(["tarcat", "--shuffle", "5", "--seed", "4", str(numbered)]).stdout
    assert first == again
    assert first != other
    keys = keys_of(first)
    assert keys != sorted(keys)
    assert sorted(keys) == [f"{i:02d}" for i in range(20)]
    assert len(first) == len(numbered.read_bytes())


def test_inputs_with_braces_files_and_stdin_are_read_in_order(tmp_path: Path) -> None:
    parts = [make_tar([(f"{p}{i}.txt", b"x") for i in range(3)]) for p in "abcd"]
    for name, data in zip(["d-0.tar", "d-1.tar", "d-2.tar", "std.tar"], parts, strict=True):
        (tmp_path / name).write_bytes(data)
    result = run_shell("tarcat 'd-{0..1}.tar' - file:d-2.tar < std.tar", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    body = b"".join(p[:-1024] for p in (parts[0], parts[1], parts[3], parts[2]))
    assert result.stdout == body + END


def test_no_input_means_stdin(numbered: Path) -> None:
    result = run_shell(f"cat {numbered} | tarcat | tarcat -")
    assert result.stdout == numbered.read_bytes()


@pytest.mark.parametrize("suffix, lister", [
    (".tar.gz", ["tar", "-tzf"]),
    (".tar.zst", ["tar", "--zstd", "-tf"]),
    (".tar.bz2", ["tar", "-tjf"]),
    (".tar.xz", ["tar", "-tJf"]),
])  # fmt: skip
def test_compressed_output_is_byte_identical_across_runs_and_readable(
    numbered: Path, suffix: str, lister: list[str]
) -> None:
    outputs = []
    for run_number in range(2):
        target = numbered.parent / f"out{run_number}{suffix}"
        assert run(["tarcat", str(numbered), "-o", str(target)]).returncode == 0
        outputs.append(target)
    assert outputs[0].read_bytes() == outputs[1].read_bytes()
    listed = subprocess.run([*lister, str(outputs[0])], capture_output=True, text=True)
    assert listed.returncode == 0 and listed.stderr == ""
    assert len(listed.stdout.splitlines()) == 20 * 2 + 7
    back = run(["tarcat", str(outputs[0])])
    assert back.stdout == numbered.read_bytes()
    if suffix == ".tar.zst":
        assert subprocess.run(["zstd", "-q", "-t", str(outputs[0])]).returncode == 0


def test_zstd_that_starts_with_a_skippable_frame_is_read_as_zstd_and_bsdtar_read_it(
    numbered: Path,
) -> None:
    # libarchive's test_read_filter_zstd_skip_frame: a skippable frame (magic 0x184D2A50
    # to 0x184D2A5F, its size, its payload), then the zstd CLI's frame.
    frame = subprocess.run(["zstd", "-q", "-c", str(numbered)], capture_output=True,
                           check=True).stdout  # fmt: skip
    skippable = (0x184D2A5E).to_bytes(4, "little") + (7).to_bytes(4, "little") + b"tarkit!"
    path = numbered.parent / "skip.tar.zst"
    path.write_bytes(skippable + frame)
    assert subprocess.run(["zstd", "-q", "-dc", str(path)], capture_output=True).stdout == (
        numbered.read_bytes()
    )
    listed = subprocess.run(["bsdtar", "-tf", str(path)], capture_output=True, text=True)
    assert (listed.returncode, len(listed.stdout.splitlines())) == (0, 20 * 2 + 7)
    result = run(["tarcat", str(path)])
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == numbered.read_bytes()


def test_a_member_whose_name_starts_with_a_dot_is_skipped_saying_so(tmp_path: Path) -> None:
    for name in (".hidden.txt", "README", "a.txt"):
        (tmp_path / name).write_text(name)
    subprocess.run(["tar", "-cf", "in.tar", ".hidden.txt", "README", "a.txt"], cwd=tmp_path,
                   check=True)  # fmt: skip
    result = run(["tarcat", "in.tar"], cwd=tmp_path)
    assert result.returncode == 0
    assert result.stderr == (
        "tarcat: warning: in.tar: skipping member whose file name starts with a dot (no key "
        "before it): .hidden.txt\n"
        "tarcat: warning: in.tar: skipping member without a field (no dot in the file name): "
        "README\n"
        "tarcat: warning: skipped 2 members: 1 whose file name starts with a dot (no key "
        "before it), 1 without a field (no dot in the file name)\n"
    )
    assert keys_of(result.stdout) == ["a"]


def test_tarkit_cat_and_python_m_tarkit_cat_are_tarcat(numbered: Path) -> None:
    want = run(["tarcat", "-c", "3", str(numbered)]).stdout
    assert run(["tarkit", "cat", "-c", "3", str(numbered)]).stdout == want
    module = run([sys.executable, "-m", "tarkit", "cat", "-c", "3", str(numbered)])
    assert (module.returncode, module.stdout) == (0, want)


# --- bin/ scripts of the checkout --------------------------------------------------------

PLAIN_PATH = {"PATH": "/usr/bin:/bin"}  # no venv on PATH, as on a fresh shell


def test_bin_scripts_are_one_launcher_and_wrappers_that_differ_only_in_the_name() -> None:
    wrappers = sorted(p for p in (ROOT / "bin").glob("tar*") if p.name != "tarkit")
    assert len(wrappers) == 9
    shape = (ROOT / "bin" / "tarcat").read_text().replace("tarcat", "NAME")
    for path in wrappers:
        assert path.read_text().replace(path.name, "NAME") == shape
        assert os.access(path, os.X_OK)


@pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "python").exists(), reason="no .venv: bash bin/setup makes it"
)
def test_bin_tarcat_runs_from_a_checkout_without_the_venv_on_path(numbered: Path) -> None:
    installed = run(["tarcat", "--slice", "3:9", str(numbered)])
    for command in (["bin/tarcat"], ["bin/tarkit", "cat"]):
        result = run(
            [str(ROOT / command[0]), *command[1:], "--slice", "3:9", str(numbered)],
            env=PLAIN_PATH,
            cwd=numbered.parent,
        )
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout == installed.stdout and len(installed.stdout) > 1024


def test_bin_scripts_say_to_run_setup_when_dependencies_are_missing(tmp_path: Path) -> None:
    # A checkout whose .venv python sees no installed packages (-S: no site-packages).
    shutil.copytree(ROOT / "bin", tmp_path / "bin", symlinks=True)
    (tmp_path / "tarkit").symlink_to(ROOT / "tarkit")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    for name in ("tarcat", "tarkit"):
        result = run([str(tmp_path / "bin" / name), "x.tar"], env=PLAIN_PATH)
        assert (result.returncode, result.stdout) == (2, b"")
        assert result.stderr == (
            f"{name}: error: tarkit's dependencies are missing (No module named "
            "'braceexpand'): run bash bin/setup first\n"
        )


def test_help_names_the_options() -> None:
    result = run(["tarcat", "--help"])
    assert result.returncode == 0
    for option in ["--count", "--skip", "--slice", "--fields", "--shuffle", "--seed",
                   "--output", "--strict", "--ignore-zeros", "--allow-empty"]:  # fmt: skip
        assert option.encode() in result.stdout


def test_output_file_gets_the_same_bytes_as_stdout(numbered: Path) -> None:
    target = numbered.parent / "out.tar"
    result = run(["tarcat", str(numbered), "-o", str(target), "--skip", "4"])
    assert (result.returncode, result.stdout) == (0, b"")
    assert target.read_bytes() == run(["tarcat", str(numbered), "--skip", "4"]).stdout
    assert sorted(os.listdir(numbered.parent)) == ["in.tar", "out.tar"]
