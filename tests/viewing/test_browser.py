"""tarkit view in a real headless browser (Debian's chromium and chromedriver, driven by
Selenium): the images drawn (read off a screenshot), scripts in fields inert, paging, a
jump to an index and to a key, the --where box, and a remote source.

One browser for the module; skipped where chromium, its driver or Selenium is absent
(``bin/setup dev`` installs them, and CI runs these).
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from shard_server import ShardServer
from viewed_shards import BLUE, HOSTILE, RED, serving, write_dataset

from tarkit.stream.filters import ExpressionError, where

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium and chromium-driver are not installed (bin/setup dev installs them)",
)
PER_PAGE = 4
# Without these, Chromium tries to reach hosts outside this machine.
FLAGS = ("--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
         "--disable-background-networking --disable-component-update --disable-sync "
         "--window-size=1200,900 --force-device-scale-factor=1").split()  # fmt: skip


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="tarkit-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(20)
    driver.set_script_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("browsed"), 10, hostile=True)


@pytest.fixture(scope="module")
def server(dataset: Path) -> Iterator[Any]:
    with serving([str(dataset)], per_page=PER_PAGE) as running:
        yield running


def wait(driver: Any, script: str, timeout: float = 10) -> Any:
    """The first truthy value of ``script`` (a function body), asked until ``timeout``."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(
        lambda d: d.execute_script(script)
    )


SHOWN = """
const cards = [...document.querySelectorAll('#grid .sample')];
const images = [...document.images];
if (!cards.length || document.getElementById('status').textContent) return null;
if (!images.every(i => i.complete)) return null;
return cards.map(c => Number(c.dataset.position));
"""


def open_page(driver: Any, url: str) -> list[int]:
    """Load ``url`` and wait until its page of samples and their images are shown."""
    driver.get(url)
    return list(wait(driver, SHOWN))


def positions(driver: Any, previous: list[int]) -> list[int]:
    """The positions shown once they are no longer ``previous``."""
    return list(wait(driver, f"const p = (() => {{{SHOWN}}})(); "
                             f"return p && JSON.stringify(p) !== '{json.dumps(previous)}' && p;"))  # fmt: skip


def pixel(driver: Any, shot: Image.Image, selector: str) -> tuple[int, int, int]:
    """The screenshot's colour at the middle of the element ``selector``."""
    box = driver.execute_script(
        "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
        "return [r.left + r.width / 2, r.top + r.height / 2];",
        selector,
    )
    return shot.getpixel((int(box[0]), int(box[1])))[:3]  # type: ignore[index]


def near(colour: tuple[int, int, int], expected: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 24 for a, b in zip(colour, expected, strict=True))


def test_the_page_draws_each_samples_image(browser: Any, server: Any) -> None:
    assert open_page(browser, server.url) == [0, 1, 2, 3]
    shot = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
    assert near(pixel(browser, shot, '[data-position="0"] [data-field="jpg"] img'), RED)
    assert near(pixel(browser, shot, '[data-position="1"] [data-field="jpg"] img'), BLUE)
    assert near(pixel(browser, shot, '[data-position="0"] [data-field="svg"] img'), (0, 255, 0))
    text = browser.execute_script(
        "return [...document.querySelectorAll('[data-position=\"1\"] .field')].map(f => f.innerText)"
    )
    assert any("1 · dog" in field for field in text)
    assert any('"width": 65' in field for field in text)


def test_scripts_in_fields_never_run(browser: Any, server: Any) -> None:
    open_page(browser, server.url)
    assert browser.title.startswith("tarkit view: ")
    assert browser.execute_script("return window.pwned") is None
    assert browser.execute_script("return document.scripts.length") == 1  # view.js alone
    shown = browser.execute_script(
        "return [...document.querySelectorAll('[data-position=\"0\"] pre')].map(p => p.textContent)"
    )
    assert HOSTILE["txt"].decode() in shown and HOSTILE["html"].decode() in shown
    assert (
        browser.execute_script("return document.querySelectorAll('#grid img[onerror]').length") == 0
    )
    svg = browser.execute_script(
        "const i = document.querySelector('[data-field=\"svg\"] img'); return [i.naturalWidth, i.src]"
    )
    assert svg[0] == 30  # drawn as an image, where no script runs
    for field in ("svg", "html", "txt"):  # each opened on its own: nothing runs either
        browser.get(f"{server.url}field/0/{field}")
        wait(browser, "return document.readyState === 'complete'")
        assert browser.title != "pwned"
        assert browser.execute_script("return window.pwned") is None


def test_paging_and_jumps_to_an_index_and_a_key(browser: Any, server: Any) -> None:
    first = open_page(browser, server.url)
    browser.find_element("id", "next").click()
    second = positions(browser, first)
    assert second == [4, 5, 6, 7]
    browser.find_element("id", "previous").click()
    assert positions(browser, second) == [0, 1, 2, 3]
    browser.find_element("id", "index").send_keys("7\n")
    assert positions(browser, first) == [7, 8, 9]
    assert browser.find_element("id", "next").get_attribute("disabled") is not None
    browser.find_element("id", "key").send_keys("k002\n")
    assert positions(browser, [7, 8, 9]) == [2, 3, 4, 5]
    found = browser.execute_script(
        "return [...document.querySelectorAll('.found')].map(c => c.dataset.position)"
    )
    assert found == ["2"]
    browser.find_element("id", "key").clear()
    browser.find_element("id", "key").send_keys("nothing\n")
    wait(browser, "return document.getElementById('error').textContent")
    assert browser.find_element("id", "error").text == "no sample has the key nothing"


def test_the_where_box_filters_and_shows_errors_as_the_cli_words_them(
    browser: Any, server: Any
) -> None:
    first = open_page(browser, server.url)
    box = browser.find_element("id", "where")
    box.send_keys("cls == 1 and json.width > 64\n")
    kept = positions(browser, first)
    assert kept == [1, 3, 5, 7]
    browser.find_element("id", "next").click()
    assert positions(browser, kept) == [9]
    box.clear()
    box.send_keys("json.width >\n")
    wait(browser, "return document.getElementById('error').textContent")
    with pytest.raises(ExpressionError) as expected:
        where("json.width >")
    assert browser.find_element("id", "error").text == str(expected.value)


def test_a_remote_source_read_in_order(browser: Any, tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path, 6, 3, indexed=False, suffix=".tar.gz")
    remote = ShardServer()
    try:
        for path in tmp_path.iterdir():
            remote.files[f"/d/{path.name}"] = path.read_bytes()
        with serving([f"{remote.url}/d/{manifest.name}"], per_page=PER_PAGE) as running:
            assert open_page(browser, running.url) == [0, 1, 2, 3]
            drawn = browser.execute_script("return [...document.images].map(i => i.naturalWidth)")
            assert drawn == [64] * PER_PAGE
            facts = browser.find_element("id", "facts").text
            assert facts.startswith("6 samples in 2 shards, read in order")
    finally:
        remote.stop()
