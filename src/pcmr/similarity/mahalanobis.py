"""Mahalanobis scores between a point and a Gaussian (GCIE §3, eq.6 and eq.10).

- ``mahalanobis_caption`` (GCE, GCIE eq.6): the image is a point ``x_i`` (its mean; an
  image variance, if any, is ignored) and the caption a Gaussian:
  ``-sqrt((x_i - m_c)^T Sigma_c^{-1} (x_i - m_c))``.
- ``mahalanobis_image`` (GIE, GCIE eq.10): the caption is a point ``x_c``:
  ``-sqrt((x_c - m_i)^T Sigma_i^{-1} (x_c - m_i))``.

Pairwise forms are matrix products: ``x^2 . (1/v) - 2 x . (m/v) + sum_d m^2/v``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.similarity._closed_form import ClosedForm, Expansion, centred_means
from pcmr.similarity._primitives import expansion_features, safe_sqrt, safe_sqrt_
from pcmr.similarity._registry import register


def _mahalanobis_sq_paired(point: Tensor, mean: Tensor, logvar: Tensor) -> Tensor:
    return ((point - mean).square() * (-logvar).exp()).sum(1)


class _Mahalanobis(ClosedForm):
    def finalize(self, parts: list[Tensor], inplace: bool) -> Tensor:
        return safe_sqrt_(parts[0]).neg_() if inplace else -safe_sqrt(parts[0])


@register
class MahalanobisCaption(_Mahalanobis):
    """Image point against caption Gaussian (GCE)."""

    name = "mahalanobis_caption"
    listing_rank = 10
    needs_caption_variance = True
    reference = "GCIE eq.6 (GCE)"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        dim = images.dim
        x, m = centred_means(images, captions)
        w = (-captions.logvar).exp()  # type: ignore[operator]  # [N_cap, D] | [N_cap, 1]
        fx, fy = expansion_features([(x.square(), w), (x, -2.0 * m * w)], dim)
        return [Expansion(fx, fy, None, (m.square() * w).sum(1))]

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        return -safe_sqrt(_mahalanobis_sq_paired(images.mean, captions.mean, captions.logvar))  # type: ignore[arg-type]


@register
class MahalanobisImage(_Mahalanobis):
    """Caption point against image Gaussian (GIE)."""

    name = "mahalanobis_image"
    listing_rank = 11
    needs_image_variance = True
    reference = "GCIE eq.10 (GIE)"

    def expansions(self, images: Gaussian, captions: Gaussian) -> list[Expansion]:
        dim = images.dim
        m, x = centred_means(images, captions)
        w = (-images.logvar).exp()  # type: ignore[operator]  # [N_img, D] | [N_img, 1]
        fx, fy = expansion_features([(w, x.square()), (-2.0 * m * w, x)], dim)
        return [Expansion(fx, fy, (m.square() * w).sum(1), None)]

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        return -safe_sqrt(_mahalanobis_sq_paired(captions.mean, images.mean, images.logvar))  # type: ignore[arg-type]
