"""The tar writer: deterministic headers, byte-for-byte copies, and archives that GNU tar,
bsdtar and tarfile read back as written.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tarfiles import (
    END,
    input_error,
    make_archive,
    member_size_on_disk,
    read_all,
    strip_end,
    tarfile_members,
)

from tarkit.errors import TruncatedError
from tarkit.format.tar import FILE
from tarkit.format.tar_writer import (
    DEFAULT_MTIME,
    TarWriter,
    _ustar_block,
    encode_member,
    make_header,
)

# What is written is read back with the compiled scanner and with the pure-Python reader.
pytestmark = pytest.mark.usefixtures("reader")


def test_added_members_have_deterministic_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    first = encode_member("x/a.jpg", b"jpeg")
    assert first == encode_member("x/a.jpg", b"jpeg")
    info = tarfile.open(fileobj=io.BytesIO(first + END)).getmembers()[0]
    assert (info.mode, info.uid, info.gid, info.uname, info.gname) == (0o444, 0, 0, "", "")
    assert info.mtime == DEFAULT_MTIME == 946684800


def test_source_date_epoch_sets_the_mtime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    out = io.BytesIO()
    with TarWriter(out) as writer:
        writer.add("a.txt", b"a")
    assert tarfile.open(fileobj=io.BytesIO(out.getvalue())).getmembers()[0].mtime == 1700000000
    assert TarWriter(io.BytesIO(), mtime=5).mtime == 5


@pytest.mark.parametrize(
    "name",
    ["a.txt", "x" * 99 + ".t", "dir/" * 30 + "deep.txt", "n" * 150 + ".txt", "日本/ラベル.cls"],
)
def test_added_member_reads_back_in_gnu_tar_and_tarfile(tmp_path: Path, name: str) -> None:
    out = io.BytesIO()
    with TarWriter(out) as writer:
        writer.add(name, b"payload")
    data = out.getvalue()
    assert len(data) == member_size_on_disk(name, 7) + 1024
    [m] = read_all(data)
    assert (m.name, m.data) == (name, b"payload")
    path = tmp_path / "w.tar"
    path.write_bytes(data)
    assert tarfile_members(path) == [(name, FILE, b"payload")]
    listed = subprocess.run(["tar", "-tf", str(path)], capture_output=True, check=True)
    assert listed.stdout.decode() == name + "\n"


def test_writer_copies_a_member_byte_for_byte(archive_dir: Path) -> None:
    data = make_archive(archive_dir, "gnu-gnu").read_bytes()
    out = io.BytesIO()
    with TarWriter(out) as writer:
        for m in read_all(data):
            writer.write(m)
    assert strip_end(out.getvalue()) == strip_end(data)
    assert out.getvalue().endswith(END)


def test_writer_leaves_out_the_end_marker_when_the_block_fails() -> None:
    out = io.BytesIO()
    with pytest.raises(RuntimeError), TarWriter(out) as writer:
        writer.add("a.txt", b"a")
        raise RuntimeError
    assert out.getvalue() == encode_member("a.txt", b"a")
    assert isinstance(input_error(out.getvalue()), TruncatedError)


@pytest.mark.skipif(shutil.which("bsdtar") is None, reason="bsdtar missing")
def test_written_archive_lists_cleanly_in_bsdtar(tmp_path: Path) -> None:
    path = tmp_path / "w.tar"
    with open(path, "wb") as f, TarWriter(f) as writer:
        for name in ["a.txt", "n" * 150 + ".txt", "日本.cls"]:
            writer.add(name, b"x")
    listed = subprocess.run(["bsdtar", "-tf", str(path)], capture_output=True, check=True,
                            env=dict(os.environ, LC_ALL="C.UTF-8"))  # fmt: skip
    assert listed.stdout.decode().splitlines() == ["a.txt", "n" * 150 + ".txt", "日本.cls"]
    assert listed.stderr == b""


WRITE_SCRIPT = """
import sys
from tarkit.format.tar_writer import TarWriter
with TarWriter(sys.stdout.buffer) as writer:
    writer.add("a/x.jpg", b"jpeg" * 300)
    writer.add("日本/" + "n" * 120 + ".cls", b"7")
"""


def test_writer_output_is_identical_across_processes_and_follows_source_date_epoch() -> None:
    def written(**env: str) -> bytes:
        environ = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
        return subprocess.run(
            [sys.executable, "-c", WRITE_SCRIPT], env={**environ, **env}, capture_output=True,
            check=True,
        ).stdout  # fmt: skip

    first = written()
    assert first == written()
    assert {m.mtime for m in tarfile.open(fileobj=io.BytesIO(first))} == {DEFAULT_MTIME}
    dated = written(SOURCE_DATE_EPOCH="1234567890")
    assert dated == written(SOURCE_DATE_EPOCH="1234567890") != first
    assert {m.mtime for m in tarfile.open(fileobj=io.BytesIO(dated))} == {1234567890}


@settings(max_examples=200, deadline=None)
@given(
    name=st.text(
        alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=100
    ),
    size=st.integers(min_value=0, max_value=8**11 - 1),
    mtime=st.integers(min_value=0, max_value=8**11 - 1),
    mode=st.sampled_from([0o444, 0o644, 0o755]),
)
def test_header_template_gives_the_bytes_of_the_general_builder(name, size, mtime, mode) -> None:
    assert make_header(name, size, mtime=mtime, mode=mode) == _ustar_block(
        name.encode(), size, mtime, mode, b"0", b""
    )
