"""Has a model's uncertainty head learned anything? The trained-signal gate.

A claim about what a model's uncertainty means (PCME, Chun et al., CVPR 2021, Fig. 6 and 7: it grows
with multiplicity, occlusion and word erasure) says nothing when the uncertainty never left its
initial value: its ranking of items is then the ranking of the random initialisation plus noise. The
gate reads the per-item uncertainty in nats per dimension, ``u_i = mean_d logvar_id``, of a trained
model and of an untrained model of the same configuration on the same items, and asks two things:

1. **It moved past initialisation**: the spread over items ``std_i(u_i)`` is at least ``ratio`` (2)
   times the untrained model's spread.
2. **It is visible to the Monte-Carlo loss**: PCME's loss sees a variance only through ``J`` samples
   per item. The log of a variance estimated from ``J`` Gaussian samples has a standard error of about
   ``sqrt(2 / (J - 1))`` nats (delta method), and averaging over ``D`` dimensions divides it by
   ``sqrt(D)``; differences between items smaller than this floor cannot be told from sampling noise
   by the loss that trains the head, so the spread must reach ``sqrt(2 / ((J - 1) D))``.

A run whose head fails either test is judged "no signal" by the study instead of "holds" or
"reversed" (docs/study.md).
"""

from __future__ import annotations

import math

from torch import Tensor

from pcmr.gaussian import Gaussian

__all__ = ["per_item_logvar", "monte_carlo_floor", "uncertainty_signal", "SIGNAL_RATIO"]

#: the trained spread must be at least this many times the untrained spread
SIGNAL_RATIO = 2.0


def per_item_logvar(gaussian: Gaussian) -> Tensor:
    """``u [N]``: the mean log-variance of each item over its dimensions (nats per dimension)."""
    if gaussian.logvar is None:
        raise ValueError("per-item uncertainty needs variances; this embedding is a point (logvar is None)")
    return gaussian.logvar.detach().double().mean(dim=1)


def monte_carlo_floor(num_samples: int, dim: int) -> float:
    """``sqrt(2 / ((J - 1) D))``: the standard error, in nats per dimension, of a log-variance averaged
    over ``D`` dimensions and estimated from ``J`` samples; 0 for a loss that does not sample (``J`` <= 1
    means a closed form, which sees any difference)."""
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    return 0.0 if num_samples <= 1 else math.sqrt(2.0 / ((num_samples - 1) * dim))


def uncertainty_signal(trained: Gaussian, initial: Gaussian, *, num_samples: int,
                       ratio: float = SIGNAL_RATIO) -> dict[str, float | bool]:
    """The gate for one modality: ``trained`` and ``initial`` are the same items ``[N, D]`` encoded by the
    trained model and by an untrained one of the same configuration; ``num_samples``: the loss's
    Monte-Carlo samples per item (PCME's ``J``; 1 or 0 for closed-form losses).

    Returns ``{"spread", "spread_init", "floor", "moved", "signal"}``: the spreads ``std_i(u_i)``
    (nats per dimension), the Monte-Carlo floor, the spread of the per-item change from the untrained
    model, and whether both tests pass.
    """
    if trained.num != initial.num or trained.dim != initial.dim:
        raise ValueError(f"trained {trained.num}x{trained.dim} and initial {initial.num}x{initial.dim} "
                         "embeddings must cover the same items")
    if trained.num < 2:
        raise ValueError("the spread over items needs at least 2 items")
    u, u0 = per_item_logvar(trained), per_item_logvar(initial)
    spread, spread_init = float(u.std()), float(u0.std())
    floor = monte_carlo_floor(num_samples, trained.dim)
    signal = spread >= ratio * spread_init and spread >= floor and spread > 0
    return {"spread": spread, "spread_init": spread_init, "floor": floor, "moved": float((u - u0).std()),
            "signal": bool(signal)}
