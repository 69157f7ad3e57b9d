"""Shards for the viewer's tests, and a viewer served in this process.

:func:`write_dataset` writes ``samples`` samples over shards of ``per_shard``: keys
``k000``…, a solid-colour JPEG (:data:`RED` for even positions, :data:`BLUE` for odd
ones), ``cls`` (position % 2, named by ``classes.json``: cat, dog), JSON and text; with
``hostile``, sample 0 also carries a ``txt``, ``svg`` and ``html`` whose scripts would
set ``window.pwned`` and the title if they ever ran. Each shard gets its index beside it
and the set a manifest.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import select
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from PIL import Image

from tarkit.format.classes import class_names_json
from tarkit.format.index import SUFFIX, index_stream
from tarkit.format.manifest import Manifest
from tarkit.format.tar_writer import TarWriter
from tarkit.storage import publish
from tarkit.viewing import ViewServer, open_view
from tarkit.writing.index import index_shard

RED, BLUE = (255, 0, 0), (0, 0, 255)
PWN = "window.pwned = 1; document.title = 'pwned'"
HOSTILE = {
    "txt": f'<script>{PWN}</script><img src=x onerror="{PWN}">'.encode(),
    "svg": (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="30" height="30" onload="{PWN}">'
        f'<script>{PWN}</script><rect width="30" height="30" fill="#00ff00"/></svg>'
    ).encode(),
    "html": f'<html><body onload="{PWN}"><script>{PWN}</script></body></html>'.encode(),
}


def jpeg(colour: tuple[int, int, int], size: tuple[int, int] = (64, 48)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "JPEG", quality=95)
    return out.getvalue()


def sample_fields(position: int, hostile: bool = False) -> dict[str, bytes]:
    fields = {
        "jpg": jpeg(RED if position % 2 == 0 else BLUE),
        "cls": str(position % 2).encode(),
        "json": json.dumps({"position": position, "width": 64 + position}).encode(),
        "txt": f"sample number {position}".encode(),
    }
    if hostile and position == 0:
        fields.update(HOSTILE)
    return fields


def write_shard(path: Path, samples: list[tuple[str, dict[str, bytes]]]) -> Path:
    data = io.BytesIO()
    with TarWriter(data) as writer:
        for key, fields in samples:
            for field, value in fields.items():
                writer.add(f"{key}.{field}", value)
    path.write_bytes(gzip.compress(data.getvalue(), mtime=0) if path.suffix == ".gz" else
                     data.getvalue())  # fmt: skip
    return path


def write_index(shard: Path) -> Path:
    with open(shard, "rb") as stream:
        data = index_stream(stream, str(shard))
    index = Path(str(shard) + SUFFIX)
    index.write_bytes(data)
    return index


def write_dataset(
    root: Path,
    samples: int = 10,
    per_shard: int = 4,
    *,
    hostile: bool = False,
    indexed: bool = True,
    suffix: str = ".tar",
) -> Path:
    """The dataset described in the module docstring, in ``root``; its manifest's path."""
    root.mkdir(parents=True, exist_ok=True)
    shards = []
    for first in range(0, samples, per_shard):
        positions = range(first, min(samples, first + per_shard))
        path = root / f"d-{first // per_shard:03d}{suffix}"
        write_shard(path, [(f"k{p:03d}", sample_fields(p, hostile)) for p in positions])
        if indexed:
            write_index(path)
        shards.append(path)
    manifest = root / "manifest.json"
    entries = [index_shard(str(p), manifest_path=str(manifest)) for p in shards]
    publish(str(manifest), Manifest(entries, str(manifest)).to_bytes())
    (root / "classes.json").write_bytes(class_names_json(["cat", "dog"]))
    return manifest


@contextmanager
def serving(sources: list[str], **options: object) -> Iterator[ViewServer]:
    """``open_view(sources, **options)`` served by a thread of this process."""
    server = open_view(sources, **options)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        server.close()
        thread.join(5)


def printed_address(process: subprocess.Popen, timeout: float = 60) -> str:
    """The address in the first line a started ``tarkit view`` prints (``… at URL …``)."""
    out, line = process.stdout.fileno(), b""  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout
    while b"\n" not in line and time.monotonic() < deadline:
        if select.select([out], [], [], 0.5)[0]:
            chunk = os.read(out, 4096)
            if not chunk:
                break
            line += chunk
    if b" at http://" not in line:
        process.kill()
        raise AssertionError(f"tarkit view printed no address: {line!r} {process.communicate()}")
    return line.decode().split(" at ", 1)[1].split()[0]
