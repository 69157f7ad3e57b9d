"""An atheris (libFuzzer) target for tarkit's reader, for long local runs.

    python fuzz/fuzz_reader.py --write-seeds fuzz/seeds      # once: the seed archives
    python fuzz/fuzz_reader.py fuzz/seeds -max_len=65536 -timeout=10 -jobs=2

Each input is read as every command reads it (decompress by magic, members, samples)
and written as tarcat writes it; the oracle is that of fuzz/mutations.py: a tarkit
error, or a clean output that tarfile and tarkit read back as the same members and
samples, the same on a second run. Anything else (another exception, a misread, over
the time limit) raises, and libFuzzer saves the input as ``crash-*``. Turn a saved input
into a case of tests/robustness/corpus.py once it is fixed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["tarkit"]):
    import mutations


def test_one_input(data: bytes) -> None:
    failure = mutations.check(0, data)
    if failure is not None:
        raise AssertionError(f"{failure.kind}: {failure.detail}")


def write_seeds(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in mutations.SEEDS.items():
        (directory / f"{name}.tar").write_bytes(data)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--write-seeds":
        write_seeds(Path(sys.argv[2]))
        return
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
