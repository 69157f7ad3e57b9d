"""A stored archive read as members: sniffed, decompressed, brought to an offset
(tarkit/format/archives.py), the one way every reader opens its input."""

from __future__ import annotations

import gzip
import io

import pytest
from conftest import make_tar

from tarkit.errors import TruncatedError
from tarkit.format.archives import archive_members, tar_stream

TAR = make_tar([("a.txt", b"1"), ("b.txt", b"2"), ("c.txt", b"3")])
SECOND = 1024  # where b.txt's header starts: a's header and its data block before it


class Forward(io.RawIOBase):
    """A stream that reads forward only, as a pipe or an HTTP body does."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
        return self.data.readinto(b)


def names(members) -> list[str]:  # type: ignore[no-untyped-def]
    return [m.name for m in members]


@pytest.mark.parametrize("stored", ["plain", "gzip"])
@pytest.mark.parametrize("stream", [io.BytesIO, Forward])
def test_members_from_an_offset_are_the_same_compressed_or_not_seekable_or_not(
    stored: str, stream: type
) -> None:
    data = TAR if stored == "plain" else gzip.compress(TAR, mtime=0)
    assert names(archive_members(stream(data), "x")) == ["a.txt", "b.txt", "c.txt"]
    assert names(archive_members(stream(data), "x", offset=SECOND)) == ["b.txt", "c.txt"]
    kind, _ = tar_stream(stream(data), "x")
    assert kind == (None if stored == "plain" else "gzip")


def test_a_seekable_plain_archive_seeks_to_the_offset_without_reading_before_it() -> None:
    stream = io.BytesIO(TAR)
    kind, tar = tar_stream(stream, "x", offset=SECOND)
    assert (kind, tar, stream.tell()) == (None, stream, SECOND)


def test_a_positioned_stream_is_not_skipped_again() -> None:
    # A range of a plain shard asked from the offset (open_source_at): it starts there.
    members = archive_members(Forward(TAR[SECOND:]), "x", offset=SECOND, positioned=True)
    assert names(members) == ["b.txt", "c.txt"]


def test_an_archive_that_ends_before_the_offset_is_truncated_naming_it() -> None:
    with pytest.raises(TruncatedError, match=r"ends before byte 99999") as info:
        tar_stream(Forward(gzip.compress(TAR)), "s.tar.gz", offset=99_999)
    assert info.value.source == "s.tar.gz"
