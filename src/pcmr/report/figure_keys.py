"""The names of an evaluation's figures and the keys of its abstention (risk-coverage) series, defined once.

The evaluation layer stores figure data under these names (``Report.figures``), the drawing functions of
:mod:`pcmr.report.plots` are registered under them, and the evaluation schema
(:mod:`pcmr.evaluation.columns`) names its AURC columns ``{direction}_{key}`` from :func:`aurc_key` and
:data:`RANDOM_WITHIN`. They live in the report layer because the plots, below the evaluation, read them.
"""

from __future__ import annotations

__all__ = ["EMBEDDINGS_2D", "EMBEDDINGS_PCA", "K_OCCURRENCE", "RANDOM_WITHIN", "RISK_COVERAGE", "UNCERTAINTY_MULTIPLICITY",
           "UNCERTAINTY_R1", "UNCERTAINTY_VS_CORRUPTION", "aurc_key"]

#: R@1 per uncertainty decile of the queries (PCME Fig. 6)
UNCERTAINTY_R1 = "uncertainty_r1"
#: k-occurrence histograms (hubness)
K_OCCURRENCE = "k_occurrence"
#: mean uncertainty against the occlusion / erasure ratio (PCME Fig. 5)
UNCERTAINTY_VS_CORRUPTION = "uncertainty_vs_corruption"
#: 2-D Gaussians with their 1-std ellipses
EMBEDDINGS_2D = "embeddings_2d"
#: uncertainty against the number of relevant items of a query
UNCERTAINTY_MULTIPLICITY = "uncertainty_multiplicity"
#: risk-coverage curves (abstention on uncertain queries)
RISK_COVERAGE = "risk_coverage"
#: the Gaussians on the means' two principal axes
EMBEDDINGS_PCA = "embeddings_pca"

#: the AURC of a random ranking within multiplicity strata (the chance level of ``aurc_key(within=True)``)
RANDOM_WITHIN = "random_within"


def aurc_key(ranked_by: str | None = None, *, within: bool = False) -> str:
    """The key of an area under a risk-coverage curve in one direction's abstention series: queries ranked
    by their uncertainty (``ranked_by`` None), by the top-1 margin (``"margin"``) or by the true
    multiplicity (``"multiplicity"``); ``within``: averaged within multiplicity strata."""
    key = f"aurc_{ranked_by}" if ranked_by else "aurc"
    return f"{key}_within" if within else key
