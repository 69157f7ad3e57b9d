"""tarsplit through real pipes: limits, atomic shards, manifest, --post, errors, SIGKILL."""

from __future__ import annotations

import hashlib
import os
import random
import re
import subprocess
from pathlib import Path

import pytest
from conftest import (
    make_tar,
    run,
    run_shell,
    samples_of,
    sigkill_when,
    tool,
    webdataset_samples,
)
from random_access import check_random_access

from tarkit.storage import load_table


def archive_of(count: int, size: int = 300) -> bytes:
    return make_tar(
        (f"s{i:04d}.{field}", (f"{field}{i}".encode() * size)[: size + i])
        for i in range(count)
        for field in ("cls", "jpg", "json")
    )


def shards_in(directory: Path, glob: str = "*.tar") -> list[Path]:
    return sorted(directory.glob(glob))


def test_cuts_a_piped_stream_into_shards_of_maxcount_samples(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(23))
    result = run_shell(f"tarcat {source} | tarsplit -c 5 -o '{tmp_path}/out/s-%06d.tar'")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    shards = shards_in(tmp_path / "out")
    assert [p.name for p in shards] == [f"s-{i:06d}.tar" for i in range(5)]
    assert [len(samples_of(p.read_bytes())) for p in shards] == [5, 5, 5, 5, 3]
    back = [sample for p in shards for sample in samples_of(p.read_bytes())]
    assert back == samples_of(source.read_bytes())


def test_shards_list_cleanly_with_tar_and_read_in_webdataset_with_all_samples_once(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(40))
    result = run(["tarsplit", str(source), "-s", "8K", "-o", str(tmp_path / "s-{shard:03d}.tar")])
    assert result.returncode == 0, result.stderr
    shards = shards_in(tmp_path, "s-*.tar")
    assert len(shards) > 5
    listed: list[str] = []
    read: list[tuple[str, dict[str, bytes]]] = []
    for shard in shards:
        tar = subprocess.run(["tar", "-tvf", str(shard)], capture_output=True, text=True)
        assert tar.returncode == 0 and tar.stderr == "", tar.stderr
        listed.extend(line.split()[-1] for line in tar.stdout.splitlines())
        read.extend(webdataset_samples(shard))
    expected = samples_of(source.read_bytes())
    assert len(listed) == 3 * 40 == len(set(listed))
    assert read == expected


def test_maxsize_is_respected_on_disk_and_a_large_sample_sits_alone(tmp_path: Path) -> None:
    members = [(f"k{i:02d}.bin", os.urandom(700)) for i in range(12)]
    members.insert(5, ("big.bin", os.urandom(20_000)))
    source = tmp_path / "in.tar"
    source.write_bytes(make_tar(members))
    result = run(["tarsplit", str(source), "-s", "4K", "-o", str(tmp_path / "s-%03d.tar")])
    assert result.returncode == 0, result.stderr
    shards = shards_in(tmp_path, "s-*.tar")
    keys = [[key for key, _ in samples_of(p.read_bytes())] for p in shards]
    # 1536 bytes per small sample: two fit in 4096 with the 1024-byte end marker.
    assert keys == [["k00", "k01"], ["k02", "k03"], ["k04"], ["big"], ["k05", "k06"],
                    ["k07", "k08"], ["k09", "k10"], ["k11"]]  # fmt: skip
    for shard, shard_keys in zip(shards, keys, strict=True):
        assert shard.stat().st_size <= 4096 or shard_keys == ["big"]


def test_manifest_holds_names_counts_sizes_and_sha256_of_the_files(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(12))
    manifest = tmp_path / "out" / "manifest.json"
    result = run(["tarsplit", str(source), "-c", "5", "-o", str(tmp_path / "out" / "t-%d.tar"),
                  "--manifest", str(manifest)])  # fmt: skip
    assert result.returncode == 0, result.stderr
    table = load_table(str(manifest))
    assert [s.url for s in table] == ["t-0.tar", "t-1.tar", "t-2.tar"]
    assert [s.samples for s in table] == [5, 5, 2]
    assert table.samples == 12
    for entry in table:
        content = (tmp_path / "out" / entry.url).read_bytes()
        assert entry.bytes == len(content)
        assert entry.sha256 == hashlib.sha256(content).hexdigest()


