"""A real Lightning Trainer on CPU over tarkit.loader: a new order every epoch, every
sample once, with no set_epoch in user code."""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
from loader_data import all_keys, make_shards

import tarkit

lightning = pytest.importorskip("lightning")

COUNTS = [5, 3, 7, 1, 4, 6]


class Recorder(lightning.LightningModule):
    """A model of one weight that records the keys of every batch it trains on."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.epochs: list[list[str]] = []

    def on_train_epoch_start(self) -> None:
        self.epochs.append([])

    def training_step(self, batch: dict, index: int) -> torch.Tensor:
        self.epochs[-1].extend(batch["__key__"])
        return ((self.weight - batch["cls"].float()) ** 2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_trainer_gets_a_new_order_every_epoch_and_every_sample_once(tmp_path, workers):
    _, manifest = make_shards(tmp_path / "shards", COUNTS)
    loader = tarkit.loader(
        manifest, batch_size=4, num_workers=workers, shuffle=5, decode=[],
        persistent_workers=workers > 0,
    )  # fmt: skip
    model = Recorder()
    trainer = lightning.Trainer(
        max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
        trainer.fit(model, train_dataloaders=loader)
    assert len(model.epochs) == 3
    for keys in model.epochs:
        assert Counter(keys) == all_keys(COUNTS)
    assert len({tuple(keys) for keys in model.epochs}) == 3
