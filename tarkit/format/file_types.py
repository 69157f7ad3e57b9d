"""What a file is when it is not a tar archive, told by its first bytes (and a directory,
by the endings of its files): for the error that names it where shards are expected,
with the command that makes shards of it, or reads it.

This is the one table of such signatures. The compressions tarkit reads are told apart
in :mod:`.compression`; the ones here are those it does not read (lz4, lzip, Unix
``compress``), named so that a stream tarkit cannot decompress does not read as a cut
tar archive. The table is asked only once the first header of an input has failed, so
a guess costs nothing on the way of every shard, and a tar archive whose first header is
damaged (the ``ustar`` magic in place) is never given another name.

>>> not_tar(b"\\xff\\xd8\\xff\\xe0" + bytes(60), "cat.jpg")
"a JPEG image, not a tar archive: make shards of image files with tarkit shard DIR -o 'shards/shard-%06d.tar' (or tarcreate)"
>>> not_tar(b"\\x04\\x22\\x4d\\x18" + bytes(20), "x.tar.lz4")
"an lz4 stream: tarkit reads gzip, bzip2, xz and zstd; decompress it first: lz4 -dc x.tar.lz4 > x.tar (or read 'pipe:lz4 -dc x.tar.lz4')"
>>> not_tar(bytes(257) + b"ustar\\x0000" + bytes(250), "x.tar") is None
True
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

IMAGE, AUDIO, VIDEO, ARCHIVE, TABLE, DOCUMENT, COMPRESSED, JSON, HTML, TEXT = (
    "image", "audio", "video", "archive", "table", "document", "compressed", "json", "html",
    "text",
)  # fmt: skip


class FileType(NamedTuple):
    """A kind of file: how a message names it (``"a JPEG image"``), its category (one of
    the constants of this module) and, for a compression, the command that decompresses
    it to stdout (``"lz4 -dc"``)."""

    name: str
    category: str
    decompress: str = ""


# The signatures of the images whose sizes :mod:`.images` reads, named once for both.
JPEG_SIGNATURE = b"\xff\xd8\xff"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GIF_SIGNATURES = (b"GIF87a", b"GIF89a")
RIFF_SIGNATURE, WEBP_FORM = b"RIFF", b"WEBP"  # a RIFF file's form type, at byte 8

# (offset, signature, type): the first whose bytes are at that offset names the file.
_SIGNATURES: tuple[tuple[int, bytes, FileType], ...] = (
    (0, JPEG_SIGNATURE, FileType("a JPEG image", IMAGE)),
    (0, PNG_SIGNATURE, FileType("a PNG image", IMAGE)),
    *((0, gif, FileType("a GIF image", IMAGE)) for gif in GIF_SIGNATURES),
    (0, b"II*\x00", FileType("a TIFF image", IMAGE)),
    (0, b"MM\x00*", FileType("a TIFF image", IMAGE)),
    (0, b"\x00\x00\x00\x0cjP  \r\n\x87\n", FileType("a JPEG 2000 image", IMAGE)),
    (0, b"PK\x03\x04", FileType("a zip archive", ARCHIVE)),
    (0, b"PK\x05\x06", FileType("a zip archive", ARCHIVE)),
    (0, b"7z\xbc\xaf\x27\x1c", FileType("a 7-Zip archive", ARCHIVE)),
    (0, b"Rar!\x1a\x07", FileType("a RAR archive", ARCHIVE)),
    (0, b"PAR1", FileType("a Parquet file", TABLE)),
    (0, b"ARROW1", FileType("an Arrow file", TABLE)),
    (0, b"\x89HDF\r\n\x1a\n", FileType("an HDF5 file", TABLE)),
    (0, b"\x93NUMPY", FileType("a NumPy array (.npy)", TABLE)),
    (0, b"%PDF-", FileType("a PDF document", DOCUMENT)),
    (0, b"fLaC", FileType("a FLAC audio file", AUDIO)),
    (0, b"OggS", FileType("an Ogg file", AUDIO)),
    (0, b"ID3", FileType("an MP3 audio file", AUDIO)),
    (0, b"\x1a\x45\xdf\xa3", FileType("a Matroska/WebM video", VIDEO)),
    (0, b"\x04\x22\x4d\x18", FileType("an lz4 stream", COMPRESSED, "lz4 -dc")),
    (0, b"\x02\x21\x4c\x18", FileType("an lz4 stream (legacy format)", COMPRESSED, "lz4 -dc")),
    (0, b"LZIP", FileType("an lzip stream", COMPRESSED, "lzip -dc")),
    (0, b"\x1f\x9d", FileType("a compress (.Z) stream", COMPRESSED, "gzip -dc")),
    (0, b"\xff\x06\x00\x00sNaPpY", FileType("a Snappy stream", COMPRESSED, "snzip -dc")),
    (4, b"ftyp", FileType("an MP4/QuickTime video (or HEIF/AVIF image)", VIDEO)),
)
_RIFF = {
    WEBP_FORM: FileType("a WebP image", IMAGE),
    b"WAVE": FileType("a WAV audio file", AUDIO),
    b"AVI ": FileType("an AVI video", VIDEO),
}
_USTAR = b"ustar"
_TEXT_CONTROLS = frozenset(b"\t\n\r\f")


def identify(head: bytes) -> FileType | None:
    """What the file whose first bytes are ``head`` is, when it is one of the kinds named
    here (images, audio, video, archives, tables, compressions tarkit does not read,
    JSON, text); None for anything else, and for a tar header (``ustar`` at byte 257),
    damaged or not.

    >>> identify(b"RIFF\\x10\\x00\\x00\\x00WEBPVP8 ").name
    'a WebP image'
    >>> identify(b' \\n{"a": 1}').category, identify(b"a,b\\n1,2\\n").category
    ('json', 'text')
    >>> identify(b"<!DOCTYPE html><title>404 Not Found</title>").name
    'an HTML page'
    >>> identify(bytes(512)) is None
    True
    """
    if head[257:262] == _USTAR:
        return None
    for offset, signature, kind in _SIGNATURES:
        if head.startswith(signature, offset):
            return kind
    if head.startswith(RIFF_SIGNATURE) and head[8:12] in _RIFF:
        return _RIFF[head[8:12]]
    text = _text(head)
    if text is None:
        return None
    start = text.lstrip("\ufeff \t\r\n")
    if start[:1] in ("{", "["):
        return FileType("JSON", JSON)
    if start[:14].lower() == "<!doctype html" or start[:5].lower() == "<html":
        return FileType("an HTML page", HTML)
    return FileType("a text file", TEXT)


def binary_kind(head: bytes) -> FileType | None:
    """What a file that is not text is, when a signature of :func:`identify`'s names it;
    None for a text head (a signature in ASCII, ``ID3`` or ``PAR1``, may also begin a
    line of text) and for anything not named.

    >>> binary_kind(b"PK\\x03\\x04" + bytes(26)).name, binary_kind(b"ID3,label\\n")
    ('a zip archive', None)
    """
    if _text(head) is not None:
        return None
    return identify(head)


def _text(head: bytes) -> str | None:
    """``head`` as text when it is UTF-8 (its last character may be cut) without control
    characters but tab, newline, form feed and carriage return; else None."""
    if not head:
        return None
    for cut in range(4):  # a character cut at the end of the head
        try:
            text = head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        break
    else:
        return None
    if any(b < 32 and b not in _TEXT_CONTROLS or b == 127 for b in head):
        return None
    return text


def not_tar(head: bytes, source: str) -> str | None:
    """The message for an input that is not a tar archive and whose first bytes
    (``head``) say what it is instead, with what to do (``source``, the input's name, goes
    into the commands); None when ``head`` is none of the kinds :func:`identify` names."""
    kind = identify(head)
    if kind is None:
        return None
    return f"{_not_tar_name(kind)}: {_advice(kind, source)}"


def _not_tar_name(kind: FileType) -> str:
    if kind.category == COMPRESSED:
        return kind.name
    return f"{kind.name}, not a tar archive"


def _advice(kind: FileType, source: str) -> str:
    """What to do with a file of ``kind`` to read it as shards."""
    stdin = source in ("-", "<stdin>")
    if kind.category == COMPRESSED:
        formats = "tarkit reads gzip, bzip2, xz and zstd; decompress it first"
        if stdin:
            return f"{formats}, with {kind.decompress} in the pipe"
        plain = source.removesuffix(".lz4").removesuffix(".lz").removesuffix(".Z")
        if plain == source or not plain.endswith(".tar"):
            plain = "x.tar"
        file = shlex.quote(source)
        command = f"{kind.decompress} {file}"
        piped = f"pipe:{command}"  # an input every tarkit command reads
        return f"{formats}: {command} > {shlex.quote(plain)} (or read {shlex.quote(piped)})"
    if kind.category == ARCHIVE:
        return (
            f"unpack it into a directory and make shards of that with tarkit shard DIR "
            f"-o {_PATTERN}"
        )
    if kind.category == TABLE:
        return (
            "make shards of its rows with tarkit.shard_dataset (a Hugging Face dataset "
            "of it: datasets.load_dataset('parquet', data_files=…)['train']) or tarkit "
            "shard --dataset MODULE:FUNCTION"
        )
    if kind.category == JSON:
        return (
            "a manifest? ShardDataset, tarkit verify and tarcat --keys take one; to "
            "stream every sample, name the shards it lists"
        )
    if kind.category == HTML:
        return "an error page in place of the shard? check its URL and fetch it again"
    if kind.category == TEXT:
        return f"make shards from a CSV/TSV plan of files with tarkit shard PLAN.csv -o {_PATTERN}"
    what = {IMAGE: "image files", AUDIO: "audio files", VIDEO: "video files"}.get(
        kind.category, "such files"
    )
    return f"make shards of {what} with tarkit shard DIR -o {_PATTERN} (or tarcreate)"


_PATTERN = "'shards/shard-%06d.tar'"
SHARD_ENDINGS = (
    ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst", ".tzst",
)  # fmt: skip
_ENDINGS = {
    IMAGE: "jpg jpeg png gif webp bmp tif tiff ppm pgm pbm pnm tga jp2 avif heic".split(),
    AUDIO: "wav flac mp3 ogg opus m4a aac".split(),
    VIDEO: "mp4 mov mkv webm avi".split(),
    TABLE: "parquet arrow feather h5 hdf5 npy npz".split(),
}
_CATEGORY_OF = {ending: category for category, endings in _ENDINGS.items() for ending in endings}
_PLURALS = {IMAGE: "images", AUDIO: "audio files", VIDEO: "videos", TABLE: "table files"}


def describe_directory(names: Iterable[str], directory: str) -> str:
    """What the directory ``directory`` holds, from the names of (some of) the files
    below it (relative, ``/``-separated), and how to make shards of it: the end of a
    message that says it is not a shard.

    >>> describe_directory(["cat/1.jpg", "cat/2.JPG", "dog/1.png"], "photos")
    "; it holds images (jpg, png): make shards of it with tarkit shard photos -o 'shards/photos-%06d.tar'"
    >>> describe_directory(["a/s-0.tar", "a/s-1.tar"], "d")
    '; it holds tar shards below it: name them (d/a/s-0.tar …)'
    >>> describe_directory([], "empty")
    '; it holds no files'
    """
    names = list(names)
    if not names:
        return "; it holds no files"
    shards = sorted(n for n in names if n.lower().endswith(SHARD_ENDINGS))
    if shards:
        below = "below it" if "/" in shards[0] else "in it"
        return f"; it holds tar shards {below}: name them ({directory}/{shards[0]} …)"
    endings = Counter(n.rpartition("/")[2].rpartition(".")[2].lower() for n in names if "." in n)
    categories = Counter(_CATEGORY_OF.get(e, "") for e in endings.elements())
    top, count = categories.most_common(1)[0] if categories else ("", 0)
    what = "files"
    if top and count * 2 > len(names):
        shown = ", ".join(sorted(e for e in endings if _CATEGORY_OF.get(e) == top))
        what = f"{_PLURALS[top]} ({shown})"
        if top == TABLE:
            return f"; it holds {what}: {_advice(FileType('', TABLE), directory)}"
    name = directory.rstrip("/").rpartition("/")[2] or "shard"
    command = f"tarkit shard {shlex.quote(directory)} -o 'shards/{name}-%06d.tar'"
    return f"; it holds {what}: make shards of it with {command}"
