"""The PVSE family: the head against a loop over items and attention heads (float64, padding
masks), PointSet outputs, K by config, the loss's tensors in the training outputs, config errors."""

from __future__ import annotations

import math

import pytest
import torch

from pcmr import PointSet
from pcmr.losses import create_loss
from pcmr.models import EncodedFeatures, create_model, load_model, save_model
from pcmr.models.pvse import PVSEHead
from test_models_support import make_batch, single_thread  # noqa: F401  (autouse fixture)


def loop_head(head: PVSEHead, local, pooled, mask):
    """The PVSE head one item and one head at a time from the head's own weights (float64 lists)."""
    w1, w2 = head.attention.w1.weight.tolist(), head.attention.w2.weight.tolist()
    fc_w, fc_b = head.fc.weight.tolist(), head.fc.bias.tolist()
    loc_w, loc_b = head.fc_local.weight.tolist(), head.fc_local.bias.tolist()
    ln_w, ln_b, ln_eps = head.layer_norm.weight.tolist(), head.layer_norm.bias.tolist(), head.layer_norm.eps

    def linear(weight, bias, x):
        return [sum(w * v for w, v in zip(row, x)) + (bias[j] if bias else 0.0) for j, row in enumerate(weight)]

    out_points, out_residuals = [], []
    for b in range(len(local)):
        regions = [r for r, real in zip(local[b], mask[b]) if real]
        global_part = linear(fc_w, fc_b, pooled[b])
        points, residuals = [], []
        for k in range(len(w2)):
            logits = [linear([w2[k]], None, [math.tanh(h) for h in linear(w1, None, x)])[0] for x in regions]
            top = max(logits)
            weights = [math.exp(v - top) for v in logits]
            weights = [w / sum(weights) for w in weights]
            attended = [sum(w * x[f] for w, x in zip(weights, regions)) for f in range(len(regions[0]))]
            residual = [1 / (1 + math.exp(-v)) for v in linear(loc_w, loc_b, attended)]
            summed = [g + r for g, r in zip(global_part, residual)]
            mu = sum(summed) / len(summed)
            var = sum((v - mu) ** 2 for v in summed) / len(summed)
            normed = [(v - mu) / math.sqrt(var + ln_eps) * g + c for v, g, c in zip(summed, ln_w, ln_b)]
            norm = math.sqrt(sum(v * v for v in normed))
            points.append([v / norm for v in normed])
            residuals.append(residual)
        out_points.append(points)
        out_residuals.append(residuals)
    return torch.tensor(out_points, dtype=torch.float64), torch.tensor(out_residuals, dtype=torch.float64)


@pytest.mark.parametrize("num_embeds", [1, 3])
def test_head_matches_loop_with_padding(num_embeds):
    torch.manual_seed(0)
    head = PVSEHead(in_dim=6, embed_dim=5, num_embeds=num_embeds).double()
    with torch.no_grad():  # non-trivial LayerNorm affine and biases
        head.layer_norm.weight.uniform_(0.5, 1.5)
        head.layer_norm.bias.uniform_(-0.2, 0.2)
        head.fc.bias.uniform_(-0.3, 0.3)
        head.fc_local.bias.uniform_(-0.3, 0.3)
    gen = torch.Generator().manual_seed(1)
    local = torch.randn(4, 7, 6, generator=gen, dtype=torch.float64)
    pooled = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 3:] = False
    mask[3, 1:] = False  # one real position: the attention is one-hot
    local[~mask] = 1e3  # padded positions must not matter
    out = head(EncodedFeatures(local, pooled, mask))
    ref_points, ref_residuals = loop_head(head, local.tolist(), pooled.tolist(), mask.tolist())
    torch.testing.assert_close(out.points, ref_points, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out.residuals, ref_residuals, rtol=1e-10, atol=1e-12)
    assert out.attention.shape == (4, 7, num_embeds)
    assert torch.equal(out.attention[~mask], torch.zeros_like(out.attention[~mask]))
    torch.testing.assert_close(out.attention.sum(1), torch.ones(4, num_embeds, dtype=torch.float64))


def test_family_outputs_point_sets_of_k_and_loss_tensors():
    torch.manual_seed(0)
    model = create_model("pvse", vocab_size=37, **{"image_head.num_embeds": 3, "caption_head.num_embeds": 4})
    batch = make_batch(model.config, num_images=3, num_captions=5)
    out = model(batch)
    assert isinstance(out["image"], PointSet) and out["image"].points.shape == (3, 3, 128)
    assert isinstance(out["caption"], PointSet) and out["caption"].points.shape == (5, 4, 128)
    assert torch.equal(out["image_points"], out["image"].points)
    assert out["caption_residuals"].shape == (5, 4, 128)
    assert ((out["image_residuals"] > 0) & (out["image_residuals"] < 1)).all()  # sigmoid branch
    torch.testing.assert_close(out["image_points"].norm(dim=-1), torch.ones(3, 3))
    model.eval()
    out = model(batch)
    assert torch.equal(model.encode_images(batch).points, out["image"].points)
    assert torch.equal(model.encode_captions(batch).points, out["caption"].points)
    terms = create_loss("pvse")(**out, positives=torch.eye(3, 5, dtype=torch.bool))
    assert torch.isfinite(terms["loss"]) and float(terms["diversity"].detach()) > 0
    assert float(terms["mmd"].detach()) != 0


def test_save_load_keeps_k(tmp_path):
    torch.manual_seed(0)
    model = create_model("pvse", vocab_size=37, **{"image_head.num_embeds": 3}).eval()
    batch = make_batch(model.config)
    save_model(model, tmp_path / "saved")
    restored = load_model(tmp_path / "saved")
    assert torch.equal(restored.encode_images(batch).points, model.encode_images(batch).points)
    assert restored.config.image_head.num_embeds == 3


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="'image_head.num_embeds' must be a positive integer, got 0"):
        create_model("pvse", vocab_size=37, **{"image_head.num_embeds": 0})
    with pytest.raises(ValueError, match="'caption_head.probabilistic' must be false for a pvse head"):
        create_model("pvse", vocab_size=37, **{"caption_head.probabilistic": True})
    with pytest.raises(ValueError, match="must both be pvse or neither"):
        create_model("pvse", vocab_size=37, **{"caption_head.kind": "linear"})
