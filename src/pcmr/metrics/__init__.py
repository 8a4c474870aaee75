"""Retrieval evaluation: R@K, ranks, R-Precision, MAP@R, PMRP, CxC/ECCV, COCO 1K/5K, hubness.

Exact, vectorised over blocks of queries, memory-bounded, on the device of the inputs.
Definitions: SPEC §6. Tie rule: among equal scores the lower gallery index ranks first.
"""

from __future__ import annotations

from pcmr.metrics.topk import recall_at_k_from_topk

__all__ = ["recall_at_k_from_topk"]
