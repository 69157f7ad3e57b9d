"""tarshow through real pipes: previews, --images, --grid contact sheets, errors."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from conftest import DATA, make_tar, run, run_shell
from PIL import Image
from test_tar2tsv import ARCHIVERS, archive_with, imported_modules, write_tree

COLOURS = [
    (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (255, 0, 255), (0, 255, 255),
    (128, 0, 0), (0, 128, 0), (0, 0, 128), (128, 128, 0), (128, 0, 128), (0, 128, 128),
    (255, 128, 0), (128, 255, 0), (0, 128, 255), (255, 255, 255), (200, 100, 50),
    (50, 100, 200), (100, 200, 50), (20, 20, 20),
]  # fmt: skip
# Contact sheet layout (docs/tarshow.md): 128-pixel tiles, 16-pixel captions, 4-pixel gaps.
CELL_W, CELL_H, GAP = 132, 148, 4
TRUECOLOR = re.compile(rb"\x1b\[38;2;(\d+);(\d+);(\d+);48;2;(\d+);(\d+);(\d+)m\xe2\x96\x80")


def image_bytes(colour: tuple[int, int, int], fmt: str, size: tuple[int, int] = (48, 32)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, fmt)
    return out.getvalue()


def close(pixel: tuple[int, ...], colour: tuple[int, ...], tolerance: int = 6) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, colour, strict=True))


def tile_centre(index: int, per_row: int) -> tuple[int, int]:
    return (
        GAP + (index % per_row) * CELL_W + 64,
        GAP + (index // per_row) * CELL_H + 64,
    )


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 samples: a solid-colour image (JPEG, PNG or WebP), a label, some JSON."""
    files = {}
    for i, colour in enumerate(COLOURS):
        fmt, ext = [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")][i % 3]
        files[f"img{i:02d}.{ext}"] = image_bytes(colour, fmt)
        files[f"img{i:02d}.cls"] = str(i).encode()
        files[f"img{i:02d}.json"] = b'{"colour": [%d, %d, %d]}' % colour
    return write_tree(tmp_path_factory.mktemp("images"), files)


@pytest.fixture(scope="module")
def image_archive(image_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("archive") / "images.tar"
    return archive_with(ARCHIVERS["gnu-gnu"], image_tree, out)


# --- text -----------------------------------------------------------------------------


def test_gnu_tar_archive_shows_key_and_a_line_per_field(tmp_path: Path) -> None:
    files = {
        "s1.bin": bytes(range(40)),
        "s1.json": b'{\n  "caption": "un caf\xc3\xa9",\n  "n": [1, 2]\n}\n',
        "s1.png": image_bytes((1, 2, 3), "PNG", (31, 17)),
        "s1.txt": b"first line\tx\nsecond" + b" word" * 20,
        "s2.txt": b"\xff\xfe not utf-8",
    }
    tree = write_tree(tmp_path / "t", files)
    archive = archive_with(ARCHIVERS["gnu-pax"], tree, tmp_path / "a.tar")
    result = run(["tarshow", str(archive)])
    assert (result.returncode, result.stderr) == (0, "")
    json, png = len(files["s1.json"]), len(files["s1.png"])
    assert result.stdout.decode() == (
        "s1\n"
        "  bin    40  00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f …\n"
        f'  json  {json:>3}  {{"caption":"un café","n":[1,2]}}\n'
        f"  png   {png:>3}  31x17 RGB\n"
        "  txt   119  first line\\tx\\nsecond word word word word word word word word …\n"
        "s2\n"
        "  txt  12  ff fe 20 6e 6f 74 20 75 74 66 2d 38\n"
    )


def test_count_and_fields_limit_what_is_shown(image_archive: Path) -> None:
    result = run(["tarshow", "-c", "2", "-f", "cls", str(image_archive)])
    assert result.stdout == b"img00\n  cls  1  0\nimg01\n  cls  1  1\n"


def test_peer_shard_images_are_described_by_pillow() -> None:
    result = run(["tarshow", "-c", "1", str(DATA / "peer-shards" / "sample.tgz")])
    assert result.returncode == 0
    assert re.fullmatch(rb"\d+\n  cls  +1  \d\n  png  +\d+  28x28 L\n", result.stdout)


def test_umbrella_show_is_tarshow(image_archive: Path) -> None:
    args = ["-c", "3", str(image_archive)]
    assert run(["tarkit", "show", *args]).stdout == run(["tarshow", *args]).stdout


# --- --images -------------------------------------------------------------------------


def test_images_are_drawn_in_truecolor_half_blocks_in_their_colours(image_archive: Path) -> None:
    result = run(["tarshow", "--images", "-c", "3", "-f", "jpg;png;webp", str(image_archive)])
    assert (result.returncode, result.stderr) == (0, "")
    blocks = result.stdout.removesuffix(b"\n").split(b"\nimg")
    assert len(blocks) == 3
    for colour, block in zip(COLOURS, blocks, strict=False):
        drawn = [tuple(map(int, m)) for m in TRUECOLOR.findall(block)]
        assert drawn, block[:200]
        assert all(close(c[:3], colour, 8) and close(c[3:], colour, 8) for c in drawn)
        lines = block.split(b"\n")
        assert len(lines) == 2 + 16  # key or field line, then 32 pixel rows in 16 lines
        assert all(line.endswith(b"\x1b[0m") for line in lines[2:])


def test_images_are_not_drawn_without_the_option(image_archive: Path) -> None:
    assert b"\x1b[" not in run(["tarshow", "-c", "3", str(image_archive)]).stdout


# --- --grid ---------------------------------------------------------------------------


def test_grid_defaults_to_16_samples_with_each_tile_in_its_colour(
    tmp_path: Path, image_archive: Path
) -> None:
    out = tmp_path / "sheet.png"
    result = run_shell(f"cat {image_archive} | tarshow --grid {out}")
    assert (result.returncode, result.stderr, result.stdout) == (0, "", b"")
    with Image.open(out) as sheet:
        assert sheet.format == "PNG"
        assert sheet.size == (GAP + 4 * CELL_W, GAP + 4 * CELL_H)
        for index in range(16):
            assert close(sheet.getpixel(tile_centre(index, 4)), COLOURS[index]), index
    assert [p.name for p in tmp_path.iterdir()] == ["sheet.png"]


def test_grid_takes_n_from_count_and_writes_the_same_png_to_stdout(
    tmp_path: Path, image_archive: Path
) -> None:
    out = tmp_path / "sheet.png"
    assert run(["tarshow", "-c", "5", "--grid", str(out), str(image_archive)]).returncode == 0
    with Image.open(out) as sheet:
        assert sheet.size == (GAP + 3 * CELL_W, GAP + 2 * CELL_H)
        for index in range(5):
            assert close(sheet.getpixel(tile_centre(index, 3)), COLOURS[index]), index
    piped = run(["tarshow", "-c", "5", "--grid", "-", str(image_archive)])
    assert piped.stdout == out.read_bytes()


def test_grid_of_a_peer_shard(tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    result = run(["tarshow", "--grid", str(out), str(DATA / "peer-shards" / "sample.tgz")])
    assert (result.returncode, result.stderr) == (0, "")
    with Image.open(out) as sheet:
        assert sheet.size == (GAP + 4 * CELL_W, GAP + 4 * CELL_H)


def test_grid_without_images_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(make_tar([("a.txt", b"1"), ("b.txt", b"2")]))
    out = tmp_path / "sheet.png"
    result = run(["tarshow", "--grid", str(out), str(archive)])
    assert result.returncode == 2
    assert result.stderr == (
        f"tarshow: error: {out}: no image in the first 2 samples "
        "(image fields end in .jpg, .jpeg, .png, .webp, …); nothing written\n"
    )
    assert not out.exists()


def test_grid_and_images_together_are_a_usage_error(tmp_path: Path, image_archive: Path) -> None:
    result = run(["tarshow", "--grid", str(tmp_path / "x.png"), "--images", str(image_archive)])
    assert result.returncode == 2
    assert result.stderr == "tarshow: error: --grid and --images do not go together\n"
    assert list(tmp_path.iterdir()) == []


def caption_line(sheet: Image.Image, index: int, per_row: int, line: int, lines: int) -> bytes:
    """The pixels of caption line ``line`` of tile ``index`` (cells ``lines`` lines high)."""
    x = GAP + (index % per_row) * CELL_W
    y = GAP + (index // per_row) * (128 + 16 * lines + GAP) + 128 + 16 * line
    return sheet.crop((x, y, x + 128, y + 16)).tobytes()


def drawn(text: str) -> bytes:
    """A caption line holding ``text``, as docs/tarshow.md draws it (Pillow's default font)."""
    from PIL import ImageDraw, ImageFont

    strip = Image.new("RGB", (128, 16), (24, 24, 24))
    font = ImageFont.load_default(size=11)
    ImageDraw.Draw(strip).text((0, 1), text, fill=(230, 230, 230), font=font)
    return strip.tobytes()


def test_grid_caption_names_the_class_from_classes_json_beside_the_input(
    tmp_path: Path, image_archive: Path
) -> None:
    (tmp_path / "shard.tar").write_bytes(image_archive.read_bytes())
    (tmp_path / "classes.json").write_text(json.dumps([f"colour {i}" for i in range(20)]))
    out = tmp_path / "sheet.png"
    result = run(["tarshow", "-c", "2", "-f", "png", "--grid", str(out), "--caption",
                  "cls __key__", str(tmp_path / "shard.tar")])  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    with Image.open(out) as sheet:
        assert sheet.size == (GAP + 2 * CELL_W, GAP + 128 + 2 * 16 + GAP)
        # -f png picks the image (img00 has a JPEG: a grey tile), not the caption's fields
        assert sheet.getpixel(tile_centre(0, 2)) == (64, 64, 64)
        assert close(sheet.getpixel(tile_centre(1, 2)), COLOURS[1])
        assert caption_line(sheet, 0, 2, 0, 2) == drawn("colour 0 (0)")
        assert caption_line(sheet, 1, 2, 1, 2) == drawn("img01")
    named = tmp_path / "names.json"
    named.write_text('["red", "green"]')
    piped = run_shell(f"tarshow -c 2 --grid - --caption cls --classes {named} < {image_archive}")
    assert piped.returncode == 0, piped.stderr
    with Image.open(io.BytesIO(piped.stdout)) as sheet:
        assert caption_line(sheet, 1, 2, 0, 1) == drawn("green (1)")


def test_caption_goes_with_grid_and_a_missing_classes_file_is_named(
    tmp_path: Path, image_archive: Path
) -> None:
    result = run(["tarshow", "--caption", "cls", str(image_archive)])
    assert (result.returncode, result.stderr) == (
        2, "tarshow: error: --caption and --classes go with --grid\n"
    )  # fmt: skip
    out = tmp_path / "sheet.png"
    result = run(["tarshow", "--grid", str(out), "--caption", "cls", "--classes",
                  str(tmp_path / "nope.json"), str(image_archive)])  # fmt: skip
    assert (result.returncode, result.stderr) == (
        2, f"tarshow: error: {tmp_path}/nope.json: no such file\n"
    )  # fmt: skip
    assert not out.exists()


# --- errors and pipes -----------------------------------------------------------------


def cut_archive(image_archive: Path, sample: int) -> bytes:
    """The archive cut inside the data of the second member (.json) of ``sample``."""
    data = image_archive.read_bytes()
    return data[: data.index(b"img%02d.json" % sample) + 512 + 1]


def test_truncated_input_shows_whole_samples_then_one_error_line(image_archive: Path) -> None:
    result = run_shell("tarshow -f cls", input=cut_archive(image_archive, 3))
    assert result.returncode == 2
    assert result.stdout == b"img00\n  cls  1  0\nimg01\n  cls  1  1\nimg02\n  cls  1  2\n"
    (line,) = result.stderr.splitlines()
    assert re.fullmatch(r"tarshow: error: <stdin>: .+ \(byte \d+, member img03\.json\)", line)


def test_truncated_input_in_grid_mode_leaves_no_file(tmp_path: Path, image_archive: Path) -> None:
    out = tmp_path / "sheet.png"
    result = run_shell(f"tarshow --grid {out}", input=cut_archive(image_archive, 3))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_closed_output_pipe_is_quiet_141(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    # 30,000 lines of preview: more than a pipe holds
    archive.write_bytes(make_tar((f"{i:05d}.txt", b"t" * 100) for i in range(30000)))
    result = run_shell(f"tarshow {archive} | head -n 1; echo ${{PIPESTATUS[0]}} >&2")
    assert result.stdout == b"00000\n"
    assert result.stderr == "141\n"


def test_images_into_a_closed_pipe_are_quiet_141(image_archive: Path) -> None:
    inputs = " ".join([str(image_archive)] * 10)  # more than a pipe holds
    result = run_shell(f"tarshow --images {inputs} | head -c 10; echo ${{PIPESTATUS[0]}} >&2")
    assert result.stderr == "141\n"


def test_full_disk_is_exit_2_with_a_message(image_archive: Path) -> None:
    result = run_shell(f"tarshow {image_archive} > /dev/full")
    assert result.returncode == 2
    assert result.stderr == "tarshow: error: <stdout>: write failed: No space left on device\n"


def test_pillow_is_imported_only_when_an_image_is_shown(tmp_path: Path) -> None:
    (tmp_path / "text.tar").write_bytes(make_tar([("a.txt", b"t"), ("a.json", b"{}")]))
    (tmp_path / "image.tar").write_bytes(make_tar([("a.png", image_bytes((0, 0, 0), "PNG"))]))
    text = imported_modules("tarkit.cli.tarshow", ["text.tar"], tmp_path)
    assert "tarkit" in text and not text & {"torch", "numpy", "PIL"}
    shown = imported_modules("tarkit.cli.tarshow", ["--images", "image.tar"], tmp_path)
    assert "PIL" in shown and not shown & {"torch", "numpy"}
    limited = imported_modules("tarkit.cli.tarshow", ["-f", "txt", "image.tar"], tmp_path)
    assert not limited & {"torch", "numpy", "PIL"}
