"""Loader state across processes: a training process killed with SIGKILL resumes from its
last checkpoint file in a fresh process, and a real two-rank gloo group checkpoints on
rank 0 and resumes on both ranks (and elastically on one)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from loader_data import all_keys, make_shards

COUNTS = [9, 4, 12, 1, 7, 10, 6, 8]  # 57 samples

TRAIN = """
import json, os, signal, sys
import tarkit

manifest, out, kill_after, state_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
loader = tarkit.loader(manifest, batch_size=4, num_workers=2, shuffle=6, seed=3, decode=[])
if os.path.exists(state_file):
    with open(state_file) as f:
        loader.load_state_dict(json.load(f)["loader"])
with open(out, "a") as log:
    done = 0
    for epoch in range(2 if kill_after < 0 else 1):
        for batch in loader:
            log.write(json.dumps(list(batch["__key__"])) + "\\n")
            log.flush()
            done += 1
            if done % 2 == 0:  # a checkpoint, written whole
                with open(state_file + ".tmp", "w") as f:
                    json.dump({"batches": done, "loader": loader.state_dict()}, f)
                os.replace(state_file + ".tmp", state_file)
            if done == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
"""


def lines(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_killed_training_process_resumes_from_its_last_checkpoint_file(tmp_path):
    _, manifest = make_shards(tmp_path / "shards", COUNTS)
    whole, state = tmp_path / "whole.log", str(tmp_path / "none.json")
    run = [sys.executable, "-c", TRAIN, manifest]
    subprocess.run([*run, str(whole), "-1", state], check=True, timeout=120)
    first, checkpoint = tmp_path / "first.log", str(tmp_path / "state.json")
    killed = subprocess.run([*run, str(first), "7", checkpoint], timeout=120)
    assert killed.returncode == -9
    saved = json.loads(Path(checkpoint).read_text())
    assert saved["batches"] == 6  # the last checkpoint before the kill
    second = tmp_path / "second.log"
    subprocess.run([*run, str(second), "-1", checkpoint], check=True, timeout=120)
    # From the checkpoint on, the restored process yields what the uninterrupted one did.
    assert lines(first)[:6] + lines(second) == lines(whole)


GROUP = """
import json, sys
import torch.distributed as dist
import tarkit

manifest, address, rank, world, steps, state_in, out = sys.argv[1:8]
rank, world, steps = int(rank), int(world), int(steps)
dist.init_process_group("gloo", init_method=address, rank=rank, world_size=world)
loader = tarkit.loader(manifest, batch_size=3, num_workers=2, shuffle=5, seed=9,
                       equal_batches=True, decode=[])
if state_in != "-":
    with open(state_in) as f:
        loader.load_state_dict(json.load(f))
seen = []
for batch in loader:
    seen.append(list(batch["__key__"]))
    if len(seen) == steps:
        break
dist.barrier()
if rank == 0 and steps >= 0:
    with open(out + ".state", "w") as f:
        json.dump(loader.state_dict(), f)
with open(f"{out}.{rank}", "w") as f:
    json.dump(seen, f)
dist.destroy_process_group()
"""


def run_group(manifest: str, world: int, steps: int, state: str, out: Path) -> list[list]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                GROUP,
                manifest,
                address,
                str(rank),
                str(world),
                str(steps),
                state,
                str(out),
            ],
            env=env,
        )  # fmt: skip
        for rank in range(world)
    ]
    for process in processes:
        assert process.wait(timeout=180) == 0
    return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(world)]


@pytest.mark.timeout(600)
def test_a_gloo_group_resumes_from_rank_zeros_checkpoint_exactly_and_elastically(tmp_path):
    _, manifest = make_shards(tmp_path / "shards", COUNTS)
    whole = run_group(manifest, 2, -1, "-", tmp_path / "whole")
    first = run_group(manifest, 2, 4, "-", tmp_path / "first")
    state = str(tmp_path / "first.state")
    # Both ranks load rank 0's checkpoint (as Lightning does) and go on exactly.
    second = run_group(manifest, 2, -1, state, tmp_path / "second")
    for rank in range(2):
        assert first[rank] + second[rank] == whole[rank], rank
    assert len(whole[0]) == len(whole[1])
    # On one rank instead: every sample not yet delivered, once.
    elastic = run_group(manifest, 1, -1, state, tmp_path / "elastic")
    delivered = Counter(k for rank in first for batch in rank for k in batch)
    union = delivered + Counter(k for batch in elastic[0] for k in batch)
    assert max(union.values()) == 1
    dropped = all_keys(COUNTS) - union
    assert sum(dropped.values()) < 2 * 3 + 1 * 3  # equal batches drop under world x batch
