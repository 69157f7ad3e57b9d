"""The stream tools start at pipe speed: what tarcat, tar2tsv and tarsplit import.

A tool's start-up is paid on every call in a shell loop or a pipeline, and most of it is
imports: ``dataclasses`` alone (with ``inspect``, ``ast``, ``dis`` and ``tokenize`` under
it) cost the tools more than all their own code, and ``hashlib`` opens OpenSSL. These
tests run the real tools' ``main()`` on a real archive and read ``sys.modules`` at exit
(the figures are in docs/performance.md, "Start-up").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_tar
from test_tar2tsv import imported_modules

# Never on a stream tool's way: the heavy stdlib modules, and the libraries of the loader.
HEAVY = {"dataclasses", "inspect", "ast", "torch", "numpy"}
# Not for reading a local file or stdin either: commits, OpenSSL, JSON, fsspec.
NOT_FOR_PLAIN_READS = {"hashlib", "json", "fsspec", "braceexpand"}


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    (tmp_path / "in.tar").write_bytes(make_tar([("a.cls", b"1"), ("b.cls", b"2")]))
    return tmp_path


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("tarkit.cli.tarcat", ["in.tar", "-o", "out.tar"]),
        ("tarkit.cli.tarcat", ["-c", "1", "--skip", "1", "in.tar", "-o", "out.tar"]),
        ("tarkit.cli.tar2tsv", ["-f", "cls", "in.tar"]),
    ],
)
def test_a_stream_tool_reading_a_file_imports_no_heavy_module(
    archive: Path, module: str, args: list[str]
) -> None:
    modules = imported_modules(module, args, archive)
    assert "tarkit" in modules
    assert not modules & HEAVY, sorted(modules & HEAVY)
    assert not modules & NOT_FOR_PLAIN_READS, sorted(modules & NOT_FOR_PLAIN_READS)


def test_tarcat_reading_stdin_loads_no_commit_and_no_manifest(archive: Path) -> None:
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(' '.join(sorted(sys.modules)), file=sys.stderr))\n"
        "sys.argv = ['tarcat']\n"
        "from tarkit.cli.tarcat import main\n"
        "main()\n"
    )
    with open(archive / "in.tar", "rb") as stdin:
        result = subprocess.run([sys.executable, "-c", probe], stdin=stdin, cwd=archive,
                                capture_output=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(b"a.cls")
    modules = set(result.stderr.decode().split())
    unwanted = {"tarkit.storage.commit", "tarkit.format.manifest", "tarkit.storage.manifests"}
    assert not modules & (HEAVY | unwanted), sorted(modules & (HEAVY | unwanted))


@pytest.mark.parametrize("module", ["tarkit.cli.tarsplit", "tarkit.cli.tarcat", "tarkit"])
def test_importing_a_tool_or_tarkit_loads_none_of_the_library_behind_it(module: str) -> None:
    # (tarsplit's run loads writing/'s ShardWriter; its command module alone must not)
    probe = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    modules = set(result.stdout.split())
    library = {m for m in modules if m.startswith(("tarkit.stream", "tarkit.writing"))}
    assert not modules & HEAVY and not library, sorted(modules & HEAVY | library)
