"""PCME++'s closed-form sampled distance (CSD) loss: binary cross-entropy without sampling.

PCME++ (Chun, ICLR 2024; successor of PCME, not a seed). The expected squared
distance between a sample of each Gaussian has a closed form (``csd`` in ``docs/similarity.md``)::

    csd(i, c) = |m_i - m_c|^2 + sum_d (v_i,d + v_c,d)

and the loss is a binary cross-entropy on the logit ``-a * csd + b`` for every
pair of the batch (target 1 for relevant pairs, 0 otherwise), with a learnable
``a > 0`` and ``b``. The score matrix comes from ``pcmr.similarity.pairwise("csd")``
(which returns ``-csd``), so the logit is ``a * S + b``.

Pseudo-positives (PCME++ §3.3, the release's ``smoothness_alpha``): for each query, the
candidates whose logit is at least that of its true match also count as matches in a second
cross-entropy, weighted by ``lambda_pseudo`` (the release: 0.1) and computed in both directions
(:func:`pseudo_positive_targets`).

Label smoothing (the release's ``label_smoothing`` / ``mixup_smoothing``, 1e-4; not in the paper):
the targets of both cross-entropies are ``1 - eps`` for matches and ``eps`` for the others
(:func:`smoothed_targets`), as the release's training step builds its ``matched`` matrix
(``pcmepp/engine.py``: ``(1 - eps) * matched + eps * (1 - matched)``; its mixup targets use the same
values for the pairs it does not mix).

Parametrisation of ``a`` and ``b`` (``scale_parametrisation``): ``"softplus"`` (pcmr's default,
``a = softplus(a_raw)``) or ``"release"``: the release's two free parameters ``negative_scale`` and
``shift`` (``pcmepp/criterions/pcmepp.py``), the logit ``-negative_scale * csd + shift``, so an
optimiser step moves ``a`` itself (:class:`FreeMatchScale`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pcmr.gaussian import Gaussian
from pcmr.losses._inputs import check_choice, check_gaussian_pair, check_positive_number
from pcmr.losses.base import RetrievalLoss
from pcmr.losses.match_scale import MatchScale
from pcmr.losses.regularisers import kl_prior_loss
from pcmr.similarity import pairwise

__all__ = ["CsdConfig", "CsdLoss", "FreeMatchScale", "csd_logits", "csd_loss", "pseudo_positive_targets", "smoothed_targets"]


def csd_logits(image: Gaussian, caption: Gaussian, a: Tensor | float, b: Tensor | float) -> Tensor:
    """``-a * csd + b`` for every pair: ``[B_img, B_cap]``."""
    return a * pairwise("csd", image, caption) + b  # pairwise("csd") is -csd


def smoothed_targets(matches: Tensor, smoothing: float, dtype: torch.dtype) -> Tensor:
    """Binary cross-entropy targets ``1 - smoothing`` where ``matches`` (``[N, M]`` bool) holds and
    ``smoothing`` elsewhere (``smoothing = 0``: the 0 / 1 relation itself)."""
    return matches.to(dtype) * (1.0 - 2.0 * smoothing) + smoothing


def pseudo_positive_targets(logits: Tensor, positives: Tensor, smoothing: float = 0.0) -> Tensor:
    """Targets with PCME++'s pseudo-positives: ``positives`` plus, in each row that has a positive,
    every candidate whose logit is at least the row's true-match logit (``[N, M]`` float; with
    ``smoothing``, ``1 - smoothing`` for those and ``smoothing`` for the rest, as the release gives a
    pseudo-positive its row's smoothed positive target).

    The release takes the true match of a row as its one positive (the identity of a batch of
    pairs); with several positives in a row, pcmr takes the lowest-scored one, so a candidate is a
    pseudo-positive when it scores at least as well as some true match. A row without positives
    is unchanged. The selection carries no gradient.
    """
    with torch.no_grad():
        lowest = logits.masked_fill(~positives, float("inf")).min(dim=1, keepdim=True).values  # [N, 1]
        pseudo = (logits >= lowest) & positives.any(dim=1, keepdim=True)  # [N, M]
    return smoothed_targets(positives | pseudo, smoothing, logits.dtype)


def csd_loss(
    image: Gaussian,
    caption: Gaussian,
    positives: Tensor,
    a: Tensor | float,
    b: Tensor | float,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Binary cross-entropy on ``-a * csd + b`` over all ``B_img x B_cap`` pairs (PCME++).

    Args:
        image: ``B_img`` Gaussians (or points: their variance term is 0);
        caption: ``B_cap`` Gaussians.
        positives: ``[B_img, B_cap]`` bool relation (targets).
        a: scale ``> 0``; b: shift (floats or 0-dim tensors, differentiable).
        reduction: ``"mean"`` (PCME++) or ``"sum"`` over the pairs.
        label_smoothing: targets ``1 - eps`` / ``eps`` in place of 1 / 0 (:func:`smoothed_targets`).

    Returns:
        A 0-dim tensor; finite for logits of any size (``binary_cross_entropy_with_logits``).
    """

    check_gaussian_pair(image, caption, positives)
    check_choice("reduction", reduction, ("mean", "sum"))
    logits = csd_logits(image, caption, a, b)  # [B_img, B_cap]
    targets = smoothed_targets(positives, label_smoothing, logits.dtype)
    return F.binary_cross_entropy_with_logits(logits, targets, reduction=reduction)


#: how ``pcme_csd`` holds ``a`` and ``b``: ``softplus`` (:class:`MatchScale`) or ``release`` (:class:`FreeMatchScale`)
CSD_SCALE_PARAMETRISATIONS = ("softplus", "release")


