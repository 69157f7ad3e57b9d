"""The viewer's HTTP server, asked over real sockets on 127.0.0.1: what each field is
served as and under which policy, nothing but the source's samples reachable, Host
headers of other names refused (DNS rebinding), read-only, ranges, a converted image,
and a remote source behind the test HTTP server."""

from __future__ import annotations

import http.client
import io
import json
import time
from pathlib import Path

import pytest
from conftest import run
from PIL import Image
from shard_server import ShardServer
from viewed_shards import sample_fields, serving, write_dataset, write_shard

from tarkit.stream.filters import where
from tarkit.viewing.server import FIELD_POLICY, PAGE_POLICY


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("served"), 10, hostile=True)


@pytest.fixture(scope="module")
def server(dataset: Path):  # type: ignore[no-untyped-def]
    with serving([str(dataset)]) as running:
        yield running


def ask(server, path: str, method: str = "GET", headers: dict | None = None):  # type: ignore[no-untyped-def]
    """(status, headers, body) of one request; Host as a browser on this machine sends it."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request(method, path, headers={"Host": f"127.0.0.1:{port}", **(headers or {})})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.mark.parametrize(
    "field,kind,disposition",
    [
        ("jpg", "image/jpeg", "inline"),
        ("svg", "image/svg+xml", "inline"),
        ("html", "text/plain; charset=utf-8", "inline"),
        ("txt", "text/plain; charset=utf-8", "inline"),
        ("json", "application/json", "inline"),
    ],
)
def test_a_field_is_served_as_its_extension_says_under_a_policy_that_runs_nothing(
    server, field: str, kind: str, disposition: str
) -> None:  # type: ignore[no-untyped-def]
    status, headers, body = ask(server, f"/field/0/{field}")
    assert status == 200 and body == sample_fields(0, hostile=True)[field]
    assert headers["Content-Type"] == kind
    assert headers["Content-Security-Policy"] == FIELD_POLICY == "default-src 'none'; sandbox"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Cross-Origin-Resource-Policy"] == "same-origin"
    assert headers["Content-Disposition"] == f"{disposition}; filename*=UTF-8''k000.{field}"
    assert "Access-Control-Allow-Origin" not in headers


def test_the_page_has_a_strict_policy_and_no_inline_script(server) -> None:  # type: ignore[no-untyped-def]
    status, headers, body = ask(server, "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"] == PAGE_POLICY
    for rule in ("default-src 'none'", "script-src 'self'", "style-src 'self'",
                 "img-src 'self' data:", "media-src 'self'"):  # fmt: skip
        assert rule in PAGE_POLICY
    assert b'<script src="/static/view.js"' in body and b"<script>" not in body
    assert b"style=" not in body
    status, headers, script = ask(server, "/static/view.js")
    assert status == 200 and headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert b"innerHTML" not in script and b"insertAdjacentHTML" not in script


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/../../../../etc/passwd",
        "/static/../server.py",
        "/static/%2e%2e/server.py",
        "/static/",
        "/field/0/..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/field/../../../etc/passwd",
        "/field/0/%2fetc%2fpasswd",
        "/field/-1/jpg",
        "/field/0x1/jpg",
        "/field/0/",
        "/api/../../etc/passwd",
        "/manifest.json",
        "/d-000.tar",
    ],
)
def test_nothing_but_the_sources_samples_can_be_reached(server, path: str) -> None:  # type: ignore[no-untyped-def]
    status, headers, body = ask(server, path)
    assert status == 404, (status, body[:200])
    assert b"root:" not in body and b"import" not in body and b"tarkit-manifest" not in body


@pytest.mark.parametrize(
    "host,allowed",
    [
        ("127.0.0.1:{port}", True),
        ("localhost:{port}", True),
        ("[::1]:{port}", True),
        ("LOCALHOST", True),
        ("attacker.example:{port}", False),
        ("localhost.attacker.example", False),
        ("127.0.0.1.nip.io:{port}", False),
    ],
)
def test_a_host_header_of_another_name_is_refused_against_dns_rebinding(
    server, host: str, allowed: bool
) -> None:  # type: ignore[no-untyped-def]
    port = server.server_address[1]
    status, _, body = ask(server, "/api/info", headers={"Host": host.format(port=port)})
    assert status == (200 if allowed else 403), body
    if not allowed:
        assert b"Host header refused" in body and b"samples" not in body


def test_only_reads_are_answered(server) -> None:  # type: ignore[no-untyped-def]
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        status, headers, body = ask(server, "/api/info", method)
        assert status == 501 and b"samples" not in body
    status, headers, body = ask(server, "/field/0/jpg", "HEAD")
    assert status == 200 and body == b""
    assert headers["Content-Length"] == str(len(sample_fields(0)["jpg"]))


def test_byte_ranges_for_audio_and_video_players(server) -> None:  # type: ignore[no-untyped-def]
    whole = sample_fields(0)["jpg"]
    status, headers, body = ask(server, "/field/0/jpg", headers={"Range": "bytes=10-19"})
    assert status == 206 and body == whole[10:20]
    assert headers["Content-Range"] == f"bytes 10-19/{len(whole)}"
    status, headers, body = ask(server, "/field/0/jpg", headers={"Range": "bytes=-5"})
    assert status == 206 and body == whole[-5:]
    status, headers, body = ask(server, "/field/0/jpg", headers={"Range": f"bytes={len(whole)}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{len(whole)}"
    status, _, body = ask(server, "/field/0/jpg", headers={"Range": "bytes=1-2,5-6"})
    assert status == 200 and body == whole  # several ranges: the whole field


def test_api_errors_are_the_messages_the_cli_prints(server) -> None:  # type: ignore[no-untyped-def]
    status, _, body = ask(server, "/api/page?where=json.width%20%3E")
    with pytest.raises(Exception) as expected:
        where("json.width >")
    assert status == 400 and json.loads(body) == {"error": str(expected.value)}
    status, _, body = ask(server, "/api/page?start=abc")
    assert status == 400 and "start must be a whole number" in json.loads(body)["error"]
    status, _, body = ask(server, "/field/3/png")
    assert status == 404 and json.loads(body) == {"error": "sample 3 (k003) has no field png"}
    status, _, body = ask(server, "/api/find?key=k007")
    assert json.loads(body) == {"position": 7, "next": None}


def test_the_summary_is_tarkit_stats_read_in_the_background(server) -> None:  # type: ignore[no-untyped-def]
    first = json.loads(ask(server, "/api/stats")[2])
    assert first["state"] in ("reading", "done")
    assert first["stats"]["samples"] == 10  # the manifest's figures at once
    deadline = time.monotonic() + 20
    state = first
    while state["state"] == "reading" and time.monotonic() < deadline:
        time.sleep(0.05)
        state = json.loads(ask(server, "/api/stats")[2])
    expected = run(["tarkit", "stats", "--json", str(server.pages.source)])
    assert state["state"] == "done" and state["stats"] == json.loads(expected.stdout)
    assert state["stats"]["classes"]["cls"]["labels"][1] == {"label": "1", "name": "dog",
                                                              "samples": 5}  # fmt: skip


def test_odd_field_names_and_images_a_browser_cannot_draw(tmp_path: Path) -> None:
    ppm = io.BytesIO()
    Image.new("RGB", (5, 4), (10, 200, 30)).save(ppm, "PPM")
    shard = write_shard(tmp_path / "odd.tar", [("a", {"x y%#?.txt": b"spaced", "ppm": ppm.getvalue(),
                                                       "weird": b"\x00\x01binary"})])  # fmt: skip
    with serving([str(shard)]) as running:
        page = json.loads(ask(running, "/api/page")[2])
        urls = {f["name"]: f["url"] for f in page["samples"][0]["fields"]}
        assert urls["x y%#?.txt"] == "/field/0/x%20y%25%23%3F.txt"
        assert ask(running, urls["x y%#?.txt"])[2] == b"spaced"
        status, headers, body = ask(running, urls["ppm"])
        assert urls["ppm"] == "/field/0/ppm?as=png" and headers["Content-Type"] == "image/png"
        assert Image.open(io.BytesIO(body)).getpixel((2, 2)) == (10, 200, 30)
        status, headers, body = ask(running, urls["weird"])
        assert headers["Content-Type"] == "application/octet-stream"
        assert headers["Content-Disposition"].startswith("attachment;")


def test_a_remote_source_behind_an_http_server(dataset: Path) -> None:
    remote = ShardServer()
    try:
        for path in dataset.parent.iterdir():
            remote.files[f"/data/{path.name}"] = path.read_bytes()
        with serving([f"{remote.url}/data/manifest.json"]) as running:
            info = json.loads(ask(running, "/api/info")[2])
            assert (info["samples"], info["indexed"]) == (10, True)
            page = json.loads(ask(running, "/api/page?start=5&count=3")[2])
            assert [s["key"] for s in page["samples"]] == ["k005", "k006", "k007"]
            assert ask(running, "/field/6/jpg")[2] == sample_fields(6)["jpg"]
            assert {r[0] for r in remote.ranges} >= {"/data/d-001.tar"}  # ranged reads
        del remote.files["/data/d-000.tar.idx"]  # no index: the shards read in order
        with serving([f"{remote.url}/data/d-{{000..002}}.tar"]) as running:
            info = json.loads(ask(running, "/api/info")[2])
            assert not info["indexed"] and "no shard index" in info["note"]
            page = json.loads(ask(running, "/api/page?start=8")[2])
            assert [s["key"] for s in page["samples"]] == ["k008", "k009"]
    finally:
        remote.stop()


def test_a_shard_changed_after_it_was_indexed_is_refused_not_shown(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path, 4, 4)
    with serving([str(manifest)]) as running:
        shard = tmp_path / "d-000.tar"
        data = bytearray(shard.read_bytes())
        data[data.index(b"sample number 2")] ^= 1  # a byte of sample 2 changed
        shard.write_bytes(bytes(data))
        status, _, body = ask(running, "/api/page?start=2&count=1")
        assert status == 500 and "changed after it was indexed" in json.loads(body)["error"]
