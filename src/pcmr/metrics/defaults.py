"""Defaults of the evaluation protocols, defined once for the library, the trainer and the command line."""

from __future__ import annotations

__all__ = ["COCO_NUM_FOLDS", "DEFAULT_KS", "HUBNESS_KS"]

#: cut-offs K of R@K (and of rsum, the sum of R@K over both directions)
DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
#: k of the k-occurrence counts N_k whose skewness enters hs-sum (HAL/RGM §3.4)
HUBNESS_KS: tuple[int, ...] = (1, 5, 10)
#: folds of the COCO 1K protocol on the 5K test images (1000 images each)
COCO_NUM_FOLDS: int = 5
