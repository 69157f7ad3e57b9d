"""Loader state: interrupted + restored equals uninterrupted, batch for batch, at every cut
point, with real DataLoader workers; elastic resume delivers the rest of the epoch exactly
once on another topology; states of another dataset or settings are refused."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from loader_data import all_keys, make_shards

import tarkit
from tarkit.errors import UsageError

COUNTS = [9, 4, 12, 1, 7, 10, 6]  # 49 samples
pytestmark = pytest.mark.filterwarnings(
    "ignore:.* some workers have nothing to read", "ignore:This DataLoader will create"
)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_shards(tmp_path_factory.mktemp("state"), COUNTS)[1]


def make(urls, workers: int = 2, rank: int = 0, world: int = 1, **options: object):
    settings: dict = {"shuffle": 6, "seed": 11, "batch_size": 4}
    settings.update(options)
    return tarkit.loader(urls, num_workers=workers, rank=rank, world_size=world, decode=[],
                         **settings)  # fmt: skip


def keys(batch: dict) -> list[str]:
    return list(batch["__key__"])


def epochs(loader, count: int) -> list[list[list[str]]]:
    return [[keys(b) for b in loader] for _ in range(count)]


def run_with_cut(urls, cut: int, restore: dict, **options: object):
    """Read ``cut`` batches of epoch 0, take the state, restore it into a new loader (a
    JSON round trip on the way) and read the rest of epoch 0 and all of epoch 1."""
    first = make(urls, **options)
    taken: list[list[str]] = []
    iterator = iter(first)
    for _ in range(cut):
        taken.append(keys(next(iterator)))
    state = json.loads(json.dumps(first.state_dict()))
    del iterator
    second = make(urls, **{**options, **restore})
    second.load_state_dict(state)
    rest = [keys(b) for b in second]
    return taken, rest, [keys(b) for b in second], state


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_a_restored_loader_yields_exactly_what_the_uninterrupted_one_would(manifest, workers):
    whole = epochs(make(manifest, workers=workers), 2)
    batches = len(whole[0])
    # Before the first batch, mid-epoch, around shard ends, inside the last batch, at the end.
    for cut in sorted({0, 1, 2, 3, batches // 2, batches - 2, batches - 1, batches}):
        taken, rest, following, _ = run_with_cut(manifest, cut, {}, workers=workers)
        assert taken + rest == whole[0], (workers, cut)
        assert following == whole[1], (workers, cut)


def test_the_state_is_plain_json_and_names_what_it_belongs_to(manifest):
    _, _, _, state = run_with_cut(manifest, 3, {}, workers=2)
    assert json.loads(json.dumps(state)) == state
    assert state["format"] == "tarkit-loader-state"
    assert state["epoch"] == 0
    assert state["settings"] == {"seed": 11, "shuffle": 6}
    assert state["dataset"]["shards"] == len(COUNTS)
    assert state["dataset"]["samples"] == sum(COUNTS)
    generation = state["generation"]
    assert generation["topology"] == {
        "world": 1, "workers": 2, "batch_size": 4, "drop_last": False, "equal_batches": False,
    }  # fmt: skip
    assert generation["delivered"] == 3
    assert sum(w[2] for w in generation["workers"]) == 3  # items per worker


def test_states_before_the_first_batch_and_after_the_epoch_are_valid(manifest):
    loader = make(manifest)
    fresh = loader.state_dict()
    assert fresh["epoch"] == 0 and fresh["generation"] is None
    whole = epochs(make(manifest), 2)
    for _ in loader:
        pass
    after = loader.state_dict()
    assert after["epoch"] == 1 and after["generation"] is None
    restored = make(manifest)
    restored.load_state_dict(after)
    assert [keys(b) for b in restored] == whole[1]


@pytest.mark.parametrize(
    "change, setting",
    [
        ({"seed": 12}, "seed=11, this dataset has seed=12"),
        ({"shuffle": 7}, "shuffle=6, this dataset has shuffle=7"),
    ],
)
def test_a_state_of_other_settings_is_refused_naming_the_setting(manifest, change, setting):
    _, _, _, state = run_with_cut(manifest, 2, {}, workers=0)
    other = make(manifest, workers=0, **change)
    with pytest.raises(UsageError, match=setting):
        other.load_state_dict(state)


def test_a_state_of_another_dataset_is_refused(manifest, tmp_path):
    _, _, _, state = run_with_cut(manifest, 2, {}, workers=0)
    _, other_manifest = make_shards(tmp_path, [9, 4, 12, 1, 7, 10, 5])
    with pytest.raises(UsageError, match="belongs to another dataset"):
        make(other_manifest, workers=0).load_state_dict(state)


def test_a_state_that_is_not_one_is_refused(manifest):
    with pytest.raises(UsageError, match="not a tarkit loader state"):
        make(manifest).load_state_dict({"epoch": 3})


@pytest.mark.parametrize(
    "before, after",
    [
        ((1, 2), (2, 3)),
        ((2, 2), (1, 1)),
        ((1, 3), (1, 2)),
        ((2, 1), (3, 2)),
    ],
    ids=["1x2 to 2x3", "2x2 to 1x1", "1x3 to 1x2", "2x1 to 3x2"],
)
@pytest.mark.parametrize("equal", [False, True])
def test_an_elastic_resume_delivers_the_rest_of_the_epoch_exactly_once(
    manifest, before, after, equal
):
    (old_world, old_workers), (new_world, new_workers) = before, after
    old = [
        make(manifest, workers=old_workers, rank=r, world=old_world, equal_batches=equal)
        for r in range(old_world)
    ]
    iterators = [iter(loader) for loader in old]
    delivered: Counter[str] = Counter()
    for _ in range(3):  # ranks move in step
        for iterator in iterators:
            delivered.update(keys(next(iterator)))
    state = json.loads(json.dumps(old[0].state_dict()))  # rank 0 checkpoints, as Lightning does
    del iterators
    rest: Counter[str] = Counter()
    per_rank = []
    for rank in range(new_world):
        loader = make(
            manifest, workers=new_workers, rank=rank, world=new_world, equal_batches=equal
        )
        loader.load_state_dict(state)
        batches = [keys(b) for b in loader]
        per_rank.append(len(batches))
        rest.update(k for b in batches for k in b)
    union = delivered + rest
    assert max(union.values()) == 1  # nothing twice
    missing = all_keys(COUNTS) - union
    if equal:
        assert len(set(per_rank)) == 1  # every new rank the same number of batches
        assert sum(missing.values()) < old_world * 4 + new_world * 4
    else:
        assert not missing


def test_an_elastic_resume_then_an_exact_one_continues_the_new_topology(manifest):
    first = make(manifest, workers=2)
    iterator = iter(first)
    seen = [keys(next(iterator)) for _ in range(3)]
    state = first.state_dict()
    del iterator
    second = make(manifest, workers=3)
    second.load_state_dict(state)
    uninterrupted = make(manifest, workers=3)
    uninterrupted.load_state_dict(state)
    rest = [keys(b) for b in uninterrupted]
    iterator = iter(second)
    more = [keys(next(iterator)) for _ in range(2)]
    again = json.loads(json.dumps(second.state_dict()))
    del iterator
    assert len(again["history"]) == 1
    third = make(manifest, workers=3)
    third.load_state_dict(again)
    assert more + [keys(b) for b in third] == rest
    assert Counter(k for b in seen + rest for k in b) == all_keys(COUNTS)


def test_the_state_stays_small_with_many_shards_and_workers(tmp_path: Path) -> None:
    from tarkit.format.manifest import Manifest, ShardInfo
    from tarkit.loading import ShardDataset
    from tarkit.loading.epoch_layout import Generation, Topology, WorkerPosition
    from tarkit.loading.state import LoaderState

    shards = [ShardInfo(f"http://127.0.0.1:9/s-{i:05d}.tar", 1000, 1 << 20) for i in range(10_000)]
    dataset = ShardDataset(manifest=Manifest(shards, None), shuffle=100_000)
    state = LoaderState.from_json(dataset.state_dict())
    big = WorkerPosition(10_000_000, 10_100_000, 150_000, False, [])
    state.generation = Generation(Topology(64, 64, 256), 150_000, 3, [big] * 64, 63)
    state.covers = list(range(64))
    state.history = [Generation(Topology(32, 64, 256), 99_999, 0, [big] * 64, 5)] * 3
    assert len(json.dumps(state.to_json())) < 64 * 1024


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stateful_dataloader_resumes_exactly_on_the_datasets_own_state(manifest, workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    from tarkit.loading import ShardDataset

    def loader() -> StatefulDataLoader:
        dataset = ShardDataset(manifest, shuffle=6, seed=11, batch_size=4, decode=[])
        return StatefulDataLoader(dataset, batch_size=None, num_workers=workers)

    whole = epochs(loader(), 2)
    for cut in (1, 5, len(whole[0]) - 1, len(whole[0])):
        first = loader()
        iterator = iter(first)
        taken = [keys(next(iterator)) for _ in range(cut)]
        state = json.loads(json.dumps(first.state_dict()))
        del iterator
        second = loader()
        second.load_state_dict(state)
        rest = [keys(b) for b in second]
        assert taken + rest == whole[0], cut
        assert [keys(b) for b in second] == whole[1], cut


@pytest.mark.parametrize(
    "change, message",
    [
        ({"num_workers": 3}, "number of DataLoader workers 2, this loader has 3"),
        ({"batch_size": 5}, "batch_size 4, this loader has 5"),
    ],
)
def test_a_stateful_dataloader_on_other_workers_or_batches_is_refused(manifest, change, message):
    from torchdata.stateful_dataloader import StatefulDataLoader

    from tarkit.loading import ShardDataset

    def loader(num_workers: int = 2, batch_size: int = 4) -> StatefulDataLoader:
        dataset = ShardDataset(manifest, shuffle=6, seed=11, batch_size=batch_size)
        return StatefulDataLoader(dataset, batch_size=None, num_workers=num_workers)

    first = loader()
    iterator = iter(first)
    next(iterator)
    state = first.state_dict()
    del iterator
    second = loader(**change)
    second.load_state_dict(state)
    with pytest.raises(UsageError, match=message):
        list(second)


def test_persistent_workers_resume_exactly_too(manifest):
    options = {"persistent_workers": True}
    whole = epochs(make(manifest, **options), 2)
    taken, rest, following, _ = run_with_cut(manifest, 5, {}, **options)
    assert (taken + rest, following) == (whole[0], whole[1])


def test_without_a_manifest_a_resume_is_exact_and_an_elastic_one_is_refused(manifest):
    paths = sorted(str(p) for p in Path(manifest).parent.glob("s-*.tar"))
    whole = epochs(make(paths, manifest=False), 2)
    for cut in (1, 4, len(whole[0]) - 1):
        taken, rest, following, _ = run_with_cut(paths, cut, {}, manifest=False)
        assert (taken + rest, following) == (whole[0], whole[1])
    _, _, _, state = run_with_cut(paths, 2, {}, manifest=False)
    other = make(paths, workers=3, manifest=False)
    other.load_state_dict(state)
    with pytest.raises(UsageError, match="another topology .* needs a manifest"):
        list(other)


def test_a_version_2_manifest_gives_the_loader_what_version_1_gives(manifest, tmp_path):
    # The same shards indexed by tarindex -o: a version 2 manifest, no keys or offsets.
    from tarkit.writing.index import index_set

    shards = [str(Path(manifest).parent / f"s-{n:03d}.tar") for n in range(len(COUNTS))]
    v2 = str(tmp_path / "v2.json")
    index_set(shards, v2)
    assert json.loads(Path(v2).read_text())["version"] == 2
    for options in ({}, {"batch_size": 5, "drop_last": True}, {"rank": 1, "world_size": 3}):
        assert len(tarkit.ShardDataset(v2, **options)) == len(
            tarkit.ShardDataset(manifest, **options)
        )
    for rank in range(2):
        old, new = (make(m, workers=0, rank=rank, world=2, equal_batches=True)
                    for m in (manifest, v2))  # fmt: skip
        assert epochs(new, 1) == epochs(old, 1)
    whole = epochs(make(v2, workers=0), 2)
    taken, rest, following, state = run_with_cut(v2, 5, {}, workers=0)
    assert (taken + rest, following) == (whole[0], whole[1])
    elastic = make(v2, workers=0, rank=0, world=2)
    elastic.load_state_dict(state)
    other = make(v2, workers=0, rank=1, world=2)
    other.load_state_dict(state)
    rest = Counter(k for loader in (elastic, other) for b in loader for k in keys(b))
    assert rest + Counter(k for b in taken for k in b) == all_keys(COUNTS)


# A state may come from anywhere (a checkpoint someone shared): every part of it is
# checked before a loop's length comes from it. (mutation of a real mid-epoch state of
# a loader with 2 workers, what the refusal names)
def _generation(world: int, workers: int) -> dict:
    topology = {"world": world, "workers": workers, "batch_size": 4, "drop_last": False,
                "equal_batches": False}  # fmt: skip
    return {"topology": topology, "delivered": 1, "rank": 0, "last_worker": None}


HOSTILE_STATES = {
    "a generation of 10**9 ranks": (
        lambda s: s["history"].append(_generation(10**9, 1)),
        "history[0].topology.world is 1000000000, more than 65536",
    ),
    "10**9 workers": (
        lambda s: s["generation"]["topology"].update(workers=10**9),
        "generation.topology.workers is 1000000000, more than 1024",
    ),
    "more generations than any epoch has": (
        lambda s: s["history"].extend([_generation(1, 1)] * 65),
        "history has 65 entries, more than 64",
    ),
    "2**21 splits of the epoch": (
        lambda s: s["history"].extend([_generation(1024, 1024)] * 2),
        "its generations split the epoch 2097154 ways (ranks x workers), more than 65536",
    ),
    "more samples taken than the dataset has": (
        lambda s: s["generation"]["workers"][0].__setitem__(0, 10**12),
        "generation.workers[0][0] is 1000000000000, more than 65585",
    ),
    "more items delivered than the dataset has": (
        lambda s: s["generation"].update(delivered=10**15),
        "generation.delivered is 1000000000000000, more than 65585",
    ),
    "a rank outside the world": (
        lambda s: s["generation"].update(rank=3),
        "generation.rank is 3, more than 0",
    ),
    "a worker outside the topology": (
        lambda s: s["generation"].update(covers=[0, 7]),
        "generation.covers[1] is 7, more than 1",
    ),
    "a negative epoch": (lambda s: s.update(epoch=-1), "epoch is -1, less than 0"),
    "an epoch as text": (lambda s: s.update(epoch="3"), "epoch is '3', not a whole number"),
    "a span that ends before it starts": (
        lambda s: s["generation"]["workers"][1].__setitem__(4, [[5, 1]]),
        "generation.workers[1][4][0] ends at 1, before its start 5",
    ),
    "a history position per worker missing": (
        lambda s: s["history"].append(dict(_generation(1, 2), workers=[[0, 0, 0, 0, []]])),
        "history[0].workers has 1 positions for 2 workers",
    ),
    "a mixture that is not one": (
        lambda s: s["settings"].update(mixture=[1]),
        "settings.mixture is not a dict",
    ),
    "no dataset": (lambda s: s.pop("dataset"), "dataset is missing"),
}


@pytest.fixture(scope="module")
def checkpoint(manifest) -> dict:
    return run_with_cut(manifest, 3, {}, workers=2)[3]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name", list(HOSTILE_STATES))
def test_a_crafted_state_is_refused_at_once_naming_what_is_wrong(manifest, checkpoint, name):
    change, message = HOSTILE_STATES[name]
    state = json.loads(json.dumps(checkpoint))
    change(state)
    loader = make(manifest, workers=0)
    started = time.monotonic()
    with pytest.raises(UsageError) as caught:
        loader.load_state_dict(state)
        list(loader)  # (a state taken for good would otherwise be read, or spin)
    assert str(caught.value) == f"malformed tarkit loader state: {message}"
    assert time.monotonic() - started < 2


@pytest.mark.timeout(20)
def test_a_state_past_the_end_of_the_shards_is_refused_with_or_without_a_manifest(manifest):
    paths = sorted(str(p) for p in Path(manifest).parent.glob("s-*.tar"))
    for urls, options in ((manifest, {}), (paths, {"manifest": False})):
        state = run_with_cut(urls, 2, {}, workers=0, **options)[3]
        # Within the bound of counts (an epoch plus its splits; any without a manifest),
        # but more than the worker's share holds: found at its end, or at once.
        state["generation"]["workers"][0][:2] = [1000, 1000]
        loader = make(urls, workers=0, **options)
        loader.load_state_dict(state)
        started = time.monotonic()
        with pytest.raises(UsageError, match="a worker had taken 1000 samples of its share"):
            list(loader)
        assert time.monotonic() - started < 2


@pytest.mark.parametrize("names", ["s-%05d.tar", "listed"])
def test_a_manifests_table_has_the_fingerprint_of_its_list_of_entries(names: str) -> None:
    from tarkit.format.manifest import ShardInfo
    from tarkit.format.shard_table import ShardTable
    from tarkit.loading.state import fingerprint
    from tarkit.storage.manifests import ShardUrls

    shards = 9000  # past the few thousand hashed at a time
    named = [names % n if names != "listed" else f"{n}-{n % 7}.tar" for n in range(shards)]
    infos = [ShardInfo(name, n % 5, 0) for n, name in enumerate(named)]
    table = ShardTable.from_infos(infos, location="/data/m.json")
    urls = ShardUrls(table)
    assert (urls.pattern is None) == (names == "listed")
    expected = fingerprint([("", [f"/data/{name}" for name in named], infos)])
    assert fingerprint([("", urls, table.entries())]) == expected
