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

    def training_step(self, batch: dict, index: int) -> torch.Tensor:
        while len(self.epochs) <= self.current_epoch:
            self.epochs.append([])
        self.epochs[self.current_epoch].extend(batch["__key__"])
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


@pytest.mark.parametrize("workers", [0, 2])
def test_a_trainer_resumed_mid_epoch_from_a_checkpoint_sees_each_sample_once(tmp_path, workers):
    _, manifest = make_shards(tmp_path / "shards", COUNTS)

    def loader():
        return tarkit.loader(manifest, batch_size=4, num_workers=workers, shuffle=5, decode=[])

    def trainer(**options: object) -> lightning.Trainer:
        return lightning.Trainer(
            accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=tmp_path, **options,
        )  # fmt: skip

    whole = Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer(max_epochs=2, enable_checkpointing=False).fit(whole, train_dataloaders=loader())
        checkpoints = lightning.pytorch.callbacks.ModelCheckpoint(
            dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1
        )
        first = Recorder()
        trainer(max_steps=3, callbacks=[checkpoints]).fit(first, train_dataloaders=loader())
        saved = sorted((tmp_path / "ckpt").glob("*.ckpt"))
        assert len(saved) == 1
        second = Recorder()
        trainer(max_epochs=2, enable_checkpointing=False).fit(
            second, train_dataloaders=loader(), ckpt_path=str(saved[0])
        )
    assert len(first.epochs[0]) == 12  # three batches of four
    assert first.epochs[0] + second.epochs[0] == whole.epochs[0]
    assert second.epochs[1] == whole.epochs[1]
