"""tarcreate through real pipes: plans checked before writing, trees packed the same way twice,
read back by GNU tar, bsdtar and webdataset."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest
from conftest import run, run_shell, webdataset_samples

from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members


def samples_of(data: bytes) -> list[tuple[str, dict[str, bytes]]]:
    return [(s.key, s.data()) for s in group_samples(read_members(io.BytesIO(data)))]


@pytest.fixture
def images(tmp_path: Path) -> Path:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "cat1.jpg").write_bytes(b"\xff\xd8cat")
    (tmp_path / "images" / "dog1.jpg").write_bytes(b"\xff\xd8dog" * 200)
    return tmp_path


def test_csv_plan_builds_sorted_fields_with_deterministic_headers(images: Path) -> None:
    plan = images / "plan.csv"
    plan.write_text(
        "__key__,@jpg,cls,txt\n"
        "cat/001,images/cat1.jpg,0,a sleeping cat\n"
        'dog/001,images/dog1.jpg,1,"a dog, running"\n'
    )
    result = run(["tarcreate", str(plan)])
    assert (result.returncode, result.stderr) == (0, "")
    assert samples_of(result.stdout) == [
        ("cat/001", {"cls": b"0", "jpg": b"\xff\xd8cat", "txt": b"a sleeping cat"}),
        ("dog/001", {"cls": b"1", "jpg": b"\xff\xd8dog" * 200, "txt": b"a dog, running"}),
    ]
    out = images / "out.tar"
    out.write_bytes(result.stdout)
    listed = subprocess.run(["tar", "-tvf", str(out)], capture_output=True, text=True, check=True)
    assert all(line.startswith("-r--r--r-- 0/0") for line in listed.stdout.splitlines())
    assert "2000-01-01 00:00 cat/001.cls" in listed.stdout
    assert webdataset_samples(out) == samples_of(result.stdout)
    # The same plan gives the same bytes, and SOURCE_DATE_EPOCH sets the mtime.
    assert run(["tarcreate", str(plan)]).stdout == result.stdout
    later = run_shell(f"SOURCE_DATE_EPOCH=1700000000 tarcreate {plan} | tar -tvf -")
    assert "2023-11-14" in later.stdout.decode()


def test_tsv_plan_without_key_column_numbers_rows_and_key_format_names_them(images: Path) -> None:
    plan = images / "plan.tsv"
    plan.write_text("@jpg\tcls\nimages/cat1.jpg\t0\nimages/dog1.jpg\t1\n")
    result = run(["tarcreate", str(plan)])
    assert [k for k, _ in samples_of(result.stdout)] == ["000000000", "000000001"]
    named = run(["tarcreate", str(plan), "--key", "train/c{cls}/{row:04d}"])
    assert [k for k, _ in samples_of(named.stdout)] == ["train/c0/0000", "train/c1/0001"]
    semicolons = images / "plan.txt"
    semicolons.write_text("@jpg;cls\nimages/cat1.jpg;7\n")
    result = run(["tarcreate", str(semicolons), "-d", ";"])
    assert samples_of(result.stdout)[0][1]["cls"] == b"7"


@pytest.mark.parametrize(
    "plan, message",
    [
        (
            "@jpg,cls\nimages/cat1.jpg,0\nimages/none.jpg,1\n",
            "line 3: field 'jpg': images/none.jpg: no such file",
        ),
        (
            "@jpg,cls\nimages/cat1.jpg,0\nimages/dog1.jpg\n",
            "line 3: 1 cells, but the header has 2 columns",
        ),
        (
            "__key__,@jpg\na,images/cat1.jpg\na,images/cat1.jpg\n",
            "line 3: key 'a' is already used on line 2",
        ),
    ],
)
def test_a_bad_plan_fails_naming_the_line_before_anything_is_written(
    images: Path, plan: str, message: str
) -> None:
    path = images / "plan.csv"
    path.write_text(plan)
    out = images / "out.tar"
    result = run(["tarcreate", str(path), "-o", str(out)])
    assert result.returncode == 2
    assert result.stderr.startswith(f"tarcreate: error: {path}: {message}")
    assert len(result.stderr.splitlines()) == 1
    assert not out.exists() and os.listdir(images) == ["images", "plan.csv"]
    piped = run(["tarcreate", str(path)])
    assert piped.returncode == 2 and piped.stdout == b""


def test_plan_usage_errors_exit_2_with_one_line(images: Path) -> None:
    plan = images / "plan.dat"
    plan.write_text("@jpg\nimages/cat1.jpg\n")
    csv = images / "plan.csv"
    csv.write_text("__key__,@jpg\nx,images/cat1.jpg\n")
    either = "give a PLAN file or --dir DIR (one of them)"
    for args, message in [
        (
            [str(plan)],
            f"{plan}: cannot tell the delimiter from the file name: pass -d ',' or -d tab",
        ),
        ([str(csv), "--key", "{row}"], f"{csv}: the plan has a __key__ column: leave out --key"),
        ([], either),
        ([str(csv), "--dir", str(images)], either),
    ]:
        result = run(["tarcreate", *args])
        assert (result.returncode, result.stdout) == (2, b""), args
        assert result.stderr == f"tarcreate: error: {message}\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "scans"
    for sub in ("a.d/deep", "b"):
        (root / sub).mkdir(parents=True)
    (root / "0001.png").write_bytes(b"png1")
    (root / "0001.seg.png").write_bytes(b"seg1")
    (root / "0001.json").write_bytes(b"{}")
    (root / "b" / "0002.png").write_bytes(b"png2")
    (root / "a.d" / "deep" / "x.txt").write_bytes(b"deep")
    (root / "README").write_bytes(b"no field")
    (root / ".DS_Store").write_bytes(b"hidden")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD.txt").write_bytes(b"hidden dir")
    (root / "link.png").symlink_to("0001.png")
    os.mkfifo(root / "fifo.png")
    return root


def test_dir_groups_files_by_key_in_sorted_order_and_skips_what_readers_skip(
    tree: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.tar"
    result = run(["tarcreate", "--dir", str(tree), "-o", str(out)])
    assert result.returncode == 0
    assert result.stderr.splitlines() == [
        f"tarcreate: warning: {tree}: skipping file without a field (no dot in the file name): "
        "README",
        f"tarcreate: warning: {tree}: skipping fifo: fifo.png",
        f"tarcreate: warning: {tree}: skipping symlink: link.png",
        "tarcreate: warning: skipped 3 members: 1 file without a field (no dot in the file "
        "name), 1 fifo, 1 symlink",
    ]
    want = [
        ("0001", {"json": b"{}", "png": b"png1", "seg.png": b"seg1"}),
        ("a.d/deep/x", {"txt": b"deep"}),
        ("b/0002", {"png": b"png2"}),
    ]
    assert samples_of(out.read_bytes()) == want
    assert webdataset_samples(out) == want
    for lister in (["tar", "-tvf"], ["bsdtar", "-tvf"]):
        listed = subprocess.run([*lister, str(out)], capture_output=True, text=True)
        assert (listed.returncode, listed.stderr) == (0, "")
        assert len(listed.stdout.splitlines()) == 5
    # The same tree gives the same bytes, whatever the files' times and modes.
    os.utime(tree / "0001.png", (1, 1))
    os.chmod(tree / "b" / "0002.png", 0o600)
    again = run(["tarcreate", "--dir", str(tree)])
    assert again.stdout == out.read_bytes()
    # tarsort finds it already in order.
    assert run(["tarsort"], input=again.stdout).stdout == again.stdout


def test_dir_strict_refuses_and_dereference_reads_links(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.tar"
    strict = run(["tarcreate", "--dir", str(tree), "--strict", "-o", str(out)])
    assert strict.returncode == 2 and not out.exists()
    assert strict.stderr == (
        f"tarcreate: error: {tree}/README: file without a field (no dot in the file name) is "
        "not allowed with --strict\n"
    )
    (tree / "README").unlink()
    (tree / "fifo.png").unlink()
    followed = run(["tarcreate", "--dir", str(tree), "-L"])
    assert (followed.returncode, followed.stderr) == (0, "")
    assert ("link", {"png": b"png1"}) in samples_of(followed.stdout)


def test_dir_fields_that_differ_only_in_case_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.jpg").write_bytes(b"1")
    (tmp_path / "d" / "x.JPG").write_bytes(b"2")
    result = run(["tarcreate", "--dir", str(tmp_path / "d")])
    assert (result.returncode, result.stdout) == (2, b"")
    # Files are taken in sorted byte order: x.JPG comes before x.jpg.
    assert result.stderr == (
        f"tarcreate: error: {tmp_path / 'd'}: x.JPG and x.jpg would both be field 'jpg' of "
        "sample 'x' (fields are compared case-insensitively, as webdataset does)\n"
    )
    missing = run(["tarcreate", "--dir", str(tmp_path / "none")])
    assert missing.stderr == f"tarcreate: error: {tmp_path}/none: no such directory\n"


def test_dir_output_compresses_by_its_ending(tree: Path, tmp_path: Path) -> None:
    (tree / "fifo.png").unlink()
    out = tmp_path / "out.tar.gz"
    assert run(["tarcreate", "--dir", str(tree), "-o", str(out)]).returncode == 0
    listed = subprocess.run(["tar", "-tzf", str(out)], capture_output=True, text=True, check=True)
    assert "b/0002.png" in listed.stdout.split()


def test_a_plan_without_an_at_column_is_packed_as_text_with_a_warning(images: Path) -> None:
    plan = images / "plan.csv"
    plan.write_text("filepath,label\nimages/cat1.jpg,0\n")
    result = run(["tarcreate", str(plan)])
    assert result.returncode == 0
    assert result.stderr == (
        f"tarcreate: warning: {plan}: no column starts with @, so no file is embedded: every "
        "cell is text. To pack the files a column lists, name it @<field> (header "
        "'@jpg,label' instead of 'filepath,label')\n"
    )
