"""Scores with ``v1 + v2`` inside a division and a log: ``elk`` and ``bhattacharyya``
(PCME eq. B.3-B.5; docs/similarity.md).

Both are built from two sums over dimensions, with ``s = v1 + v2``:
``A = sum_d (m1 - m2)^2 / s`` and ``B = sum_d log s``:

- ``elk`` = ``log N(m1; m2, diag(v1 + v2)) = -0.5 (A + B + D log 2 pi)`` (the log
  expected likelihood kernel; PCME prints the negative without the constant);
- ``bhattacharyya`` = ``-D_B`` with ``D_B = 0.25 A + 0.5 B - 0.5 D log 2
  - 0.25 sum_d (logvar1 + logvar2)`` (PCME's printed form differs by ``0.5 log 2`` per
  dimension; rankings are identical).

For ellipsoidal covariances ``1 / (v1 + v2)`` does not factor into per-item vectors, so
the ``[n, m, D]`` terms are computed elementwise, fused and blocked: tiles of
``TILE_ROWS`` images x ``m`` captions of ``TILE_ELEMENTS`` floats (a few MiB: near the
cache, yet few enough operations that thread hand-offs stay cheap on a busy CPU), two
preallocated buffers and in-place passes. When both sides are spherical, ``s`` is
one number per pair and everything is a matrix product (``A = |m1 - m2|^2 / s``,
``B = D log s``).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.similarity._closed_form import centred_means
from pcmr.similarity._primitives import dim_sum, squared_distances
from pcmr.similarity._registry import Similarity, register

TILE_ROWS = 16
TILE_ELEMENTS = 2**21  # floats per [rows, captions, D] buffer (8 MiB in float32)


@dataclass(frozen=True)
class _KernelState:
    m1: Tensor  # [N_img, D]
    v1: Tensor  # [N_img, D] | [N_img, 1]
    m2: Tensor  # [N_cap, D]
    v2: Tensor  # [N_cap, D] | [N_cap, 1]
    row: Tensor  # [N_img] additive constant of the score
    col: Tensor  # [N_cap]


class _VarianceKernel(Similarity):
    """Score ``= alpha * (A + beta * B) + row_i + col_c``."""

    needs_image_variance = True
    needs_caption_variance = True
    alpha = 1.0
    beta = 1.0

    @abstractmethod
    def constants(self, images: Gaussian, captions: Gaussian) -> tuple[Tensor, Tensor]:
        """Implemented by each concrete score."""

    def row_bytes(self, images: Gaussian, captions: Gaussian, options: dict[str, Any], grad: bool) -> int:
        return 4 * captions.num * images.dim * images.mean.element_size()

    def prepare(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> _KernelState:
        m1, m2 = centred_means(images, captions)
        row, col = self.constants(images, captions)
        return _KernelState(m1, images.var, m2, captions.var, row, col)

    def block(self, state: _KernelState, rows: slice, out: Tensor | None) -> Tensor:
        m1, v1, m2, v2 = state.m1[rows], state.v1[rows], state.m2, state.v2
        dim = m1.shape[1]
        spherical = v1.shape[1] == 1 and v2.shape[1] == 1 and dim != 1
        if out is None:
            if spherical:
                s = v1 + v2.T  # [n, N_cap]
                core = squared_distances(m1, m2) / s + self.beta * dim * s.log()
            else:
                s = v1.unsqueeze(1) + v2.unsqueeze(0)  # [n, N_cap, D]
                diff_sq = (m1.unsqueeze(1) - m2.unsqueeze(0)).square()
                core = (diff_sq / s).sum(2) + self.beta * s.log().sum(2)
            return self.alpha * core + state.row[rows].unsqueeze(1) + state.col.unsqueeze(0)
        if spherical:
            s = torch.add(v1, v2.T)  # [n, N_cap]
            squared_distances(m1, m2, out=out).div_(s)
            out.add_(s.log_(), alpha=self.beta * dim)
        else:
            self._fused_(m1, v1, m2, v2, out)
        out.mul_(self.alpha).add_(state.row[rows].unsqueeze(1)).add_(state.col.unsqueeze(0))
        return out

    def _fused_(self, m1: Tensor, v1: Tensor, m2: Tensor, v2: Tensor, out: Tensor) -> None:
        """``out = A + beta B`` over cache-sized tiles, two buffers, in-place passes."""
        n, dim = m1.shape
        m = m2.shape[0]
        rows = min(n, TILE_ROWS)
        cols = max(1, min(m, TILE_ELEMENTS // (rows * dim)))
        s_buf = m1.new_empty(rows * cols * dim)
        d_buf = m1.new_empty(rows * cols * dim)
        for r0 in range(0, n, rows):
            r1 = min(r0 + rows, n)
            a_mean, a_var = m1[r0:r1].unsqueeze(1), v1[r0:r1].unsqueeze(1)  # [nt, 1, D|1]
            for c0 in range(0, m, cols):
                c1 = min(c0 + cols, m)
                shape = (r1 - r0, c1 - c0, dim)
                size = shape[0] * shape[1] * dim
                s = s_buf[:size].view(shape)
                d = d_buf[:size].view(shape)
                torch.add(a_var, v2[c0:c1].unsqueeze(0), out=s)  # v1 + v2
                torch.sub(a_mean, m2[c0:c1].unsqueeze(0), out=d)  # m1 - m2
                d.mul_(d).div_(s)  # (m1 - m2)^2 / s
                d.add_(s.log_(), alpha=self.beta)
                torch.sum(d, dim=2, out=out[r0:r1, c0:c1])


@register
class ExpectedLikelihoodKernel(_VarianceKernel):
    """``log N(m1; m2, diag(v1 + v2))`` (PCME eq.B.3-B.4)."""

    name = "elk"
    listing_rank = 7
    reference = "PCME eq.B.3-B.4 (log expected likelihood kernel)"
    alpha = -0.5
    beta = 1.0

    def constants(self, images: Gaussian, captions: Gaussian) -> tuple[Tensor, Tensor]:
        const = -0.5 * images.dim * math.log(2 * math.pi)
        return images.mean.new_full((images.num,), const), captions.mean.new_zeros(captions.num)

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        s = images.var + captions.var  # [N, D] | [N, 1]
        terms = (images.mean - captions.mean).square() / s + s.log() + math.log(2 * math.pi)  # [N, D]
        return -0.5 * terms.sum(1)


@register
class Bhattacharyya(_VarianceKernel):
    """``-D_B`` between diagonal Gaussians (PCME eq.B.5, exact form)."""

    name = "bhattacharyya"
    listing_rank = 8
    reference = "PCME eq.B.5 (Bhattacharyya distance)"
    alpha = -0.25
    beta = 2.0

    def constants(self, images: Gaussian, captions: Gaussian) -> tuple[Tensor, Tensor]:
        dim = images.dim
        row = 0.25 * dim_sum(images.logvar, dim) + 0.5 * dim * math.log(2.0)  # type: ignore[arg-type]
        col = 0.25 * dim_sum(captions.logvar, dim)  # type: ignore[arg-type]
        return row, col

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        lv1, lv2 = images.logvar, captions.logvar
        s = lv1.exp() + lv2.exp()  # type: ignore[union-attr]
        diff_sq = (images.mean - captions.mean).square()  # [N, D]
        terms = 0.25 * diff_sq / s + 0.5 * (s.log() - math.log(2.0) - 0.5 * (lv1 + lv2))  # type: ignore[operator]
        return -terms.sum(1)
