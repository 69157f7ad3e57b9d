"""Weighted mixing in the loader: exact proportions in every aligned block of 1,000
samples, each source once per pass, both epoch rules, exact and elastic resume of a
mixture, and tarcat --mix previewing what the loader yields."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import run
from loader_data import make_shards

import tarkit
from tarkit.errors import UsageError
from tarkit.stream.combining import MixSchedule

pytestmark = pytest.mark.filterwarnings(
    "ignore:.* some workers have nothing to read", "ignore:This DataLoader will create"
)
WEIGHTS = {"web": 0.7, "books": 0.2, "code": 0.1}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mix")
    return {
        "web": make_shards(root / "web", [1500, 2000, 1700], prefix="w")[1],
        "books": make_shards(root / "books", [700, 800], prefix="b")[1],
        "code": make_shards(root / "code", [400, 450], prefix="c")[1],
    }


def mixed(sources, workers: int = 0, **options: object):
    settings: dict = {"weights": WEIGHTS, "shuffle": 50, "seed": 4, "batch_size": 10}
    settings.update(options)
    return tarkit.loader(sources, num_workers=workers, decode=[], **settings)


def keys(loader) -> list[str]:
    return [k for batch in loader for k in batch["__key__"]]


def test_every_aligned_block_of_a_workers_stream_holds_each_share_to_within_one(sources):
    got = keys(mixed(sources))  # one worker: its stream is the loader's
    assert len(got) >= 7000
    for start in range(0, len(got) - 999, 1000):
        block = Counter(k[0] for k in got[start : start + 1000])
        for name, weight in WEIGHTS.items():
            assert abs(block[name[0]] - 1000 * weight) <= 1, (start, name)
    assert got[:1000] != sorted(got[:1000])  # a random order inside the block


def test_until_the_first_runs_out_every_sample_comes_at_most_once(sources):
    for workers in (0, 2):
        loader = mixed(sources, workers)
        batches = len(loader)  # asked before the pass, as a progress bar does
        got = keys(loader)
        counts = Counter(got)
        assert max(counts.values()) == 1
        assert len(got) == batches * 10
        per_source = Counter(k[0] for k in got)
        # The web source (5,200 samples at 70 %) runs out first: nearly all of it came.
        assert per_source["w"] > 5100 and per_source["c"] < 800
        assert loader.dataset.source_counts == {
            "web": per_source["w"], "books": per_source["b"], "code": per_source["c"]
        }  # fmt: skip


@pytest.mark.parametrize("workers", [0, 2])
def test_len_is_the_pass_under_way_else_the_next_one_whose_length_differs(tmp_path, workers):
    small = {"a": make_shards(tmp_path / "a", [30, 25], prefix="a")[1],
             "b": make_shards(tmp_path / "b", [12], prefix="b")[1]}  # fmt: skip
    loader = tarkit.loader(small, batch_size=4, num_workers=workers, weights={"a": 0.6, "b": 0.4},
                           shuffle=10, seed=1, decode=[], persistent_workers=workers > 0)  # fmt: skip
    counts = []
    for _ in range(3):
        announced = len(loader)  # before the pass, as a progress bar or LR schedule asks
        count = 0
        for _ in loader:
            count += 1
            assert len(loader) == announced
        assert count == announced
        counts.append(count)
    for _ in loader:
        break  # a pass given up: the next one reads the epoch after it
    announced = len(loader)
    counts.append(sum(1 for _ in loader))
    assert counts[-1] == announced
    assert len(set(counts)) > 1  # the epochs differ in length, or this proves nothing


def test_a_resampled_epoch_has_its_size_and_each_pass_over_a_source_is_exact_once(sources):
    loader = mixed(sources, epoch_samples=20_000)
    got = keys(loader)
    assert len(got) == len(loader) * 10 == 20_000
    code = [k for k in got if k[0] == "c"]
    assert len(code) == 2000  # 10 % of 20,000: the 850 code samples read more than twice
    assert len(set(code[:850])) == len(set(code[850:1700])) == 850  # each pass: all, once
    assert code[:850] != code[850:1700]  # in another order


def test_a_mixture_resumes_exactly_at_any_batch(sources):
    for options in ({}, {"epoch_samples": 9_000}):
        whole = mixed(sources, 2, **options)
        first_epoch, second_epoch = [keys(whole) for _ in range(2)]
        for cut in (1, 37, 200):
            loader = mixed(sources, 2, **options)
            iterator = iter(loader)
            taken = [k for _ in range(cut) for k in next(iterator)["__key__"]]
            state = json.loads(json.dumps(loader.state_dict()))
            del iterator
            restored = mixed(sources, 2, **options)
            restored.load_state_dict(state)
            assert taken + keys(restored) == first_epoch, (options, cut)
            assert keys(restored) == second_epoch


def test_a_mixture_resumes_elastically_without_repeating_a_sample(sources):
    old = [mixed(sources, 2, rank=r, world_size=2) for r in range(2)]
    iterators = [iter(loader) for loader in old]
    delivered: Counter[str] = Counter()
    for _ in range(30):
        for iterator in iterators:
            delivered.update(next(iterator)["__key__"])
    state = old[0].state_dict()
    del iterators
    rest: Counter[str] = Counter()
    for rank in range(3):
        loader = mixed(sources, 1, rank=rank, world_size=3)
        loader.load_state_dict(state)
        rest.update(keys(loader))
    union = delivered + rest
    assert max(union.values()) == 1
    assert sum(rest.values()) > 1000


def test_tarcat_mix_previews_the_loaders_mix(tmp_path: Path) -> None:
    web = make_shards(tmp_path / "web", [900], prefix="w")[0][0]
    books = make_shards(tmp_path / "books", [300], prefix="b")[0][0]
    loader = tarkit.loader(
        {"web": web, "books": books}, weights={"web": 3, "books": 1}, batch_size=1, seed=8,
        decode=[],
    )  # fmt: skip
    result = run(["tarcat", "--mix", "3,1", "--seed", "8", web, books])
    assert result.returncode == 0, result.stderr
    import io

    from tarkit.format.samples import group_samples
    from tarkit.format.tar import read_members

    previewed = [s.key for s in group_samples(read_members(io.BytesIO(result.stdout)))]
    assert previewed == keys(loader)


def test_weights_must_name_the_sources(sources):
    with pytest.raises(UsageError, match="give one weight per source"):
        mixed(sources, weights={"web": 1, "books": 2})


def _generation(world: int, workers: int) -> dict:
    topology = {"world": world, "workers": workers, "batch_size": 10, "drop_last": False,
                "equal_batches": False}  # fmt: skip
    return {"topology": topology, "delivered": 1, "rank": 0, "last_worker": None}


@pytest.mark.timeout(60)
def test_a_mixture_state_of_many_elastic_resumes_is_resumed_in_seconds(tmp_path):
    # Each generation's plan was made again for every later one: 6 generations took 18 s,
    # 8 would take hours. Now each is made once.
    small = {name: make_shards(tmp_path / name, [30, 20], prefix=name[0])[1]
             for name in WEIGHTS}  # fmt: skip
    state = mixed(small, epoch_samples=300).state_dict()
    state["history"] = [_generation(2, 2)] * 8
    state["generation"] = dict(_generation(1, 3), covers=[0, 1, 2],
                               workers=[[0, 0, 0, 0, [], [[], [], []]]] * 3)  # fmt: skip
    loader = mixed(small, epoch_samples=300)
    loader.load_state_dict(state)
    started = time.monotonic()
    assert 0 < len(keys(loader)) < 300
    assert time.monotonic() - started < 10


def test_a_mixture_state_split_more_ways_than_a_mixture_allows_is_refused(sources):
    state = mixed(sources).state_dict()
    state["history"] = [_generation(64, 64)] * 2
    with pytest.raises(UsageError, match=r"split the epoch 8192 ways .*, more than 4096$"):
        mixed(sources).load_state_dict(state)


def test_a_pass_draws_each_block_of_its_schedule_once(sources, monkeypatch):
    # Its length (where the first source runs out) and its samples follow one schedule.
    drawn: Counter[tuple[object, int]] = Counter()
    block = MixSchedule.block

    def counted(schedule: MixSchedule, number: int) -> list[int]:
        if number not in schedule._blocks:
            drawn[(schedule.seed, number)] += 1
        return block(schedule, number)

    monkeypatch.setattr(MixSchedule, "block", counted)
    got = keys(mixed(sources))
    assert len(got) >= 7000 and len(drawn) >= 7
    assert max(drawn.values()) == 1
