"""Issue 24: ``tarkit view``'s first page of 48 images over 1,000,000 indexed samples.

The dataset is a version 2 manifest of 1,000 shards of 1,000 samples (``train-%06d.tar``,
indexes ``train-%06d.tar.idx``), of which only shards 0 and 500 exist: real shards of
photo-sized JPEGs (``data.photo_shards``, 30–75 KB each) with their indexes. A page only
reads the shards it shows, so the others need not be there (as in
``tests/synthetic_dataset.py``). Under ``--quick``, shards of 100 samples (100,000 in all).

Each round starts the real command (``tarkit view --no-browser manifest.json``) and times:

- **start-up**: from the command's start to the address it prints (the manifest read);
- **first page (HTTP)**: what a browser asks for a first page, asked by a client here: the
  page, its script and style, ``/api/info``, ``/api/page`` (48 samples described) and the
  48 images over 6 connections, as a browser opens them;
- **page at 500,000**: the same for the page at position 500,000 (another shard, opened
  then);
- **first page (Chromium)**: the page loaded in headless Chromium, from navigation start
  to the 48 images decoded (``performance.now()``), when chromium and Selenium are
  installed.

The goal: the first page of 48 images in under 1 s.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from data import ROOT, SETTINGS, VENV_BIN, photo_shards, sample_count, shell_env

from tarkit.format.columns import columns_bytes
from tarkit.format.index import index_stream

TITLE = "tarkit view: the first page of 48 images over 1,000,000 indexed samples (issue 24)"
ORDER = 50
SHARDS = 1000
MIDDLE = 500  # the other shard that exists
PAGE = 48
CONNECTIONS = 6  # a browser's connections to one host
GOAL = 1.0  # seconds for the first page


def run(workdir: Path, quick: bool) -> str:
    sys.path.insert(0, str(ROOT / "tests"))  # viewed_shards: the address a view prints
    manifest, samples = _dataset(workdir, photo_shards(None, 6))
    middle = samples // 2
    rounds: dict[str, list[float]] = {"start-up": [], "first page (HTTP)": [],
                                      f"page at {middle:,} (HTTP)": []}  # fmt: skip
    browser = _browser()
    if browser is not None:
        rounds["first page (Chromium)"] = []
    try:
        for round_number in range(1 + SETTINGS.repeat):  # the first round untimed
            figures = _round(manifest, middle, browser)
            if round_number:
                for name, seconds in figures.items():
                    rounds[name].append(seconds)
    finally:
        if browser is not None:
            browser.quit()
    lines = [
        f"{samples:,} samples in {SHARDS:,} shards (a version 2 manifest; shards 0 and "
        f"{MIDDLE} exist, {samples // SHARDS:,} photo-sized JPEGs each), median of "
        f"{SETTINGS.repeat} rounds, each a new `tarkit view --no-browser manifest.json`:",
        "",
        "| what | s | goal |",
        "| --- | ---: | --- |",
    ]
    for name, values in rounds.items():
        seconds = statistics.median(values)
        goal = ""
        if name.startswith("first page"):
            goal = f"< {GOAL:.0f} s: {'PASS' if seconds < GOAL else 'MISS'}"
        lines.append(f"| {name} | {seconds:.3f} | {goal} |")
    if browser is None:
        lines += ["", "Chromium or Selenium is not installed: no figure in a browser."]
    lines += [
        "",
        "A page of 48 is 48 positioned reads of an indexed shard (its index memory-mapped on "
        "the first), the samples kept for their images, which are then served from memory.",
        "",
    ]
    return "\n".join(lines)


def _dataset(workdir: Path, photos: list[Path]) -> tuple[Path, int]:
    """The manifest described in the module docstring, in ``workdir``, and its samples."""
    per_shard = sample_count(photos[0])
    sizes = array("q", [photos[0].stat().st_size]) * SHARDS
    for number, real in ((0, photos[0]), (MIDDLE, photos[1])):
        shard = workdir / f"train-{number:06d}.tar"
        shard.unlink(missing_ok=True)
        shard.symlink_to(real)
        with open(real, "rb") as stream:
            Path(f"{shard}.idx").write_bytes(index_stream(stream, str(shard)))
        sizes[number] = real.stat().st_size
    assert sample_count(photos[1]) == per_shard
    digests = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(SHARDS))
    columns = workdir / "manifest.columns"
    columns.write_bytes(columns_bytes(array("q", [per_shard]) * SHARDS, sizes, digests))
    manifest = workdir / "manifest.json"
    manifest.write_text(json.dumps({
        "format": "tarkit-manifest", "version": 2, "samples": per_shard * SHARDS,
        "bytes": sum(sizes), "shards": SHARDS, "names": {"pattern": "train-%06d.tar", "first": 0},
        "columns": columns.name, "index": "train-%06d.tar.idx",
    }, indent=1) + "\n")  # fmt: skip
    return manifest, per_shard * SHARDS


def _round(manifest: Path, middle: int, browser: object) -> dict[str, float]:
    figures = {}
    start = time.perf_counter()
    process = subprocess.Popen(
        [str(VENV_BIN / "tarkit"), "view", "--no-browser", str(manifest)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=shell_env(),
    )  # fmt: skip
    try:
        from viewed_shards import printed_address

        url = printed_address(process)
        figures["start-up"] = time.perf_counter() - start
        host, port = url.split("//", 1)[1].strip("/").split(":")
        figures["first page (HTTP)"] = _page(host, int(port), 0)
        figures[f"page at {middle:,} (HTTP)"] = _page(host, int(port), middle)
        if browser is not None:
            process.send_signal(signal.SIGINT)  # a new server: its first page, cold
            process.communicate(timeout=30)
            process = subprocess.Popen(
                [str(VENV_BIN / "tarkit"), "view", "--no-browser", str(manifest)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=shell_env(),
            )  # fmt: skip
            figures["first page (Chromium)"] = _in_browser(browser, printed_address(process))
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    return figures


def _page(host: str, port: int, start: int) -> float:
    """Seconds to get what a browser gets for the page at ``start``."""
    began = time.perf_counter()
    connections = [http.client.HTTPConnection(host, port, timeout=30) for _ in range(CONNECTIONS)]

    def get(connection: http.client.HTTPConnection, path: str) -> bytes:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200, (path, response.status, body[:200])
        return body

    try:
        for path in ("/", "/static/view.js", "/static/view.css", "/api/info"):
            get(connections[0], path)
        page = json.loads(get(connections[0], f"/api/page?start={start}&count={PAGE}"))
        images = [f["url"] for s in page["samples"] for f in s["fields"] if f["kind"] == "image"]
        assert len(images) == PAGE, len(images)
        lanes = [images[i::CONNECTIONS] for i in range(CONNECTIONS)]
        with ThreadPoolExecutor(CONNECTIONS) as pool:
            list(pool.map(lambda lane: [get(lane[0], u) for u in lane[1]],
                          zip(connections, lanes, strict=True)))  # fmt: skip
    finally:
        for connection in connections:
            connection.close()
    return time.perf_counter() - began


_LOADED = (
    "const i = [...document.images];"
    f"return i.length === {PAGE} && i.every(x => x.complete && x.naturalWidth > 0)"
    " ? performance.now() : null;"
)


def _browser() -> object:
    """Headless Chromium driven by Selenium, or None when either is missing."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    if chromium is None or driver is None:
        return None
    options = webdriver.ChromeOptions()
    for flag in ("--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                 "--disable-background-networking --disable-component-update "
                 "--disable-sync --window-size=1280,1000").split():  # fmt: skip
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='tarkit-bench-')}")
    options.binary_location = chromium
    return webdriver.Chrome(service=Service(driver), options=options)


def _in_browser(browser: object, url: str) -> float:
    """Seconds from navigation start to the 48 images decoded, in the browser."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get("about:blank")  # type: ignore[attr-defined]
    browser.get(url)  # type: ignore[attr-defined]
    waited = WebDriverWait(browser, 30, poll_frequency=0.01)
    milliseconds = waited.until(lambda d: d.execute_script(_LOADED))
    return float(milliseconds) / 1000
