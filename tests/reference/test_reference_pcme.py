"""pcmr's PCME modules and loss against PCME's official release (naver-ai/pcme), values and gradients.

The fixture was written by tools/reference/pcme_release.py running the release's own modules in
float64; its JSON sidecar names the commit, files and functions. Tolerance: the sidecar's
(rtol 1e-9, atol 1e-10) for the modules; for the loss rtol 2e-6 and atol 1e-6, as the release's distance is
``sqrt(|x - y|^2 + 1e-6)`` and pcmr's the exact one.
"""

from __future__ import annotations

import pytest
import torch

from _reference import assert_close, load_fixture, part
from pcmr import Gaussian
from pcmr.losses import create_loss
from pcmr.losses.match_scale import inverse_softplus
from pcmr.models.config import HeadConfig
from pcmr.models.convert_pcme_release import image_uncertainty_state, pienet_state, text_uncertainty_state
from pcmr.models.features import EncodedFeatures
from pcmr.models.heads import PCMEMeanHead, PCMEVarianceHead

TENSORS, PROVENANCE = load_fixture("pcme")
TOL = PROVENANCE["tolerance"]
LOSS_TOL = PROVENANCE["tolerance_loss"]  # the release adds 1e-6 under the distance's square root
RELEASE_HEAD = {"kind": "pcme", "attention_bias": False, "variance_output": "logsigma"}


def _leaves(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}


def _check_grads(prefix: str, out: torch.Tensor, cotangent: torch.Tensor, leaves: dict, module, names: dict) -> None:
    """Gradients of sum(out * cotangent) w.r.t. inputs and (renamed) weights equal the release's."""
    want = part(TENSORS, f"{prefix}/grad")
    params = dict(module.named_parameters())
    targets = {f"input/{k}": v for k, v in leaves.items() if v.requires_grad}
    targets.update({f"weight/{release}": params[ours] for release, ours in names.items()})
    grads = torch.autograd.grad((out * cotangent).sum(), list(targets.values()))
    assert set(targets) == set(want), sorted(set(want) ^ set(targets))
    for name, grad in zip(targets, grads):
        assert_close(grad, want[name], TOL, f"{prefix} grad {name}")


def _load(module, release_weights: dict, convert) -> dict[str, str]:
    """Load the release's weights; returns release name -> pcmr parameter name."""
    state = convert(release_weights)
    module.load_state_dict(state, strict=True)
    renamed = convert({k: torch.tensor(i) for i, k in enumerate(release_weights)})
    return {list(release_weights)[int(v)]: k for k, v in renamed.items()}


def _mask(lengths: torch.Tensor, length: int) -> torch.Tensor:
    return torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)  # True at real words


def test_fixture_provenance_names_the_release():
    assert PROVENANCE["repository"] == "https://github.com/naver-ai/pcme"
    assert len(PROVENANCE["commit"]) == 40 and PROVENANCE["dtype"] == "float64"


def test_image_variance_head_equals_release_uncertainty_module():
    inputs, weights = part(TENSORS, "image_uncertainty/input"), part(TENSORS, "image_uncertainty/weight")
    grid = inputs["grid"]
    config = HeadConfig(**RELEASE_HEAD)
    head = PCMEVarianceHead(grid.shape[2], weights["fc.weight"].shape[0], config).double()
    names = _load(head, weights, image_uncertainty_state)
    leaves = _leaves(inputs)
    logvar = head(EncodedFeatures(local=leaves["grid"], pooled=leaves["pooled"]))
    logsigma = 0.5 * logvar  # the release outputs log sigma
    assert_close(logsigma, TENSORS["image_uncertainty/output"], TOL, "image logsigma")
    _check_grads("image_uncertainty", logsigma, TENSORS["image_uncertainty/cotangent"], leaves, head, names)


def test_caption_variance_head_equals_release_text_uncertainty_module():
    inputs, weights = part(TENSORS, "text_uncertainty/input"), part(TENSORS, "text_uncertainty/weight")
    words, lengths = inputs["words"], inputs["lengths"]
    embed_dim = weights["fc.weight"].shape[0]
    config = HeadConfig(**RELEASE_HEAD, variance_source="word_gru")
    head = PCMEVarianceHead(embed_dim, embed_dim, config, local_dim=words.shape[2], sentence_feature="last_output").double()
    names = _load(head, weights, text_uncertainty_state)
    leaves = _leaves(inputs)
    features = EncodedFeatures(local=leaves["words"], pooled=torch.zeros(words.shape[0], embed_dim),
                               mask=_mask(lengths, words.shape[1]))
    logsigma = 0.5 * head(features)
    assert_close(logsigma, TENSORS["text_uncertainty/output"], TOL, "caption logsigma")
    _check_grads("text_uncertainty", logsigma, TENSORS["text_uncertainty/cotangent"], leaves, head, names)