def test_post_runs_after_each_complete_shard_with_the_quoted_path(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(7))
    out = tmp_path / "a dir"
    log = tmp_path / "posted"
    result = run(["tarsplit", str(source), "-c", "3", "-o", str(out / "s-%d.tar"),
                  "--post", f"tar -tf {{}} | wc -l >> {log}; mv {{}} {{}}.done"])  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert log.read_text().split() == ["9", "9", "3"]
    assert sorted(p.name for p in out.iterdir()) == ["s-0.tar.done", "s-1.tar.done", "s-2.tar.done"]


def test_failing_post_command_exits_2_and_stops(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(7))
    result = run(["tarsplit", str(source), "-c", "3", "-o", str(tmp_path / "s-%d.tar"),
                  "--post", "test $(basename {}) != s-1.tar"])  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("tarsplit: error: ")
    assert "post command exited with status 1" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.glob("s-*")) == ["s-0.tar", "s-1.tar"]


def test_input_error_keeps_complete_shards_removes_the_partial_one_and_exits_2(
    tmp_path: Path,
) -> None:
    archive = archive_of(20)
    source = tmp_path / "cut.tar"
    source.write_bytes(archive[: len(archive) // 2 + 100])
    out = tmp_path / "out"
    result = run_shell(
        f"cat {source} | tarsplit -c 4 -o '{out}/s-%02d.tar' --manifest {out}/m.json"
    )
    assert result.returncode == 2
    warning, error = result.stderr.splitlines()
    # s0008 and s0009 were whole, s0010 is cut: the shard holding the two is removed.
    assert warning == (
        f"tarsplit: warning: {out}/s-02.tar: unfinished shard removed with its 2 complete "
        "samples (from s0008 on), which are in no shard; the complete shards hold the first "
        "8 samples"
    )
    assert error.startswith("tarsplit: error: <stdin>: input ends inside member data")
    assert "member s0010.cls" in error
    names = sorted(p.name for p in out.iterdir())
    # no temporary file, no manifest; each complete shard with its index
    assert names == ["s-00.tar", "s-00.tar.idx", "s-01.tar", "s-01.tar.idx"]
    for name in names[::2]:
        assert len(samples_of((out / name).read_bytes())) == 4


def test_input_error_before_any_whole_sample_prints_only_the_error(tmp_path: Path) -> None:
    archive = archive_of(8)
    cut = archive.index(b"s0001.cls") - 100  # inside the last member of the first sample
    result = run(["tarsplit", "-c", "4", "-o", f"{tmp_path}/out/s-%d.tar"], input=archive[:cut])
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("tarsplit: error: <stdin>: input ends inside the padding")
    assert not (tmp_path / "out").exists()


def test_sigkill_mid_run_leaves_no_final_named_partial_shard(tmp_path: Path) -> None:
    archive = archive_of(13)
    out = tmp_path / "out"
    process = subprocess.Popen(
        [tool("tarsplit"), "-c", "5", "-o", str(out / "s-%d.tar")], stdin=subprocess.PIPE
    )
    assert process.stdin is not None
    process.stdin.write(archive[:-1024])  # all samples, no end marker: still reading
    process.stdin.flush()

    def partial_third_shard() -> bool:
        names = [p.name for p in out.iterdir()] if out.exists() else []
        return "s-1.tar" in names and any(n.endswith(".tmp") for n in names)

    sigkill_when(process, partial_third_shard)
    process.stdin.close()
    names = sorted(p.name for p in out.iterdir())
    assert names[-2:] == ["s-0.tar", "s-1.tar"], names
    assert all(n.startswith(".s-2.tar.") and n.endswith(".tmp") for n in names[:-2])
    for name in ("s-0.tar", "s-1.tar"):
        listed = subprocess.run(["tar", "-tf", str(out / name)], capture_output=True)
        assert listed.returncode == 0
        assert len(samples_of((out / name).read_bytes())) == 5


def test_reruns_give_byte_identical_shards_and_manifest(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(30))
    outputs = []
    for name in ("a", "b"):
        result = run(["tarsplit", str(source), "-s", "10K", "-o", str(tmp_path / name / "s-%d.tar"),
                      "--manifest", str(tmp_path / name / "m.json")])  # fmt: skip
        assert result.returncode == 0, result.stderr
        outputs.append({p.name: p.read_bytes() for p in (tmp_path / name).iterdir()})
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) > 3


def test_verbose_prints_each_finished_shard_on_stderr(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(5))
    result = run(["tarsplit", str(source), "-v", "-c", "2", "-o", str(tmp_path / "s-%d.tar")])
    assert result.returncode == 0
    assert result.stdout == b""
    lines = result.stderr.splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        str(tmp_path / f"s-{i}.tar") for i in range(3)
    ]
    assert lines[2].endswith("1 sample, 4.0 KiB")


