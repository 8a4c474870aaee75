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


def test_warmup_freezes_the_pretrained_parts_only():
    """PCME §4.1 / App. C.2: the warm-up freezes the pretrained feature extractors (the image CNN,
    the word vectors) and trains the caption GRU, which belongs to PCME's text head."""
    from pcmr.models import create_model

    for name in ("pcme", "probvse"):
        model = create_model(name, vocab_size=23)
        ids = {id(p) for p in trainable_backbone_parameters(model)}
        frozen = {n for n, p in model.named_parameters() if id(p) in ids}
        trained = {n for n, p in model.named_parameters() if id(p) not in ids}
        assert any(n.startswith("image_tower.encoder.backbone.") for n in frozen)
        assert "caption_tower.encoder.backbone.embedding.weight" in frozen
        assert any(".gru." in n for n in trained) and not any(".gru." in n for n in frozen), name
        if name == "probvse":  # the duplicated variance encoders: same rule
            assert "caption_tower.variance_encoder.backbone.embedding.weight" in frozen
            assert any(n.startswith("image_tower.variance_encoder.backbone.") for n in frozen)
    model = create_model("pcme", vocab_size=23)
    model.image_tower.encoder.backbone.requires_grad_(False)  # frozen for good (finetune: false)
    assert not any(n.startswith("image_tower.") for n, p in model.named_parameters()
                   if id(p) in {id(q) for q in trainable_backbone_parameters(model)})
