"""The house's rules, read off the code: which folder may import which, and where the
location kinds, private names, oversized modules and exception classes may not appear,
and that the map (docs/architecture.md) names every module.

See docs/architecture.md for the data flow and the reasons.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "tarkit"
# What each folder of tarkit may import besides itself (errors and sizes are for all).
ALLOWED = {
    "format": set(),
    "storage": {"format"},
    "stream": {"format", "storage"},
    "engines": {"format", "storage"},
    "writing": {"format", "storage", "stream", "engines"},
    "loading": {"format", "storage", "stream"},
    "processing": {"format", "storage", "stream", "engines", "writing"},
    "viewing": {"format", "storage", "stream", "processing"},
}
SHARED = {"errors", "sizes", "seeds"}
LONG_MODULES = {"format/tar.py"}  # the reader: one state machine, read in one place
MAX_LINES = 500
# The base of another library's exception class, by its name (``requests.HTTPError``).
FOREIGN_EXCEPTION = re.compile(r"(Error|Exception|Exit|Interrupt|Warning)$")


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def folder_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def imported(path: Path) -> list[tuple[str, list[str], int]]:
    """(absolute module, imported names, line) of every import of tarkit in ``path``,
    at any depth (imports inside functions too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ["tarkit", *path.relative_to(PACKAGE).parts[:-1]]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "tarkit" or module.startswith("tarkit."):
                found.append((module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tarkit"):
                    found.append((alias.name, [], node.lineno))
    return found


def targets(module: str, names: list[str]) -> set[str]:
    """The top-level parts of tarkit an import reaches (``from tarkit import stream``
    reaches ``stream``)."""
    parts = module.split(".")
    if len(parts) > 1:
        return {parts[1]}
    return set(names)


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_each_folder_imports_only_the_stages_before_it(folder: str) -> None:
    wrong = []
    for path in modules():
        if folder_of(path) != folder:
            continue
        for module, names, line in imported(path):
            reached = targets(module, names) - {folder} - SHARED - ALLOWED[folder]
            if reached:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} {names}")
    assert not wrong, "\n".join(wrong)


def test_the_cli_imports_only_public_names_of_the_library() -> None:
    wrong = []
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        for module, names, line in imported(path):
            if module.startswith("tarkit.cli"):
                continue
            private = [part for part in module.split(".") if part.startswith("_")]
            private += [name for name in names if name.startswith("_")]
            if private:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module} {names}")
    assert not wrong, "\n".join(wrong)


def test_no_module_of_tarkit_is_imported_under_another_librarys_name() -> None:
    """``from . import declare as typer`` would make a reader believe they read typer."""
    import importlib.util

    wrong = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not (
                node.level or (node.module or "").startswith("tarkit")
            ):
                continue
            for alias in node.names:
                if alias.asname and alias.asname != alias.name:
                    if importlib.util.find_spec(alias.asname) is not None:
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} as {alias.asname}")
    assert not wrong, "\n".join(wrong)


def string_tests(path: Path) -> list[int]:
    """Lines where code compares text with a location prefix ("://", "pipe:", "http://")."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prefixes = ("://", "pipe:", "http://", "https://", "file:", "s3://")
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Compare, ast.Call)):
            for child in ast.walk(node):
                if (
                    isinstance(child, ast.Constant)
                    and isinstance(child.value, str)
                    and child.value in prefixes
                ):
                    lines.append(node.lineno)
    return sorted(set(lines))


def test_only_storage_tells_location_kinds_apart_by_their_text() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in modules()
        if folder_of(path) != "storage"
        for line in string_tests(path)
    ]
    assert not wrong, "ask tarkit.storage.location(spec) instead:\n" + "\n".join(wrong)


def test_no_module_reads_another_librarys_frames() -> None:
    wrong = [
        str(path.relative_to(ROOT))
        for path in modules()
        if "_getframe" in path.read_text(encoding="utf-8")
    ]
    assert not wrong


def test_every_module_but_the_tar_reader_is_small_enough_to_read_in_one_sitting() -> None:
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in modules()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert set(long) <= LONG_MODULES, long


def reaches_into_its_dataset(path: Path) -> list[int]:
    """Lines where ``path`` sets an attribute of a ``dataset`` (``dataset.x = …``,
    ``self.dataset.x = …``) or reads one of its private names (``dataset._clock``)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
        if name == "dataset" and (isinstance(node.ctx, ast.Store) or node.attr.startswith("_")):
            lines.append(node.lineno)
    return lines


def test_the_loader_asks_its_dataset_through_its_interface_alone() -> None:
    # ShardDataset.attach(), next_epoch, derive(), fresh_state(), loaded_state: nothing
    # of the dataset is set from outside or read by a private name.
    assert reaches_into_its_dataset(PACKAGE / "loading" / "loader.py") == []


def class_bases(path: Path) -> list[tuple[str, list[str], int]]:
    """(name, the last part of each base's name, line) of every class in ``path``, nested
    ones too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(base).split("[")[0].rsplit(".", 1)[-1] for base in node.bases]
            found.append((node.name, bases, node.lineno))
    return found


def test_no_exception_class_is_defined_outside_errors_py() -> None:
    # An exception derives from a built-in one, from another library's (named so), or
    # from a class of tarkit that does (CarriedError, a carrier, is none): followed
    # through every module until none is new.
    builtin = {n for n, v in vars(builtins).items() if isinstance(v, type)
               and issubclass(v, BaseException)}  # fmt: skip
    classes = {path: class_bases(path) for path in modules()}
    ours = {name for found in classes.values() for name, _, _ in found}
    exceptions = set(builtin)
    while True:
        more = {
            name
            for found in classes.values()
            for name, bases, _ in found
            if name not in exceptions
            and any(
                b in exceptions or (b not in ours and FOREIGN_EXCEPTION.search(b)) for b in bases
            )
        }
        if not more:
            break
        exceptions |= more
    where = {
        f"{path.relative_to(ROOT)}:{line} {name}"
        for path, found in classes.items()
        for name, _, line in found
        if name in exceptions
    }
    in_errors = {w for w in where if w.startswith("tarkit/errors.py:")}
    assert len(in_errors) >= 10  # (the check sees the tree)
    assert not where - in_errors, "define it in tarkit/errors.py:\n" + "\n".join(
        sorted(where - in_errors)
    )


ARCHITECTURE = ROOT / "docs" / "architecture.md"
# A module as the map names it: its path below tarkit/, in backticks (`loading/epoch_layout.py`).
MAP_NAME = re.compile(r"`((?:\w+/)*\w+\.(?:py|c))`")


def test_the_map_names_every_module_by_its_path_and_none_that_is_gone() -> None:
    # Every .py (a folder's __init__.py too: its public names) and the compiled scanner's
    # source; a path under one of tarkit's folders that names no file is a room since
    # moved or renamed.
    rooms = {
        str(path.relative_to(PACKAGE))
        for path in [*modules(), *PACKAGE.rglob("*.c")]
        if "__pycache__" not in path.parts
    }
    named = set(MAP_NAME.findall(ARCHITECTURE.read_text(encoding="utf-8")))
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir()}
    gone = {name for name in named if name.split("/")[0] in folders} - rooms
    missing = sorted(rooms - named)
    assert not missing, "name these in docs/architecture.md by their path:\n" + "\n".join(missing)
    assert not gone, "docs/architecture.md names modules that are not there:\n" + "\n".join(
        sorted(gone)
    )
