"""The training augmentations of :mod:`pcmr.data.augment`, computed for a whole batch at once.

Each function takes the draws of its items (rows of :func:`pcmr.data.draws.uniforms`, one row per item,
the slot layout below) and returns what the per-item definition gives for the same draws:

- Cutout of pixel images is a box per image, ``(top, left, h, w)`` int64 ``[B, 4]`` (``h = w = 0``:
  nothing erased), drawn on the CPU; :func:`finish_images` then normalises a uint8 batch into the
  channels-last layout the CNN reads and zeroes the boxes, on whatever device the batch lives on.
  :func:`random_erase_boxes` (the PCME release's random erasing, :func:`pcmr.data.augment.random_erase`):
  slot 0 decides (``u < prob``), attempt ``a`` of 10 reads slots ``1 + 4a`` (area
  ``(min + (max - min) u) * H * W``), ``2 + 4a`` (aspect ``exp(log r0 + (-2 log r0) u)``), and, for the
  first attempt whose ``h = round(sqrt(A r)) < H`` and ``w = round(sqrt(A / r)) < W``, ``3 + 4a``
  (``top = floor((H - h + 1) u)``) and ``4 + 4a`` (``left``). :func:`square_erase_boxes` (Cutout of a
  fixed ratio, :func:`pcmr.data.augment.erase_image`): slot 0 decides, slots 1 and 2 place the square
  (``top = round((H - h) u)``).
- Cutout of precomputed features, :func:`feature_erase_mask`: slot 0 decides, slot 1 draws the fraction
  (a range), and the ``n`` rows (or dimensions) with the smallest draws in slots ``2 ...`` are zeroed.
- Word dropout, :func:`drop_words_batch`, on padded ``[<start>, w..., <end>]`` rows: word ``j`` reads
  slots ``2j`` and ``2j + 1``. ``"unk_then_delete"``: word ``j`` becomes ``<unk>`` when
  ``u_{2j} < p``, then the ``floor(p n)`` words (at most ``n - 1``) with the smallest ``u_{2j+1}`` are
  deleted. ``"delete"``: word ``j`` stays when ``u_{2j} >= p``; when none would, word
  ``floor(n u_1)`` stays; a caption of one word is kept whole.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pcmr.data.augment import _square_box
from pcmr.data.images import IMAGE_MEAN, IMAGE_STD
from pcmr.data.text import UNK_ID

__all__ = ["RANDOM_ERASE_SLOTS", "SQUARE_ERASE_SLOTS", "random_erase_boxes", "square_erase_boxes",
           "feature_erase_mask", "word_slots", "drop_words_batch", "finish_images", "normalise_channels_last",
           "erase_box_mask"]

#: attempts at a rectangle that fits (the release's random erasing gives up after 10)
ERASE_ATTEMPTS = 10
#: draws one image's random erasing reads
RANDOM_ERASE_SLOTS = 1 + 4 * ERASE_ATTEMPTS
#: draws one image's fixed-ratio Cutout reads
SQUARE_ERASE_SLOTS = 3


def random_erase_boxes(draws: np.ndarray, height: int, width: int, *, prob: float, min_area: float,
                       max_area: float, min_aspect: float) -> np.ndarray:
    """Random-erasing boxes ``(top, left, h, w)`` int64 ``[B, 4]`` from draws ``[B, RANDOM_ERASE_SLOTS]``."""
    draws = np.asarray(draws, dtype=np.float64)
    count = draws.shape[0]
    low = math.log(min_aspect)
    area = (min_area + (max_area - min_area) * draws[:, 1::4][:, :ERASE_ATTEMPTS]) * height * width  # [B, 10]
    aspect = np.exp(low + (-low - low) * draws[:, 2::4][:, :ERASE_ATTEMPTS])
    h = np.rint(np.sqrt(area * aspect)).astype(np.int64)
    w = np.rint(np.sqrt(area / aspect)).astype(np.int64)
    fits = (w < width) & (h < height)
    first = np.argmax(fits, axis=1)  # the first attempt that fits
    rows = np.arange(count)
    h, w = h[rows, first], w[rows, first]
    top = np.floor(draws[rows, 3 + 4 * first] * (height - h + 1)).astype(np.int64)
    left = np.floor(draws[rows, 4 + 4 * first] * (width - w + 1)).astype(np.int64)
    erased = (draws[:, 0] < prob) & fits.any(axis=1)
    return np.where(erased[:, None], np.stack([top, left, h, w], axis=1), 0)


def square_erase_boxes(draws: np.ndarray, height: int, width: int, *, ratio: float, prob: float) -> np.ndarray:
    """Fixed-ratio Cutout boxes ``(top, left, h, w)`` int64 ``[B, 4]`` from draws ``[B, SQUARE_ERASE_SLOTS]``."""
    draws = np.asarray(draws, dtype=np.float64)
    if ratio == 0.0:
        return np.zeros((draws.shape[0], 4), dtype=np.int64)
    _, _, side_h, side_w = _square_box(height, width, ratio, (0.0, 0.0))
    top = np.rint(draws[:, 1] * (height - side_h)).astype(np.int64)
    left = np.rint(draws[:, 2] * (width - side_w)).astype(np.int64)
    sides = np.broadcast_to(np.array([side_h, side_w], dtype=np.int64), (draws.shape[0], 2))
    boxes = np.concatenate([top[:, None], left[:, None], sides], axis=1)
    return np.where((draws[:, 0] < prob)[:, None], boxes, 0)


def feature_erase_mask(draws: np.ndarray, count: int, *, prob: float, fraction: tuple[float, float] | float
                       ) -> np.ndarray:
    """Rows (or dimensions) of precomputed features to zero, bool ``[B, count]``, from draws ``[B, 2 + count]``.

    ``fraction`` a pair ``(min, max)``: ``round(U(min, max) * count)`` rows (random erasing); a number:
    ``round(fraction * count)`` rows (fixed-ratio Cutout)."""
    draws = np.asarray(draws, dtype=np.float64)
    if isinstance(fraction, tuple):
        erased = np.rint((fraction[0] + (fraction[1] - fraction[0]) * draws[:, 1]) * count)
    else:
        erased = np.full(draws.shape[0], float(round(fraction * count)))
    keys = draws[:, 2: 2 + count]
    ranks = np.argsort(np.argsort(keys, axis=1, kind="stable"), axis=1, kind="stable")  # [B, count]
    return (draws[:, 0] < prob)[:, None] & (ranks < erased[:, None])


def word_slots(lengths: np.ndarray) -> int:
    """Draws the word dropout of captions with ``lengths`` (special tokens included) reads per caption."""
    return 2 * max(int(np.max(lengths, initial=2)) - 2, 0)


def drop_words_batch(ids: np.ndarray, lengths: np.ndarray, draws: np.ndarray, prob: float,
                     rule: str) -> tuple[np.ndarray, np.ndarray]:
    """Word dropout of padded captions ``[B, L]`` (each ``[<start>, w..., <end>]``, ``lengths`` ``[B]``) with
    draws ``[B, >= word_slots(lengths)]`` -> new padded ids (``<pad>`` = 0) and lengths."""
    ids, lengths = np.asarray(ids, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    count = len(ids)
    if prob == 0.0 or count == 0:
        return ids, lengths
    num_words = lengths - 2  # [B]
    span = max(ids.shape[1] - 2, 0)
    words = ids[:, 1: 1 + span]  # [B, span]
    is_word = np.arange(span)[None, :] < num_words[:, None]
    first, second = draws[:, 0: 2 * span: 2], draws[:, 1: 2 * span: 2]  # [B, span] each
    if rule == "unk_then_delete":
        words = np.where(is_word & (first < prob), UNK_ID, words)
        deleted = np.maximum(np.minimum(np.floor(num_words * prob).astype(np.int64), num_words - 1), 0)
        keys = np.where(is_word, second, np.inf)
        ranks = np.argsort(np.argsort(keys, axis=1, kind="stable"), axis=1, kind="stable")
        keep = is_word & (ranks >= deleted[:, None])
    elif rule == "delete":
        keep = is_word & (first >= prob)
        keep[num_words <= 1] = is_word[num_words <= 1]
        none = ~keep.any(axis=1) & (num_words > 1)
        if none.any():
            rescued = np.floor(draws[none, 1] * num_words[none]).astype(np.int64)
            keep[np.flatnonzero(none), rescued] = True
    else:
        raise ValueError(f"word dropout rule {rule!r} is not one of ('delete', 'unk_then_delete')")
    new_lengths = keep.sum(axis=1) + 2
    out = np.zeros((count, int(new_lengths.max())), dtype=np.int64)
    out[:, 0] = ids[:, 0]
    rows, cols = np.nonzero(keep)
    out[rows, np.cumsum(keep, axis=1)[rows, cols]] = words[rows, cols]
    out[np.arange(count), new_lengths - 1] = ids[np.arange(count), lengths - 1]
    return out, new_lengths


def erase_box_mask(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bool ``[..., H, W]``: True inside box ``(top, left, h, w)`` of ``boxes`` ``[..., 4]``."""
    top, left, h, w = boxes.unbind(-1)
    rows = torch.arange(height, device=boxes.device)
    cols = torch.arange(width, device=boxes.device)
    in_rows = (rows >= top[..., None]) & (rows < (top + h)[..., None])  # [..., H]
    in_cols = (cols >= left[..., None]) & (cols < (left + w)[..., None])  # [..., W]
    return in_rows[..., :, None] & in_cols[..., None, :]


