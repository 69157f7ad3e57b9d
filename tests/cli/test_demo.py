"""The README's first command: `tarkit demo` end to end, on the real digits dataset."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import ROOT, run, samples_of
from PIL import Image


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("demo") / "out"
    result = run(["tarkit", "demo", "--out", str(out), "--epochs", "4"], timeout=300)
    assert result.returncode == 0, result.stdout.decode()[-3000:] + result.stderr[-3000:]
    return out, result.stdout.decode()


def test_demo_trains_a_classifier_above_90_percent_from_the_shards(demo_out) -> None:
    out, _ = demo_out
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["epochs"]) == 4
    assert metrics["accuracy"] >= 0.9
    assert metrics["train_shards"] == 8  # 4 original + 4 augmented
    assert (out / "model.pt").stat().st_size > 0


def test_demo_shards_hold_every_digit_once(demo_out) -> None:
    out, _ = demo_out
    train = json.loads((out / "shards" / "train.json").read_text())
    test = json.loads((out / "shards" / "test.json").read_text())
    assert train["samples"] + test["samples"] == 1797
    keys = []
    for path in sorted((out / "shards").glob("*.tar")):
        samples = samples_of(path.read_bytes())
        keys += [key for key, _ in samples]
        assert all(set(fields) == {"png", "cls"} for _, fields in samples)
    assert len(keys) == len(set(keys)) == 1797


def test_demo_keys_lead_back_to_the_original_scans_and_labels(demo_out) -> None:
    from sklearn.datasets import load_digits

    out, _ = demo_out
    target = load_digits().target
    for path in sorted((out / "shards").glob("*.tar")):
        for key, fields in samples_of(path.read_bytes()):
            index = int(key.removeprefix("digit-"))
            assert key == f"digit-{index:04d}"
            assert int(fields["cls"]) == target[index]
            assert (index % 5 == 4) == path.name.startswith("test-")


def test_plain_setup_installs_every_distribution_the_demo_imports() -> None:
    # `bin/demo` runs `bin/setup` without `dev`: the demo must not lean on a test tool.
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    setup = (ROOT / "bin" / "setup").read_text()
    extras = re.search(r'^extras="([^"]*)"', setup, re.M)
    assert extras, "bin/setup no longer sets its extras on one line"
    installed = " ".join(project["dependencies"])
    for extra in extras[1].split(","):
        installed += " " + " ".join(project["optional-dependencies"][extra])
    for distribution in ("scikit-learn", "torch", "pillow", "webdataset"):
        assert distribution in installed, f"bin/demo would run without {distribution}"


def test_demo_augmented_shards_have_the_same_samples_with_new_images(demo_out) -> None:
    out, _ = demo_out
    original = {}
    for path in sorted((out / "shards").glob("train-*.tar")):
        original.update(samples_of(path.read_bytes()))
    augmented = {}
    for path in sorted((out / "augmented").glob("*.tar")):
        augmented.update(samples_of(path.read_bytes()))
    assert augmented.keys() == original.keys()
    changed = sum(augmented[k]["png"] != original[k]["png"] for k in original)
    assert changed > 0.9 * len(original)
    assert all(augmented[k]["cls"] == original[k]["cls"] for k in original)


def test_demo_writes_contact_sheets_labels_and_prints_copyable_commands(demo_out) -> None:
    out, stdout = demo_out
    for name in ("contact-sheet.png", "augmented-contact-sheet.png"):
        with Image.open(out / name) as sheet:
            assert sheet.width > 100 and sheet.height > 100
    labels = (out / "labels.tsv").read_text().splitlines()
    assert labels[0] == "__key__\tcls" and len(labels) == 1 + 1438
    for command in (
        "$ tarkit shard",
        "$ tarshow",
        "$ tar2tsv",
        "| tarproc -p 2",
        "$ python -m tarkit.demo train",
    ):
        assert command in stdout
    assert "test accuracy:" in stdout
