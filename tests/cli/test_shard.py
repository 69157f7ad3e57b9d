"""tarkit shard through the real command: ImageFolder, trees, plans, --dataset, S3, resume."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import run, samples_of, sigkill_when, tool, webdataset_samples
from PIL import Image
from random_access import check_random_access

from tarkit.storage import load_table


def image_bytes(color: tuple[int, int, int], size: tuple[int, int] = (40, 30),
                fmt: str = "JPEG") -> bytes:  # fmt: skip
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    root = tmp_path / "photos"
    for label, name in enumerate(["cat", "dog", "eel"]):
        (root / name).mkdir(parents=True)
        for i in range(4 + label):
            (root / name / f"{name}{i}.jpg").write_bytes(image_bytes((label * 80, i * 30, 0)))
    (root / "dog" / "odd.name.png").write_bytes(image_bytes((1, 2, 3), fmt="PNG"))
    return root


def shards_in(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.tar"))


def all_samples(directory: Path) -> list[tuple[str, dict[str, bytes]]]:
    return [sample for shard in shards_in(directory) for sample in webdataset_samples(shard)]


def test_image_folder_becomes_samples_of_image_class_index_and_name(
    tmp_path: Path, image_folder: Path
) -> None:
    out = tmp_path / "out"
    result = run(["tarkit", "shard", str(image_folder), "-o", str(out / "s-%03d.tar"), "-c", "5",
                  "--manifest", str(out / "manifest.json")])  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    samples = all_samples(out)
    files = sorted(p for p in image_folder.rglob("*") if p.is_file())
    assert len(samples) == len(files) == 16
    assert len({key for key, _ in samples}) == 16
    by_key = dict(samples)
    assert by_key["dog/odd_name"]["png"] == (image_folder / "dog" / "odd.name.png").read_bytes()
    assert by_key["eel/eel5"] == {
        "jpg": (image_folder / "eel" / "eel5.jpg").read_bytes(),
        "cls": b"2",
        "class.txt": b"eel",
    }
    assert json.loads((out / "classes.json").read_text()) == ["cat", "dog", "eel"]
    assert [s.samples for s in load_table(str(out / "manifest.json"))] == [5, 5, 5, 1]
    assert check_random_access(out / "manifest.json").samples == 16
    for shard in shards_in(out):
        listed = subprocess.run(["tar", "-tvf", str(shard)], capture_output=True, text=True)
        assert listed.returncode == 0 and listed.stderr == ""


def test_resize_and_format_reencode_every_image(tmp_path: Path, image_folder: Path) -> None:
    out = tmp_path / "out"
    result = run(["tarkit", "shard", str(image_folder), "-o", str(out / "s-%d.tar"),
                  "--resize", "20x20", "--format", "webp", "--quality", "80"])  # fmt: skip
    assert result.returncode == 0, result.stderr
    samples = all_samples(out)
    assert len(samples) == 16
    for _, fields in samples:
        assert sorted(fields) == ["class.txt", "cls", "webp"]
        image = Image.open(io.BytesIO(fields["webp"]))
        assert image.format == "WEBP" and image.size == (20, 15)


def test_zero_and_two_workers_give_identical_shards(tmp_path: Path, image_folder: Path) -> None:
    for workers in ("0", "2"):
        result = run(["tarkit", "shard", str(image_folder), "-o", str(tmp_path / workers / "s-%d.tar"),
                      "-s", "8K", "-p", workers, "--shuffle", "--seed", "7",
                      "--resize", "16x16!", "--format", "png"])  # fmt: skip
        assert result.returncode == 0, result.stderr
    zero = {p.name: p.read_bytes() for p in (tmp_path / "0").iterdir()}
    two = {p.name: p.read_bytes() for p in (tmp_path / "2").iterdir()}
    assert len(zero) > 3 and zero == two
    keys = [key for key, _ in all_samples(tmp_path / "0")]
    assert keys != sorted(keys) and len(keys) == 16


def test_a_plain_tree_is_grouped_by_key_in_sorted_order(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "b").mkdir(parents=True)
    (root / "b" / "x.jpg").write_bytes(b"jpeg bytes")
    (root / "b" / "x.seg.png").write_bytes(b"png bytes")
    (root / "a.txt").write_text("first")
    (root / "a.json").write_text("{}")
    (root / "README").write_text("no field")
    out = tmp_path / "out"
    # b/ alone would be a class directory of images: the layout must be named.
    result = run(["tarkit", "shard", str(root), "--layout", "tree", "-o", str(out / "s-%d.tar")])
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"tarkit shard: warning: {root}: skipping file without a field (no dot in the file "
        "name): README\n"
    )
    assert samples_of((out / "s-0.tar").read_bytes()) == [
        ("a", {"json": b"{}", "txt": b"first"}),
        ("b/x", {"jpg": b"jpeg bytes", "seg.png": b"png bytes"}),
    ]
    strict = run(["tarkit", "shard", str(root), "--layout", "tree", "--strict",
                  "-o", str(tmp_path / "x-%d.tar")])  # fmt: skip
    assert strict.returncode == 2
    assert strict.stderr == (
        f"tarkit shard: error: {root}/README: file without a field (no dot in the file name) "
        "is not allowed with --strict\n"
    )


def test_a_tree_with_metadata_and_a_symlink_out_gives_tarcreates_samples_and_warnings(
    tmp_path: Path,
) -> None:
    root = tmp_path / "tree"
    (root / "__meta__").mkdir(parents=True)
    (root / "__meta__" / "info.txt").write_text("webdataset metadata")
    (root / "a").mkdir()
    (root / "a" / "x.txt").write_text("in the tree")
    (tmp_path / "outside.txt").write_text("outside the tree")
    (root / "a" / "y.txt").symlink_to("../../outside.txt")
    created = run(["tarcreate", "--dir", str(root)])
    sharded = run(["tarkit", "shard", str(root), "--layout", "tree", "-o",
                   str(tmp_path / "out" / "s-%d.tar")])  # fmt: skip
    assert (created.returncode, sharded.returncode) == (0, 0)
    want = [("a/x", {"txt": b"in the tree"})]
    assert samples_of(created.stdout) == want
    assert samples_of((tmp_path / "out" / "s-0.tar").read_bytes()) == want
    metadata = "file below a webdataset metadata directory (__name__), which readers skip"
    warnings = [
        f"warning: {root}: skipping {metadata}: __meta__/info.txt",
        f"warning: {root}: skipping symlink: a/y.txt",
        f"warning: skipped 2 members: 1 {metadata}, 1 symlink",
    ]
    assert created.stderr.splitlines() == [f"tarcreate: {line}" for line in warnings]
    assert sharded.stderr.splitlines() == [f"tarkit shard: {line}" for line in warnings]
    # --layout auto reads it the same way, and --strict refuses it in both.
    auto = run(["tarkit", "shard", str(root), "-o", str(tmp_path / "auto" / "s-%d.tar")])
    assert (auto.returncode, auto.stderr) == (sharded.returncode, sharded.stderr)
    for command in (["tarcreate", "--dir"], ["tarkit", "shard", "--layout", "tree"]):
        strict = run([*command, str(root), "--strict", "-o", str(tmp_path / "x-%d.tar")])
        assert strict.returncode == 2
        assert strict.stderr.endswith(
            f": error: {root}/__meta__/info.txt: {metadata} is not allowed with --strict\n"
        )


def test_a_stray_file_among_class_directories_is_an_ambiguous_layout_error(
    tmp_path: Path, image_folder: Path
) -> None:
    (image_folder / "dog" / "Thumbs.db").write_bytes(b"windows thumbnails")
    out = tmp_path / "out"
    result = run(["tarkit", "shard", str(image_folder), "-o", str(out / "s-%d.tar")])
    assert result.returncode == 2
    assert result.stderr == (
        f"tarkit shard: error: {image_folder}: ambiguous layout: class directories of images, "
        "but dog/Thumbs.db is not an image in a class directory: --layout imagefolder skips "
        "such files, --layout tree shards every file grouped by key\n"
    )
    assert not out.exists()


def test_split_directories_holding_class_directories_are_refused_with_the_fix(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    for split in ("val", "train"):
        for label in ("cat", "dog"):
            (data / split / label).mkdir(parents=True)
            (data / split / label / "a.jpg").write_bytes(image_bytes((9, 9, 9)))
    result = run(["tarkit", "shard", "data/", "-o", "out/s-%06d.tar"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        "tarkit shard: error: data/: train/ and val/ look like a dataset's splits, not its "
        "classes (they hold class directories of images): shard each split on its own, as in "
        "tarkit shard data/train -o 'train-%06d.tar' (--layout imagefolder takes them as "
        "classes)\n"
    )
    assert not (tmp_path / "out").exists()
    result = run(["tarkit", "shard", "data/train", "-o", "out/train-%06d.tar"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "out" / "classes.json").read_text()) == ["cat", "dog"]
    assert sorted(k for k, _ in all_samples(tmp_path / "out")) == ["cat/a", "dog/a"]


def test_layout_imagefolder_skips_stray_files_counts_them_and_exits_1(
    tmp_path: Path, image_folder: Path
) -> None:
    (image_folder / "dog" / "Thumbs.db").write_bytes(b"windows thumbnails")
    (image_folder / "labels.csv").write_text("name,label\n")
    out = tmp_path / "out"
    result = run(["tarkit", "shard", str(image_folder), "--layout", "imagefolder",
                  "-o", str(out / "s-%d.tar")])  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"tarkit shard: warning: {image_folder}: skipping stray file (not an image in a class "
        "directory): dog/Thumbs.db",
        "tarkit shard: warning: skipped 2 members: 2 stray file (not an image in a class "
        "directory)",
    ]
    samples = samples_of((out / "s-0.tar").read_bytes())
    assert len(samples) == 16 and all(fields["cls"] for _, fields in samples)
    assert json.loads((out / "classes.json").read_text()) == ["cat", "dog", "eel"]


def test_layout_tree_shards_the_stray_file_as_a_sample_of_its_own(
    tmp_path: Path, image_folder: Path
) -> None:
    (image_folder / "dog" / "Thumbs.db").write_bytes(b"windows thumbnails")
    out = tmp_path / "out"
    result = run(["tarkit", "shard", str(image_folder), "--layout", "tree",
                  "-o", str(out / "s-%d.tar")])  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    samples = dict(samples_of((out / "s-0.tar").read_bytes()))
    assert samples["dog/Thumbs"] == {"db": b"windows thumbnails"}
    assert len(samples) == 17 and not (out / "classes.json").exists()


@pytest.mark.parametrize("ending,sep", [("csv", ","), ("tsv", "\t")])
def test_a_plan_with_file_paths_and_text_round_trips(tmp_path: Path, ending: str, sep: str) -> None:
    (tmp_path / "img").mkdir()
    rows = []
    for i in range(7):
        (tmp_path / "img" / f"{i}.png").write_bytes(image_bytes((i, 0, 0), fmt="PNG"))
        rows.append(sep.join([f"item{i}", f"img/{i}.png", str(i % 2), f"caption {i}"]))
    plan = tmp_path / f"plan.{ending}"
    plan.write_text(sep.join(["__key__", "@png", "cls", "txt"]) + "\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out"
    result = run(["tarkit", "shard", str(plan), "-o", str(out / "s-%d.tar"), "-c", "3",
                  "--no-shuffle"])  # fmt: skip
    assert result.returncode == 0, result.stderr
    samples = all_samples(out)
    assert [key for key, _ in samples] == [f"item{i}" for i in range(7)]
    listed = [subprocess.run(["tar", "-tvf", str(p)], capture_output=True, text=True)
              for p in shards_in(out)]  # fmt: skip
    assert all(r.returncode == 0 and r.stderr == "" for r in listed)
    assert sum(len(r.stdout.splitlines()) for r in listed) == 7 * 3
    assert samples[5][1] == {
        "png": (tmp_path / "img" / "5.png").read_bytes(), "cls": b"1", "txt": b"caption 5"
    }  # fmt: skip


def test_key_makes_the_keys_of_plan_rows_as_in_tarcreate(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"a")
    plan = tmp_path / "plan.csv"
    plan.write_text("@bin,cls,txt\na.bin,3,one\na.bin,7,two\n")
    out = tmp_path / "out"
    result = run(["tarkit", "shard", str(plan), "--key", "train/{cls}/{row:04d}",
                  "-o", str(out / "s-%d.tar")])  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [key for key, _ in samples_of((out / "s-0.tar").read_bytes())] == [
        "train/3/0000", "train/7/0001"
    ]  # fmt: skip
    created = run(["tarcreate", str(plan), "--key", "train/{cls}/{row:04d}"])
    assert created.stdout == (out / "s-0.tar").read_bytes()


@pytest.mark.parametrize(
    "plan,key,message",
    [
        ("@bin,cls\na.bin,3\n", "{label}/{row}", "--key '{label}/{row}': no text column 'label'"),
        ("__key__,@bin\nk,a.bin\n", "{row}", "the plan has a __key__ column: leave out --key"),
        (None, "{row}", "--key makes the keys of plan rows: it takes a .csv/.tsv SOURCE"),
    ],
)
def test_key_that_cannot_apply_is_a_one_line_usage_error(
    tmp_path: Path, plan: str | None, key: str, message: str
) -> None:
    (tmp_path / "a.bin").write_bytes(b"a")
    source = tmp_path / "plan.csv"
    if plan is None:
        source = tmp_path
    else:
        source.write_text(plan)
    result = run(["tarkit", "shard", str(source), "--key", key, "-o", str(tmp_path / "s-%d.tar")])
    assert result.returncode == 2
    assert result.stderr.startswith("tarkit shard: error: ") and message in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not list(tmp_path.glob("s-*"))


def test_a_plan_with_a_missing_file_fails_naming_the_line_before_writing(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"a")
    plan = tmp_path / "plan.csv"
    plan.write_text("@bin,txt\na.bin,one\nmissing.bin,two\n")
    out = tmp_path / "out"
    result = run(["tarkit", "shard", str(plan), "-o", str(out / "s-%d.tar")])
    assert result.returncode == 2
    assert result.stderr == (
        f"tarkit shard: error: {plan}: line 3: field 'bin': missing.bin: no such file (looked "
        f"for at {tmp_path}/missing.bin: relative paths are resolved against the plan's "
        f"directory, {tmp_path})\n"
    )
    assert not out.exists()


DATASET_MODULE = """
import os, time
from PIL import Image


