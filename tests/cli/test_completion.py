"""Shell completion through click's protocol (``_TARCAT_COMPLETE=source_bash tarcat``),
driven by a real bash: the script each tool prints completes its options and, for
``tarkit``, its subcommands."""

from __future__ import annotations

import pytest
from conftest import run_shell

from tarkit.cli.main import COMMANDS

TOOLS = ["tarkit", *sorted({module for _, module, _, _ in COMMANDS if module.startswith("tar")})]


def complete(tool: str, words: str) -> list[str]:
    """What bash's completion of ``words`` offers, with ``tool``'s script sourced."""
    variable = f"_{tool.upper()}_COMPLETE"
    script = (
        f'eval "$({variable}=source_bash {tool})"\n'
        f"COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\n"
        f"_{tool}_completion {tool}\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    result = run_shell(script)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode().split()


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_prints_a_bash_script_that_completes_its_options(tool: str) -> None:
    assert "--help" in complete(tool, f"{tool} --he")


def test_options_and_subcommands_complete_by_prefix() -> None:
    assert complete("tarsplit", "tarsplit --num") == ["--num-shards"]
    assert complete("tarcat", "tarcat --pro") == ["--progress"]
    assert complete("tarkit", "tarkit sp") == ["split"]
    assert complete("tarkit", "tarkit split --num") == ["--num-shards"]


def test_zsh_and_fish_scripts_are_printed_too() -> None:
    result = run_shell("_TARCAT_COMPLETE=source_zsh tarcat; _TARCAT_COMPLETE=source_fish tarcat")
    assert result.returncode == 0, result.stderr
    assert b"#compdef tarcat" in result.stdout and b"complete --command tarcat" in result.stdout
