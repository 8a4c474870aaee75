"""match_prob is the log of the mean match probability: no float32 underflow, same rankings as float64."""

from __future__ import annotations

import math

import pytest
import torch

from pcmr.gaussian import Gaussian
from pcmr.similarity import paired, pairwise


def _wide_gaussians(dtype: torch.dtype) -> tuple[Gaussian, Gaussian, torch.Tensor, torch.Tensor]:
    """D = 128, log-variance 0: sample distances about 16, so sigmoid(10 - 10 d) is about 1e-65."""
    gen = torch.Generator().manual_seed(3)
    images = Gaussian(torch.randn(13, 128, generator=gen, dtype=torch.float64), torch.zeros(13, 128, dtype=torch.float64))
    captions = Gaussian(torch.randn(29, 128, generator=gen, dtype=torch.float64), torch.zeros(29, 128, dtype=torch.float64))
    zi, zc = images.sample(7, generator=gen), captions.sample(7, generator=gen)
    cast = lambda g: Gaussian(g.mean.to(dtype), g.logvar.to(dtype))  # noqa: E731
    return cast(images), cast(captions), zi.to(dtype), zc.to(dtype)


def test_float32_rankings_equal_float64_where_probabilities_underflow():
    s64 = pairwise("match_prob", *_wide_gaussians(torch.float64)[:2], a=10.0, b=10.0,
                   image_samples=_wide_gaussians(torch.float64)[2], caption_samples=_wide_gaussians(torch.float64)[3])
    images, captions, zi, zc = _wide_gaussians(torch.float32)
    s32 = pairwise("match_prob", images, captions, a=10.0, b=10.0, image_samples=zi, caption_samples=zc)
    assert s32.dtype == torch.float32 and bool(torch.isfinite(s32).all())
    assert float(s64.exp().max()) < 1e-45  # the probabilities themselves are below float32's range
    assert torch.equal(s32.argsort(dim=1, stable=True), s64.argsort(dim=1, stable=True))  # image -> text
    assert torch.equal(s32.argsort(dim=0, stable=True), s64.argsort(dim=0, stable=True))  # text -> image
    assert len(torch.unique(s32)) == s32.numel()  # no tie left
    torch.testing.assert_close(s32.double(), s64, rtol=1e-5, atol=1e-3)


def test_log_space_matches_a_float64_reference_and_blocks_and_paths_agree():
    images, captions, zi, zc = _wide_gaussians(torch.float64)
    a, b = 10.0, 10.0
    d = torch.cdist(zi.reshape(-1, 128), zc.reshape(-1, 128)).view(13, 7, 29, 7)  # [N, J, M, K]
    logsig = torch.nn.functional.logsigmoid(b - a * d)
    reference = torch.logsumexp(logsig, dim=(1, 3)) - math.log(49)
    opts = {"a": a, "b": b, "image_samples": zi, "caption_samples": zc}
    torch.testing.assert_close(pairwise("match_prob", images, captions, **opts), reference)
    torch.testing.assert_close(pairwise("match_prob", images, captions, block_size=4, **opts), reference)
    a_grad = torch.tensor(a, dtype=torch.float64, requires_grad=True)  # the differentiable path
    grad_scores = pairwise("match_prob", images, captions, **{**opts, "a": a_grad})
    torch.testing.assert_close(grad_scores.detach(), reference)
    diagonal = paired("match_prob", images, Gaussian(captions.mean[:13], captions.logvar[:13]), a=a, b=b,
                      image_samples=zi, caption_samples=zc[:13])
    torch.testing.assert_close(diagonal, reference.diagonal())


@pytest.mark.parametrize("distance", [0.0, 0.5, 3.0])
def test_exp_of_the_score_is_the_match_probability_where_it_is_representable(distance):
    """Two points at a known distance: exp(score) = sigmoid(b - a d) (PCME eq.2)."""
    images = Gaussian(torch.zeros(1, 2, dtype=torch.float64), None)
    captions = Gaussian(torch.tensor([[distance, 0.0]], dtype=torch.float64), None)
    score = pairwise("match_prob", images, captions, a=2.0, b=1.0)
    assert math.isclose(float(score.exp()), 1 / (1 + math.exp(-(1.0 - 2.0 * distance))), rel_tol=1e-5)  # d is floored at a tiny epsilon


def test_mixed_tiles_of_representable_and_underflowing_pairs_equal_a_float64_reference(monkeypatch):
    """float32, tiles of a few rows and captions: pairs whose probabilities are representable and pairs
    whose every probability underflows sit in the same tiles; both equal a float64 reference of the same
    samples, wherever they fall in the tiles."""
    from pcmr.similarity import sampled

    monkeypatch.setattr(sampled, "TILE_CAPTIONS", 7)  # several caption tiles, a short last one
    monkeypatch.setattr(sampled, "TILE_ELEMENTS", 4 * 9 * 7)  # 4 image rows per tile (J = K = 3)
    gen = torch.Generator().manual_seed(5)
    means_i = torch.randn(11, 16, generator=gen, dtype=torch.float64)
    far = torch.arange(23) % 3 == 0  # every third caption far from every image: its probabilities underflow
    means_c = means_i[torch.arange(23) % 11] + 0.05 * torch.randn(23, 16, generator=gen, dtype=torch.float64)
    means_c[far] += 40.0
    logvar_i, logvar_c = torch.full((11, 16), -6.0, dtype=torch.float64), torch.full((23, 16), -6.0, dtype=torch.float64)
    zi = Gaussian(means_i, logvar_i).sample(3, generator=gen)
    zc = Gaussian(means_c, logvar_c).sample(3, generator=gen)
    a, b = 10.0, 10.0
    d = torch.cdist(zi.reshape(-1, 16), zc.reshape(-1, 16)).view(11, 3, 23, 3)
    reference = torch.logsumexp(torch.nn.functional.logsigmoid(b - a * d), dim=(1, 3)) - math.log(9)
    assert float(reference[:, far].exp().max()) < 1e-100 and float(reference[:, ~far].exp().min()) > 1e-30
    f32 = lambda t: t.to(torch.float32)  # noqa: E731
    scores = pairwise("match_prob", Gaussian(f32(means_i), f32(logvar_i)), Gaussian(f32(means_c), f32(logvar_c)),
                      a=a, b=b, image_samples=f32(zi), caption_samples=f32(zc), block_size=5)
    assert scores.dtype == torch.float32 and bool(torch.isfinite(scores).all())
    torch.testing.assert_close(scores.double(), reference, rtol=1e-4, atol=2e-3)
