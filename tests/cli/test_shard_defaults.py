"""tarkit shard's defaults and guards through the real command: shuffled shards, an earlier
run's shards, resize modes that stack, bad images skipped when asked, plans that explain
themselves, and the README's shard-then-load example run as written."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, run, run_shell, webdataset_samples
from PIL import Image
from random_access import check_random_access

from tarkit.storage import load_table


def jpeg(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="JPEG")
    return out.getvalue()


def make_folder(root: Path, classes: int, per_class: int) -> Path:
    """An ImageFolder whose images all differ in size."""
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(per_class):
            size = (30 + 7 * i + c, 20 + 3 * c + 5 * (i % 4))
            (root / f"class{c}" / f"{i:03d}.jpg").write_bytes(jpeg((c * 20, i, 0), size))
    return root


def shards_in(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.tar"))


def samples_in(directory: Path) -> list[tuple[str, dict[str, bytes]]]:
    return [sample for shard in shards_in(directory) for sample in webdataset_samples(shard)]


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# --- i.i.d. shards ----------------------------------------------------------------------------


def test_an_image_folder_is_shuffled_by_default_so_every_shard_mixes_classes(
    tmp_path: Path,
) -> None:
    photos = make_folder(tmp_path / "photos", classes=8, per_class=10)
    result = run(["tarkit", "shard", str(photos), "-o", str(tmp_path / "a" / "s-%02d.tar"),
                  "-c", "20"])  # fmt: skip
    assert result.returncode == 0, result.stderr
    for shard in shards_in(tmp_path / "a"):
        classes = {fields["cls"] for _, fields in webdataset_samples(shard)}
        assert len(classes) >= 5, (shard.name, classes)
    again = run(["tarkit", "shard", str(photos), "-o", str(tmp_path / "b" / "s-%02d.tar"),
                 "-c", "20"])  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert contents(tmp_path / "a") == contents(tmp_path / "b")  # seeded: the same order


def test_no_shuffle_keeps_the_class_order_and_seed_changes_the_order(tmp_path: Path) -> None:
    photos = make_folder(tmp_path / "photos", classes=3, per_class=4)
    kept = run(["tarkit", "shard", str(photos), "-o", str(tmp_path / "kept" / "s-%d.tar"),
                "--no-shuffle"])  # fmt: skip
    assert kept.returncode == 0, kept.stderr
    keys = [key for key, _ in samples_in(tmp_path / "kept")]
    assert keys == sorted(keys)
    seeded = run(["tarkit", "shard", str(photos), "-o", str(tmp_path / "seeded" / "s-%d.tar"),
                  "--seed", "7"])  # fmt: skip
    default = run(["tarkit", "shard", str(photos), "-o", str(tmp_path / "default" / "s-%d.tar")])
    assert seeded.returncode == default.returncode == 0
    orders = [[k for k, _ in samples_in(tmp_path / d)] for d in ("seeded", "default")]
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1]) == keys


def test_help_says_that_items_are_shuffled_by_default() -> None:
    result = run(["tarkit", "shard", "--help"])
    text = " ".join(result.stdout.decode().split())
    assert "Items are written in a seeded random order (--no-shuffle keeps" in text
    assert "--shuffle / --no-shuffle" in text


# --- an earlier run's shards ---------------------------------------------------------------


def test_a_rerun_with_another_maxcount_is_refused_then_overwritten_then_resumed(
    tmp_path: Path,
) -> None:
    photos = make_folder(tmp_path / "photos", classes=2, per_class=10)
    pattern = str(tmp_path / "out" / "s-%03d.tar")
    manifest = str(tmp_path / "out" / "m.json")
    first = run(["tarkit", "shard", str(photos), "-o", pattern, "-c", "2"])
    assert first.returncode == 0, first.stderr
    before = contents(tmp_path / "out")

    refused = run(["tarkit", "shard", str(photos), "-o", pattern, "-c", "5"])
    assert refused.returncode == 2
    assert (
        f"tarkit shard: error: {pattern}: 10 files already match the output pattern, first "
        f"{tmp_path}/out/s-000.tar" in refused.stderr
    )
    assert contents(tmp_path / "out") == before

    replaced = run(["tarkit", "shard", str(photos), "-o", pattern, "-c", "5", "--overwrite",
                    "--manifest", manifest])  # fmt: skip
    assert replaced.returncode == 0, replaced.stderr
    assert [p.name for p in shards_in(tmp_path / "out")] == [f"s-00{i}.tar" for i in range(4)]
    listed = list(load_table(manifest))
    assert [s.url for s in listed] == [f"s-00{i}.tar" for i in range(4)]
    assert len(samples_in(tmp_path / "out")) == 20

    (tmp_path / "out" / "s-003.tar").unlink()  # as if the run had stopped before it
    resumed = run(["tarkit", "shard", str(photos), "-o", pattern, "-c", "5", "--resume",
                   "--manifest", manifest])  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert list(load_table(manifest)) == listed
    assert check_random_access(manifest).samples == 20


def test_a_failing_item_costs_only_its_unfinished_shard_and_resume_continues(
    tmp_path: Path,
) -> None:
    photos = make_folder(tmp_path / "photos", classes=2, per_class=10)
    clean = run(["tarkit", "shard", str(photos), "-o", str(tmp_path / "clean" / "s-%d.tar"),
                 "-c", "4", "--resize", "16x16:crop"])  # fmt: skip
    assert clean.returncode == 0, clean.stderr
    # The 14th item in the shuffled order is cut short: a decoding error.
    victim = photos / (samples_in(tmp_path / "clean")[13][0] + ".jpg")
    good = victim.read_bytes()
    victim.write_bytes(good[: len(good) // 2])
    pattern = str(tmp_path / "out" / "s-%d.tar")
    failed = run(
        ["tarkit", "shard", str(photos), "-o", pattern, "-c", "4", "--resize", "16x16:crop"]
    )
    assert failed.returncode == 2
    assert f"{victim}: field 'jpg': cannot decode the image" in failed.stderr
    assert [p.name for p in shards_in(tmp_path / "out")] == ["s-0.tar", "s-1.tar", "s-2.tar"]
    victim.write_bytes(good)
    resumed = run(["tarkit", "shard", str(photos), "-o", pattern, "-c", "4", "--resize", "16x16:crop",
                   "--resume"])  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert contents(tmp_path / "out") == contents(tmp_path / "clean")


# --- batches that stack ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "resize,sizes",
    [("24x24:crop", {(24, 24)}), ("24x16!", {(24, 16)}), ("24x24", None), ("24x24^", None)],
)
def test_resize_modes_crop_and_exact_give_one_size_fit_and_cover_keep_the_aspect(
    tmp_path: Path, resize: str, sizes: set[tuple[int, int]] | None
) -> None:
    photos = make_folder(tmp_path / "photos", classes=2, per_class=6)
    result = run(["tarkit", "shard", str(photos), "-o", str(tmp_path / "out" / "s-%d.tar"),
                  "--resize", resize])  # fmt: skip
    assert result.returncode == 0, result.stderr
    found = {Image.open(io.BytesIO(f["jpg"])).size for _, f in samples_in(tmp_path / "out")}
    if sizes is not None:
        assert found == sizes
    else:
        width, height = 24, 24
        assert len(found) > 1
        inside = resize == "24x24"
        for w, h in found:
            assert (max(w / width, h / height) <= 1.02) if inside else (min(w, h) == 24)


def test_a_bad_resize_names_every_mode(tmp_path: Path) -> None:
    result = run(["tarkit", "shard", str(tmp_path), "--resize", "24x", "-o", "s-%d.tar"])
    assert result.returncode == 2
    assert "WxH:crop (cover and crop the centre to exactly WxH)" in result.stderr


def test_the_readme_shard_then_load_example_gives_stacked_batches(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines() if line.startswith("tarkit shard "))
    code = re.search(r"```python\n(import tarkit\n.*?)```", readme, re.S)
    assert code is not None and "tarkit.loader(" in code.group(1)
    make_folder(tmp_path / "imagenet" / "train", classes=5, per_class=14)  # 70 images
    sharded = run_shell(command, cwd=tmp_path)
    assert sharded.returncode == 0, sharded.stderr
    check = code.group(1) + textwrap.dedent("""
        assert tuple(images.shape) == (64, 3, 256, 256), images.shape
        assert tuple(labels.shape) == (64,) and len(set(labels.tolist())) == 5
        print("stacked")
    """)
    loaded = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout == "stacked\n"


# --- bad sources, counted --------------------------------------------------------------------


def corrupt_folder(root: Path) -> Path:
    """200 JPEGs in 4 classes, one of them cut short."""
    make_folder(root, classes=4, per_class=50)
    victim = root / "class2" / "017.jpg"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    return victim


def test_on_error_skip_leaves_out_a_corrupt_jpeg_lists_it_and_exits_1(tmp_path: Path) -> None:
    victim = corrupt_folder(tmp_path / "photos")
    out = tmp_path / "out"
    result = run(["tarkit", "shard", str(tmp_path / "photos"), "-o", str(out / "s-%d.tar"),
                  "-c", "50", "--resize", "32x32:crop", "--on-error", "skip", "-p", "2"])  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"tarkit shard: warning: skipping item 117 ({victim}): ")
    assert "cannot decode the image" in lines[0]
    assert lines[-1] == (
        f"tarkit shard: warning: skipped 1 item that failed (listed in {out}/s-rejects.tsv)"
    )
    samples = samples_in(out)
    assert len(samples) == 199 and "class2/017" not in dict(samples)
    index, source, cause = (out / "s-rejects.tsv").read_text().rstrip("\n").split("\t")
    assert (index, source) == ("117", str(victim)) and "cannot decode the image" in cause


def test_verify_decodes_images_that_are_not_resized_and_strict_is_the_default(
    tmp_path: Path,
) -> None:
    victim = corrupt_folder(tmp_path / "photos")
    packed = run(
        ["tarkit", "shard", str(tmp_path / "photos"), "-o", str(tmp_path / "a" / "s-%d.tar")]
    )
    assert packed.returncode == 0  # without --verify a JPEG is copied, not decoded
    verified = run(["tarkit", "shard", str(tmp_path / "photos"), "-o",
                    str(tmp_path / "b" / "s-%d.tar"), "--verify"])  # fmt: skip
    assert verified.returncode == 2
    assert verified.stderr.startswith(f"tarkit shard: error: {victim}: field 'jpg': cannot decode")
    rejects = tmp_path / "bad.tsv"
    skipped = run(["tarkit", "shard", str(tmp_path / "photos"), "-o",
                   str(tmp_path / "c" / "s-%d.tar"), "--verify", "--on-error", "skip",
                   "--rejects", str(rejects)])  # fmt: skip
    assert skipped.returncode == 1
    assert len(samples_in(tmp_path / "c")) == 199
    assert rejects.read_text().startswith(f"117\t{victim}\t")


def test_on_error_takes_fail_or_skip_and_rejects_needs_skip(tmp_path: Path) -> None:
    photos = make_folder(tmp_path / "photos", classes=1, per_class=1)
    bad = run(["tarkit", "shard", str(photos), "--on-error", "keep", "-o", "s-%d.tar"])
    assert bad.stderr == "tarkit shard: error: --on-error must be one of fail, skip (got 'keep')\n"
    lonely = run(["tarkit", "shard", str(photos), "--rejects", "r.tsv", "-o", "s-%d.tar"])
    assert lonely.stderr == "tarkit shard: error: --rejects goes with --on-error skip\n"


# --- plans that explain themselves ------------------------------------------------------------


def test_a_plan_without_an_at_column_warns_and_shows_the_header_that_embeds_files(
    tmp_path: Path,
) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.jpg").write_bytes(jpeg((1, 2, 3), (8, 8)))
    plan = tmp_path / "plan.csv"
    plan.write_text("filepath,label\nimg/a.jpg,0\n")
    result = run(["tarkit", "shard", str(plan), "-o", str(tmp_path / "out" / "s-%d.tar")])
    assert result.returncode == 0
    assert result.stderr == (
        f"tarkit shard: warning: {plan}: no column starts with @, so no file is embedded: "
        "every cell is text. To pack the files a column lists, name it @<field> (header "
        "'@jpg,label' instead of 'filepath,label')\n"
    )


def test_a_key_template_takes_every_column_it_lists(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(jpeg((1, 2, 3), (8, 8)))
    plan = tmp_path / "plan.csv"
    plan.write_text("@jpg,class.txt\na.jpg,cat\na.jpg,dog\n")
    out = tmp_path / "out"
    result = run(["tarkit", "shard", str(plan), "--key", "{class.txt}/{row:04d}", "--no-shuffle",
                  "-o", str(out / "s-%d.tar")])  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [key for key, _ in samples_in(out)] == ["cat/0000", "dog/0001"]
    wrong = run(["tarkit", "shard", str(plan), "--key", "{label}", "-o", str(out / "t-%d.tar")])
    assert wrong.stderr == (
        "tarkit shard: error: --key '{label}': no text column 'label' (it can use: row, "
        "class.txt)\n"
    )


def test_a_zip_or_a_binary_file_is_named_as_what_it_is(tmp_path: Path) -> None:
    archive = tmp_path / "photos.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("cat/1.jpg", b"x")
    result = run(["tarkit", "shard", str(archive), "-o", str(tmp_path / "s-%d.tar")])
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"tarkit shard: error: {archive}: a zip archive, not a CSV/TSV plan: unpack it"
    )
    blob = tmp_path / "data.bin"
    blob.write_bytes(b"\x00\x01" * 100)
    binary = run(["tarkit", "shard", str(blob), "-o", str(tmp_path / "s-%d.tar")])
    assert binary.stderr.startswith(f"tarkit shard: error: {blob}: a binary file, not a CSV/TSV")
