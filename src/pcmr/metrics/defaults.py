"""Defaults of the evaluation protocols, defined once for the library, the trainer and the command line."""

from __future__ import annotations

__all__ = ["COCO_NUM_FOLDS", "DEFAULT_KS", "DEFAULT_RERANKERS", "DEFAULT_SELECT_ON", "DEFAULT_SIMILARITIES", "HUBNESS_KS"]

#: cut-offs K of R@K (and of rsum, the sum of R@K over both directions)
DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
#: k of the k-occurrence counts N_k whose skewness enters hs-sum (HAL/RGM §3.4)
HUBNESS_KS: tuple[int, ...] = (1, 5, 10)
#: folds of the COCO 1K protocol on the 5K test images (1000 images each)
COCO_NUM_FOLDS: int = 5
#: the similarities and re-rankers an evaluation scores when none are named (``pcmr evaluate``,
#: ``RetrievalEvaluator``, a run config's ``eval`` section)
DEFAULT_SIMILARITIES: tuple[str, ...] = ("cosine", "wasserstein", "match_prob", "elk", "kl")
DEFAULT_RERANKERS: tuple[str, ...] = ("nns", "is", "csls", "csls+rgm")
#: the validation metric of model selection (``train.select_on``): rsum, the driver's total row
DEFAULT_SELECT_ON = "rsum"
