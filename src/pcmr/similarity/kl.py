"""Kullback-Leibler scores between diagonal Gaussians (ProbVSE eq.4-6, GCIE eq.15-16, PCME eq.B.2).

``KL(p || q) = 0.5 * sum_d [ log(v2/v1) + v1/v2 + (m1-m2)^2/v2 - 1 ]`` with the image
``p = N(m1, v1)`` and the caption ``q = N(m2, v2)`` (ProbVSE eq.4-5, GCIE eq.15).

- ``kl``: ``-KL(p || q)`` (caption is the reference distribution, the papers' default);
- ``kl_reverse``: ``-KL(q || p)`` (ProbVSE §6.2);
- ``min_kl``: ``-min(KL(p||q), KL(q||p))`` (ProbVSE eq.6, GCIE eq.16);
- ``js``: ``-0.5 (KL(p||q) + KL(q||p))`` (PCME eq.B.2, CalibPE). The seeds call this
  "JS"; it is the *symmetrised KL* (Jeffreys divergence / 2), not Jensen-Shannon.

Pairwise forms are matrix products: ``sum_d (v1 + m1^2) / v2 - 2 m1 . (m2 / v2) + ...``;
the image side carries each score's constant factor (``-1/2`` or ``-1/4``), so the product
is the score itself (``min_kl``: the larger of two such products).
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


def _scaled(e: Expansion, scale: float) -> Expansion:
    """``scale * base``, the factor carried by the image side."""
    assert e.row is not None and e.col is not None
    return Expansion(scale * e.x, e.y, scale * e.row, scale * e.col)


def kl_paired(m1: Tensor, lv1: Tensor, m2: Tensor, lv2: Tensor) -> Tensor:
    """``KL(N(m1, e^lv1) || N(m2, e^lv2))`` of aligned rows, ``[N]`` (direct form)."""
    terms = lv2 - lv1 + (lv1 - lv2).exp() + (m1 - m2).square() * (-lv2).exp() - 1.0  # [N, D]
    return 0.5 * terms.sum(1)


def _sides(images: Gaussian, captions: Gaussian) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    m1, m2 = centred_means(images, captions)
    return m1, images.logvar, m2, captions.logvar  # type: ignore[return-value]


# ----------------------------------------------------------------------------- in-place path
Layout = tuple[tuple[str, float], ...]


def _in_place(images: Gaussian, captions: Gaussian) -> bool:
    """Whether the in-place feature path applies: both sides ellipsoidal and no autograd."""
    sides = (images.mean, images.logvar, captions.mean, captions.logvar)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in sides)  # type: ignore[union-attr]
    dim = images.dim
    return not grad and images.logvar.shape[1] == dim and captions.logvar.shape[1] == dim  # type: ignore[union-attr]


def _kl_side(mean: Tensor, logvar: Tensor, centre: Tensor, layout: Layout) -> tuple[Tensor, dict[str, Tensor]]:
    """One side's KL features written into one buffer (no autograd).

    With ``m = mean - centre``, ``v = e^logvar`` and ``w = 1/v`` the ``D``-wide blocks are
    ``a = v + m^2``, ``b = w``, ``c = m w`` and ``e = m``, laid out and scaled as ``layout``
    says; a key starting with ``#`` is one column left for the caller. Since
    ``2 KL(p || q) = a_p . b_q - 2 e_p . c_q + sum(m_q^2 w_q) + sum lv_q - sum lv_p - D``,
    an image block meets its partner caption block (``a``-``b``, ``e``-``c`` and the
    reverse) at the same position.

    Returns:
        ``feats [n, K]`` and the one-column views, plus ``"quad" = sum_d m^2 w`` and
        ``"logdet" = sum_d logvar`` (both ``[n]``).
    """
    n, dim = mean.shape
    widths = [1 if key.startswith("#") else dim for key, _ in layout]
    feats = mean.new_empty(n, sum(widths))
    views, start = {}, 0
    for (key, _), width in zip(layout, widths):
        views[key] = feats[:, start] if width == 1 else feats[:, start:start + width]
        start += width

    def block(key: str) -> Tensor:
        return views[key] if key in views else mean.new_empty(n, dim)

    m, w, c = block("e"), block("b"), block("c")
    torch.sub(mean, centre, out=m)
    torch.neg(logvar, out=w).exp_()
    torch.mul(m, w, out=c)
    if "a" in views:
        torch.exp(logvar, out=views["a"]).addcmul_(m, m)
    views["quad"], views["logdet"] = rowwise_dot(m, c), logvar.sum(1)
    for key, scale in layout:
        if not key.startswith("#") and scale != 1.0:
            views[key].mul_(scale)
    return feats, views


def _in_place_sides(images: Gaussian, captions: Gaussian, image_layout: Layout,
                    caption_layout: Layout) -> tuple[Tensor, dict[str, Tensor], Tensor, dict[str, Tensor]]:
    centre = ((images.mean.sum(0) + captions.mean.sum(0)) / max(1, images.num + captions.num)).detach()
    x, xv = _kl_side(images.mean, images.logvar, centre, image_layout)  # type: ignore[arg-type]
    y, yv = _kl_side(captions.mean, captions.logvar, centre, caption_layout)  # type: ignore[arg-type]
    return x, xv, y, yv


def _layouts(forward: bool, scale: float, tag: str = "") -> tuple[Layout, Layout]:
    """``scale * 2 KL`` of one direction as ``[x, row, 1] . [y, 1, col]``: the forward
    ``KL(image || caption)`` pairs the image's ``(a, e)`` with the caption's ``(b, c)``, the
    reverse pairs ``(b, c)`` with ``(a, e)``."""
    own, other = (("a", "e"), ("b", "c")) if forward else (("b", "c"), ("a", "e"))
    return (((own[0], scale), (own[1], -2.0 * scale), ("#row" + tag, 0.0), ("#one" + tag, 0.0)),
            ((other[0], 1.0), (other[1], 1.0), ("#one" + tag, 0.0), ("#col" + tag, 0.0)))


def _fill_constants(xv: dict[str, Tensor], yv: dict[str, Tensor], forward: bool, scale: float, dim: int,
                    tag: str = "") -> None:
    """The constant columns of ``scale * 2 KL(p || q)``: ``-sum lv_p`` on p's side and
    ``quad_q + sum lv_q - D`` on q's side (p is the image side when ``forward``)."""
    p, q = (xv, yv) if forward else (yv, xv)
    p_key, q_key = ("#row", "#col") if forward else ("#col", "#row")
    torch.mul(p["logdet"], -scale, out=p[p_key + tag])
    torch.add(q["quad"], q["logdet"], out=q[q_key + tag]).sub_(dim).mul_(scale)
    xv["#one" + tag].fill_(1.0)
    yv["#one" + tag].fill_(1.0)


