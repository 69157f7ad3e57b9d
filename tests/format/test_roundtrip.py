"""Round trip: random samples written by TarWriter come back byte for byte, in tarkit,
Python's tarfile and webdataset alike; copying them through tarkit changes no byte."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile

import pytest
from conftest import webdataset_samples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members
from tarkit.format.tar_writer import TarWriter
from tarkit.stream.stages import write_samples

# Every test here runs with the compiled scanner and with the pure-Python reader.
pytestmark = pytest.mark.usefixtures("reader")

BOUNDARY_SIZES = [0, 1, 100, 511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097]
LETTERS = "abcXYZ019-_ é日本"

data = st.one_of(
    st.sampled_from(BOUNDARY_SIZES).flatmap(lambda n: st.binary(min_size=n, max_size=n)),
    st.binary(max_size=3000),
)
component = st.text(alphabet=LETTERS, min_size=1, max_size=12).filter(
    lambda c: c.strip() == c and not c.startswith("__")
)
long_component = st.text(alphabet="abcdefgh", min_size=90, max_size=160)
key = st.builds(
    lambda dirs, base: "/".join([*dirs, base]),
    st.lists(st.one_of(component, long_component), max_size=3),
    st.one_of(component, long_component),
)
field = st.from_regex(r"[a-zA-Z0-9]{1,5}(\.[a-z0-9]{1,4})?", fullmatch=True)
fields = st.lists(st.tuples(field, data), min_size=1, max_size=4, unique_by=lambda f: f[0].lower())
samples = st.lists(st.tuples(key, fields), min_size=1, max_size=8, unique_by=lambda s: s[0])


def archive_of(generated: list[tuple[str, list[tuple[str, bytes]]]]) -> bytes:
    out = io.BytesIO()
    with TarWriter(out) as writer:
        for k, members in generated:
            for f, d in members:
                writer.add(f"{k}.{f}", d)
    return out.getvalue()


def expected(generated) -> list[tuple[str, dict[str, bytes]]]:  # type: ignore[no-untyped-def]
    return [(k, dict(members)) for k, members in generated]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(samples)
def test_written_samples_read_back_identically_everywhere(generated) -> None:  # type: ignore[no-untyped-def]
    archive = archive_of(generated)
    want = expected(generated)

    got = list(group_samples(read_members(io.BytesIO(archive))))
    assert [(s.key, s.data()) for s in got] == want
    assert [s.fields for s in got] == [[f for f, _ in members] for _, members in generated]

    with tarfile.open(fileobj=io.BytesIO(archive), mode="r|") as stream:
        listed = [(m.name, stream.extractfile(m).read()) for m in stream]  # type: ignore[union-attr]
    assert listed == [(f"{k}.{f}", d) for k, members in generated for f, d in members]

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "shard.tar")
        with open(path, "wb") as f:
            f.write(archive)
        # webdataset lowercases field names.
        assert webdataset_samples(path) == [
            (k, {f.lower(): d for f, d in fields.items()}) for k, fields in want
        ]


class Captured:
    spec = "-"

    def __init__(self) -> None:
        self.stream = io.BytesIO()

    def commit(self) -> None:
        pass

    def abort(self) -> None:
        pass


@settings(max_examples=40, deadline=None)
@given(samples)
def test_copying_samples_changes_no_byte(generated) -> None:  # type: ignore[no-untyped-def]
    archive = archive_of(generated)
    sink = Captured()
    write_samples(group_samples(read_members(io.BytesIO(archive))), sink)  # type: ignore[arg-type]
    assert sink.stream.getvalue() == archive


def test_gnu_tar_extracts_what_tarkit_wrote(tmp_path) -> None:  # type: ignore[no-untyped-def]
    generated = [
        ("日本/" + "d" * 120 + "/x", [("jpg", b"\x00" * 513), ("CLS", b"7")]),
        ("a/b", [("txt", b""), ("seg.png", b"s" * 1024)]),
    ]
    archive = tmp_path / "w.tar"
    archive.write_bytes(archive_of(generated))
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(out)], check=True)
    for k, members in generated:
        for f, d in members:
            assert (out / f"{k}.{f}").read_bytes() == d
