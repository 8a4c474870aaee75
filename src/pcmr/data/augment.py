"""Augmentations of PCME (§4.1, App. C.2) and the controlled corruption series of PCME Fig. 7.

- :func:`erase_image`: Cutout (DeVries & Taylor 2017) of one square covering exactly
  ``ratio`` of the image, filled with 0 = the mean colour after normalisation. On
  precomputed features the same ratio of regions (``[R, F]``) or of dimensions
  (``[F]``) is zeroed.
- :func:`random_erase`: random erasing as the PCME release applies it (Zhong et al.
  2020): with probability ``prob`` one rectangle whose area is drawn uniformly in
  ``[min_area, max_area]`` of the image and whose aspect ratio is log-uniform in
  ``[min_aspect, 1 / min_aspect]`` (release: 0.2, 2-33 %, 0.3), filled with 0.
- :func:`drop_words`: random caption word dropping, either the PCME release's rule
  (``"unk_then_delete"``: each word becomes ``<unk>`` with probability ``prob``, then
  ``floor(prob * L)`` words are deleted) or independent deletion (``"delete"``).
- :func:`occlusion_series`, :func:`word_erasure_series`: the same item corrupted at
  fixed ratios, nested (what is erased at a ratio is erased at every larger one).

All functions take an explicit ``numpy.random.Generator`` (deterministic).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from pcmr.data.text import END_ID, START_ID, UNK_ID, tokenize

__all__ = ["erase_image", "random_erase", "drop_words", "WORD_DROPOUT_RULES", "occlusion_series", "word_erasure_series"]


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


#: word dropping rules of :func:`drop_words`
WORD_DROPOUT_RULES = ("delete", "unk_then_delete")

#: attempts at drawing a rectangle that fits the image (the release's random erasing gives up after 10)
_ERASE_ATTEMPTS = 10


def random_erase(image: torch.Tensor, rng: np.random.Generator, *, prob: float, min_area: float,
                 max_area: float, min_aspect: float = 0.3) -> torch.Tensor:
    """Random erasing as in the PCME release; returns a copy of ``image``.

    Images ``[3, H, W]``: with probability ``prob``, up to 10 attempts draw a target area
    ``A ~ U(min_area, max_area) * H * W`` and an aspect ratio ``r`` log-uniform in
    ``[min_aspect, 1 / min_aspect]``; the rectangle ``h = round(sqrt(A r))``, ``w = round(sqrt(A / r))``
    is kept when ``h < H`` and ``w < W``, placed uniformly and filled with 0 (the mean colour after
    normalisation); when no attempt fits, nothing is erased. Precomputed features (``[R, F]`` /
    ``[F]``): with probability ``prob``, ``round(f * R)`` rows (or dimensions) are zeroed, with
    ``f ~ U(min_area, max_area)`` (no aspect ratio).
    """
    _check_ratio(prob, "prob")
    _check_ratio(min_area, "min_area")
    _check_ratio(max_area, "max_area")
    if min_area > max_area:
        raise ValueError(f"min_area={min_area} must not exceed max_area={max_area}")
    if not 0.0 < min_aspect <= 1.0:
        raise ValueError(f"min_aspect={min_aspect} must lie in (0, 1] (the aspect ratio is drawn in "
                         f"[min_aspect, 1 / min_aspect])")
    out = image.clone()
    if prob == 0.0 or rng.random() >= prob:
        return out
    if out.ndim != 3:
        count = out.shape[0]
        erased = rng.permutation(count)[: int(round(rng.uniform(min_area, max_area) * count))]
        out[torch.from_numpy(erased)] = 0.0
        return out
    _, height, width = out.shape
    log_aspect = (math.log(min_aspect), -math.log(min_aspect))
    for _ in range(_ERASE_ATTEMPTS):
        target_area = rng.uniform(min_area, max_area) * height * width
        aspect = math.exp(rng.uniform(*log_aspect))
        h = int(round(math.sqrt(target_area * aspect)))
        w = int(round(math.sqrt(target_area / aspect)))
        if w < width and h < height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            out[:, top: top + h, left: left + w] = 0.0
            break
    return out


def drop_words(ids: Sequence[int], prob: float, rng: np.random.Generator, rule: str = "delete") -> list[int]:
    """Word dropping of ``[<start>, w..., <end>]`` (the special tokens stay); at least one word stays.

    ``rule="delete"``: each word is deleted independently with probability ``prob``.
    ``rule="unk_then_delete"`` (the PCME release's caption dropping): each word is replaced by
    ``<unk>`` with probability ``prob``, then ``floor(prob * L)`` of the ``L`` words, chosen
    uniformly without replacement, are deleted (at most ``L - 1``).
    """
    _check_ratio(prob, "prob")
    if rule not in WORD_DROPOUT_RULES:
        raise ValueError(f"word dropout rule {rule!r} is not one of {WORD_DROPOUT_RULES}")
    ids = list(ids)
    start = 1 if ids and ids[0] == START_ID else 0
    end = len(ids) - 1 if len(ids) > start and ids[-1] == END_ID else len(ids)
    words = ids[start:end]
    if prob == 0.0 or not words:
        return ids
    if rule == "unk_then_delete":
        replaced = [UNK_ID if unk else w for w, unk in zip(words, rng.random(len(words)) < prob)]
        deleted = set(rng.choice(len(words), size=min(int(len(words) * prob), len(words) - 1),
                                 replace=False).tolist())
        return ids[:start] + [w for i, w in enumerate(replaced) if i not in deleted] + ids[end:]
    if len(words) <= 1:
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
