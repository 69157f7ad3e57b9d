"""ShardDataset(split=KeySplit(…)): exactly tarcat's split, over real DataLoader workers,
resumed exactly and elastically; what a split cannot know in advance is refused."""

from __future__ import annotations

import io
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import run
from loader_data import all_keys, make_shards

import tarkit
from tarkit.errors import UsageError
from tarkit.format.samples import group_samples
from tarkit.format.tar import read_members
from tarkit.loading.key_split import check_resumable
from tarkit.loading.state import LoaderState
from tarkit.seeds import in_split

COUNTS = [9, 4, 12, 1, 7, 10, 6]  # 49 samples
SPLIT = (0.6, 3)  # fraction, seed: 29 samples on one side, 20 on the other
pytestmark = pytest.mark.filterwarnings(
    "ignore:.* some workers have nothing to read", "ignore:This DataLoader will create"
)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], str]:
    return make_shards(tmp_path_factory.mktemp("split"), COUNTS)


def make(urls, workers: int = 2, invert: bool = False, **options: object):
    settings: dict = {"shuffle": 6, "seed": 11, "batch_size": 4}
    settings.update(options)
    split = tarkit.KeySplit(*SPLIT, invert=invert)
    return tarkit.loader(urls, num_workers=workers, decode=[], split=split, **settings)


def batch_keys(loader) -> list[list[str]]:
    return [list(batch["__key__"]) for batch in loader]


@pytest.fixture(scope="module")
def tarcat_sides(shards) -> tuple[list[str], list[str]]:
    """The keys of what the real tarcat writes with the split, and with --invert."""
    sides = []
    for invert in ([], ["--invert"]):
        split = ["--fraction", str(SPLIT[0]), "--seed", str(SPLIT[1]), *invert]
        result = run(["tarcat", *split, *shards[0]])
        assert result.returncode == 0, result.stderr
        sides.append([s.key for s in group_samples(read_members(io.BytesIO(result.stdout)))])
    return sides[0], sides[1]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_reads_exactly_the_samples_tarcat_splits_off(
    shards, tarcat_sides, workers
) -> None:
    paths, manifest = shards
    side = Counter(k for b in batch_keys(make(manifest, workers)) for k in b)
    other = Counter(
        k for b in batch_keys(make(paths, workers, invert=True, manifest=False)) for k in b
    )
    assert set(side) == set(tarcat_sides[0]) and max(side.values()) == 1
    assert set(other) == set(tarcat_sides[1]) and max(other.values()) == 1
    assert side + other == all_keys(COUNTS)
    assert len(side) == sum(in_split(k, *SPLIT) for k in all_keys(COUNTS)) == 29


def test_a_restored_split_resumes_exactly_and_elastically(shards) -> None:
    manifest = shards[1]
    whole = batch_keys(make(manifest))
    assert Counter(k for b in whole for k in b) == Counter(
        k for k in all_keys(COUNTS) if in_split(k, *SPLIT)
    )
    for cut in (1, len(whole) - 2):
        first = make(manifest)
        iterator = iter(first)
        taken = [list(next(iterator)["__key__"]) for _ in range(cut)]
        state = json.loads(json.dumps(first.state_dict()))
        del iterator
        assert state["settings"]["split"] == {"fraction": 0.6, "seed": 3, "invert": False}
        exact = make(manifest)
        exact.load_state_dict(state)
        assert taken + batch_keys(exact) == whole, cut
        elastic = make(manifest, workers=3, batch_size=3)
        elastic.load_state_dict(state)
        rest = Counter(k for b in batch_keys(elastic) for k in b)
        assert Counter(k for b in taken for k in b) + rest == Counter(k for b in whole for k in b)


def test_without_a_manifest_a_restored_split_resumes_exactly(shards) -> None:
    paths = shards[0]
    whole = batch_keys(make(paths, workers=0, manifest=False))
    first = make(paths, workers=0, manifest=False)
    iterator = iter(first)
    taken = [list(next(iterator)["__key__"]) for _ in range(3)]
    state = first.state_dict()
    del iterator
    restored = make(paths, workers=0, manifest=False)
    restored.load_state_dict(state)
    assert taken + batch_keys(restored) == whole


def test_len_of_a_split_is_a_type_error_saying_why(shards) -> None:
    loader = make(shards[1], workers=0)
    for sized in (loader, loader.dataset):
        with pytest.raises(TypeError, match="with split= is not known before reading"):
            len(sized)


