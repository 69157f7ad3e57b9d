"""Long local runs of the seeded mutation fuzzer (see fuzz/mutations.py for the oracle).

    python fuzz/run_mutations.py --seed 20240917 --cases 1000000 --jobs 2 --out fuzz/found

Case ``i`` of a seed is the same bytes on every machine, so a failure is reproduced with
``--start i --cases 1``. Failing inputs are written to ``--out`` as ``case-<i>.tar``
with ``case-<i>.txt`` saying what went wrong; the exit status is 1 if any case failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mutations  # noqa: E402

CHUNK = 5000
MEMORY_LIMIT = 3 << 30  # bytes of address space per worker


def run_chunk(job: tuple[int, int, int]) -> tuple[int, collections.Counter[str], list[dict]]:
    """Check ``cases`` cases from ``start``; count outcomes, return failures."""
    seed, start, cases = job
    # An input that makes the reader allocate without bound is a failure, not a dead
    # machine: cap the address space of the worker.
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    outcomes: collections.Counter[str] = collections.Counter()
    failures = []
    for mutant, failure in mutations.run(seed, cases, start):
        outcomes[mutant.seed_name] += 1
        if failure is None:
            output, _, error = mutations.read_and_write(mutant.data)
            outcomes["exit 0" if error is None else "exit 2"] += 1
            continue
        outcomes[failure.kind] += 1
        failures.append(
            {"index": mutant.index, "seed": mutant.seed_name, "steps": list(mutant.steps),
             "kind": failure.kind, "detail": failure.detail, "data": failure.data.hex()}
        )  # fmt: skip
    return cases, outcomes, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="directory for failing inputs")
    args = parser.parse_args(argv)

    started = time.monotonic()
    jobs = [
        (args.seed, start, min(CHUNK, args.start + args.cases - start))
        for start in range(args.start, args.start + args.cases, CHUNK)
    ]
    totals: collections.Counter[str] = collections.Counter()
    failures: list[dict] = []
    done = 0
    with multiprocessing.Pool(args.jobs) as pool:
        for cases, outcomes, found in pool.imap(run_chunk, jobs):
            done += cases
            totals.update(outcomes)
            failures.extend(found)
            rate = done / (time.monotonic() - started)
            print(f"{done} cases, {len(failures)} failures, {rate:.0f} cases/s", file=sys.stderr)
    if args.out is not None and failures:
        args.out.mkdir(parents=True, exist_ok=True)
        for failure in failures:
            stem = args.out / f"case-{failure['index']}"
            stem.with_suffix(".tar").write_bytes(bytes.fromhex(failure.pop("data")))
            stem.with_suffix(".txt").write_text(json.dumps(failure, indent=1) + "\n")
    summary = {
        # The compiled scanner and the pure reader are compared on every case when the
        # scanner is built (mutations.disagreement); "pure" means the pure reader alone.
        "reader": mutations.scanner.implementation(),
        "seed": args.seed,
        "start": args.start,
        "cases": done,
        "seconds": round(time.monotonic() - started, 1),
        "outcomes": dict(sorted(totals.items())),
        "failures": [{k: v for k, v in f.items() if k != "data"} for f in failures[:20]],
    }
    print(json.dumps(summary, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
