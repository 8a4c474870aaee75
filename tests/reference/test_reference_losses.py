"""pcmr's VSE++, PVSE, PCME++ and HAL losses against the official releases
(fartashf/vsepp, yalesong/pvse, naver-ai/pcmepp, hardyqr/HAL).

Fixtures written by tools/reference/*_release.py running the releases'
own loss modules in float64; tolerances are the sidecars' (rtol 1e-10 / 1e-9).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from _reference import assert_close, load_fixture, part
from pcmr import Gaussian
from pcmr.losses import create_loss
from pcmr.losses.match_scale import inverse_softplus
from pcmr.models.features import EncodedFeatures
from pcmr.models.pvse import PVSEHead

VSEPP, VSEPP_INFO = load_fixture("vsepp")
PVSE, PVSE_INFO = load_fixture("pvse")


@pytest.mark.parametrize("batch", [5, 1])
@pytest.mark.parametrize("mode", ["sum", "max"])
def test_triplet_loss_equals_vsepp_contrastive_loss(batch, mode):
    inputs = {k: v.clone().requires_grad_() for k, v in part(VSEPP, f"b{batch}/input").items()}
    loss_fn = create_loss(f"triplet_{mode}", margin=VSEPP_INFO["margin"], similarity="cosine")
    positives = torch.eye(batch, dtype=torch.bool)
    loss = loss_fn(Gaussian.point(inputs["images"]), Gaussian.point(inputs["captions"]), positives)["loss"]
    tol = VSEPP_INFO["tolerance"]
    assert_close(loss, VSEPP[f"b{batch}/{mode}/output/loss"], tol, f"VSE++ {mode} loss")
    grads = torch.autograd.grad(loss, [inputs["images"], inputs["captions"]], allow_unused=True)
    for name, grad in zip(("images", "captions"), grads):
        want = VSEPP[f"b{batch}/{mode}/grad/{name}"]
        assert_close(torch.zeros_like(want) if grad is None else grad, want, tol, f"VSE++ {mode} grad {name}")


@pytest.mark.parametrize("k", [2, 1])
def test_pvse_loss_equals_release(k):
    raw = {name: value.clone().requires_grad_() for name, value in part(PVSE, f"k{k}/input").items()}
    settings = PVSE_INFO["settings"]
    loss_fn = create_loss("pvse", margin=settings["margin"], lambda_div=settings["div_weight"],
                          lambda_mmd=settings["mmd_weight"])
    points = {side: F.normalize(raw[f"{side}_points"], dim=-1) for side in ("image", "caption")}
    batch = points["image"].shape[0]
    terms = loss_fn(Gaussian.point(points["image"][:, 0]), Gaussian.point(points["caption"][:, 0]),
                    torch.eye(batch, dtype=torch.bool), image_points=points["image"],
                    caption_points=points["caption"], image_residuals=raw["image_residuals"],
                    caption_residuals=raw["caption_residuals"])
    tol = PVSE_INFO["tolerance"]
    out = part(PVSE, f"k{k}/output")
    assert_close(terms["loss"], out["loss"], tol, "PVSE total")
    assert_close(terms["ranking"], out["ranking_loss"], tol, "PVSE ranking")
    if k > 1:
        assert_close(terms["diversity"], out["div_loss"], tol, "PVSE diversity")
        assert_close(terms["mmd"], out["mmd_loss"], tol, "PVSE MMD")
    want = part(PVSE, f"k{k}/grad")
    names = sorted(want)
    grads = torch.autograd.grad(terms["loss"], [raw[n] for n in names])
    for name, grad in zip(names, grads):
        assert_close(grad, want[name], tol, f"PVSE grad {name}")
    assert set(want) == ({"image_points", "caption_points", "image_residuals", "caption_residuals"} if k > 1
                         else {"image_points", "caption_points"})


PCMEPP, PCMEPP_INFO = load_fixture("pcmepp")


@pytest.mark.parametrize("run", ["full", "plain", "smoothed", "released"])
def test_csd_loss_equals_pcmepp_release(run):
    settings = PCMEPP_INFO["runs"][run]
    loss_fn = create_loss("pcme_csd", init_a=settings["init_negative_scale"], init_b=settings["init_shift"],
                          lambda_kl=settings["vib_beta"], lambda_pseudo=settings["smoothness_alpha"],
                          label_smoothing=settings.get("label_smoothing", 0.0)).double()
    with torch.no_grad():  # a = softplus(a_raw) exactly in float64 (the float32 init rounds a_raw)
        loss_fn.match_scale.a_raw.fill_(inverse_softplus(settings["init_negative_scale"]))
    inputs = {k: v.clone().requires_grad_() for k, v in part(PCMEPP, "input").items()}
    image = Gaussian(inputs["image_mean"], inputs["image_logvar"])
    caption = Gaussian(inputs["caption_mean"], inputs["caption_logvar"])
    positives = torch.eye(image.num, dtype=torch.bool)
    terms = loss_fn(image, caption, positives)
    tol = PCMEPP_INFO["tolerance"]
    assert_close(terms["loss"], PCMEPP[f"{run}/output/loss"], tol, "PCME++ loss")
    if settings["vib_beta"]:
        assert_close(terms["kl_prior"], PCMEPP[f"{run}/output/vib_loss"], tol, "PCME++ KL")
    grads = part(PCMEPP, f"{run}/grad")
    a_raw, b = loss_fn.match_scale.a_raw, loss_fn.match_scale.b
    got = torch.autograd.grad(terms["loss"], [*inputs.values(), a_raw, b])
    for name, grad in zip(inputs, got):
        assert_close(grad, grads[f"input/{name}"], tol, f"PCME++ grad {name}")
    assert_close((got[-2] / torch.sigmoid(a_raw)).reshape(1), grads["weight/negative_scale"], tol, "grad a")
    assert_close(got[-1].reshape(1), grads["weight/shift"], tol, "grad b")


def test_the_fixture_has_pseudo_positives():
    """Without pseudo-positives the loss differs from the release's (the fixture exercises them)."""
    settings = PCMEPP_INFO["runs"]["full"]
    loss_fn = create_loss("pcme_csd", init_a=settings["init_negative_scale"], init_b=settings["init_shift"],
                          lambda_kl=settings["vib_beta"], lambda_pseudo=0.0, label_smoothing=0.0).double()
    inputs = part(PCMEPP, "input")
    terms = loss_fn(Gaussian(inputs["image_mean"], inputs["image_logvar"]),
                    Gaussian(inputs["caption_mean"], inputs["caption_logvar"]), torch.eye(6, dtype=torch.bool))
    assert not torch.allclose(terms["loss"], PCMEPP["full/output/loss"], rtol=1e-6)


