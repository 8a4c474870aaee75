"""The opt-in fused (``torch.compile``) tile reduction of ``match_prob`` gives the eager path's values.

Compiled with inductor on the CPU here (a C compiler is needed; the first call compiles, ~20 s on
one core), on CUDA with Triton in the ``cuda`` test. Awkward sizes: J != K, two caption tiles (more
captions than ``TILE_CAPTIONS``), a last tile of a few rows, match probabilities far below the float32
range (whose logs must stay finite).
"""

from __future__ import annotations

import shutil

import pytest
import torch

from pcmr import Gaussian
from pcmr.similarity import pairwise
from pcmr.similarity.sampled import (
    FUSED_SCORES_ENV,
    TILE_CAPTIONS,
    _compiled_log_match_tile,
    fused_tiles_enabled,
)


def _inputs(device: str, dtype: torch.dtype = torch.float32) -> tuple[Gaussian, Gaussian, dict]:
    gen = torch.Generator().manual_seed(3)
    n, m, dim, j, k = 23, TILE_CAPTIONS + 77, 19, 3, 5
    images = Gaussian(torch.randn(n, dim, generator=gen), -2.0 + torch.randn(n, dim, generator=gen))
    captions = Gaussian(torch.randn(m, dim, generator=gen), -2.0 + torch.randn(m, dim, generator=gen))
    options = {"image_samples": images.mean.unsqueeze(1) + torch.randn(n, j, dim, generator=gen),
               "caption_samples": captions.mean.unsqueeze(1) + torch.randn(m, k, dim, generator=gen),
               "a": 20.0, "b": 5.0}
    def move(t):
        return t.to(device=device, dtype=dtype)
    return (Gaussian(move(images.mean), move(images.logvar)), Gaussian(move(captions.mean), move(captions.logvar)),
            {key: move(v) if isinstance(v, torch.Tensor) else v for key, v in options.items()})


def _agreement(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    images, captions, options = _inputs(device)
    monkeypatch.delenv(FUSED_SCORES_ENV, raising=False)
    eager = pairwise("match_prob", images, captions, **options)
    monkeypatch.setenv(FUSED_SCORES_ENV, "1")
    fused = pairwise("match_prob", images, captions, **options)
    assert _compiled_log_match_tile.cache_info().currsize == 1  # the compiled reduction ran
    assert torch.isfinite(fused).all() and float(eager.min()) < -104  # probabilities below float32, finite logs
    torch.testing.assert_close(fused, eager, rtol=1e-5, atol=1e-5)
    assert torch.equal(fused.argmax(1), eager.argmax(1))


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="torch.compile on the CPU needs a C compiler")
def test_fused_tiles_agree_with_eager_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _agreement("cpu", monkeypatch)


@pytest.mark.cuda
def test_fused_tiles_agree_with_eager_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    _agreement("cuda", monkeypatch)


def test_fused_tiles_are_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv(FUSED_SCORES_ENV, raising=False)
    assert not fused_tiles_enabled(cpu) and not fused_tiles_enabled(cuda)
    monkeypatch.setenv(FUSED_SCORES_ENV, "cuda")
    assert not fused_tiles_enabled(cpu) and fused_tiles_enabled(cuda)
    monkeypatch.setenv(FUSED_SCORES_ENV, "1")
    assert fused_tiles_enabled(cpu) and fused_tiles_enabled(cuda)
    monkeypatch.setenv(FUSED_SCORES_ENV, "triton")
    images, captions, options = _inputs("cpu")
    with pytest.raises(ValueError, match=r"^PCMR_FUSED_SCORES='triton': expected 0 .*, cuda .* or 1 "):
        pairwise("match_prob", images, captions, **options)