class FreeMatchScale(nn.Module):
    """PCME++'s release's ``negative_scale`` (= ``a``) and ``shift`` (= ``b``): two free 0-dim parameters
    (``pcmepp/criterions/pcmepp.py``, ``ClosedFormSampledDistanceLoss``). Nothing keeps ``a`` positive, as
    in the release.

    Args:
        init_a: initial ``a`` (> 0); init_b: initial ``b``.
    """

    def __init__(self, init_a: float, init_b: float) -> None:
        super().__init__()
        check_positive_number("init_a", init_a)
        if isinstance(init_b, bool) or not isinstance(init_b, (int, float)) or not math.isfinite(init_b):
            raise ValueError(f"init_b must be a finite number, got {init_b!r}")
        self.negative_scale = nn.Parameter(torch.tensor(float(init_a)))
        self.shift = nn.Parameter(torch.tensor(float(init_b)))

    @property
    def a(self) -> Tensor:
        """``negative_scale`` (0-dim, differentiable)."""
        return self.negative_scale

    @property
    def b(self) -> Tensor:
        """``shift`` (0-dim, differentiable)."""
        return self.shift

    def as_floats(self) -> dict[str, float]:
        """``{"a": ..., "b": ...}`` as Python floats."""
        return {"a": float(self.a.detach()), "b": float(self.b.detach())}

    def extra_repr(self) -> str:
        values = self.as_floats()
        return f"a={values['a']:.4g}, b={values['b']:.4g} (release parametrisation)"


@dataclass
class CsdConfig:
    """Configuration of ``pcme_csd`` (defaults: PCME++'s released configuration).

    Attributes:
        init_a / init_b: initial scale and shift of the logit ``-a * csd + b`` (PCME++: 5 / 5).
        lambda_kl: weight of the KL prior, with the KL averaged over instances and
            dimensions as in PCME++'s release (its ``vib_beta``: 1e-4).
        lambda_pseudo: weight of the pseudo-positive cross-entropy (PCME++'s
            ``smoothness_alpha``: 0.1; 0 switches it off).
        label_smoothing: the targets are ``1 - label_smoothing`` for matches and
            ``label_smoothing`` otherwise (PCME++'s release: 1e-4; 0: plain 0 / 1 targets).
        scale_parametrisation: ``"softplus"`` (``a = softplus(a_raw)``) or ``"release"`` (the
            release's free ``negative_scale`` and ``shift``: :class:`FreeMatchScale`).
    """

    init_a: float = 5.0
    init_b: float = 5.0
    lambda_kl: float = 1e-4
    lambda_pseudo: float = 0.1
    label_smoothing: float = 1e-4
    scale_parametrisation: str = "softplus"

    def __post_init__(self) -> None:
        check_choice("scale_parametrisation", self.scale_parametrisation, CSD_SCALE_PARAMETRISATIONS)
        check_positive_number("init_a", self.init_a)
        check_positive_number("lambda_kl", self.lambda_kl, allow_zero=True)
        check_positive_number("lambda_pseudo", self.lambda_pseudo, allow_zero=True)
        check_positive_number("label_smoothing", self.label_smoothing, allow_zero=True)
        if self.label_smoothing >= 0.5:
            raise ValueError(f"label_smoothing={self.label_smoothing!r}: expected a number in [0, 0.5)")


class CsdLoss(RetrievalLoss):
    """PCME++'s objective with the scaling of its release::

        loss = csd_matching + lambda_kl * kl_prior

    * ``csd_matching``: the mean binary cross-entropy over all pairs, counted in both
      directions (image->text and text->image are equal; the release adds both), targets
      smoothed by ``label_smoothing``;
    * ``kl_prior``: KL to ``N(0, I)`` averaged over instances and dimensions, image
      term + caption term (point embeddings contribute 0);
    * ``pseudo_positive``: the mean cross-entropy with pseudo-positive targets, image->text plus
      text->image (only computed, and reported, when ``lambda_pseudo > 0``).

    Holds the learnable ``a`` (softplus-parametrised, or free: ``scale_parametrisation``) and ``b``; the optimiser must
    include this module's parameters. The ranking score is ``csd`` (a monotone
    logit of it gives the same ranking), so ``similarity_options()`` is ``{}``.
    """

    similarity_name = "csd"

    def __init__(self, config: CsdConfig) -> None:
        super().__init__(config)
        self.match_scale: MatchScale | FreeMatchScale = (
            FreeMatchScale(config.init_a, config.init_b) if config.scale_parametrisation == "release"
            else MatchScale(config.init_a, config.init_b))

    def forward(self, image: Gaussian, caption: Gaussian, positives: Tensor, **optional: object) -> dict[str, Tensor]:
        check_gaussian_pair(image, caption, positives)
        a, b = self.match_scale.a, self.match_scale.b
        logits = csd_logits(image, caption, a, b)  # [B_img, B_cap]
        smoothing = self.config.label_smoothing
        matching = 2.0 * F.binary_cross_entropy_with_logits(logits, smoothed_targets(positives, smoothing, logits.dtype))
        kl = matching.new_zeros(())
        for gaussian in (image, caption):
            if not gaussian.is_point:
                kl = kl + kl_prior_loss(gaussian, reduction="element_mean")
        total = matching + self.config.lambda_kl * kl
        terms = {"csd_matching": matching, "kl_prior": kl}
        if self.config.lambda_pseudo > 0:
            pseudo = F.binary_cross_entropy_with_logits(logits, pseudo_positive_targets(logits, positives, smoothing))
            transposed = logits.t()  # text -> image
            pseudo = pseudo + F.binary_cross_entropy_with_logits(
                transposed, pseudo_positive_targets(transposed, positives.t(), smoothing)
            )
            terms["pseudo_positive"] = pseudo
            total = total + self.config.lambda_pseudo * pseudo
        return {"loss": total, **terms, "a": a.detach(), "b": b.detach()}

