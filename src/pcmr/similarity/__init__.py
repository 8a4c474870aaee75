"""Pairwise scores between image and caption Gaussian embeddings (formulas and papers: ``docs/similarity.md``).

Every score is registered by name; higher is always more similar::

    from pcmr.similarity import pairwise, paired, list_similarities
    scores = pairwise("kl", images, captions)          # [N_img, N_cap]
    diag = paired("match_prob", images, captions, a=30.0, b=30.0)  # [N]

See ``docs/similarity.md`` for formulas, papers and options.
"""

from __future__ import annotations

from pcmr.similarity import (  # noqa: F401  (registration)
    kl,
    mahalanobis,
    point,
    point_set,
    product_kernels,
    sampled,
    wasserstein,
)
from pcmr.similarity._primitives import safe_sqrt, sampled_pair_distances
from pcmr.similarity._registry import (
    SIMILARITIES,
    AnnVectors,
    Similarity,
    check_similarity_option_values,
    get_similarity,
    list_similarities,
    paired,
    pairwise,
)

__all__ = [
    "SIMILARITIES",
    "AnnVectors",
    "Similarity",
    "check_similarity_option_values",
    "get_similarity",
    "list_similarities",
    "paired",
    "pairwise",
    "safe_sqrt",
    "sampled_pair_distances",
]
