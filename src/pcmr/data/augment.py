"""Augmentations of PCME (§4.1, App. C.2) and the controlled corruption series of PCME Fig. 7.

- :func:`erase_image`: Cutout / random erasing (DeVries & Taylor 2017) of one
  square covering ``ratio`` of the image (PCME: 0.2), filled with 0 = the mean
  colour after normalisation. On precomputed features the same ratio of regions
  (``[R, F]``) or of dimensions (``[F]``) is zeroed.
- :func:`drop_words`: random caption word dropping (PCME: probability 0.1).
- :func:`occlusion_series`, :func:`word_erasure_series`: the same item corrupted at
  fixed ratios, nested (what is erased at a ratio is erased at every larger one).

All functions take an explicit ``numpy.random.Generator`` (deterministic).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from pcmr.data.text import END_ID, START_ID, tokenize

__all__ = ["erase_image", "drop_words", "occlusion_series", "word_erasure_series"]


def _check_ratio(ratio: float, name: str = "ratio") -> None:
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"{name}={ratio} must lie in [0, 1]")


def _square_box(height: int, width: int, ratio: float, center: tuple[float, float]) -> tuple[int, int, int, int]:
    """A square of area ~ ``ratio * H * W`` centred near ``center`` (fractions), kept inside the image."""
    side = int(round(math.sqrt(ratio * height * width)))
    side_h, side_w = min(side, height), min(side, width)
    if side_h * side_w < ratio * height * width:  # the square does not fit: widen the other side
        side_w = min(width, int(math.ceil(ratio * height * width / max(side_h, 1))))
    top = int(round(center[0] * (height - side_h)))
    left = int(round(center[1] * (width - side_w)))
    return top, left, side_h, side_w


def erase_image(image: torch.Tensor, ratio: float, rng: np.random.Generator) -> torch.Tensor:
    """Erase ``ratio`` of one image (``[3, H, W]``) or feature item (``[R, F]`` / ``[F]``); returns a copy."""
    _check_ratio(ratio)
    out = image.clone()
    if ratio == 0.0:
        return out
    if out.ndim == 3:
        _, height, width = out.shape
        top, left, h, w = _square_box(height, width, ratio, (rng.random(), rng.random()))
        out[:, top: top + h, left: left + w] = 0.0
    else:
        count = out.shape[0]
        erased = rng.permutation(count)[: int(round(ratio * count))]
        out[torch.from_numpy(erased)] = 0.0
    return out


def drop_words(ids: Sequence[int], prob: float, rng: np.random.Generator) -> list[int]:
    """Drop each word of ``[<start>, w..., <end>]`` with probability ``prob``; at least one word stays."""
    _check_ratio(prob, "prob")
    ids = list(ids)
    start = 1 if ids and ids[0] == START_ID else 0
    end = len(ids) - 1 if len(ids) > start and ids[-1] == END_ID else len(ids)
    words = ids[start:end]
    if prob == 0.0 or len(words) <= 1:
        return ids
    keep = rng.random(len(words)) >= prob
    if not keep.any():
        keep[rng.integers(len(words))] = True
    return ids[:start] + [w for w, k in zip(words, keep) if k] + ids[end:]


def occlusion_series(images: torch.Tensor, ratios: Sequence[float], seed: int = 0) -> torch.Tensor:
    """Cutout at fixed ratios (PCME Fig. 7): ``[N, 3, H, W]`` -> ``[len(ratios), N, 3, H, W]``.

    Each image keeps one random centre across ratios, so larger ratios erase a
    superset of the pixels erased by smaller ones.
    """
    if images.ndim != 4:
        raise ValueError(f"images must be [N, 3, H, W], got shape {tuple(images.shape)}")
    for ratio in ratios:
        _check_ratio(ratio, "ratios")
    rng = np.random.default_rng(seed)
    centers = rng.random((images.shape[0], 2))
    height, width = images.shape[-2:]
    out = images.unsqueeze(0).repeat(len(ratios), 1, 1, 1, 1)
    for r, ratio in enumerate(ratios):
        for n in range(images.shape[0]):
            if ratio == 0.0:
                continue
            side = min(height, width, int(round(math.sqrt(ratio * height * width))))
            cy = int(round(centers[n, 0] * (height - 1)))
            cx = int(round(centers[n, 1] * (width - 1)))
            top = min(max(cy - side // 2, 0), height - side)
            left = min(max(cx - side // 2, 0), width - side)
            out[r, n, :, top: top + side, left: left + side] = 0.0
    return out


def word_erasure_series(texts: Sequence[str], ratios: Sequence[float], seed: int = 0) -> list[list[str]]:
    """Replace ``round(ratio * n_words)`` words of each text by ``<unk>`` (PCME Fig. 7, right).

    Returns ``[len(ratios)][len(texts)]`` texts (lower-cased tokens joined by spaces);
    erased positions are nested across ratios.
    """
    for ratio in ratios:
        _check_ratio(ratio, "ratios")
    rng = np.random.default_rng(seed)
    tokens = [tokenize(text) for text in texts]
    orders = [rng.permutation(len(words)) for words in tokens]
    series = []
    for ratio in ratios:
        row = []
        for words, order in zip(tokens, orders):
            erased = set(order[: int(round(ratio * len(words)))].tolist())
            row.append(" ".join("<unk>" if i in erased else w for i, w in enumerate(words)))
        series.append(row)
    return series
