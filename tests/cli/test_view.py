"""tarkit view through the real command: the address printed, the page served until
Ctrl-C (exit 130, no traceback) or SIGTERM (143), a warning for another address and for
shards read in order, bad input in one line with exit 2, and no torch or numpy loaded."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import BIN, run
from test_tar2tsv import module_probe
from viewed_shards import printed_address, write_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("cli"), 6, 3)


def start(args: list[str], cwd: Path | None = None, command: list[str] | None = None
          ) -> tuple[subprocess.Popen, str]:  # fmt: skip
    """``tarkit view --no-browser ARGS`` started, and the address it prints."""
    process = subprocess.Popen([*(command or [str(BIN / "tarkit"), "view"]), "--no-browser", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)  # fmt: skip
    return process, printed_address(process)


def stop(process: subprocess.Popen, signum: int) -> tuple[int, str, str]:
    process.send_signal(signum)
    out, err = process.communicate(timeout=20)
    return process.returncode, out.decode(), err.decode()


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_serves_the_page_until_ctrl_c_then_exits_130_without_a_traceback(dataset: Path) -> None:
    process, url = start([str(dataset)])
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        assert get(url + "api/info")["samples"] == 6
        page = get(url + "api/page?start=4")
        assert [s["key"] for s in page["samples"]] == ["k004", "k005"]
        port = url.rsplit(":", 1)[1].strip("/")
        taken = run(["tarkit", "view", "--no-browser", "--port", port, str(dataset)], timeout=60)
    finally:
        status, out, err = stop(process, signal.SIGINT)
    assert (status, out, err) == (130, "", "")
    assert (taken.returncode, taken.stdout) == (2, b"")
    assert taken.stderr == (f"tarkit view: error: cannot listen on 127.0.0.1 port {port}: "
                            "Address already in use\n")  # fmt: skip


def test_another_address_and_shards_without_index_are_each_a_warning(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path, 4, 2, indexed=False, suffix=".tar.gz")
    process, url = start(["--host", "0.0.0.0", "--port", "0", str(manifest)])
    try:
        assert url.startswith("http://127.0.0.1:")
        assert [s["key"] for s in get(url + "api/page?count=2&where=cls%20%3D%3D%201")["samples"]] == [
            "k001", "k003"]  # fmt: skip
    finally:
        status, _, err = stop(process, signal.SIGTERM)
    assert status == 143
    port = url.rsplit(":", 1)[1].strip("/")
    address, order = err.splitlines()
    assert address == (f"tarkit view: warning: serving on 0.0.0.0: anyone who can reach this "
                       f"machine on port {port} can read the data (no password)")  # fmt: skip
    assert order.startswith("tarkit view: warning: reading the shards in order, without random "
                            "access: ")  # fmt: skip
    assert order.endswith("random access into gzip is not possible: a compressed shard is read "
                          "from its start only (keep random-access shards uncompressed: tarcat "
                          "it to a .tar and index that)")  # fmt: skip


@pytest.mark.parametrize(
    "args,message",
    [
        (["-"], "tarkit view reads its shards more than once, so not from stdin"),
        (["--where", "cls ==", "M"], "--where: expected a value after '==' at column 7"),
        (["--per-page", "0", "M"], "--per-page must be between 1 and 1000 (got 0)"),
        (["--port", "70000", "M"], "--port must be between 0 and 65535 (got 70000)"),
        (["nothing.tar"], "nothing.tar: no such shard (1 of 1 shards do not exist)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(dataset: Path, args: list[str], message: str) -> None:
    args = [str(dataset) if a == "M" else a for a in args]
    result = run(["tarkit", "view", "--no-browser", *args], cwd=dataset.parent, timeout=60)
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.startswith(f"tarkit view: error: {message}")
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n")


def test_never_imports_torch_or_numpy(dataset: Path, tmp_path: Path) -> None:
    probe = module_probe("tarkit.cli.view", ["--no-browser", str(dataset)])
    process, url = start([], cwd=tmp_path, command=[sys.executable, "-c", probe])
    get(url + "api/page")  # a page read and described
    assert stop(process, signal.SIGINT)[0] == 130
    modules = set((tmp_path / "modules.txt").read_text().split())
    assert "tarkit" in modules and not modules & {"torch", "numpy"}