def test_start_numbers_the_first_shard_and_compression_follows_the_pattern(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(4))
    result = run(["tarsplit", str(source), "-c", "3", "--start", "7",
                  "-o", str(tmp_path / "s-%02d.tar.gz")])  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.glob("s-*")) == ["s-07.tar.gz", "s-08.tar.gz"]
    listed = subprocess.run(["tar", "-tzf", str(tmp_path / "s-07.tar.gz")], capture_output=True)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 9


def test_maxshards_exceeded_exits_2_with_the_first_shards_complete(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(10))
    result = run(["tarsplit", str(source), "-c", "3", "--maxshards", "2",
                  "-o", str(tmp_path / "s-%d.tar")])  # fmt: skip
    assert result.returncode == 2
    assert "more than 2 shards" in result.stderr
    assert sorted(p.name for p in tmp_path.glob("s-*")) == ["s-0.tar", "s-1.tar"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["-o", "out.tar"], "has no shard number"),
        (["-s", "lots"], "expected a number of bytes"),
        (["-c", "0"], "maxcount must be at least 1"),
    ],
)
def test_bad_options_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = run(["tarsplit", *args], input=archive_of(2), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("tarsplit: error: ") and message in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_empty_input_is_an_error_unless_allowed_and_never_makes_a_shard(tmp_path: Path) -> None:
    result = run(["tarsplit"], input=b"", cwd=tmp_path)
    assert result.returncode == 2 and "empty input" in result.stderr
    result = run(["tarsplit", "--allow-empty", "--manifest", "m.json"], input=b"", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.columns", "m.json"]


def test_several_inputs_are_split_as_one_stream(tmp_path: Path) -> None:
    (tmp_path / "a.tar").write_bytes(make_tar([("a1.txt", b"1"), ("a2.txt", b"2")]))
    (tmp_path / "b.tar").write_bytes(make_tar([("b1.txt", b"3")]))
    result = run(["tarsplit", str(tmp_path / "{a,b}.tar"), "-c", "2",
                  "-o", str(tmp_path / "s-%d.tar")])  # fmt: skip
    assert result.returncode == 0, result.stderr
    keys = [[k for k, _ in samples_of(p.read_bytes())] for p in shards_in(tmp_path, "s-*.tar")]
    assert keys == [["a1", "a2"], ["b1"]]


def test_inputs_whose_keys_meet_at_their_seam_exit_2_instead_of_merging_two_samples(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.tar").write_bytes(make_tar([("k1.txt", b"1"), ("k2.txt", b"2")]))
    (tmp_path / "c.tar").write_bytes(make_tar([("k2.cls", b"3"), ("k3.txt", b"4")]))
    result = run(["tarsplit", str(tmp_path / "a.tar"), str(tmp_path / "c.tar"), "-c", "1",
                  "-o", str(tmp_path / "s-%d.tar")])  # fmt: skip
    assert result.returncode == 2
    assert f"sample 'k2' follows a sample with the same key (from {tmp_path}/a.tar)" in (
        result.stderr
    )
    # One sample per shard, yet the two k2 would merge when the shards are read in order.
    # The shard open at the error (k2 from a.tar) is removed, and the warning says so.
    assert "s-1.tar: unfinished shard removed with its 1 complete sample (from k2 on)" in (
        result.stderr
    )
    keys = [[k for k, _ in samples_of(p.read_bytes())] for p in shards_in(tmp_path, "s-*.tar")]
    assert keys == [["k1"]]


# Per ending, a size of random samples at which two of them take more bytes compressed
# than their tar bytes (what --maxsize counted before); xz would need ~22 MiB, so it runs
# at 512 KiB, where it must stay under maxsize all the same.
RANDOM_SAMPLE = {"tar.gz": 3 << 20, "tar.bz2": 1 << 19, "tar.xz": 1 << 19, "tar.zst": 24 << 20}


@pytest.mark.parametrize("ending", sorted(RANDOM_SAMPLE))
def test_compressed_shards_of_random_data_stay_within_maxsize_on_disk(
    tmp_path: Path, ending: str
) -> None:
    size = RANDOM_SAMPLE[ending]
    rng = random.Random(size)
    members = [("a.bin", rng.randbytes(size)), ("b.bin", rng.randbytes(size)),
               ("c.bin", rng.randbytes(1000))]  # fmt: skip
    maxsize = 2 * (512 + size) + 1024  # a and b as tar bytes, end marker included
    out = tmp_path / "out"
    result = run(["tarsplit", "-s", str(maxsize), "-o", f"{out}/s-%d.{ending}"],
                 input=make_tar(members))  # fmt: skip
    assert result.returncode == 0, result.stderr
    shards = shards_in(out, f"*.{ending}")
    assert [p.stat().st_size <= maxsize for p in shards] == [True, True]
    listed = [subprocess.run(["bsdtar", "-tf", str(p)], capture_output=True, check=True).stdout
              for p in shards]  # fmt: skip
    assert listed == [b"a.bin\n", b"b.bin\nc.bin\n"]


def text_archive(count: int) -> bytes:
    """Samples of text in words from a small vocabulary: compressible about 4 times."""
    rng = random.Random(0)
    words = ["cat", "dog", "runs", "sleeps", "the", "a", "fast", "slow", "house", "garden"]
    return make_tar(
        member
        for i in range(count)
        for member in ((f"s{i:04d}.cls", str(i % 10).encode()),
                       (f"s{i:04d}.txt", " ".join(rng.choices(words, k=150)).encode()))
    )  # fmt: skip


@pytest.mark.parametrize("ending", ["tar.gz", "tar.zst"])
def test_gzip_and_zstd_shards_fill_maxsize_on_disk_and_read_everywhere(
    tmp_path: Path, ending: str
) -> None:
    archive = text_archive(600)
    out = tmp_path / "out"
    result = run(["tarsplit", "-s", "32K", "-o", f"{out}/s-%d.{ending}"], input=archive)
    assert result.returncode == 0, result.stderr
    shards = shards_in(out, f"*.{ending}")
    sizes = [p.stat().st_size for p in shards]
    # Full up to about one sample's worst case below maxsize.
    assert len(sizes) > 2 and all(0.85 * 32768 < n <= 32768 for n in sizes[:-1]), sizes
    # The flushes that measure a shard are plain stream content to every reader
    # (webdataset reads no zstd).
    back = []
    for path in shards:
        samples = samples_of(run(["tarcat", str(path)]).stdout)
        if ending == "tar.gz":
            assert webdataset_samples(path) == samples
        for lister in (["tar", "-tf"], ["bsdtar", "-tf"]):
            listed = subprocess.run([*lister, str(path)], capture_output=True, check=True)
            assert len(listed.stdout.splitlines()) == 2 * len(samples)
        back.extend(samples)
    assert back == samples_of(archive)


def test_a_shard_name_that_is_not_utf8_is_kept_in_the_manifest_as_tarindex_keeps_it(
    tmp_path: Path,
) -> None:
    # A Latin-1 byte in the pattern: the manifest names the shards with \udcXX escapes,
    # byte for byte as tarindex names the same shards (one manifest serializer), and
    # tarindex makes the same indexes of them.
    (tmp_path / "in.tar").write_bytes(archive_of(5))
    pattern = os.fsencode(str(tmp_path)) + b"/caf\xe9-%03d.tar"
    result = subprocess.run(
        [tool("tarsplit"), "-c", "2", "-o", pattern, "--manifest", str(tmp_path / "m.json")],
        stdin=(tmp_path / "in.tar").open("rb"),
        capture_output=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, b"")
    names = sorted(n for n in os.listdir(os.fsencode(tmp_path)) if n.startswith(b"caf"))
    assert names[::2] == [b"caf\xe9-000.tar", b"caf\xe9-001.tar", b"caf\xe9-002.tar"]
    assert names[1::2] == [name + b".idx" for name in names[::2]]
    written = {n: (tmp_path / os.fsdecode(n)).read_bytes() for n in [*names, b"m.columns"]}
    indexed = subprocess.run(
        [tool("tarindex"), *(os.fsencode(tmp_path) + b"/" + n for n in names[::2]), "-o",
         "m.json"],
        cwd=tmp_path, capture_output=True, timeout=60,
    )  # fmt: skip
    assert indexed.returncode == 0, indexed.stderr
    assert b'"caf\\udce9-%03d.tar"' in (tmp_path / "m.json").read_bytes()
    assert {n: (tmp_path / os.fsdecode(n)).read_bytes() for n in written} == written


# --- an earlier run's shards: refused, overwritten, resumed --------------------------------


def test_a_second_run_into_the_same_pattern_exits_2_naming_the_files_and_writes_nothing(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(100, size=20))
    pattern = str(tmp_path / "st" / "s-%03d.tar")
    assert run(["tarsplit", str(source), "-c", "1", "-o", pattern]).returncode == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "st").iterdir()}
    again = run(["tarsplit", str(source), "-c", "5", "-o", pattern])
    assert again.returncode == 2
    assert again.stderr.startswith(
        f"tarsplit: error: {pattern}: 100 files already match the output pattern, first "
        f"{tmp_path}/st/s-000.tar"
    )
    assert "--overwrite" in again.stderr and len(again.stderr.splitlines()) == 1
    assert {p.name: p.read_bytes() for p in (tmp_path / "st").iterdir()} == before


def test_overwrite_leaves_only_the_new_shards_so_tarcat_meets_each_key_once(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(archive_of(100, size=20))
    pattern = str(tmp_path / "st" / "s-%03d.tar")
    manifest = ["--manifest", str(tmp_path / "st" / "m.json")]
    assert run(["tarsplit", str(source), "-c", "1", "-o", pattern, *manifest]).returncode == 0
    result = run(["tarsplit", str(source), "-c", "5", "-o", pattern, "--overwrite", *manifest])
    assert result.returncode == 0, result.stderr
    shards = shards_in(tmp_path / "st")
    assert len(shards) == 20
    assert [s.url for s in load_table(str(tmp_path / "st" / "m.json"))] == [p.name for p in shards]
    # The new shards' indexes took the old ones' names; the other old indexes are gone.
    assert check_random_access(tmp_path / "st" / "m.json").samples == 100
    assert sorted((tmp_path / "st").glob("*.idx")) == [Path(f"{p}.idx") for p in shards]
    everything = run_shell(f"tarcat {tmp_path}/st/s-*.tar | tar -tf - | wc -l")
    assert everything.returncode == 0, everything.stderr
    assert int(everything.stdout) == 300


def test_an_overwrite_whose_input_fails_leaves_the_old_shards_as_they_were(tmp_path: Path) -> None:
    source = tmp_path / "in.tar"
    archive = archive_of(40, size=20)
    source.write_bytes(archive)
    pattern = str(tmp_path / "st" / "s-%03d.tar")
    assert run(["tarsplit", str(source), "-c", "10", "-o", pattern]).returncode == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "st").iterdir()}
    cut = archive[: len(archive) // 2 + 100]
    result = run(["tarsplit", "-c", "3", "-o", pattern, "--overwrite"], input=cut)
    assert result.returncode == 2
    assert "tarsplit: warning: the new shards were removed" in result.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "st").iterdir()} == before


