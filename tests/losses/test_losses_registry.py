"""Every registered loss: construction, output shape, finiteness and gradients to every input."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from pcmr import Gaussian
from pcmr.config import ConfigError
from pcmr.losses import create_loss, get_loss_entry, list_losses
from pcmr.similarity import list_similarities

# Config that makes each loss use the variances, so log-variances must receive a gradient.
VARIANCE_CONFIG = {
    "triplet_sum": {"similarity": "wasserstein"},
    "triplet_max": {"similarity": "kl"},
    "triplet_semihard": {"similarity": "min_kl"},
    "hal": {"similarity": "wasserstein", "k": 2},
    "max_hal": {"similarity": "wasserstein", "k": 1},
    "hal_released": {"similarity": "wasserstein"},
    "pcme": {"num_samples": 3},
    "pcme_csd": {},
    "calibpe": {},
    "pvse": {},
}
POINT_LOSSES = {"pvse"}  # trained on points (K embeddings per item): variances are never read


def make_inputs(dtype=torch.float64, seed=0, num_img=5, num_cap=7, dim=6):
    gen = torch.Generator().manual_seed(seed)
    leaves = {
        "image_mean": torch.nn.functional.normalize(torch.randn(num_img, dim, generator=gen, dtype=dtype), dim=1),
        "caption_mean": torch.nn.functional.normalize(torch.randn(num_cap, dim, generator=gen, dtype=dtype), dim=1),
        "image_logvar": -2 + 0.3 * torch.randn(num_img, dim, generator=gen, dtype=dtype),
        "caption_logvar": -2 + 0.3 * torch.randn(num_cap, dim, generator=gen, dtype=dtype),
    }
    leaves = {name: value.requires_grad_() for name, value in leaves.items()}
    positives = torch.zeros(num_img, num_cap, dtype=torch.bool)
    for c in range(num_cap):
        positives[c % num_img, c] = True  # several captions per image
    positives[0, -1] = True
    image = Gaussian(leaves["image_mean"], leaves["image_logvar"])
    caption = Gaussian(leaves["caption_mean"], leaves["caption_logvar"])
    return image, caption, positives, leaves


def test_list_losses_names_every_loss_of_the_papers():
    papers = {"triplet_sum", "triplet_max", "triplet_semihard", "hal", "max_hal", "hal_released", "pcme", "pcme_csd",
              "calibpe", "pvse"}
    assert papers <= set(list_losses())  # a new loss is tested below with its default options


@pytest.mark.parametrize("name", list_losses())
def test_every_loss_shape_finiteness_and_gradients(name):
    image, caption, positives, leaves = make_inputs()
    loss_fn = create_loss(name, **VARIANCE_CONFIG.get(name, {})).double()
    terms = loss_fn(image=image, caption=caption, positives=positives, generator=torch.Generator().manual_seed(0))
    assert isinstance(terms, dict) and "loss" in terms
    for key, value in terms.items():
        assert isinstance(value, torch.Tensor) and value.dim() == 0, key
        assert torch.isfinite(value), key
    parameters = list(loss_fn.parameters())
    inputs = list(leaves.values()) + parameters
    grads = torch.autograd.grad(terms["loss"], inputs, allow_unused=True)
    names = list(leaves) + [n for n, _ in loss_fn.named_parameters()]
    for input_name, grad in zip(names, grads):
        if name in POINT_LOSSES and input_name.endswith("logvar"):
            assert grad is None, f"{name}: {input_name} should not be read"
            continue
        assert grad is not None, f"{name}: {input_name} receives no gradient"
        assert torch.isfinite(grad).all(), f"{name}: non-finite gradient for {input_name}"
        assert grad.abs().sum() > 0, f"{name}: zero gradient for {input_name}"


@pytest.mark.parametrize("name", list_losses())
def test_every_loss_default_config_float32_and_reports_its_score(name):
    image, caption, positives, _ = make_inputs(dtype=torch.float32, seed=1)
    loss_fn = create_loss(name)
    terms = loss_fn(image=image, caption=caption, positives=positives)
    assert terms["loss"].dtype == torch.float32 and torch.isfinite(terms["loss"])
    assert loss_fn.similarity_name in list_similarities()
    options = loss_fn.similarity_options()
    assert isinstance(options, dict)
    json.dumps(loss_fn.config_dict())  # the resolved config is plain data
    assert dataclasses.is_dataclass(loss_fn.config)


@pytest.mark.parametrize("name", list_losses())
def test_every_loss_finite_at_extreme_embeddings(name):
    image, caption, positives, _ = make_inputs(seed=2)
    big = Gaussian(image.mean.detach() * 50, image.logvar.detach() + 6)
    tiny = Gaussian(caption.mean.detach() * 50, caption.logvar.detach() - 12)
    loss_fn = create_loss(name, **VARIANCE_CONFIG.get(name, {})).double()
    terms = loss_fn(image=big.detach(), caption=tiny.detach(), positives=positives)
    assert torch.isfinite(terms["loss"])


def test_unknown_key_and_name_and_fixed_field_raise():
    with pytest.raises(ValueError, match=r"unknown loss 'triplet_max' key 'margn' \(did you mean 'margin'\?\); accepted keys: .*\bmargin\b"):
        create_loss("triplet_max", margn=0.1)
    with pytest.raises(ValueError, match=r"unknown loss 'triplet' \(did you mean 'triplet_sum'\?\); expected one of: "):
        create_loss("triplet")
    with pytest.raises(ValueError, match="fixes negatives='max'"):
        create_loss("triplet_max", negatives="sum")
    assert create_loss("triplet_max", negatives="max").config.negatives == "max"
    with pytest.raises(ValueError, match="similarity must be one of"):
        create_loss("hal", similarity="cosinus")
    with pytest.raises(ValueError, match="k"):
        create_loss("hal", k=0)
    with pytest.raises(ValueError, match="init_a"):
        create_loss("pcme", init_a=-1.0)


def test_none_overrides_are_dropped_and_entries_describe_losses():
    loss_fn = create_loss("max_hal", margin=None, k=None)
    assert loss_fn.config.margin == 0.2 and loss_fn.config.k == 3
    assert all(get_loss_entry(name).reference for name in list_losses())


def test_bad_inputs_raise_clear_errors():
    image, caption, positives, _ = make_inputs()
    loss_fn = create_loss("triplet_max")
    with pytest.raises(ValueError, match=r"positives must have shape \[B_img, B_cap\] = \[5, 7\]"):
        loss_fn(image=image, caption=caption, positives=positives.t())
    with pytest.raises(ValueError, match="caption must be a pcmr.Gaussian"):
        loss_fn(image=image, caption=caption.mean, positives=positives)


def test_learned_parameters_save_and_load_through_state_dict():
    loss_fn = create_loss("pcme", init_a=7.0, init_b=3.0)
    clone = create_loss("pcme")
    clone.load_state_dict(loss_fn.state_dict())
    assert clone.similarity_options() == pytest.approx({"a": 7.0, "b": 3.0})


def test_loss_options_go_through_the_one_config_loader():
    with pytest.raises(ConfigError, match=r"loss 'triplet_max' key 'margin' expects a number, got 'wide'"):
        create_loss("triplet_max", margin="wide")
    with pytest.raises(ConfigError, match=r"loss 'pcme' key 'num_samples' expects an integer, got 2.5"):
        create_loss("pcme", num_samples=2.5)
    assert create_loss("triplet_max", margin=1).config.margin == 1.0  # an integer is a number
