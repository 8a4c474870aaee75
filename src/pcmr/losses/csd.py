"""PCME++'s closed-form sampled distance (CSD) loss: binary cross-entropy without sampling.

PCME++ (Chun, ICLR 2024; successor of PCME, not a seed). The expected squared
distance between a sample of each Gaussian has a closed form (``csd`` in ``docs/similarity.md``)::

    csd(i, c) = |m_i - m_c|^2 + sum_d (v_i,d + v_c,d)

and the loss is a binary cross-entropy on the logit ``-a * csd + b`` for every
pair of the batch (target 1 for relevant pairs, 0 otherwise), with a learnable
``a > 0`` and ``b``. The score matrix comes from ``pcmr.similarity.pairwise("csd")``
(which returns ``-csd``), so the logit is ``a * S + b``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor
from torch.nn import functional as F

from pcmr.gaussian import Gaussian
from pcmr.losses._inputs import check_choice, check_gaussian_pair, check_positive_number
from pcmr.losses.base import RetrievalLoss
from pcmr.losses.match_scale import MatchScale
from pcmr.losses.regularisers import kl_prior_loss
from pcmr.similarity import pairwise

__all__ = ["CsdConfig", "CsdLoss", "csd_loss"]


def csd_loss(
    image: Gaussian,
    caption: Gaussian,
    positives: Tensor,
    a: Tensor | float,
    b: Tensor | float,
    reduction: str = "mean",
) -> Tensor:
    """Binary cross-entropy on ``-a * csd + b`` over all ``B_img x B_cap`` pairs (PCME++).

    Args:
        image: ``B_img`` Gaussians (or points: their variance term is 0);
        caption: ``B_cap`` Gaussians.
        positives: ``[B_img, B_cap]`` bool relation (targets).
        a: scale ``> 0``; b: shift (floats or 0-dim tensors, differentiable).
        reduction: ``"mean"`` (PCME++) or ``"sum"`` over the pairs.

    Returns:
        A 0-dim tensor; finite for logits of any size (``binary_cross_entropy_with_logits``).
    """

    check_gaussian_pair(image, caption, positives)
    check_choice("reduction", reduction, ("mean", "sum"))
    negative_csd = pairwise("csd", image, caption)  # [B_img, B_cap], = -csd
    logits = a * negative_csd + b  # [B_img, B_cap]
    return F.binary_cross_entropy_with_logits(logits, positives.to(logits.dtype), reduction=reduction)


@dataclass
class CsdConfig:
    """Configuration of ``pcme_csd`` (defaults: PCME++'s released configuration).

    Attributes:
        init_a / init_b: initial scale and shift of the logit ``-a * csd + b`` (PCME++: 5 / 5).
        lambda_kl: weight of the KL prior, with the KL averaged over instances and
            dimensions as in PCME++'s release (its ``vib_beta``: 1e-4).
    """

    init_a: float = 5.0
    init_b: float = 5.0
    lambda_kl: float = 1e-4

    def __post_init__(self) -> None:
        check_positive_number("init_a", self.init_a)
        check_positive_number("lambda_kl", self.lambda_kl, allow_zero=True)


class CsdLoss(RetrievalLoss):
    """PCME++'s objective with the scaling of its release::

        loss = csd_matching + lambda_kl * kl_prior

    * ``csd_matching``: the mean binary cross-entropy over all pairs, counted in both
      directions (image->text and text->image are equal; the release adds both);
    * ``kl_prior``: KL to ``N(0, I)`` averaged over instances and dimensions, image
      term + caption term (point embeddings contribute 0).

    Holds the learnable ``a`` (softplus-parametrised) and ``b``; the optimiser must
    include this module's parameters. The ranking score is ``csd`` (a monotone
    logit of it gives the same ranking), so ``similarity_options()`` is ``{}``.
    """

    similarity_name = "csd"

    def __init__(self, config: CsdConfig) -> None:
        super().__init__(config)
        self.match_scale = MatchScale(config.init_a, config.init_b)

    def forward(self, image: Gaussian, caption: Gaussian, positives: Tensor, **optional: object) -> dict[str, Tensor]:
        check_gaussian_pair(image, caption, positives)
        a, b = self.match_scale.a, self.match_scale.b
        matching = 2.0 * csd_loss(image, caption, positives, a, b, reduction="mean")
        kl = matching.new_zeros(())
        for gaussian in (image, caption):
            if not gaussian.is_point:
                kl = kl + kl_prior_loss(gaussian, reduction="element_mean")
        total = matching + self.config.lambda_kl * kl
        return {"loss": total, "csd_matching": matching, "kl_prior": kl, "a": a.detach(), "b": b.detach()}

