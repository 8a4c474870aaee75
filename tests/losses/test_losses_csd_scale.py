"""pcme_csd's two parametrisations of ``a`` and ``b``: the same loss at the same values; the release's
free ``negative_scale`` / ``shift`` receive the gradients with respect to ``a`` and ``b`` themselves."""

from __future__ import annotations

import pytest
import torch

from pcmr.gaussian import Gaussian
from pcmr.losses import create_loss
from pcmr.losses.csd import CsdConfig, FreeMatchScale


def _inputs(generator: torch.Generator) -> tuple[Gaussian, Gaussian, torch.Tensor]:
    image = Gaussian(torch.randn(5, 4, generator=generator, dtype=torch.float64),
                     torch.randn(5, 4, generator=generator, dtype=torch.float64) - 2.0)
    caption = Gaussian(torch.randn(7, 4, generator=generator, dtype=torch.float64),
                       torch.randn(7, 4, generator=generator, dtype=torch.float64) - 2.0)
    positives = torch.zeros(5, 7, dtype=torch.bool)
    positives[torch.arange(5), torch.arange(5)] = True
    positives[1, 6] = True
    return image, caption, positives


def test_release_parametrisation_equals_softplus_at_the_same_values():
    image, caption, positives = _inputs(torch.Generator().manual_seed(0))
    softplus = create_loss("pcme_csd", init_a=3.0, init_b=-1.5).double()
    release = create_loss("pcme_csd", init_a=3.0, init_b=-1.5, scale_parametrisation="release").double()
    assert isinstance(release.match_scale, FreeMatchScale)
    assert release.match_scale.as_floats() == {"a": 3.0, "b": -1.5}
    with torch.no_grad():  # softplus(a_raw) is 3 to float32's precision: the same value on both sides
        release.match_scale.negative_scale.copy_(softplus.match_scale.a)
    want, got = softplus(image, caption, positives), release(image, caption, positives)
    for name in ("loss", "csd_matching", "kl_prior", "pseudo_positive"):
        torch.testing.assert_close(got[name], want[name], rtol=1e-12, atol=0.0)
    want["loss"].backward()
    got["loss"].backward()
    a_raw = softplus.match_scale.a_raw
    # d loss / d a = (d loss / d a_raw) / sigmoid(a_raw)
    torch.testing.assert_close(release.match_scale.negative_scale.grad, a_raw.grad / torch.sigmoid(a_raw.detach()),
                               rtol=1e-12, atol=0.0)
    torch.testing.assert_close(release.match_scale.shift.grad, softplus.match_scale.b.grad, rtol=1e-12, atol=0.0)


def test_unknown_parametrisation_is_refused():
    with pytest.raises(ValueError, match="scale_parametrisation"):
        CsdConfig(scale_parametrisation="raw")
    with pytest.raises(ValueError, match="init_a"):
        FreeMatchScale(0.0, 1.0)
