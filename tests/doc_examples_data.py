"""The small real data the examples of README.md and docs/*.md run on, made with tarkit.

Every name an example reads is here (data-000.tar…, train.tar, photos/, plan.csv…), so
that a block runs as written in a copy of this directory. A block that needs more says so
in its ``<!-- setup: … -->`` marker (see tests/test_doc_examples.py).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import wave
from pathlib import Path

from PIL import Image

from tarkit import ShardWriter
from tarkit.format.tar_writer import TarWriter
from tarkit.writing.sample_encoder import SampleEncoder

COLORS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30), (30, 200, 200)]


def picture(index: int, size: tuple[int, int] = (16, 12), kind: str = "JPEG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, COLORS[index % len(COLORS)]).save(out, kind)
    return out.getvalue()


def sample(key: str, index: int, image: str = "jpg") -> dict[str, object]:
    """A sample with an image, a label, JSON with a height and a caption."""
    return {
        "__key__": key,
        image: picture(index, kind="PNG" if image == "png" else "JPEG"),
        "cls": index % 10,
        "json": {"width": 16, "height": 120 + (index * 37) % 200,
                 "meta": {"source": "web" if index % 2 else "book", "flagged": index % 7 == 0}},
        "txt": f"a {'cat' if index % 3 == 0 else 'dog'} number {index}",
    }  # fmt: skip


def shards(pattern: str, count: int, per_shard: int, prefix: str, image: str = "jpg") -> None:
    with ShardWriter(pattern, maxcount=per_shard, checksums=False) as writer:
        for i in range(count * per_shard):
            writer.write(sample(f"{prefix}{i:06d}", i, image))


def archive(path: Path, samples: list[dict[str, object]]) -> None:
    encoder = SampleEncoder()
    with open(path, "wb") as out:
        for s in samples:
            out.write(encoder.encode(s) or b"")
        out.write(bytes(1024))


def members(path: Path, named: list[tuple[str, bytes]]) -> None:
    """An archive of exactly these members, in this order (an interleaved one too)."""
    out = io.BytesIO()
    with TarWriter(out) as writer:
        for name, data in named:
            writer.add(name, data)
    path.write_bytes(out.getvalue())


def indexed_dataset(directory: Path) -> None:
    """Three shards, an index beside each and their manifest: random access (tarcat.md)."""
    from tarkit.format.index import index_stream
    from tarkit.storage import publish
    from tarkit.writing.index import index_shards

    shards(str(directory / "data-%03d.tar"), 3, 20, "d")
    paths = sorted(str(path) for path in directory.glob("*.tar"))
    for path in paths:
        with open(path, "rb") as stream:
            Path(path + ".idx").write_bytes(index_stream(stream, path))
    manifest = str(directory / "manifest.json")
    publish(manifest, index_shards(paths, manifest_path=manifest).to_bytes())


def image_folder(root: Path, per_class: int = 4) -> None:
    for c, name in enumerate(["cat", "dog"]):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            (root / name / f"{name}{i}.jpg").write_bytes(picture(c + i, (40, 30)))


def recording(seconds: float) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(bytes(2 * int(8000 * seconds)))
    return out.getvalue()


def prepare(root: Path) -> None:
    """Write every file the examples read into ``root``."""
    shards(str(root / "data-%03d.tar"), 10, 20, "d")
    archive(root / "data.tar",
            [sample(f"{'train' if i % 4 else 'val'}/{i:04d}", i) for i in range(60)])  # fmt: skip
    archive(root / "train.tar", [sample(f"train/{i:06d}", i) for i in range(60)])
    shards(str(root / "train-%03d.tar"), 100, 1, "t", image="png")
    archive(root / "train-000000.tar",
            [sample(f"train/n01440764/{i:06d}", i) for i in range(122, 125)])  # fmt: skip
    archive(root / "big.tar", [sample(f"big{i:04d}", i) for i in range(50)])
    archive(root / "more.tar", [sample(f"more{i:04d}", i) for i in range(10)])
    archive(root / "in.tar", [sample(f"in{i:02d}", i) for i in range(3)])
    archive(root / "shard.tar", [sample(f"s{i:02d}", i) for i in range(2)])
    shards(str(root / "old-%03d.tar"), 100, 2, "o")
    for name in ("a", "b", "c"):
        archive(root / f"{name}.tar", [sample(f"{name}{i}", i) for i in range(3)])
    archive(root / "web.tar", [sample(f"web{i:03d}", i) for i in range(12)])
    archive(root / "curated.tar", [sample(f"cur{i:03d}", i) for i in range(4)])
    (root / "keep.txt").write_text("train/000003\ntrain/000010\n")
    indexed_dataset(root / "dataset")
    (root / "wanted.txt").write_text("d000045\nd000003\n")
    demo = [
        {"__key__": f"{i:06d}", "cls": i, "jpg": picture(i, (256, 192)),
         "json": {"width": 256, "height": 192}, "txt": text}
        for i, text in enumerate(["a red square\n", "a green\tsquare\n"])
    ]  # fmt: skip
    archive(root / "demo.tar", demo)
    members(root / "unsorted.tar",
            [("a.jpg", picture(0)), ("b.jpg", picture(1)), ("a.cls", b"0"), ("b.cls", b"1")])  # fmt: skip
    members(root / "images.tar", [(f"k{i}.jpg", picture(i)) for i in range(3)])
    members(root / "labels.tar", [(f"k{i}.cls", str(i).encode()) for i in range(3)])
    members(root / "speech.tar", [("talk.json", b'{"speaker": 1}'), ("talk.wav", recording(2.5))])
    # format.md: cut 100 bytes into the data of the third member.
    members(root / "cut.tar", [("0000.bin", b"x" * 2500), ("0001.bin", b"x" * 2500),
                               ("0002.bin", b"x" * 1500)])  # fmt: skip
    with open(root / "cut.tar", "r+b") as f:
        f.truncate(6144 + 512 + 100)

    image_folder(root / "photos")
    image_folder(root / "imagenet" / "train")
    image_folder(root / "pets")
    scans = root / "scans"
    scans.mkdir()
    for i in (1, 2):
        (scans / f"{i:04d}.png").write_bytes(picture(i, kind="PNG"))
        (scans / f"{i:04d}.seg.png").write_bytes(picture(i + 1, kind="PNG"))
        (scans / f"{i:04d}.json").write_text(json.dumps({"page": i}))
    (root / "images").mkdir()
    (root / "images" / "cat1.jpg").write_bytes(picture(0))
    (root / "images" / "dog1.jpg").write_bytes(picture(1))
    (root / "plan.csv").write_text(
        "__key__,@jpg,cls,txt\ncat/001,images/cat1.jpg,0,a sleeping cat\n"
        'dog/001,images/dog1.jpg,1,"a dog, running"\n'
    )
    (root / "plan-without-keys.csv").write_text(
        "@jpg,cls,txt\nimages/cat1.jpg,0,a cat\nimages/dog1.jpg,1,a dog\n"
    )
    (root / "labelled.csv").write_text("@jpg,class.txt\nimages/cat1.jpg,cat\nimages/dog1.jpg,dog\n")
    (root / "captions.tsv").write_text("cls\ttxt\n0\ta cat\n1\ta dog\n")
    (root / "plan.txt").write_text("__key__;txt\none;first\ntwo;second\n")

    # processing.md: 100 shards, the first four with samples (and a recording), the rest empty.
    data = root / "data"
    data.mkdir()
    flac = data / "tone.flac"
    subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", str(flac), "synth", "0.1", "sine",
                    "440"], check=True)  # fmt: skip
    with ShardWriter(str(data / "train-%03d.tar"), maxcount=2) as writer:
        for i in range(8):
            writer.write(dict(sample(f"{i:04d}", i), flac=flac.read_bytes()))
    flac.unlink()
    for n in range(4, 100):
        members(data / f"train-{n:03d}.tar", [])
    shutil.rmtree(root / "__pycache__", ignore_errors=True)
