"""The README's first command: `tarkit demo` end to end, on the real digits dataset."""

from __future__ import annotations

import json
import os
import re
import subprocess
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
    assert metrics["train_shards"] == 5  # 4 original + 1 augmented (a quarter: ~350 samples)
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


def test_demo_augmented_shards_hold_a_seeded_quarter_of_the_samples_with_new_images(
    demo_out,
) -> None:
    out, _ = demo_out
    original = {}
    for path in sorted((out / "shards").glob("train-*.tar")):
        original.update(samples_of(path.read_bytes()))
    augmented = {}
    for path in sorted((out / "augmented").glob("*.tar")):
        augmented.update(samples_of(path.read_bytes()))
    assert augmented.keys() < original.keys()
    assert 0.2 * len(original) < len(augmented) < 0.3 * len(original)
    changed = sum(augmented[k]["png"] != original[k]["png"] for k in augmented)
    assert changed > 0.9 * len(augmented)
    assert all(augmented[k]["cls"] == original[k]["cls"] for k in augmented)


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


def test_demo_prints_loss_accuracy_and_speed_for_every_epoch(demo_out) -> None:
    _, stdout = demo_out
    line = r"epoch (\d+): loss [\d.]+, test accuracy [\d.]+%, [\d,]+ samples/s"
    assert re.findall(line, stdout) == ["1", "2", "3", "4"]


def test_a_printed_command_run_by_hand_gives_the_demo_output(demo_out, tmp_path: Path) -> None:
    # The demo says how to run its commands: from this folder, the venv first on PATH.
    out, stdout = demo_out
    setup = re.search(r"^  (cd .* && export PATH=.*)$", stdout, re.M)
    assert setup, stdout[:500]
    [command] = [line[2:] for line in stdout.splitlines() if line.startswith("$ tar2tsv")]
    by_hand = command.replace(str(out / "labels.tsv"), str(tmp_path / "labels.tsv"))
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # no venv: the printed line must add it
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{setup[1]} && {by_hand} > /dev/null"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "labels.tsv").read_bytes() == (out / "labels.tsv").read_bytes()


def test_a_failing_step_stops_the_demo_with_exit_2_naming_the_step(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "shards").mkdir(parents=True)
    (out / "shards" / "train-000000.tar").mkdir()  # the first shard cannot be written
    result = run(["tarkit", "demo", "--out", str(out), "--epochs", "1"], timeout=120)
    assert result.returncode == 2
    assert "tarkit demo: error: step 1 failed (exit 2): tarkit shard" in result.stderr
    assert "== 2." not in result.stdout.decode()
