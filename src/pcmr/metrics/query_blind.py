"""R-Precision of the query-blind ranking: what ranking by how generic an item is scores.

Every query gets the same gallery list, the gallery items with the most relevant queries first
(captions fitting the most images, for image queries; images fitting the most captions, for caption
queries), ties broken uniformly at random. A model whose R-Precision is near this value ranks by
genericity, not by what the query shows; its *skill* ``(R-P - QB) / (100 - QB)`` is the share of
the way from this baseline to a perfect ranking that it covers.

R-Precision is that of Musgrave et al. (ECCV 2020, "A metric learning reality check"), used by PCME
(Chun et al., CVPR 2021, Sec. 4.1.1): the share of relevant items among a query's first ``R``, ``R``
its number of relevant items. The random tie-break is not drawn: its expectation is exact (below).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["query_blind_r_precision", "retrieval_skill"]


def query_blind_r_precision(relevant: Tensor) -> float:
    """Expected R-Precision (percent) of the query-blind ranking of ``relevant``.

    Args:
        relevant: bool ``[Q, G]``: ``relevant[q, g]`` when gallery item ``g`` is relevant to query
            ``q`` (for image->text, the ``[N_img, N_cap]`` relevance; for text->image its transpose).

    Every query ranks the gallery by ``m[g] = relevant[:, g].sum()``, ties in random order. For a
    query with ``R`` relevant items, let ``A`` gallery items score above the ``R``-th score ``t``
    (``a`` of them relevant) and ``T`` score exactly ``t`` (``r`` of them relevant): the ``R - A``
    places left go to tied items drawn uniformly, so the expected number of relevant items in the
    first ``R`` is ``a + (R - A) r / T``. Queries without a relevant item are left out (as
    :func:`pcmr.metrics.ranking.retrieval_metrics` does). Returns NaN when no query has one.
    """
    if relevant.dim() != 2:
        raise ValueError(f"relevant must be a bool matrix [Q, G], got shape {tuple(relevant.shape)}")
    rel = relevant.to(torch.bool).cpu()
    multiplicity = rel.sum(dim=0)  # [G]
    order = torch.argsort(multiplicity, descending=True, stable=True)
    ranked_scores = multiplicity[order]  # [G], non-increasing
    ranked_rel = rel[:, order].to(torch.float64)  # [Q, G]
    counts = rel.sum(dim=1)  # R per query
    valid = counts > 0
    if not bool(valid.any()):
        return float("nan")
    total = 0.0
    for q in torch.nonzero(valid).flatten().tolist():
        r_count = int(counts[q])
        threshold = ranked_scores[r_count - 1]
        above = ranked_scores > threshold
        tied = ranked_scores == threshold
        num_above = int(above.sum())
        hits = float(ranked_rel[q][above].sum()) + (r_count - num_above) * float(ranked_rel[q][tied].mean())
        total += hits / r_count
    return 100.0 * total / int(valid.sum())


def retrieval_skill(r_precision: float, query_blind: float) -> float:
    """``(R-P - QB) / (100 - QB)``: the share of the way from the query-blind ranking's R-Precision
    ``QB`` to 100 that a model's R-Precision covers (both in percent; 1 = perfect, 0 = no better than
    ranking by genericity, negative = worse). NaN when ``QB`` is 100 (nothing left to learn)."""
    return float("nan") if query_blind >= 100.0 else (r_precision - query_blind) / (100.0 - query_blind)
