"""Training objectives of the probabilistic cross-modal retrieval papers (formulas: ``docs/losses.md``).

Pure functions on tensors (``triplet_loss``, ``hal_weights``, ``soft_contrastive_loss``,
...) and small ``nn.Module`` losses built by name::

    from pcmr.losses import create_loss, list_losses
    loss_fn = create_loss("triplet_semihard", similarity="kl", margin=0.2)
    terms = loss_fn(image=image_gaussians, caption=caption_gaussians, positives=relevance)
    terms["loss"].backward()

See ``docs/losses.md`` for each loss's formula, paper, defaults and name.
"""

from __future__ import annotations

from pcmr.losses.base import RetrievalLoss, ScoreConfig, ScoredLoss
from pcmr.losses.calibrated import (
    CalibratedConfig,
    CalibratedTripletLoss,
    calibrated_scores,
    calibrated_triplet_loss,
    gaussian_from_views,
)
from pcmr.losses.csd import CsdConfig, CsdLoss, csd_loss
from pcmr.losses.hubness import (
    HalConfig,
    HalLoss,
    HalReleasedConfig,
    HalReleasedLoss,
    hal_loss,
    hal_released_loss,
    hal_weights,
)
from pcmr.losses.match_scale import MatchScale
from pcmr.losses.pvse import PvseConfig, PvseLoss, diversity_loss, mil_triplet_loss, mmd_loss
from pcmr.losses.registry import LOSSES, LossEntry, create_loss, get_loss_entry, list_losses
from pcmr.losses.regularisers import kl_prior_loss, uniformity_loss
from pcmr.losses.soft_contrastive import (
    PcmeConfig,
    PcmeLoss,
    draw_samples,
    match_log_probabilities,
    soft_contrastive_loss,
)
from pcmr.losses.triplet import TripletConfig, TripletLoss, triplet_loss, triplet_terms

__all__ = [
    "CalibratedConfig",
    "CalibratedTripletLoss",
    "CsdConfig",
    "CsdLoss",
    "HalConfig",
    "HalLoss",
    "HalReleasedConfig",
    "HalReleasedLoss",
    "LOSSES",
    "LossEntry",
    "MatchScale",
    "PcmeConfig",
    "PcmeLoss",
    "PvseConfig",
    "PvseLoss",
    "RetrievalLoss",
    "ScoreConfig",
    "ScoredLoss",
    "TripletConfig",
    "TripletLoss",
    "calibrated_scores",
    "calibrated_triplet_loss",
    "create_loss",
    "csd_loss",
    "diversity_loss",
    "draw_samples",
    "gaussian_from_views",
    "get_loss_entry",
    "hal_loss",
    "hal_released_loss",
    "hal_weights",
    "kl_prior_loss",
    "list_losses",
    "match_log_probabilities",
    "mil_triplet_loss",
    "mmd_loss",
    "soft_contrastive_loss",
    "triplet_loss",
    "triplet_terms",
    "uniformity_loss",
]
