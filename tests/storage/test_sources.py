"""Sources and sinks: braces, files, pipe: commands, HTTP on 127.0.0.1, atomic outputs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from shard_server import ShardServer

from tarkit.errors import OutputError, SourceError, TruncatedError, UsageError
from tarkit.storage import Sink, display_name, expand_inputs, open_source


def read_source(spec: str) -> bytes:
    with open_source(spec) as source:
        return source.stream.read()


# --- inputs ---------------------------------------------------------------------------


def test_braces_expand_in_order() -> None:
    assert expand_inputs(["d-{000..002}.tar", "{train,val}.tar", "x.tar"]) == [
        "d-000.tar", "d-001.tar", "d-002.tar", "train.tar", "val.tar", "x.tar",
    ]  # fmt: skip


@pytest.mark.parametrize("spec", ["a{b.tar", "a}b.tar", "{a,b"])
def test_unbalanced_braces_are_a_usage_error_naming_the_input(spec: str) -> None:
    with pytest.raises(UsageError) as info:
        expand_inputs(["x.tar", spec])
    assert str(info.value) == f"{spec}: unbalanced braces (write \\{{ or \\}} for a literal brace)"


def test_escaped_braces_are_literal() -> None:
    assert expand_inputs([r"a\{b.tar"]) == ["a{b.tar"]


def test_no_input_means_stdin_and_pipe_commands_keep_their_braces() -> None:
    assert expand_inputs([]) == ["-"]
    assert expand_inputs(["pipe:cat {a,b}.tar"]) == ["pipe:cat {a,b}.tar"]
    assert display_name("-") == "<stdin>"


def test_path_and_file_url_read_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.tar"
    path.write_bytes(b"content")
    assert read_source(str(path)) == b"content"
    assert read_source(f"file:{path}") == b"content"


def test_missing_file_and_directory_are_source_errors(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"^/nonexistent/x\.tar: no such file$"):
        open_source("/nonexistent/x.tar")
    with pytest.raises(SourceError, match="is a directory"):
        open_source(str(tmp_path))
    with pytest.raises(SourceError, match="no such file"):
        open_source(f"file:{tmp_path}/missing.tar")


def test_pipe_command_output_is_read_and_its_success_accepted() -> None:
    assert read_source("pipe:printf abc") == b"abc"


@pytest.mark.parametrize(
    "command, message",
    [
        ("exit 3", "command exited with status 3"),
        ("kill -TERM $$", "command was killed by signal 15 (SIGTERM)"),
    ],
)
def test_pipe_command_failing_at_the_end_is_a_source_error(command: str, message: str) -> None:
    with pytest.raises(SourceError) as info:
        read_source(f"pipe:printf abc; {command}")
    assert str(info.value) == f"pipe:printf abc; {command}: {message}"


def test_pipe_command_failure_outranks_the_bad_input_it_caused() -> None:
    # The command died after writing half a member: say that, not "truncated".
    with pytest.raises(SourceError, match="command exited with status 4"):
        with open_source("pipe:printf abc; exit 4") as source:
            source.stream.read()
            raise TruncatedError("input ends inside a header block", source=source.name)


def test_bad_input_from_a_successful_command_stays_an_input_error() -> None:
    with pytest.raises(TruncatedError):
        with open_source("pipe:printf abc") as source:
            source.stream.read()
            raise TruncatedError("input ends inside a header block", source=source.name)


def test_early_stop_accepts_sigpipe_and_ends_a_command_that_never_writes() -> None:
    # yes gets SIGPIPE; sleep writes nothing, so it never would: it is killed instead.
    for command in ["pipe:yes", "pipe:printf abc; sleep 300"]:
        source = open_source(command)
        assert source.stream.read(3)
        process = source.process
        source.close(early=True)
        assert process is not None and process.returncode is not None


def test_http_body_is_streamed(http_server: ShardServer) -> None:
    http_server.files["/x.tar"] = b"y" * 100_000
    assert read_source(f"{http_server.url}/x.tar") == b"y" * 100_000


def test_http_404_is_a_source_error(http_server: ShardServer) -> None:
    with pytest.raises(SourceError, match=r"/missing\.tar: HTTP 404 Not Found$"):
        open_source(f"{http_server.url}/missing.tar")


def test_http_body_shorter_than_content_length_is_a_source_error(
    http_server: ShardServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    http_server.files["/x.tar"] = b"y" * 100_000
    http_server.cut["/x.tar"] = 50_000
    monkeypatch.setenv("TARKIT_RETRIES", "0")
    with pytest.raises(SourceError, match="connection closed after 50000 of 100000 bytes$"):
        read_source(f"{http_server.url}/x.tar")


# --- outputs --------------------------------------------------------------------------


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_file_sink_appears_only_on_commit(tmp_path: Path) -> None:
    target = tmp_path / "out.tar"
    sink = Sink(str(target))
    sink.stream.write(b"data")
    assert not target.exists()
    assert sink.staged is not None and Path(sink.staged.temp_path).parent == tmp_path
    sink.commit()
    assert target.read_bytes() == b"data"
    assert leftovers(tmp_path) == ["out.tar"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_aborted_file_sink_leaves_nothing_and_keeps_an_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.tar"
    sink = Sink(str(target))
    sink.stream.write(b"partial")
    sink.abort()
    assert leftovers(tmp_path) == []
    target.write_bytes(b"old")
    sink = Sink(str(target))
    sink.stream.write(b"partial")
    sink.abort()
    assert target.read_bytes() == b"old"
    assert leftovers(tmp_path) == ["out.tar"]


def test_compressed_sink_is_compressed_by_its_name(tmp_path: Path) -> None:
    import gzip

    sink = Sink(str(tmp_path / "out.tar.gz"))
    sink.stream.write(b"data")
    sink.commit()
    assert gzip.decompress((tmp_path / "out.tar.gz").read_bytes()) == b"data"


def test_device_sink_is_written_in_place() -> None:
    sink = Sink("/dev/null")
    assert sink.staged is None
    sink.stream.write(b"data")
    sink.commit()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_unwritable_outputs_are_output_errors(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="cannot create"):
        Sink(str(tmp_path / "no-such-dir" / "out.tar"))
    for spec in ("http://127.0.0.1:9/out.tar", "pipe:cat"):
        with pytest.raises(OutputError, match="cannot write here"):
            Sink(spec)


def test_a_document_that_does_not_end_is_read_up_to_its_bound_only(
    http_server: ShardServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tarkit.storage import load_manifest, load_table, manifests

    monkeypatch.setattr(manifests, "MANIFEST_LIMIT", 64 << 10)  # (1 GiB: a test of seconds)
    http_server.lengths = False  # as a stream that never ends would be sent
    http_server.files["/m.json"] = b'{"format": "tarkit-manifest", "version": 1, "shards": ['
    http_server.files["/m.json"] += b'{"url": "s-0.tar", "samples": 1, "bytes": 1024}, ' * 4000
    url = f"{http_server.url}/m.json"
    for load in (load_manifest, load_table):
        with pytest.raises(SourceError) as raised:
            load(url)
        assert str(raised.value) == (
            f"{url}: more than 64 KiB, the most tarkit reads of such a document (docs/format.md, "
            '"Bounds")'
        )
