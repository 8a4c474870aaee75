"""The trained-signal gate: a head that never learned is told apart from one that did."""

from __future__ import annotations

import math

import pytest
import torch

from pcmr import Gaussian
from pcmr.metrics.signal import monte_carlo_floor, per_item_logvar, uncertainty_signal
from pcmr.models import create_model


def _gaussian(logvar: torch.Tensor) -> Gaussian:
    return Gaussian(torch.nn.functional.normalize(torch.randn(logvar.shape, dtype=torch.float64), dim=1), logvar)


def test_floor_is_the_standard_error_of_a_sampled_log_variance():
    # brute force: log of the unbiased variance of J standard normal samples, averaged over D dims
    g = torch.Generator().manual_seed(0)
    j, d = 7, 32
    samples = torch.randn(4000, d, j, generator=g, dtype=torch.float64)
    estimate = samples.var(dim=2).log().mean(dim=1)  # [4000]
    assert monte_carlo_floor(j, d) == pytest.approx(float(estimate.std()), rel=0.15)
    assert monte_carlo_floor(1, d) == 0.0 and monte_carlo_floor(7, 128) == pytest.approx(math.sqrt(2 / (6 * 128)))


def test_untrained_pcme_head_shows_no_signal():
    """Two untrained models of one configuration (different seeds): no signal, whatever the seed."""
    torch.manual_seed(0)
    images = torch.rand(40, 3, 16, 16)
    models = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        models.append(create_model("pcme", vocab_size=10, embed_dim=16, image_encoder={"cnn_channels": [4, 8]},
                                   text_encoder={"word_dim": 8, "hidden_dim": 8}).eval())
    with torch.no_grad():
        a, b = (m.encode_images({"images": images}) for m in models)
    out = uncertainty_signal(a, b, num_samples=7)
    assert out["signal"] is False


def test_a_learned_spread_passes_and_a_tiny_one_does_not():
    torch.manual_seed(0)
    initial = _gaussian(torch.full((200, 16), -1.0) + 0.001 * torch.randn(200, 16, dtype=torch.float64))
    learned = _gaussian(torch.linspace(-3, 1, 200, dtype=torch.float64)[:, None].expand(200, 16).clone())
    out = uncertainty_signal(learned, initial, num_samples=7)
    assert out["signal"] is True and out["spread"] > out["floor"] > 0
    assert out["moved"] == pytest.approx(float((per_item_logvar(learned) - per_item_logvar(initial)).std()))
    # 0.01 nats of spread: above the initial spread, below what 7 samples can resolve in 16 dims
    barely = _gaussian(-1.0 + 0.01 * torch.randn(200, 1, dtype=torch.float64).expand(200, 16).clone())
    out = uncertainty_signal(barely, initial, num_samples=7)
    assert out["spread"] > 2 * out["spread_init"] and out["signal"] is False
    assert uncertainty_signal(barely, initial, num_samples=1)["signal"] is True  # a closed-form loss sees it


def test_bad_input_is_named():
    a = _gaussian(torch.zeros(5, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="same items"):
        uncertainty_signal(a, a[0:3], num_samples=7)
    with pytest.raises(ValueError, match="needs variances"):
        per_item_logvar(Gaussian(torch.zeros(3, 2)))
