"""tarkit.seeds: the key split's rule (in_split, KeySplit), the same in every process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from tarkit.errors import UsageError
from tarkit.seeds import KeySplit, in_split

# Keys as tarkit reads them: any text, with bytes that are not UTF-8 as surrogate escapes.
KEYS = st.lists(
    st.one_of(
        st.text(st.characters(blacklist_categories=["Cs"]), max_size=12),
        st.binary(max_size=12).map(lambda b: b.decode("utf-8", "surrogateescape")),
    ),
    max_size=40,
    unique=True,
)
FRACTIONS = st.one_of(st.sampled_from([0.0, 1.0, 0.5, 0.9]), st.floats(0, 1))
SEEDS = st.integers(-(2**70), 2**70)


@settings(max_examples=60, deadline=None)
@given(KEYS, FRACTIONS, SEEDS)
def test_a_split_and_its_inverse_partition_any_keys_exactly(keys, fraction, seed) -> None:
    side = [k for k in keys if KeySplit(fraction, seed).keeps(k)]
    other = [k for k in keys if KeySplit(fraction, seed, invert=True).keeps(k)]
    assert not set(side) & set(other)
    assert sorted(side + other) == sorted(keys)
    assert side == [k for k in keys if in_split(k, fraction, seed)]


@settings(max_examples=60, deadline=None)
@given(KEYS, FRACTIONS, FRACTIONS, SEEDS)
def test_a_smaller_fraction_keeps_a_subset_of_a_larger_one(keys, a, b, seed) -> None:
    small, large = sorted((a, b))
    assert {k for k in keys if in_split(k, small, seed)} <= {
        k for k in keys if in_split(k, large, seed)
    }


def test_the_rule_is_the_documented_digest_of_the_seed_and_the_key_bytes() -> None:
    odd = b"caf\xe9/\xff".decode("utf-8", "surrogateescape")  # a key that is not UTF-8
    for key, data in [("000123", b"7:000123"), ("été/1", "7:été/1".encode()),
                      (odd, b"7:caf\xe9/\xff")]:  # fmt: skip
        draw = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
        for fraction in (0.0, 0.3, draw / 2**64, 0.7, 1.0):
            assert in_split(key, fraction, 7) == (draw < fraction * 2**64)


def test_the_share_kept_is_close_to_the_fraction() -> None:
    keys = [f"s{i:05d}" for i in range(20000)]
    for fraction in (0.1, 0.5, 0.9):
        kept = sum(in_split(k, fraction, 3) for k in keys)
        assert abs(kept - 20000 * fraction) < 5 * (20000 * fraction * (1 - fraction)) ** 0.5
    assert not any(in_split(k, 0, 3) for k in keys) and all(in_split(k, 1, 3) for k in keys)


def test_the_split_is_the_same_in_another_process_whatever_its_hash_seed() -> None:
    keys = [f"k{i}" for i in range(500)] + ["train/0001", "ünïcode"]
    here = [in_split(k, 0.5, 11) for k in keys]
    code = (
        "import json, sys; from tarkit.seeds import in_split; "
        "print(json.dumps([in_split(k, 0.5, 11) for k in json.load(sys.stdin)]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "4242", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], input=json.dumps(keys),
                            capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == here


def test_a_split_records_plain_numbers_whatever_it_was_given() -> None:
    import numpy as np

    split = KeySplit(np.float32(0.5), np.int64(7), invert=1)  # type: ignore[arg-type]
    assert json.dumps(split.to_json()) == '{"fraction": 0.5, "seed": 7, "invert": true}'
    assert split == KeySplit(0.5, 7, True) and KeySplit(1, 0).fraction == 1.0


@pytest.mark.parametrize(
    "fraction, seed, message",
    [
        (1.5, 0, r"fraction must be between 0 and 1 \(got 1.5\)"),
        (-0.1, 0, r"fraction must be between 0 and 1 \(got -0.1\)"),
        (float("nan"), 0, r"fraction must be between 0 and 1 \(got nan\)"),
        ("0.5", 0, r"fraction must be between 0 and 1 \(got '0.5'\)"),
        (0.5, 1.0, r"seed must be an integer \(got 1.0\)"),
        (0.5, "1", r"seed must be an integer \(got '1'\)"),
    ],
)
def test_a_split_of_a_bad_fraction_or_seed_is_a_usage_error(fraction, seed, message) -> None:
    with pytest.raises(UsageError, match=message):
        KeySplit(fraction, seed)
