"""Measure tarkit, GNU tar and Python's tarfile on every case of the hostile corpus.

Run once by hand; it prints the Markdown table of docs/robustness.md:

    .venv/bin/python tests/robustness/compare.py > /tmp/table.md

- tarkit: ``tarcat CASE`` (with the case's options): exit status, samples written.
- GNU tar: ``tar -tf CASE``: exit status, members listed, its first message.
- tarfile: ``tarfile.open(mode="r|*")`` (stream mode, as webdataset reads), reading every
  member's data: members read, and the exception if one is raised.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from corpus import Case, cases  # noqa: E402

from tarkit.format.samples import group_samples  # noqa: E402
from tarkit.format.tar import END_OF_ARCHIVE, read_members  # noqa: E402

BIN = Path(sys.executable).parent


def short(text: str, width: int = 70) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def tarkit_result(path: Path, case: Case) -> str:
    result = subprocess.run([str(BIN / "tarcat"), *case.args, str(path)], capture_output=True)
    out = result.stdout
    if result.returncode != 0:
        out += END_OF_ARCHIVE
    count = sum(1 for _ in group_samples(read_members(io.BytesIO(out)))) if out else 0
    text = f"exit {result.returncode}, {plural(count, 'sample')}"
    errors = [line for line in result.stderr.decode(errors="replace").splitlines()
              if ": error: " in line]  # fmt: skip
    if errors:
        text += ": " + short(errors[0].split(f"{path}: ", 1)[-1], 60)
    return text


def gnu_tar_result(path: Path, case: Case) -> str:
    args = ["tar", "-tf", str(path)] + (["-i"] if "--ignore-zeros" in case.args else [])
    result = subprocess.run(args, capture_output=True, env=dict(os.environ, LC_ALL="C"))
    listed = len(result.stdout.splitlines())
    text = f"exit {result.returncode}, {listed} listed"
    message = [line for line in result.stderr.decode(errors="replace").splitlines() if line]
    if message:
        text += ": " + short(message[0].removeprefix("tar: "), 50)
    return text


def tarfile_result(data: bytes, case: Case) -> str:
    count = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|*",
                          ignore_zeros="--ignore-zeros" in case.args) as archive:  # fmt: skip
            for info in archive:
                file = archive.extractfile(info) if info.isreg() else None
                if file is not None:
                    file.read()
                count += 1
    except Exception as exc:  # noqa: BLE001 - any exception is a result here
        return f"{plural(count, 'member')}, then {type(exc).__name__}: " + short(str(exc), 40)
    return plural(count, "member")


def main() -> None:
    rows = [
        "| case | expected | tarkit (`tarcat`) | GNU tar 1.34 (`tar -t`) | tarfile `r\\|*` |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as directory:
        for case in cases():
            path = Path(directory) / "case.tar"
            path.write_bytes(case.data)
            options = f" `{' '.join(case.args)}`" if case.args else ""
            expected = f"{case.status}, {plural(len(case.samples), 'sample')}"
            rows.append(
                f"| {case.name}{options} | {expected} | {tarkit_result(path, case)} | "
                f"{gnu_tar_result(path, case)} | {tarfile_result(case.data, case)} |"
            )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