def _generic(images: Gaussian, captions: Gaussian, forward: bool) -> Expansion:
    """``-KL`` of one direction from ``expansion_features`` (autograd, or a spherical side)."""
    m1, lv1, m2, lv2 = _sides(images, captions)
    dim = images.dim
    base = _kl_expansion(m1, lv1, m2, lv2, dim) if forward else _transpose(_kl_expansion(m2, lv2, m1, lv1, dim))
    return _scaled(base, -0.5)


# ----------------------------------------------------------------------------- scores
class _KLBase(ClosedForm):
    needs_image_variance = True
    needs_caption_variance = True

    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        """The product is already the score (min_kl overrides this)."""
        return parts[0]


class _OneWayKL(_KLBase):
    """``-KL`` of one direction: image -> caption when ``forward``, else caption -> image."""

    forward = True

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        if _in_place(images, captions):
            x, xv, y, yv = _in_place_sides(images, captions, *_layouts(self.forward, -0.5))
            _fill_constants(xv, yv, self.forward, -0.5, images.dim)
            return [Expansion(x, y, None, None)]
        return [_generic(images, captions, self.forward)]

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        p, q = (images, captions) if self.forward else (captions, images)
        return -kl_paired(p.mean, p.logvar, q.mean, q.logvar)  # type: ignore[arg-type]


@register
class KL(_OneWayKL):
    """``-KL(image || caption)``."""

    name = "kl"
    listing_rank = 3
    reference = "ProbVSE eq.4-5, GCIE eq.15"


@register
class KLReverse(_OneWayKL):
    """``-KL(caption || image)``."""

    name = "kl_reverse"
    listing_rank = 4
    reference = "ProbVSE §6.2"
    forward = False


@register
class MinKL(_KLBase):
    """``-min(KL(image || caption), KL(caption || image)) = max(-KL(p||q), -KL(q||p))``."""

    name = "min_kl"
    listing_rank = 5
    num_expansions = 2
    reference = "ProbVSE eq.6, GCIE eq.16"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        if _in_place(images, captions):  # one buffer per side; each direction is a column half
            (fx, fy), (rx, ry) = _layouts(True, -0.5, "f"), _layouts(False, -0.5, "r")
            x, xv, y, yv = _in_place_sides(images, captions, fx + rx, fy + ry)
            _fill_constants(xv, yv, True, -0.5, images.dim, "f")
            _fill_constants(xv, yv, False, -0.5, images.dim, "r")
            half = 2 * images.dim + 2
            return [Expansion(x[:, :half], y[:, :half], None, None), Expansion(x[:, half:], y[:, half:], None, None)]
        return [_generic(images, captions, True), _generic(images, captions, False)]

    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        if inplace:
            return torch.maximum(parts[0], parts[1], out=parts[0])
        return torch.maximum(parts[0], parts[1])

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        forward = kl_paired(images.mean, images.logvar, captions.mean, captions.logvar)  # type: ignore[arg-type]
        backward = kl_paired(captions.mean, captions.logvar, images.mean, images.logvar)  # type: ignore[arg-type]
        return -torch.minimum(forward, backward)


@register
class SymmetrisedKL(_KLBase):
    """``-0.5 (KL(p||q) + KL(q||p))``; the log-variance terms cancel, leaving
    ``-0.25 sum_d [ v1/v2 + v2/v1 + (m1-m2)^2 (1/v1 + 1/v2) - 2 ]``."""

    name = "js"
    listing_rank = 6
    reference = "PCME eq.B.2, CalibPE (symmetrised KL, called 'JS' in the papers)"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        dim = images.dim
        if _in_place(images, captions):  # both KL directions and the constants in ONE product
            x_layout = (("a", -0.25), ("e", 0.5), ("b", -0.25), ("c", 0.5), ("#row", 0.0), ("#one", 0.0))
            y_layout = (("b", 1.0), ("c", 1.0), ("a", 1.0), ("e", 1.0), ("#one", 0.0), ("#col", 0.0))
            x, xv, y, yv = _in_place_sides(images, captions, x_layout, y_layout)
            torch.sub(xv["quad"], dim, out=xv["#row"]).mul_(-0.25)  # the log-variances cancel
            torch.sub(yv["quad"], dim, out=yv["#col"]).mul_(-0.25)
            xv["#one"].fill_(1.0)
            yv["#one"].fill_(1.0)
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

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        forward = kl_paired(images.mean, images.logvar, captions.mean, captions.logvar)  # type: ignore[arg-type]
        backward = kl_paired(captions.mean, captions.logvar, images.mean, images.logvar)  # type: ignore[arg-type]
        return -0.5 * (forward + backward)