@pytest.mark.parametrize("run", ["smoothed", "released"])
def test_the_fixture_has_label_smoothing(run):
    """Without the smoothed targets the loss differs from the release's at its own 1e-4 (float64)."""
    settings = PCMEPP_INFO["runs"][run]
    loss_fn = create_loss("pcme_csd", init_a=settings["init_negative_scale"], init_b=settings["init_shift"],
                          lambda_kl=settings["vib_beta"], lambda_pseudo=settings["smoothness_alpha"],
                          label_smoothing=0.0).double()
    with torch.no_grad():
        loss_fn.match_scale.a_raw.fill_(inverse_softplus(settings["init_negative_scale"]))
    inputs = part(PCMEPP, "input")
    terms = loss_fn(Gaussian(inputs["image_mean"], inputs["image_logvar"]),
                    Gaussian(inputs["caption_mean"], inputs["caption_logvar"]), torch.eye(6, dtype=torch.bool))
    assert not torch.allclose(terms["loss"], PCMEPP[f"{run}/output/loss"], rtol=1e-7, atol=0.0)


def test_csd_loss_defaults_are_the_releases_configuration():
    """CsdConfig's defaults are configs/pcmepp.yaml's values (the 'released' fixture run)."""
    settings = PCMEPP_INFO["runs"]["released"]
    config = create_loss("pcme_csd").config
    assert (config.init_a, config.init_b, config.lambda_kl, config.lambda_pseudo, config.label_smoothing) == (
        settings["init_negative_scale"], settings["init_shift"], settings["vib_beta"], settings["smoothness_alpha"],
        settings["label_smoothing"])


