"""tar2tsv through real pipes: GNU tar and bsdtar archives, peer shards, options, errors."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, make_tar, run, run_shell, webdataset_samples
from tarfiles import wide_members

PEER_SHARDS = sorted(
    p for p in (DATA / "peer-shards").iterdir() if ".tar" in p.name or p.suffix == ".tgz"
)
LONG = "d" * 70 + "/" + "n" * 60  # 131 bytes: GNU long name or pax path

# The tree every real archive is made of, in name order, and the TSV it must give.
FILES = {
    "0001.cls": b"3",
    "0001.json": b'{"a": 1}\n',
    "0001.txt": b"a\tcat\non a mat\\",
    "0002.cls": b"7\r\n",
    "0002.txt": b"\xff\xfe latin-1 \xe9",
    f"{LONG}.cls": b"long",
    "\u65e5\u672c/\u00e9-0003.cls": "\u65e5\u672c".encode(),
}
EXPECTED = (
    "__key__\tcls\tjson\ttxt\n"
    '0001\t3\t{"a": 1}\\n\ta\\tcat\\non a mat\\\\\n'
    "0002\t7\\r\\n\t\t<12 bytes>\n"
    f"{LONG}\tlong\t\t\n"
    "\u65e5\u672c/\u00e9-0003\t\u65e5\u672c\t\t\n"
).encode()

ARCHIVERS = {
    "gnu-gnu": ["tar", "--format=gnu"],
    "gnu-pax": ["tar", "--format=pax"],
    "bsdtar-pax": ["bsdtar", "--format=pax"],
    "bsdtar-gnutar": ["bsdtar", "--format=gnutar"],
}


def unescape(text: str) -> str:
    table = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}
    return re.sub(r"\\(.)", lambda m: table[m.group(1)], text)


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def archive_with(archiver: list[str], tree: Path, out: Path, *flags: str) -> Path:
    """``out`` made by a real tar from the files of ``tree``, listed in name order."""
    names = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
    subprocess.run([*archiver, *flags, "-cf", str(out), "-C", str(tree), *names], check=True)
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tree(tmp_path_factory.mktemp("tree"), FILES)


def numbered(count: int, text: str = "text") -> bytes:
    """``count`` samples 0000.. with a .txt and a .cls."""
    return make_tar(
        (f"{i:04d}.{field}", f"{text} {i}".encode() if field == "txt" else str(i % 10).encode())
        for i in range(count)
        for field in ("cls", "txt")
    )


def module_probe(module: str, args: list[str]) -> str:
    """Python code that runs ``module``'s main() with ``args`` and, at exit, writes the
    top-level packages imported to ``modules.txt`` in its directory."""
    return (
        "import atexit, sys\n"
        "def report():\n"
        "    with open('modules.txt', 'w') as out:\n"
        "        out.write('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
        "atexit.register(report)\n"
        f"sys.argv = ['probe', *{args!r}]\n"
        f"from {module} import main\n"
        "main()\n"
    )


def imported_modules(module: str, args: list[str], cwd: Path, stderr: int = subprocess.PIPE
                     ) -> set[str]:  # fmt: skip
    """Top-level packages imported by running ``module``'s main() with ``args`` (stderr
    to ``stderr``: a pipe unless told)."""
    probe = module_probe(module, args)
    result = subprocess.run([sys.executable, "-c", probe], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=stderr, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return set((cwd / "modules.txt").read_text().split())


# --- real archives --------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(ARCHIVERS))
def test_archive_by_real_tar_gives_the_expected_tsv(tmp_path: Path, tree: Path, kind: str) -> None:
    archive = archive_with(ARCHIVERS[kind], tree, tmp_path / "a.tar")
    result = run(["tar2tsv", str(archive)])
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == EXPECTED


@pytest.mark.parametrize("flag", ["-z", "--zstd"])
def test_compressed_archive_through_stdin_gives_the_same_tsv(
    tmp_path: Path, tree: Path, flag: str
) -> None:
    archive = archive_with(ARCHIVERS["gnu-pax"], tree, tmp_path / "a.tar.x", flag)
    result = run_shell(f"cat {archive} | tarcat | tar2tsv")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == EXPECTED


def test_ustar_archive_with_the_prefix_field(tmp_path: Path) -> None:
    name = "p" * 90 + "/" + "q" * 60 + ".txt"  # needs the ustar prefix field
    archive = archive_with(["tar", "--format=ustar"], write_tree(tmp_path / "t", {name: b"v"}),
                           tmp_path / "a.tar")  # fmt: skip
    result = run(["tar2tsv", str(archive)])
    assert result.stdout == f"__key__\ttxt\n{name[:-4]}\tv\n".encode()


@pytest.mark.parametrize("shard", PEER_SHARDS, ids=lambda p: p.name)
def test_peer_shard_cells_hold_webdatasets_samples(shard: Path) -> None:
    result = run(["tar2tsv", str(shard)])
    assert (result.returncode, result.stderr) == (0, "")
    header, *rows = result.stdout.decode().splitlines()
    columns = header.split("\t")[1:]
    want = webdataset_samples(shard)
    assert [row.split("\t")[0] for row in rows] == [key for key, _ in want]
    for row, (_, fields) in zip(rows, want, strict=True):
        for column, value in zip(columns, row.split("\t")[1:], strict=True):
            data = fields[column.lower()]
            assert value == f"<{len(data)} bytes>" or unescape(value).encode() == data


# --- options --------------------------------------------------------------------------


def test_fields_pick_alternatives_in_order_and_leave_missing_cells_empty(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(make_tar([
        ("a.caption", b"cap a"), ("a.cls", b"1"), ("a.txt", b"txt a"),
        ("b.caption", b"cap b"),
        ("c.cls", b"3"),
    ]))  # fmt: skip
    result = run(["tar2tsv", "-f", "txt;caption cls", str(archive)])
    assert result.stdout == (b"__key__\ttxt;caption\tcls\na\ttxt a\t1\nb\tcap b\t\nc\t\t3\n")
    result = run(["tar2tsv", "--fields", "cls,nothing", "--no-header", "--no-key", str(archive)])
    assert result.stdout == b"1\t\n\t\n3\t\n"


def test_count_stops_after_n_samples(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(numbered(10))
    result = run(["tar2tsv", "-c", "3", "--no-header", str(archive)])
    assert result.stdout == b"0000\t0\ttext 0\n0001\t1\ttext 1\n0002\t2\ttext 2\n"


def test_count_stops_reading_an_endless_input(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(numbered(10)[:-1024])  # then zeros forever: read to the end, it never ends
    result = run_shell(f"cat {archive} /dev/zero | tar2tsv -c 2", timeout=60)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.count(b"\n") == 3


def test_count_stops_before_a_damaged_part_of_the_input(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(numbered(10)[: 5 * 2048 + 700])
    assert run(["tar2tsv", "-c", "2", str(archive)]).returncode == 0
    assert run(["tar2tsv", str(archive)]).returncode == 2


def test_inputs_are_brace_expanded_and_share_one_header(tmp_path: Path) -> None:
    for part in range(2):
        (tmp_path / f"p-{part}.tar").write_bytes(make_tar([(f"k{part}.txt", b"v%d" % part)]))
    result = run(["tar2tsv", str(tmp_path / "p-{0..1}.tar")])
    assert result.stdout == b"__key__\ttxt\nk0\tv0\nk1\tv1\n"


def test_umbrella_tsv_is_tar2tsv(tmp_path: Path, tree: Path) -> None:
    archive = archive_with(ARCHIVERS["gnu-gnu"], tree, tmp_path / "a.tar")
    assert run(["tarkit", "tsv", str(archive)]).stdout == EXPECTED


def test_empty_input_is_an_error_unless_allowed() -> None:
    result = run(["tar2tsv"], input=b"")
    assert result.returncode == 2
    assert result.stderr == "tar2tsv: error: <stdin>: empty input (0 bytes)\n"
    result = run(["tar2tsv", "--allow-empty", "-f", "jpg cls"], input=b"")
    assert (result.returncode, result.stdout) == (0, b"__key__\tjpg\tcls\n")


def test_ignore_zeros_reads_concatenated_archives() -> None:
    data = make_tar([("a.txt", b"1")]) + make_tar([("b.txt", b"2")])
    assert run(["tar2tsv"], input=data).returncode == 2
    result = run(["tar2tsv", "--ignore-zeros"], input=data)
    assert (result.returncode, result.stdout) == (0, b"__key__\ttxt\na\t1\nb\t2\n")


def test_member_without_a_field_is_a_warning_or_with_strict_an_error(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(make_tar([("a.txt", b"1"), ("README", b"x"), ("b.txt", b"2")]))
    result = run(["tar2tsv", str(archive)])
    assert result.returncode == 0
    assert result.stdout == b"__key__\ttxt\na\t1\nb\t2\n"
    assert result.stderr == (
        f"tar2tsv: warning: {archive}: skipping member without a field "
        "(no dot in the file name): README\n"
    )
    result = run(["tar2tsv", "--strict", str(archive)])
    assert result.returncode == 2
    assert result.stdout == b""  # sample a is not known to be complete before README
    assert len(result.stderr.splitlines()) == 1 and "--strict" in result.stderr


# --- errors and pipes -----------------------------------------------------------------


@pytest.mark.parametrize(
    "cut, complete",
    [(3 * 2048 + 1024 + 100, 3), (3 * 2048 + 1536 + 100, 3), (10 * 2048, 9)],
    ids=["inside a header", "inside member data", "no end marker"],
)
def test_truncated_input_exits_2_with_one_line_after_whole_lines_only(
    cut: int, complete: int
) -> None:
    # The cuts fall in sample 3's second member, or after sample 9 (which could have had
    # more fields): the samples before are whole, the one cut is not written.
    data = numbered(10)[:cut]
    result = run_shell("tar2tsv --no-header", input=data)
    assert result.returncode == 2
    assert result.stdout == b"".join(b"%04d\t%d\ttext %d\n" % (i, i, i) for i in range(complete))
    (line,) = result.stderr.splitlines()
    assert re.fullmatch(r"tar2tsv: error: <stdin>: .+ \(byte \d+(, member \S+)?\)", line)


def test_corrupt_gzip_through_a_pipe_exits_2() -> None:
    packed = bytearray(gzip.compress(numbered(5)))
    packed[-8] ^= 0xFF  # CRC
    result = run_shell("cat | tar2tsv", input=bytes(packed))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_key_that_comes_back_is_an_error_naming_the_sample_that_went_out_short(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(make_tar([("a.txt", b"1"), ("b.txt", b"2"), ("a.cls", b"3")]))
    result = run(["tar2tsv", "-f", "txt cls", str(archive)])
    assert result.returncode == 2
    # a went out when b began; b may have more members further on, so it does not.
    assert result.stdout == b"__key__\ttxt\tcls\na\t1\t\n"
    assert result.stderr == (
        f"tar2tsv: error: {archive}: key 'a' comes back after other keys: members of a "
        "sample must be adjacent, so sample 'a' read earlier lacks this member (sort the "
        "input: tarsort, or tar --sort=name; if these are two samples, give them keys of "
        "their own) (byte 2048, member a.cls)\n"
    )


def test_missing_input_and_bad_option_are_one_line_errors(tmp_path: Path) -> None:
    result = run(["tar2tsv", str(tmp_path / "missing.tar")])
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.startswith("tar2tsv: error: ") and len(result.stderr.splitlines()) == 1
    result = run(["tar2tsv", "-c", "-1"], input=numbered(2))
    assert result.returncode == 2
    assert result.stderr == "tar2tsv: error: the count must not be negative\n"
    result = run(["tar2tsv", "--bogus"], input=numbered(2))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1


def test_closed_output_pipe_is_quiet_141(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(numbered(20000, "x" * 200))  # 4 MB of TSV: more than a pipe holds
    result = run_shell(f"tar2tsv {archive} | head -n 1; echo ${{PIPESTATUS[0]}} >&2")
    assert result.stdout == b"__key__\tcls\ttxt\n"
    assert result.stderr == "141\n"


def test_full_disk_is_exit_2_with_a_message(tmp_path: Path) -> None:
    result = run_shell("tar2tsv > /dev/full", input=numbered(3))
    assert result.returncode == 2
    assert result.stderr == "tar2tsv: error: <stdout>: write failed: No space left on device\n"


def test_shell_tool_never_imports_torch_numpy_or_pillow(tmp_path: Path) -> None:
    (tmp_path / "a.tar").write_bytes(make_tar([("a.jpg", b"\xff\xd8"), ("a.txt", b"t")]))
    modules = imported_modules("tarkit.cli.tar2tsv", ["a.tar"], tmp_path)
    assert "tarkit" in modules  # the probe saw the real run
    assert "typer" not in modules  # a plain command line is parsed without it (cli/declare.py)
    assert not modules & {"torch", "numpy", "PIL"}


def test_samples_of_20000_fields_take_a_second_not_minutes(tmp_path: Path) -> None:
    # Each column used to fold every field name of the sample (33 s for one sample of
    # 20,000 short names); the limit is generous, the old way cannot meet it.
    path = tmp_path / "wide.tar"
    path.write_bytes(make_tar(wide_members(2, 20_000)))
    result = run(["tar2tsv", str(path)], timeout=20)
    assert (result.returncode, result.stderr) == (0, "")
    rows = [line.split(b"\t") for line in result.stdout.splitlines()]
    assert [len(row) for row in rows] == [20_001] * 3
    assert [row[0] for row in rows] == [b"__key__", b"a", b"b"]
    assert rows[0][-1] == b"f" * 80 + b"019999"
