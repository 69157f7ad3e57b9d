"""tarkit demo: shard a real dataset, look at it, process it and train on it, end to end."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, TextIO

from ..errors import StepFailed
from . import declare  # the quick parser; typer itself only when needed
from .runner import run, typer_main

app = declare.Typer(add_completion=False, rich_markup_mode=None)

MIN_ACCURACY = 0.9


class Demo:
    """Runs each step as the shell command a user could copy, and prints it first."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.env = dict(os.environ)
        # The commands of this installation come first, whatever PATH says (Debian's
        # /usr/sbin/tarcat is another program).
        self.bin_dir = os.path.dirname(sys.executable)
        self.env["PATH"] = self.bin_dir + os.pathsep + self.env.get("PATH", "")
        self.env.setdefault("SOURCE_DATE_EPOCH", "946684800")
        self.started = time.perf_counter()
        self.step_number = 0

    def step(self, title: str) -> None:
        self.step_number += 1
        elapsed = time.perf_counter() - self.started
        print(f"\n== {self.step_number}. {title}  [{elapsed:.0f} s]", flush=True)

    def sh(self, command: str, *, show_lines: int | None = None) -> str:
        """Run ``command`` with bash (pipefail), print it, then its output as it comes.

        Output lines are indented; after ``show_lines`` lines the rest are counted, not
        shown. The command's stderr goes to stderr as it comes. Returns its stdout.
        """
        print(f"$ {command}", flush=True)
        process = subprocess.Popen(
            ["bash", "-o", "pipefail", "-c", command], env=self.env, cwd=os.getcwd(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        relay = threading.Thread(target=_indent_lines, args=(process.stderr, sys.stderr))
        relay.start()
        lines = []
        for line in process.stdout:
            lines.append(line)
            if show_lines is None or len(lines) <= show_lines:
                print(f"  {line.rstrip()}", flush=True)
        status = process.wait()
        relay.join()
        if show_lines is not None and len(lines) > show_lines:
            print(f"  … ({len(lines) - show_lines} more lines)", flush=True)
        if status != 0:
            raise StepFailed(f"step {self.step_number} failed (exit {status}): {command}")
        return "".join(lines)


def _indent_lines(stream: TextIO, out: TextIO) -> None:
    for line in stream:
        out.write(f"  {line.rstrip()}\n")
        out.flush()


def run_demo(out: Path, epochs: int, workers: int) -> int:
    demo = Demo(out)
    q = shlex.quote
    o = q(str(out))
    shards, augmented = out / "shards", out / "augmented"
    print(f"tarkit demo: everything goes to {out}/")
    print("Every step is a shell command. To run them yourself, first:")
    print(f"  cd {q(os.getcwd())} && export PATH={q(demo.bin_dir)}:$PATH")
    out.mkdir(parents=True, exist_ok=True)

    demo.step("Shard a real dataset (scikit-learn's 1,797 handwritten digits, as PNG + cls)")
    demo.sh(
        f"tarkit shard --dataset tarkit.demo:digits_train -o {o}/shards/train-%06d.tar "
        f"-c 400 --seed 0 -p {workers} --manifest {o}/shards/train.json --overwrite"
    )
    demo.sh(
        f"tarkit shard --dataset tarkit.demo:digits_test -o {o}/shards/test-%06d.tar "
        f"--manifest {o}/shards/test.json --overwrite"
    )
    demo.sh(f"ls -l {o}/shards")

    demo.step("Look at it")
    demo.sh(f"tarshow -c 2 {o}/shards/train-000000.tar")
    demo.sh(f"tarshow -c 64 --grid {o}/contact-sheet.png {o}/shards/train-000000.tar")
    labels = demo.sh(f"tar2tsv -f cls {o}/shards/train-*.tar | tee {o}/labels.tsv", show_lines=4)
    demo.sh(f"tail -n +2 {o}/labels.tsv | cut -f 2 | sort -n | uniq -c   # class histogram")

    demo.step(
        "Process it: a random affine distortion of a seeded quarter of the images, "
        "two samples at a time"
    )
    demo.sh(f"mkdir -p {o}/augmented")
    demo.sh(
        f"tarcat --fraction 0.25 --seed 1 {o}/shards/train-*.tar "
        f"| tarproc -p 2 -c 'python -m tarkit.demo augment' "
        f"| tarsplit -c 400 -o {o}/augmented/train-aug-%06d.tar "
        f"--manifest {o}/augmented/manifest.json --overwrite"
    )
    demo.sh(
        f"tarshow -c 64 --grid {o}/augmented-contact-sheet.png {o}/augmented/train-aug-000000.tar"
    )

    demo.step(f"Train a small CNN from the shards: ShardDataset, DataLoader with {workers} workers")
    demo.sh(f"python -m tarkit.demo train {o} {epochs} {workers}")
    metrics = json.loads((out / "metrics.json").read_text())

    demo.step("Summary")
    elapsed = time.perf_counter() - demo.started
    train_samples = sum(1 for _ in labels.splitlines()[1:])
    print(f"  original shards:   {shards}/ ({train_samples} train samples, test shard, manifests)")
    print(f"  augmented shards:  {augmented}/")
    print(f"  contact sheets:    {out}/contact-sheet.png, {out}/augmented-contact-sheet.png")
    print(f"  labels:            {out}/labels.tsv")
    print(f"  model, metrics:    {out}/model.pt, {out}/metrics.json")
    print(f"  test accuracy:     {metrics['accuracy']:.1%} after {len(metrics['epochs'])} epochs")
    print(f"  total time:        {elapsed:.0f} s")
    if metrics["accuracy"] < MIN_ACCURACY:
        raise StepFailed(f"test accuracy {metrics['accuracy']:.1%} is below {MIN_ACCURACY:.0%}")
    return 0


@app.command(
    help="Run the end-to-end demo: shard scikit-learn's digits, inspect the shards, "
    "augment them with tarproc, and train a classifier with DataLoader workers.\n\n"
    "Example: tarkit demo --out demo-out"
)
def demo(
    ctx: declare.Context,
    out: Annotated[str, declare.Option("--out", help="Folder for everything the demo writes.")] = (
        "demo-out"
    ),
    epochs: Annotated[int, declare.Option("--epochs", help="Training epochs.")] = 6,
    workers: Annotated[int, declare.Option("--workers", help="DataLoader worker processes.")] = 2,
) -> None:
    run(ctx.command_path, lambda: run_demo(Path(out), epochs, workers))


def main() -> None:
    typer_main(app, "tarkit demo")
