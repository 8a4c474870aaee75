"""Closed-form scores that expand into matrix products (see "Exactness and speed" in ``docs/similarity.md``).

A score of this kind is ``f(row_i + col_c + X_i . Y_c)`` for per-item feature
vectors: e.g. ``sum_d (m1-m2)^2 / v2 = m1^2 . (1/v2) - 2 m1 . (m2/v2) + sum_d m2^2/v2``.
Features of both sides are built once (``expansions``); each block of image rows is
then one ``addmm`` per expansion, written straight into the output, followed by a
cheap in-place finaliser (negation, square root, minimum).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.similarity._registry import Similarity


@dataclass(frozen=True)
class Expansion:
    """``base[i, c] = row[i] + col[c] + X[i] . Y[c]``; ``row``/``col`` may be None when
    they are zero or already folded into ``X``/``Y`` as extra columns."""

    x: Tensor  # [N_img, K]
    y: Tensor  # [N_cap, K]
    row: Tensor | None  # [N_img]
    col: Tensor | None  # [N_cap]


def centred_means(images: Gaussian, captions: Gaussian) -> tuple[Tensor, Tensor]:
    """Means shifted by their common centroid (detached). Scores that depend on ``m1 - m2``
    only are unchanged, but the expansion ``|m1|^2 + |m2|^2 - 2 m1.m2`` loses less
    precision to cancellation."""
    n, m = images.num, captions.num
    centre = ((images.mean.sum(0) + captions.mean.sum(0)) / max(1, n + m)).detach()  # [D]
    return images.mean - centre, captions.mean - centre


class ClosedForm(Similarity):
    """A score computed from one or more :class:`Expansion` per block."""

    @abstractmethod
    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        """Implemented by each concrete score."""

    @abstractmethod
    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        """Map the ``base`` blocks to scores; in place into ``parts[0]`` when ``inplace``."""

    def prepare(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> _ClosedFormState:
        return _ClosedFormState(self.expansions(images, captions))

    num_expansions = 1  # expansions per block (each beyond the first needs a temporary block)

    def row_bytes(self, images: Gaussian, captions: Gaussian, options: dict[str, Any], grad: bool) -> int:
        if grad:  # addmm, row add and finaliser results per expansion
            return 3 * self.num_expansions * captions.num * images.mean.element_size()
        return (self.num_expansions - 1) * captions.num * images.mean.element_size()

    def block(self, state: _ClosedFormState, rows: slice, out: Tensor | None) -> Tensor:
        parts = []
        for k, e in enumerate(state.expansions):
            if out is None:
                part = e.x[rows] @ e.y.T if e.col is None else torch.addmm(e.col.unsqueeze(0), e.x[rows], e.y.T)
                if e.row is not None:
                    part = part + e.row[rows].unsqueeze(1)
            else:
                part = out if k == 0 else state.scratch_block(k, out)
                if e.col is None:
                    torch.mm(e.x[rows], e.y.T, out=part)
                else:
                    torch.addmm(e.col.unsqueeze(0), e.x[rows], e.y.T, out=part)
                if e.row is not None:
                    part.add_(e.row[rows].unsqueeze(1))
            parts.append(part)  # [n, N_cap]
        return self.finalize(parts, inplace=out is not None)


@dataclass
class _ClosedFormState:
    """Expansions plus the temporary blocks of expansions after the first, kept across
    blocks (the first block is the largest), so their pages are touched once."""

    expansions: list[Expansion]
    scratch: dict[int, Tensor] = field(default_factory=dict)

    def scratch_block(self, k: int, like: Tensor) -> Tensor:
        n = like.shape[0]
        buf = self.scratch.get(k)
        if buf is None or buf.shape[0] < n:
            buf = self.scratch[k] = torch.empty_like(like)
        return buf[:n]