def test_resume_continues_an_interrupted_run_with_the_bytes_of_a_clean_one(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.tar"
    archive = archive_of(23, size=50)
    source.write_bytes(archive)
    clean = run(["tarsplit", str(source), "-c", "5", "-o", str(tmp_path / "clean" / "s-%d.tar")])
    assert clean.returncode == 0, clean.stderr
    pattern = str(tmp_path / "cut" / "s-%d.tar")
    cut = archive[: archive.index(b"s0013.cls") - 600]
    assert run(["tarsplit", "-c", "5", "-o", pattern], input=cut).returncode == 2
    assert len(shards_in(tmp_path / "cut")) == 2
    resumed = run(["tarsplit", str(source), "-c", "5", "-o", pattern, "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    expected = {p.name: p.read_bytes() for p in (tmp_path / "clean").iterdir()}
    assert {p.name: p.read_bytes() for p in (tmp_path / "cut").iterdir()} == expected


def test_overwrite_and_resume_together_are_a_usage_error(tmp_path: Path) -> None:
    result = run(["tarsplit", "-o", str(tmp_path / "s-%d.tar"), "--overwrite", "--resume"],
                 input=archive_of(2))  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == "tarsplit: error: --overwrite and --resume exclude each other\n"


def test_a_full_disk_names_its_file_system_and_keeps_only_complete_shards(
    tmp_path: Path, small_disk: Path
) -> None:
    source = tmp_path / "in.tar"
    source.write_bytes(make_tar((f"s{i:02d}.bin", bytes(100_000)) for i in range(12)))
    result = run(["tarsplit", "-c", "3", str(source), "-o", f"{small_disk}/s-%02d.tar"])
    assert result.returncode == 2
    shards = shards_in(small_disk)
    assert re.fullmatch(
        rf"tarsplit: error: {small_disk}/s-{len(shards):02d}.tar: write failed: no space left "
        rf"on the file system of {re.escape(str(small_disk))} \([\d.]+ \w+ free\)\n",
        result.stderr,
    ), result.stderr
    assert all(len(samples_of(p.read_bytes())) == 3 for p in shards)
    assert [p.name for p in small_disk.iterdir() if p.name.startswith(".")] == []