def normalise_channels_last(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``[..., H, W, 3]`` -> float32 ``[..., 3, H, W]`` normalised with the ImageNet mean/std, stored
    channels-last (a ``[..., H, W, 3]`` buffer viewed as channels-first, ``torch.channels_last`` for a
    4-d batch: the layout the convolutions read, with no copy on the way in).

    The operations of :func:`pcmr.data.images.normalize_pixels`, ``(x / 255 - mean_c) / std_c`` in
    float32, so the same bits. The buffer is read as rows of ``W * 3`` values against the mean and
    standard deviation tiled to that length: every pass is a plain vectorised loop (the per-channel
    broadcast over an innermost dimension of 3 is not)."""
    out = torch.empty(images.shape, dtype=torch.float32, device=images.device)
    out.copy_(images)
    if out.numel():
        width = out.shape[-2]
        mean = torch.tensor(IMAGE_MEAN, dtype=torch.float32, device=out.device).repeat(width)  # [W * 3]
        std = torch.tensor(IMAGE_STD, dtype=torch.float32, device=out.device).repeat(width)
        out.view(-1, width * 3).div_(255.0).sub_(mean).div_(std)
    return out.movedim(-1, -3)


def finish_images(images: torch.Tensor, boxes: torch.Tensor | None = None) -> torch.Tensor:
    """uint8 ``[..., H, W, 3]`` -> float32 ``[..., 3, H, W]`` normalised with the ImageNet mean/std and stored
    channels-last (:func:`normalise_channels_last`), then 0 inside ``boxes`` ``[..., 4]``.

    On the CPU each box is a slice; elsewhere (a GPU) a mask over the batch. Both give the same values."""
    if images.device.type == "cpu":
        out = normalise_channels_last(images)
        if boxes is not None and boxes.numel():
            flat_out, flat_boxes = out.view(-1, *out.shape[-3:]), boxes.reshape(-1, 4)  # a view: zeroed in place
            for row in torch.nonzero(flat_boxes[:, 2] * flat_boxes[:, 3]).view(-1).tolist():
                top, left, h, w = flat_boxes[row].tolist()
                flat_out[row, :, top: top + h, left: left + w] = 0.0
        return out
    return _finish_by_arithmetic(images, boxes)


def _finish_by_arithmetic(images: torch.Tensor, boxes: torch.Tensor | None) -> torch.Tensor:
    """:func:`finish_images` with the boxes as a mask over the batch (any device)."""
    out = normalise_channels_last(images)
    if boxes is not None and boxes.numel():
        mask = erase_box_mask(boxes.to(out.device), out.shape[-2], out.shape[-1])  # [..., H, W]
        out.masked_fill_(mask.unsqueeze(-3), 0.0)
    return out