class Squares:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == 30 and os.environ.get("STALL"):
            time.sleep(120)  # the test kills the command here
        return Image.new("RGB", (12, 12), (i, 2 * i, 0)), i % 4


def make(count="42"):
    return Squares(int(count))


def splits():
    return {"train": Squares(4), "test": Squares(2)}


def dicts():
    return [{"__key__": f"d{i}", "jpg": Image.new("RGB", (64, 32), (i, 0, 0)),
             "seg.png": Image.new("L", (64, 32), i), "cls": i} for i in range(3)]
"""


def test_dataset_factory_items_become_samples(tmp_path: Path) -> None:
    (tmp_path / "mydata.py").write_text(DATASET_MODULE)
    result = run(["tarkit", "shard", "--dataset", "mydata:make", "5", "-o", "out/s-%d.tar", "--no-shuffle",
                  "--format", "jpg"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    samples = all_samples(tmp_path / "out")
    assert [key for key, _ in samples] == [f"{i:09d}" for i in range(5)]
    assert Image.open(io.BytesIO(samples[3][1]["jpg"])).format == "JPEG"
    assert samples[3][1]["cls"] == b"3"


def test_resize_applies_to_the_image_of_dataset_pairs(tmp_path: Path) -> None:
    (tmp_path / "mydata.py").write_text(DATASET_MODULE)
    result = run(["tarkit", "shard", "--dataset", "mydata:make", "2", "-o", "out/s-%d.tar",
                  "--resize", "6x6"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    samples = all_samples(tmp_path / "out")
    assert [sorted(fields) for _, fields in samples] == [["cls", "png"]] * 2
    assert Image.open(io.BytesIO(samples[1][1]["png"])).size == (6, 6)


def test_resize_and_format_apply_to_every_image_field_of_dataset_dicts(tmp_path: Path) -> None:
    (tmp_path / "mydata.py").write_text(DATASET_MODULE)
    result = run(["tarkit", "shard", "--dataset", "mydata:dicts", "-o", "out/s-%d.tar", "--no-shuffle",
                  "--resize", "16x16", "--format", "webp"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    samples = all_samples(tmp_path / "out")
    assert [key for key, _ in samples] == ["d0", "d1", "d2"]
    fields = samples[2][1]
    assert sorted(fields) == ["cls", "seg.webp", "webp"]
    for field in ("webp", "seg.webp"):
        image = Image.open(io.BytesIO(fields[field]))
        assert (image.format, image.size) == ("WEBP", (16, 8))
    assert fields["cls"] == b"2"


def test_dataset_factory_that_cannot_be_imported_is_a_one_line_error(tmp_path: Path) -> None:
    result = run(["tarkit", "shard", "--dataset", "nosuchmodule:make"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("tarkit shard: error: --dataset 'nosuchmodule:make'")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "spec,message",
    [
        ("mydata", "expected package.module:function"),
        ("nosuchmodule:make", "cannot import nosuchmodule: No module named 'nosuchmodule'"),
        ("mydata:nothing", "mydata has no nothing"),
        ("mydata:Squares.nothing", "mydata has no Squares.nothing"),
        ("mydata:COUNT", "COUNT is not a function"),
    ],
)
def test_dataset_and_map_fn_load_a_function_by_one_rule_with_one_message(
    tmp_path: Path, spec: str, message: str
) -> None:
    (tmp_path / "mydata.py").write_text(DATASET_MODULE + "\nCOUNT = 3\n")
    for command, option in (("shard", "--dataset"), ("map", "--fn")):
        result = run(["tarkit", command, "in.tar", "-o", "out/", option, spec], cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr == f"tarkit {command}: error: {option} {spec!r}: {message}\n"


def test_a_dict_of_splits_asks_for_one_by_name(tmp_path: Path) -> None:
    (tmp_path / "mydata.py").write_text(DATASET_MODULE)
    result = run(["tarkit", "shard", "--dataset", "mydata:splits", "-o", "out/s-%d.tar"],
                 cwd=tmp_path)  # fmt: skip
    assert (result.returncode, result.stderr) == (2, (
        "tarkit shard: error: a dict (train, test) is not a dataset of items: pass one of its "
        "values, e.g. ds['train'], or a sequence of items\n"
    ))  # fmt: skip
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "how,status,workers,kept",
    [pytest.param(signal.SIGINT, 130, "0", 3, id="ctrl-c"),
     pytest.param(signal.SIGTERM, 143, "2", 2, id="sigterm-with-workers")],
)  # fmt: skip
def test_an_interrupted_run_says_which_shards_it_kept_and_how_to_resume(
    tmp_path: Path, how: int, status: int, workers: str, kept: int
) -> None:
    (tmp_path / "mydata.py").write_text(DATASET_MODULE)
    args = ["shard", "--dataset", "mydata:make", "-c", "8", "--no-shuffle", "-p", workers,
            "-o", "cut/s-%02d.tar"]  # fmt: skip
    # Item 30 stalls, in shard 3. A shard is complete once the next item comes: here
    # items 24 to 29; from workers nothing of their chunk of 8 items (24 to 31).
    last = tmp_path / "cut" / f"s-{kept - 1:02d}.tar"
    process = subprocess.Popen([tool("tarkit"), *args], cwd=tmp_path, stderr=subprocess.PIPE,
                               env=dict(os.environ, STALL="1"), start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not last.exists() and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr and process.stderr.read()
            time.sleep(0.05)
        # As Ctrl-C in a terminal, and `timeout` or `kill -- -PGID`: the whole group.
        os.killpg(process.pid, how)
        stderr = process.communicate(timeout=60)[1].decode()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert (process.returncode, stderr) == (status, (
        f"tarkit shard: interrupted: {kept} complete shards kept (cut/s-00.tar … "
        f"cut/{last.name}); add --resume to the same command to continue after them\n"
    ))  # fmt: skip
    names = sorted(p.name for p in (tmp_path / "cut").iterdir())
    assert names == [f"s-{n:02d}.tar" for n in range(kept)]
    if workers == "0":
        resumed = run(["tarkit", *args, "--resume"], cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        assert len(all_samples(tmp_path / "cut")) == 42


def test_sigkill_then_resume_gives_the_bytes_of_a_clean_run(tmp_path: Path) -> None:
    (tmp_path / "mydata.py").write_text(DATASET_MODULE)
    args = ["shard", "--dataset", "mydata:make", "-c", "8", "--no-shuffle", "--manifest"]
    clean = run(["tarkit", *args, "clean/m.json", "-o", "clean/s-%02d.tar"], cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr

    env = dict(os.environ, STALL="1")
    process = subprocess.Popen([tool("tarkit"), *args, "cut/m.json", "-o", "cut/s-%02d.tar"],
                               cwd=tmp_path, env=env)  # fmt: skip
    cut = tmp_path / "cut"
    sigkill_when(process, (cut / "s-02.tar").exists)
    names = sorted(p.name for p in cut.iterdir())
    assert names[1:] == [f"s-0{i}.tar{index}" for i in range(3) for index in ("", ".idx")]
    assert names[0].startswith(".s-03.tar.") and names[0].endswith(".tmp")

    resumed = run(["tarkit", *args, "cut/m.json", "-o", "cut/s-%02d.tar", "--resume"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    expected = {p.name: p.read_bytes() for p in (tmp_path / "clean").iterdir()}
    assert {p.name: p.read_bytes() for p in cut.iterdir()} == expected


def test_shards_go_to_s3_through_fsspec(tmp_path: Path, s3_env: dict[str, str],
                                        image_folder: Path) -> None:  # fmt: skip
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_env["FSSPEC_S3_ENDPOINT_URL"])
    fs.mkdir("shard-cli")
    env = dict(os.environ, **s3_env)
    result = run(["tarkit", "shard", str(image_folder), "-o", "s3://shard-cli/d/s-%d.tar",
                  "-c", "6", "--manifest", "s3://shard-cli/d/manifest.json"], env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls("shard-cli/d", refresh=True))
    shards = [f"s-{i}.tar{index}" for i in range(3) for index in ("", ".idx")]
    assert names == ["classes.json", "manifest.columns", "manifest.json", *shards]
    local = run(["tarkit", "shard", str(image_folder), "-o", str(tmp_path / "s-%d.tar"), "-c", "6"])
    assert local.returncode == 0
    for i in range(3):
        assert fs.cat(f"shard-cli/d/s-{i}.tar") == (tmp_path / f"s-{i}.tar").read_bytes()


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "give a SOURCE"),
        (["nowhere/"], "nowhere/: no such file or directory"),
        (["--resize", "big", "."], "--resize 'big'"),
        (["--resize", "\u00b2x2", "."], "--resize '\u00b2x2'"),  # a digit int() refuses
        (["--format", "gif2", "."], "--format 'gif2'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = run(["tarkit", "shard", "-o", "s-%d.tar", *args], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("tarkit shard: error: ") and message in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_shards_named_with_bytes_that_are_not_utf8_get_a_manifest(
    tmp_path: Path, image_folder: Path
) -> None:
    pattern = os.fsencode(str(tmp_path)) + b"/out/caf\xe9-%03d.tar"
    result = subprocess.run(
        [tool("tarkit"), "shard", str(image_folder), "-o", pattern, "-c", "5",
         "--manifest", str(tmp_path / "m.json")],
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [s.url for s in load_table(str(tmp_path / "m.json"))] == [
        os.fsdecode(f"out/caf\xe9-{i:03d}.tar".encode("latin-1")) for i in range(4)
    ]


def test_split_directories_of_plain_files_are_refused_too_with_the_fix(tmp_path: Path) -> None:
    data = tmp_path / "d4"
    for split, name in (("train", "a.wav"), ("val", "b.wav")):
        (data / split).mkdir(parents=True)
        (data / split / name).write_bytes(b"RIFF")
    result = run(["tarkit", "shard", "d4/", "-o", "out/s-%06d.tar"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        "tarkit shard: error: d4/: train/ and val/ look like a dataset's splits (they hold its "
        "files): shard each split on its own, as in tarkit shard d4/train -o 'train-%06d.tar' "
        "(--layout tree shards them together)\n"
    )
    assert not (tmp_path / "out").exists()
    together = run(["tarkit", "shard", "d4/", "--layout", "tree", "-o", "out/s-%06d.tar"],
                   cwd=tmp_path)  # fmt: skip
    assert together.returncode == 0, together.stderr
