"""Kullback-Leibler scores between diagonal Gaussians (SPEC §3).

``KL(p || q) = 0.5 * sum_d [ log(v2/v1) + v1/v2 + (m1-m2)^2/v2 - 1 ]`` with the image
``p = N(m1, v1)`` and the caption ``q = N(m2, v2)`` (ProbVSE eq.4-5, GCIE eq.15).

- ``kl``: ``-KL(p || q)`` (caption is the reference distribution, the papers' default);
- ``kl_reverse``: ``-KL(q || p)`` (ProbVSE §6.2);
- ``min_kl``: ``-min(KL(p||q), KL(q||p))`` (ProbVSE eq.6, GCIE eq.16);
- ``js``: ``-0.5 (KL(p||q) + KL(q||p))`` (PCME eq.B.2, CalibPE). The seeds call this
  "JS"; it is the *symmetrised KL* (Jeffreys divergence / 2), not Jensen-Shannon.

Pairwise forms are matrix products: ``sum_d (v1 + m1^2) / v2 - 2 m1 . (m2 / v2) + ...``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.similarity._closed_form import ClosedForm, Expansion, centred_means
from pcmr.similarity._primitives import dim_sum, expansion_features, rowwise_dot
from pcmr.similarity._registry import register


def _kl_expansion(m1: Tensor, lv1: Tensor, m2: Tensor, lv2: Tensor, dim: int) -> Expansion:
    """``2 KL(N(m1, e^lv1) || N(m2, e^lv2))`` between rows of side 1 and rows of side 2."""
    v1, w2 = lv1.exp(), (-lv2).exp()
    x, y = expansion_features([(v1 + m1.square(), w2), (m1, -2.0 * m2 * w2)], dim)
    row = -dim_sum(lv1, dim)
    col = dim_sum(lv2, dim) + (m2.square() * w2).sum(1) - dim
    return Expansion(x, y, row, col)


def _transpose(e: Expansion) -> Expansion:
    return Expansion(e.y, e.x, e.col, e.row)


def kl_paired(m1: Tensor, lv1: Tensor, m2: Tensor, lv2: Tensor) -> Tensor:
    """``KL(N(m1, e^lv1) || N(m2, e^lv2))`` of aligned rows, ``[N]`` (direct form)."""
    terms = lv2 - lv1 + (lv1 - lv2).exp() + (m1 - m2).square() * (-lv2).exp() - 1.0  # [N, D]
    return 0.5 * terms.sum(1)


def _sides(images: Gaussian, captions: Gaussian) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    m1, m2 = centred_means(images, captions)
    return m1, images.logvar, m2, captions.logvar  # type: ignore[return-value]


def _in_place(images: Gaussian, captions: Gaussian) -> bool:
    """Whether the in-place feature path applies: both sides ellipsoidal and no autograd."""
    sides = (images.mean, images.logvar, captions.mean, captions.logvar)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in sides)  # type: ignore[union-attr]
    dim = images.dim
    return not grad and images.logvar.shape[1] == dim and captions.logvar.shape[1] == dim  # type: ignore[union-attr]


def _kl_side(mean: Tensor, logvar: Tensor, centre: Tensor, layout: tuple[tuple[str, float], ...],
             extra_columns: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """One side's KL features written into one ``[n, len(layout) * D]`` buffer (no autograd).

    With ``m = mean - centre``, ``v = e^logvar`` and ``w = 1/v`` the ``D``-wide blocks are
    ``a = v + m^2``, ``b = w``, ``c = m w`` and ``e = m``, laid out and scaled as ``layout``
    says. ``2 KL(p || q) = a_p . b_q - 2 e_p . c_q + sum(m_q^2 w_q) + sum lv_q - sum lv_p - D``,
    so an image block meets its partner caption block (``a``-``b``, ``e``-``c`` and the
    reverse) at the same position. ``extra_columns`` trailing columns are left for the caller
    to fill. Also returns ``sum_d m^2 w`` and ``sum_d logvar``, ``[n]``.
    """
    n, dim = mean.shape
    feats = mean.new_empty(n, len(layout) * dim + extra_columns)
    blocks = {key: feats[:, i * dim:(i + 1) * dim] for i, (key, _) in enumerate(layout)}

    def block(key: str) -> Tensor:
        return blocks[key] if key in blocks else mean.new_empty(n, dim)

    m, w, c = block("e"), block("b"), block("c")
    torch.sub(mean, centre, out=m)
    torch.neg(logvar, out=w).exp_()
    torch.mul(m, w, out=c)
    if "a" in blocks:
        torch.exp(logvar, out=blocks["a"]).addcmul_(m, m)
    quad, logdet = rowwise_dot(m, c), logvar.sum(1)
    for key, scale in layout:
        if scale != 1.0:
            blocks[key].mul_(scale)
    return feats, quad, logdet


# Image and caption layouts of the in-place path: forward KL(image || caption) pairs the
# image's (a, e) with the caption's (b, c); the reverse pairs (b, c) with (a, e).
_FORWARD = ((("a", 1.0), ("e", -2.0)), (("b", 1.0), ("c", 1.0)))
_REVERSE = ((("b", 1.0), ("c", -2.0)), (("a", 1.0), ("e", 1.0)))


def _in_place_expansions(images: Gaussian, captions: Gaussian, image_layout: tuple[tuple[str, float], ...],
                         caption_layout: tuple[tuple[str, float], ...], extra_columns: int = 0) -> tuple[Tensor, ...]:
    """``(x, quad_1, logdet_1, y, quad_2, logdet_2)`` of the in-place path."""
    centre = ((images.mean.sum(0) + captions.mean.sum(0)) / max(1, images.num + captions.num)).detach()
    x, quad_1, logdet_1 = _kl_side(images.mean, images.logvar, centre, image_layout, extra_columns)  # type: ignore[arg-type]
    y, quad_2, logdet_2 = _kl_side(captions.mean, captions.logvar, centre, caption_layout, extra_columns)  # type: ignore[arg-type]
    return x, quad_1, logdet_1, y, quad_2, logdet_2


class _KLBase(ClosedForm):
    needs_image_variance = True
    needs_caption_variance = True

    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        """One KL expansion (``2 KL``) -> ``-KL``; min_kl and js override this."""
        return parts[0].mul_(-0.5) if inplace else -0.5 * parts[0]


@register
class KL(_KLBase):
    """``-KL(image || caption)``."""

    name = "kl"
    reference = "ProbVSE eq.4-5, GCIE eq.15"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        if _in_place(images, captions):
            x, _, ld_1, y, quad_2, ld_2 = _in_place_expansions(images, captions, *_FORWARD)
            return [Expansion(x, y, ld_1.neg_(), quad_2.add_(ld_2).sub_(images.dim))]
        m1, lv1, m2, lv2 = _sides(images, captions)
        return [_kl_expansion(m1, lv1, m2, lv2, images.dim)]

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        return -kl_paired(images.mean, images.logvar, captions.mean, captions.logvar)  # type: ignore[arg-type]


@register
class KLReverse(_KLBase):
    """``-KL(caption || image)``."""

    name = "kl_reverse"
    reference = "ProbVSE §6.2"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        if _in_place(images, captions):
            x, quad_1, ld_1, y, _, ld_2 = _in_place_expansions(images, captions, *_REVERSE)
            return [Expansion(x, y, quad_1.add_(ld_1).sub_(images.dim), ld_2.neg_())]
        m1, lv1, m2, lv2 = _sides(images, captions)
        return [_transpose(_kl_expansion(m2, lv2, m1, lv1, images.dim))]

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        return -kl_paired(captions.mean, captions.logvar, images.mean, images.logvar)  # type: ignore[arg-type]


@register
class MinKL(_KLBase):
    """``-min(KL(image || caption), KL(caption || image))``."""

    name = "min_kl"
    num_expansions = 2
    reference = "ProbVSE eq.6, GCIE eq.16"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        if _in_place(images, captions):  # one buffer per side; each direction is a column half
            x, quad_1, ld_1, y, quad_2, ld_2 = _in_place_expansions(
                images, captions, _FORWARD[0] + _REVERSE[0], _FORWARD[1] + _REVERSE[1])
            half, dim = 2 * images.dim, images.dim
            return [Expansion(x[:, :half], y[:, :half], -ld_1, quad_2 + ld_2 - dim),
                    Expansion(x[:, half:], y[:, half:], quad_1 + ld_1 - dim, -ld_2)]
        m1, lv1, m2, lv2 = _sides(images, captions)
        return [_kl_expansion(m1, lv1, m2, lv2, images.dim), _transpose(_kl_expansion(m2, lv2, m1, lv1, images.dim))]

    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        if inplace:
            return torch.minimum(parts[0], parts[1], out=parts[0]).mul_(-0.5)
        return -0.5 * torch.minimum(parts[0], parts[1])

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        forward = kl_paired(images.mean, images.logvar, captions.mean, captions.logvar)  # type: ignore[arg-type]
        backward = kl_paired(captions.mean, captions.logvar, images.mean, images.logvar)  # type: ignore[arg-type]
        return -torch.minimum(forward, backward)


@register
class SymmetrisedKL(_KLBase):
    """``-0.5 (KL(p||q) + KL(q||p))``; the log-variance terms cancel, leaving
    ``-0.25 sum_d [ v1/v2 + v2/v1 + (m1-m2)^2 (1/v1 + 1/v2) - 2 ]``."""

    name = "js"
    reference = "PCME eq.B.2, CalibPE (symmetrised KL, called 'JS' in the papers)"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        # The image side carries the factor -1/4 (and the -2 of the cross terms), so the
        # product is the score itself and the finaliser does nothing.
        dim = images.dim
        if _in_place(images, captions):  # both directions of min_kl's layout in ONE product
            image_layout = tuple((key, -0.25 * scale) for key, scale in _FORWARD[0] + _REVERSE[0])
            x, quad_1, _, y, quad_2, _ = _in_place_expansions(
                images, captions, image_layout, _FORWARD[1] + _REVERSE[1], extra_columns=2)
            # the row and column constants ride inside the product: [x, row, 1] . [y, 1, col]
            torch.sub(quad_1, dim, out=x[:, -2]).mul_(-0.25)
            torch.sub(quad_2, dim, out=y[:, -1]).mul_(-0.25)
            x[:, -1], y[:, -2] = 1.0, 1.0
            return [Expansion(x, y, None, None)]
        m1, lv1, m2, lv2 = _sides(images, captions)  # autograd, or a spherical side (width-1 terms collapse)
        v1, w1, v2, w2 = lv1.exp(), (-lv1).exp(), lv2.exp(), (-lv2).exp()
        x, y = expansion_features(
            [(-0.25 * (v1 + m1.square()), w2), (-0.25 * w1, v2 + m2.square()), (0.5 * m1, m2 * w2), (0.5 * m1 * w1, m2)],
            dim,
        )
        row = -0.25 * ((m1.square() * w1).sum(1) - dim)
        col = -0.25 * ((m2.square() * w2).sum(1) - dim)
        return [Expansion(x, y, row, col)]

    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        return parts[0]

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        forward = kl_paired(images.mean, images.logvar, captions.mean, captions.logvar)  # type: ignore[arg-type]
        backward = kl_paired(captions.mean, captions.logvar, images.mean, images.logvar)  # type: ignore[arg-type]
        return -0.5 * (forward + backward)
