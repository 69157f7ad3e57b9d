"""What a file that is not a tar archive is, by its first bytes; what a directory holds."""

from __future__ import annotations

import io

import pytest
from conftest import make_tar
from PIL import Image

from tarkit.format.file_types import binary_kind, describe_directory, identify, not_tar


def image(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8)).save(out, fmt)
    return out.getvalue()


@pytest.mark.parametrize(
    "head,name",
    [
        (image("JPEG"), "a JPEG image"),
        (image("PNG"), "a PNG image"),
        (image("GIF"), "a GIF image"),
        (image("WEBP"), "a WebP image"),
        (image("TIFF"), "a TIFF image"),
        (b"PAR1\x15\x04\x15", "a Parquet file"),
        (b"\x93NUMPY\x01\x00v\x00{'descr'", "a NumPy array (.npy)"),
        (b"RIFF$\x00\x00\x00WAVEfmt ", "a WAV audio file"),
        (b"\x00\x00\x00\x20ftypisom", "an MP4/QuickTime video (or HEIF/AVIF image)"),
        (b"\x1f\x9d\x90", "a compress (.Z) stream"),
        (b"path,label\nx.jpg,1\n", "a text file"),
        (b'\xef\xbb\xbf [{"a": 1}]', "JSON"),
        (b"\n<!DOCTYPE html>\n<title>404 Not Found</title>", "an HTML page"),
    ],
)
def test_identify_names_a_file_by_its_first_bytes(head: bytes, name: str) -> None:
    kind = identify(head[:512])
    assert kind is not None and kind.name == name


@pytest.mark.parametrize(
    "head",
    [
        make_tar([("a.txt", b"x")])[:512],  # a tar header, even one that fails its checksum
        b"\xff\xd8\xff" + make_tar([("a.txt", b"x")])[3:512],
        bytes(512),
        bytes(range(256)) * 2,  # binary: nothing to say about it
    ],
)
def test_identify_names_nothing_it_cannot_tell(head: bytes) -> None:
    assert identify(head) is None


def test_text_cut_inside_a_character_is_text_and_a_control_byte_is_not() -> None:
    assert identify("café".encode()[:-1]) is not None
    assert identify(b"abc\x01def") is None


def test_the_commands_quote_the_source() -> None:
    message = not_tar(b"LZIP\x01", "my data.tar.lz")
    assert message is not None
    assert message.endswith(
        "lzip -dc 'my data.tar.lz' > 'my data.tar' (or read 'pipe:lzip -dc '\"'\"'my data.tar.lz'\"'\"'')"
    )


def test_describe_directory_goes_by_the_most_common_kind_of_file() -> None:
    assert describe_directory(["a.wav", "b.flac", "c.json"], "rec").startswith(
        "; it holds audio files (flac, wav): make shards of it with tarkit shard rec"
    )
    assert describe_directory(["a.txt", "b.json"], "d") == (
        "; it holds files: make shards of it with tarkit shard d -o 'shards/d-%06d.tar'"
    )
    assert describe_directory(["part-0.parquet"], "t").startswith(
        "; it holds table files (parquet): make shards of its rows with tarkit.shard_dataset"
    )


def test_binary_kind_names_only_heads_that_are_not_text() -> None:
    assert binary_kind(b"ID3\x04\x00\x00\x00\x00\x00#TSSE").name == "an MP3 audio file"
    assert binary_kind(b"ID3,label\nk,1\n") is None  # a signature in ASCII, read as text
    assert binary_kind(b"\x00\x01\x02\x03") is None  # binary, but none of the table's