@pytest.mark.parametrize("prefix, local", [("pienet", "grid"), ("pienet_masked", "words")])
def test_mean_head_equals_release_pienet(prefix, local):
    inputs, weights = part(TENSORS, f"{prefix}/input"), part(TENSORS, f"{prefix}/weight")
    embed_dim = weights["fc.weight"].shape[0]
    head = PCMEMeanHead(embed_dim, embed_dim, 0, inputs[local].shape[2], attention_bias=False,
                        project_pooled=False).double()
    names = _load(head, weights, pienet_state)
    captured = []
    head.layer_norm.register_forward_hook(lambda module, args, output: captured.append(output))
    leaves = _leaves(inputs)
    mask = _mask(inputs["lengths"], inputs[local].shape[1]) if "lengths" in inputs else None
    mean = head(EncodedFeatures(local=leaves[local], pooled=leaves["out"], mask=mask))
    want = TENSORS[f"{prefix}/output"]  # PIE-Net's output, before the encoder's L2 normalisation
    assert_close(captured[0], want, TOL, f"{prefix} output")
    assert_close(mean, torch.nn.functional.normalize(want, dim=-1), TOL, f"{prefix} normalised")
    _check_grads(prefix, captured[0], TENSORS[f"{prefix}/cotangent"], leaves, head, names)


def _release_loss(kl_form: str = "release"):
    config = PROVENANCE["loss_config"]
    weights = part(TENSORS, "loss/weight")
    # release logit l = -s d + t enters sigmoid(2 l): pcmr's a = 2 s, b = 2 t
    loss_fn = create_loss("pcme", num_samples=config["num_samples"], init_a=2 * float(weights["negative_scale"]),
                          init_b=2 * float(weights["shift"]), lambda_kl=config["vib_beta"],
                          lambda_unif=config["uniform_lambda"], kl_form=kl_form).double()
    with torch.no_grad():  # a = softplus(a_raw) exactly in float64 (the float32 init rounds a_raw)
        loss_fn.match_scale.a_raw.fill_(inverse_softplus(2 * float(weights["negative_scale"])))
    inputs = _leaves(part(TENSORS, "loss/input"))
    gaussians = {side: Gaussian(inputs[f"{side}_mean"], 2 * inputs[f"{side}_logsigma"]) for side in ("image", "caption")}
    draws = {side: TENSORS[f"loss/draws/{side}_eps"] for side in ("image", "caption")}
    samples = {side: gaussians[side].sample(draws=draws[side]) for side in ("image", "caption")}
    positives = torch.eye(inputs["image_mean"].shape[0], dtype=torch.bool)
    terms = loss_fn(image=gaussians["image"], caption=gaussians["caption"], positives=positives,
                    image_samples=samples["image"], caption_samples=samples["caption"])
    return loss_fn, inputs, terms


def test_soft_contrastive_loss_with_kl_and_uniformity_equals_release():
    loss_fn, inputs, terms = _release_loss()
    out = part(TENSORS, "loss/output")
    assert_close(terms["soft_contrastive"], out["i2t_loss"] + out["t2i_loss"], LOSS_TOL, "soft contrastive")
    assert_close(terms["kl_prior"], out["vib_loss"], LOSS_TOL, "kl (vib)")
    assert_close(terms["uniformity"], out["uniform_loss"], LOSS_TOL, "uniformity")
    assert_close(terms["loss"], out["loss"], LOSS_TOL, "total")
    grads = part(TENSORS, "loss/grad")
    got = torch.autograd.grad(terms["loss"], [*inputs.values(), loss_fn.match_scale.a_raw, loss_fn.match_scale.b])
    for name, grad in zip(inputs, got):
        key = f"input/{name}"
        # pcmr's leaves are the means and log sigma (logvar = 2 log sigma was formed from them)
        assert_close(grad, grads[key], LOSS_TOL, f"loss grad {key}")
    a_grad = got[-2] / torch.sigmoid(loss_fn.match_scale.a_raw)  # d/da through a = softplus(a_raw)
    assert_close(a_grad.reshape(1), grads["weight/negative_scale"] / 2, LOSS_TOL, "grad a")
    assert_close(got[-1].reshape(1), grads["weight/shift"] / 2, LOSS_TOL, "grad b")


def test_exact_kl_form_differs_from_release_term():
    """kl_form='logvar' is the exact KL (twice the pull on log sigma); the release's is the default."""
    _, _, release = _release_loss()
    _, _, exact = _release_loss("logvar")
    assert not torch.allclose(release["kl_prior"], exact["kl_prior"])
    assert_close(exact["soft_contrastive"], release["soft_contrastive"], TOL, "same matching term")
    out = part(TENSORS, "loss/output")
    assert not torch.allclose(exact["kl_prior"], out["vib_loss"], rtol=1e-3)
