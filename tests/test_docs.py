"""Every command has --help text and a page in docs/; the README keeps its promises."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, run

from tarkit.cli.main import COMMANDS

# Commands whose page is a guide rather than docs/<tool>.md.
PAGES = {"shard": "sharding.md", "map": "processing.md", "demo": "demo.md"}


@pytest.mark.parametrize("name,module", [(c[0], c[1]) for c in COMMANDS])
def test_every_command_has_help_and_a_docs_page(name: str, module: str) -> None:
    result = run(["tarkit", name, "--help"])
    assert result.returncode == 0, result.stderr
    assert b"Usage:" in result.stdout
    page = ROOT / "docs" / PAGES.get(name, f"{module}.md")
    assert page.exists(), f"docs page {page.name} for `tarkit {name}` is missing"
    assert "```" in page.read_text(), f"{page.name} has no example"


def test_readme_shows_exactly_two_setup_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("##", 1)[0]
    commands = re.findall(r"^(bash bin/\S+)", setup, flags=re.M)
    assert commands == ["bash bin/demo", "bash bin/test"]
    assert "bin/test" in (ROOT / ".ci" / "run").read_text()


def test_docs_index_links_every_page_that_exists() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    for page in (ROOT / "docs").glob("*.md"):
        if page.name != "index.md":
            assert f"({page.name})" in index, f"docs/index.md does not link {page.name}"
