"""Every command has --help text and a page in docs/; the README keeps its promises."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, run

from tarkit.cli.main import COMMANDS

# Commands whose page is a guide rather than docs/<tool>.md.
PAGES = {"shard": "sharding.md", "map": "processing.md", "demo": "demo.md"}


def help_options(text: str) -> list[list[str]]:
    """The spellings of each option in ``--help`` (``["-c", "--count"]``), but --help."""
    options = []
    for line in text.split("Options:", 1)[-1].splitlines():
        names = re.match(r"\s+(-[\w-]+(?:\s*[,/]\s*-[\w-]+)*)", line)
        if names:
            spellings = re.split(r"\s*[,/]\s*", names[1])
            if "--help" not in spellings:
                options.append(spellings)
    return options


@pytest.mark.parametrize("name,module", [(c[0], c[1]) for c in COMMANDS])
def test_every_command_has_help_and_a_docs_page_naming_each_option(name: str, module: str) -> None:
    result = run(["tarkit", name, "--help"])
    assert result.returncode == 0, result.stderr
    assert b"Usage:" in result.stdout
    page = ROOT / "docs" / PAGES.get(name, f"{module}.md")
    assert page.exists(), f"docs page {page.name} for `tarkit {name}` is missing"
    text = page.read_text()
    assert "```" in text, f"{page.name} has no example"
    missing = [
        spellings[-1]
        for spellings in help_options(result.stdout.decode())
        if not any(re.search(f"(?<![\\w-]){o}(?![\\w-])", text) for o in spellings)
    ]
    assert not missing, f"{page.name} does not mention {missing} of `tarkit {name} --help`"


def test_every_console_script_is_a_tarkit_subcommand() -> None:
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts.pop("tarkit") == "tarkit.cli.main:main"
    assert {s: f"tarkit.cli.{s}:main" for s in scripts} == scripts
    assert set(scripts) <= {module for _, module, _, _ in COMMANDS}
    assert sorted(p.name for p in (ROOT / "bin").iterdir() if p.name in scripts) == sorted(scripts)


def test_every_relative_link_in_the_readme_and_docs_leads_to_a_file() -> None:
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.name} links {target}, not found"


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
