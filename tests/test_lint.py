"""The house rules that tools can check: ruff's lint and format, and mypy on the library."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

PYTHON_TREES = ["tarkit", "tests", "bench", "fuzz"]


def check(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_ruff_finds_nothing() -> None:
    check("ruff", "check", *PYTHON_TREES)


def test_code_is_formatted_as_ruff_formats_it() -> None:
    check("ruff", "format", "--check", *PYTHON_TREES)


def test_mypy_finds_no_type_errors_in_the_library() -> None:
    check("mypy", "tarkit")
