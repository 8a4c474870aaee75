"""How many seeds each claim needs, fixed in the study file before its runs.

Each claim names the smallest difference that matters to a user (its ``min_effect``; for a
non-inferiority or equivalence claim, its ``margin``) and, under ``power``, the standard deviation of
the per-seed differences a pilot showed (``pilot_sd``) and the seeds these need (``seeds``). The
seeds follow from the one-sided paired t-test the claim's verdict is (:func:`pcmr.study.stats.required_seeds`)
at the study's power, at the one-sided level ``(1 - level) / 2`` of its intervals, divided by the
size of the primary family for a primary claim (Holm's first step, the strictest):

    n >= ((t_{1-alpha, n-1} + t_{q, n-1}) sd / effect)^2,   q = power (superiority, non-inferiority),
                                                           q = (1 + power) / 2 (equivalence).

:func:`check_power` refuses a study file whose stated seeds do not follow from its stated sd and
effect, that needs more seeds than ``max_seeds``, or that runs a claim's recipes with fewer seeds than
the claim needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from pcmr.study.claims import Claim
from pcmr.study.design import StudyDesign
from pcmr.study.stats import one_sided_alpha, required_seeds

__all__ = ["claim_alpha", "check_power", "claim_seeds"]


def claim_alpha(claim: Claim, level: float, primary: Sequence[str] | None) -> float:
    """The one-sided level a claim is sized at: ``(1 - level) / 2``, divided by the primary family's size
    for a primary claim."""
    alpha = one_sided_alpha(level)
    return alpha / len(primary) if primary and claim.id in primary else alpha


def claim_seeds(claim: Claim, level: float, design: StudyDesign) -> int:
    """The seeds ``claim`` needs from its ``pilot_sd`` and its minimum effect (else its margin) at the
    design's power; ``max_seeds + 1`` where more than the study affords."""
    if design.power is None:
        raise ValueError("the study has no power section")
    effect = claim.min_effect if claim.min_effect > 0 else claim.margin
    return required_seeds(claim.pilot_sd, effect, claim.expect, claim_alpha(claim, level, design.primary),
                          design.power.power, design.power.max_seeds)


def check_power(claims: Sequence[Claim], level: float, design: StudyDesign, recipe_seeds: dict[str, int],
                where: str) -> None:
    """With a ``power`` section: every claim states ``power: {pilot_sd, seeds}``, ``seeds`` is what
    :func:`claim_seeds` computes, at most ``max_seeds``, and every recipe the claim reads runs at least
    that many seeds (``recipe_seeds``: label -> seeds). A ValueError naming the claim otherwise."""
    if design.power is None:
        return
    for claim in claims:
        here = f"{where}: claims.{claim.id}.power"
        if claim.seeds_needed == 0:
            raise ValueError(f"{here}: the study sizes every claim; expected power: {{pilot_sd: SD, seeds: N}}")
        needed = claim_seeds(claim, level, design)
        if needed > design.power.max_seeds:
            raise ValueError(f"{here}: sd {claim.pilot_sd:g} at effect {claim.min_effect or claim.margin:g} needs more "
                             f"than max_seeds {design.power.max_seeds}; remove the claim with that reason")
        if claim.seeds_needed != needed:
            raise ValueError(f"{here}.seeds: sd {claim.pilot_sd:g} at effect {claim.min_effect or claim.margin:g} "
                             f"and power {design.power.power:g} needs {needed} seeds, the file says "
                             f"{claim.seeds_needed}")
        for side in (claim.a, claim.b):
            if side is None or side.recipe is None:
                continue
            if recipe_seeds.get(side.recipe, 0) < needed:
                raise ValueError(f"{here}: recipe {side.recipe!r} runs {recipe_seeds.get(side.recipe, 0)} seeds, "
                                 f"the claim needs {needed}")