def test_a_split_with_equal_batches_or_a_mixture_or_of_another_type_is_refused(shards) -> None:
    manifest = shards[1]
    with pytest.raises(UsageError, match="equal_batches needs every rank's number"):
        make(manifest, equal_batches=True)
    with pytest.raises(UsageError, match="split= takes one source, not a mixture"):
        tarkit.ShardDataset({"a": manifest, "b": manifest}, split=tarkit.KeySplit(0.5))
    with pytest.raises(UsageError, match=r"split= takes a tarkit.KeySplit"):
        tarkit.ShardDataset(manifest, split=(0.5, 1))  # type: ignore[arg-type]


def test_a_state_of_another_split_or_of_no_split_is_refused(shards) -> None:
    manifest = shards[1]
    state = make(manifest, workers=0).state_dict()
    with pytest.raises(UsageError, match=r"split=KeySplit\(fraction=0.6, seed=3, invert=False\), "
                       r"this dataset has split=KeySplit\(fraction=0.6, seed=3, invert=True\)"):  # fmt: skip
        make(manifest, workers=0, invert=True).load_state_dict(state)
    plain = tarkit.loader(manifest, batch_size=4, shuffle=6, seed=11)
    with pytest.raises(UsageError, match=r"this dataset has split=None: it reads other samples"):
        plain.load_state_dict(state)


def test_rank_zeros_state_is_refused_on_rank_one_and_elsewhere_under_a_split(shards) -> None:
    manifest = shards[1]
    first = make(manifest, workers=0, rank=0, world_size=2)
    iterator = iter(first)
    next(iterator)
    state = first.state_dict()
    del iterator
    other_rank = make(manifest, workers=0, rank=1, world_size=2)
    other_rank.load_state_dict(state)  # the settings match: refused once the rank is known
    with pytest.raises(UsageError, match="position of rank 1 cannot be derived"):
        next(iter(other_rank))
    same_rank = make(manifest, workers=0, rank=0, world_size=2)
    same_rank.load_state_dict(state)
    assert next(iter(same_rank))  # its own state: exact
    elsewhere = make(manifest, workers=0, rank=0, world_size=1)
    elsewhere.load_state_dict(state)
    with pytest.raises(UsageError, match="records only rank 0's of a run over 2 ranks"):
        next(iter(elsewhere))


def test_a_state_of_one_worker_is_refused_for_the_others_under_a_split(shards) -> None:
    first = make(shards[1])
    iterator = iter(first)
    next(iterator)
    state = json.loads(json.dumps(first.state_dict()))
    del iterator
    generation = state["generation"]  # as torchdata's worker 0 would have it
    generation["covers"], generation["workers"] = [0], generation["workers"][:1]
    parsed = LoaderState.from_json(state)
    topology = first.dataset.topology(2)
    check_resumable(parsed, topology, rank=0, worker=0)  # its own position: exact
    # (Checked here, not through a DataLoader: a worker's error costs torch ~5 s a worker
    # to shut the others down.)
    with pytest.raises(UsageError, match=r"covers workers \[0\]: with split= the position of "
                       "worker 1 cannot be derived"):  # fmt: skip
        check_resumable(parsed, topology, rank=0, worker=1)


@pytest.mark.parametrize(
    "manifest, counted",
    [(True, {"s02-009"}), (False, set())],
    ids=["manifest with keys", "no manifest"],
)
def test_a_truncated_shard_counts_as_skipped_only_the_samples_of_the_side_read(
    shards, tmp_path: Path, manifest: bool, counted: set[str]
) -> None:
    # Shard 2's samples 0-11 by side: 101111100100. Cut inside sample 7 (the other side):
    # with a manifest the rest of the shard is lost, of which only sample 9 is on the side
    # read; without one, only sample 7, started and never completed, is known to be lost.
    paths, manifest_path = shards
    for path in [*paths, manifest_path]:
        shutil.copy(path, tmp_path)
    cut = tmp_path / Path(paths[2]).name
    offset = json.loads(Path(manifest_path).read_text())["shards"][2]["offsets"][7]
    cut.write_bytes(cut.read_bytes()[: offset + 513])  # inside sample 7's first member
    urls = str(tmp_path / "manifest.json") if manifest else sorted(map(str, tmp_path.glob("*.tar")))
    loader = make(urls, workers=0, handler="skip", manifest=None if manifest else False)
    with pytest.warns(UserWarning, match="skipping bad input"):
        read = {k for b in batch_keys(loader) for k in b}
    side = {k for k in all_keys(COUNTS) if in_split(k, *SPLIT)}
    assert read == side - {"s02-009"}
    assert loader.skipped.total_samples == len(counted)
    assert loader.skipped.total_shards == 1