HAL, HAL_INFO = load_fixture("hal")


@pytest.mark.parametrize("batch", [6, 2])
def test_hal_released_loss_equals_the_release_up_to_its_zeroed_diagonal(batch):
    """The release zeroes S's diagonal inside its sums, adding c = exp(-alpha eps) to each log's
    argument; pcmr leaves the positives out. So 0 <= release - pcmr <= 2 c / alpha exactly, and the
    gradients agree to the relative size of c (1.2e-4 at alpha 30, eps 0.3)."""
    settings = HAL_INFO["settings"]
    alpha, eps = settings["local_alpha"], settings["local_ep"]
    inputs = {k: v.clone().requires_grad_() for k, v in part(HAL, f"b{batch}/input").items()}
    loss_fn = create_loss("hal_released", alpha=alpha, eps=eps, similarity="cosine")
    loss = loss_fn(Gaussian.point(inputs["images"]), Gaussian.point(inputs["captions"]),
                   torch.eye(batch, dtype=torch.bool))["loss"]
    want = HAL[f"b{batch}/output/loss"]
    gap = float(want - loss.detach())
    bound = 2 * math.exp(-alpha * eps) / alpha
    assert 0.0 <= gap <= bound * (1 + 1e-9), (gap, bound)
    grads = torch.autograd.grad(loss, [inputs["images"], inputs["captions"]])
    for name, grad in zip(("images", "captions"), grads):
        torch.testing.assert_close(grad, HAL[f"b{batch}/grad/{name}"], rtol=2e-4, atol=1e-6)


PIENET_NAMES = {"attention.w_1.weight": "attention.w1.weight", "attention.w_2.weight": "attention.w2.weight",
                "fc.weight": "fc_local.weight", "fc.bias": "fc_local.bias",
                "layer_norm.weight": "layer_norm.weight", "layer_norm.bias": "layer_norm.bias"}


def test_pvse_head_equals_release_pienet_with_two_heads():
    """pcmr's PVSE caption head (no layer on the bi-GRU output, attention over word embeddings)
    against the release's PIENet(K = 2) on padded words: output before L2, residuals, gradients."""
    inputs, weights = part(PVSE, "pienet/input"), part(PVSE, "pienet/weight")
    embed_dim, word_dim = weights["fc.weight"].shape
    head = PVSEHead(embed_dim, embed_dim, 2, 0, local_dim=word_dim, project_pooled=False).double()
    head.load_state_dict({ours: weights[theirs] for theirs, ours in PIENET_NAMES.items()}, strict=True)
    captured = []
    head.layer_norm.register_forward_hook(lambda module, args, output: captured.append(output))
    words, out = inputs["words"].clone().requires_grad_(), inputs["out"].clone().requires_grad_()
    mask = torch.arange(words.shape[1]).unsqueeze(0) < inputs["lengths"].unsqueeze(1)
    result = head(EncodedFeatures(local=words, pooled=out, mask=mask))
    tol = PVSE_INFO["tolerance"]
    assert_close(captured[0], PVSE["pienet/output"], tol, "PIE-Net output")
    assert_close(result.residuals, PVSE["pienet/residual"], tol, "PIE-Net residuals")
    assert_close(result.points, F.normalize(PVSE["pienet/output"], dim=-1), tol, "PVSE points")
    params = dict(head.named_parameters())
    targets = {"input/words": words, "input/out": out}
    targets.update({f"weight/{theirs}": params[ours] for theirs, ours in PIENET_NAMES.items()})
    grads = torch.autograd.grad((captured[0] * PVSE["pienet/cotangent"]).sum(), list(targets.values()))
    for name, grad in zip(targets, grads):
        assert_close(grad, PVSE[f"pienet/grad/{name}"], tol, f"PIE-Net grad {name}")
