"""The PCME schedule: backbones frozen during the warm-up epochs, everything trained afterwards."""

from __future__ import annotations

import torch

from pcmr.train import Trainer, load_config, save_config
from pcmr.train.checkpoint import list_checkpoints, load_checkpoint
from pcmr.train.schedules import trainable_backbone_parameters


def test_backbones_frozen_during_warmup_only(tmp_path):
    config = load_config(
        None,
        [
            "model.name=vsepp",
            "loss.name=triplet_sum",
            "data.options={num_train: 12, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
            f"image_size: 32, cache_dir: {tmp_path / 'cache'}}}",
            "data.batch_size=10",
            "train.epochs=2",
            "train.warmup_epochs=1",
            "train.max_steps_per_epoch=2",
            "train.keep_checkpoints=3",
            "train.progress=false",
            "model.embed_dim=8",
            "model.text_encoder={word_dim: 8, hidden_dim: 8}",
            "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
        ],
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    trainer = Trainer(config, run_dir)
    backbone_ids = {id(p) for p in trainable_backbone_parameters(trainer.model)}
    names = {n for n, p in trainer.model.named_parameters() if id(p) in backbone_ids}
    assert any(".backbone." in n for n in names) and all(".backbone." in n for n in names)
    initial = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.fit()
    after_warmup, after_finetune = (
        load_checkpoint(p).weights for p in list_checkpoints(run_dir / "checkpoints")
    )
    for name, value in initial.items():
        warm = after_warmup[f"model.{name}"]
        if name in names:
            assert torch.equal(warm, value), f"{name} changed during the warm-up"
            assert not torch.equal(after_finetune[f"model.{name}"], value), f"{name} not fine-tuned"
    heads = [n for n in initial if n not in names and "head" in n]
    assert heads and any(not torch.equal(after_warmup[f"model.{n}"], initial[n]) for n in heads)
    assert all(p.requires_grad for p in trainer.model.parameters() if id(p) in backbone_ids)
