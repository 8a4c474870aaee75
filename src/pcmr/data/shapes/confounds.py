"""How far the shapes benchmark ties multiplicity to other variables (caption length, object count).

A caption's *multiplicity* is the number of images it is relevant to; an image's, the number of
captions relevant to it. When multiplicity follows caption length (or an image's object count),
any effect of length reads as an effect of ambiguity: PCME's claim that uncertainty grows with
multiplicity (Chun et al., CVPR 2021, Fig. 6) can only be judged on data where it does not.
"""

from __future__ import annotations

import numpy as np

from pcmr.data.split import RetrievalSplit

__all__ = ["spearman", "multiplicity_confounds"]


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``values [n]``, ties sharing the mean of their ranks."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    start = 0
    while start < len(values):
        stop = start
        while stop + 1 < len(values) and sorted_values[stop + 1] == sorted_values[start]:
            stop += 1
        ranks[order[start: stop + 1]] = 0.5 * (start + stop) + 1.0
        start = stop + 1
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of ``x [n]`` and ``y [n]`` (Pearson's r of average ranks); NaN if either is constant."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"spearman needs two 1-D arrays of one length, got shapes {x.shape} and {y.shape}")
    rx, ry = _average_ranks(x), _average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float("nan") if denominator == 0 else float((rx * ry).sum() / denominator)


def multiplicity_confounds(split: RetrievalSplit) -> dict[str, float]:
    """Correlations of multiplicity with length and object count on a shapes split.

    Returns ``rho_length_caption``: Spearman's rho between a caption's word count and its number of
    relevant images; ``rho_objects_image``: between an image's object count and its number of relevant
    captions (NaN when every image has the same count); plus the means and ranges they come from.
    """
    lengths = np.array([len(text.split()) for text in split.caption_texts])
    caption_multiplicity = np.array([len(images) for images in split.caption_to_images])
    image_multiplicity = np.array([len(captions) for captions in split.image_to_captions])
    objects = np.asarray(split.info["scenes"].num_objects)
    return {
        "rho_length_caption": spearman(lengths, caption_multiplicity),
        "rho_objects_image": spearman(objects, image_multiplicity),
        "caption_words_min": float(lengths.min()), "caption_words_max": float(lengths.max()),
        "caption_multiplicity_mean": float(caption_multiplicity.mean()),
        "caption_multiplicity_max": float(caption_multiplicity.max()),
        "image_multiplicity_mean": float(image_multiplicity.mean()),
    }
