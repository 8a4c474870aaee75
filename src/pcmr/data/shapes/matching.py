"""Exact relevance of shapes captions to scenes.

A matching caption with descriptions ``d_1..d_k`` is relevant to a scene iff its
descriptions can be assigned to *distinct* objects that satisfy them: a
bipartite matching saturating the descriptions. With ``k <= 3`` and at most 4
objects, Hall's theorem gives an exact vectorised test on 4-bit object masks:
for every subset ``S`` of descriptions, ``|union of their object masks| >= |S|``.
A counting caption is relevant iff exactly ``count`` objects satisfy it.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from pcmr.data.shapes.grammar import decode_predicate
from pcmr.data.shapes.scene import SHAPE
from pcmr.relevance import Relevance

__all__ = ["predicate_masks", "shapes_relevance"]

_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.int8)


def predicate_masks(objects: np.ndarray, codes: np.ndarray, *, block: int = 2048) -> np.ndarray:
    """uint8 ``[N, P]``: bit ``j`` set iff object slot ``j`` of scene ``n`` satisfies predicate ``codes[p]``."""
    table = np.array([decode_predicate(int(c)) for c in codes], dtype=np.int16).reshape(-1, 5)  # [P, 5]
    masks = np.zeros((objects.shape[0], len(codes)), dtype=np.uint8)
    weights = (1 << np.arange(objects.shape[1], dtype=np.uint16)).reshape(1, -1, 1)  # [1, M, 1]
    for start in range(0, objects.shape[0], block):
        obj = objects[start: start + block]  # [n, M, 5]
        hit = (obj[:, :, SHAPE] >= 0)[:, :, None]  # [n, M, 1]
        for field in range(5):
            want = table[None, None, :, field]  # [1, 1, P]
            hit = hit & ((want < 0) | (obj[:, :, None, field] == want))  # [n, M, P]
        masks[start: start + block] = (hit * weights).sum(axis=1).astype(np.uint8)
    return masks


def _hall(columns: list[np.ndarray]) -> np.ndarray:
    """bool ``[N]``: the masks in ``columns`` admit a system of distinct representatives."""
    ok = np.ones(columns[0].shape, dtype=bool)
    for size in range(1, len(columns) + 1):
        for subset in combinations(columns, size):
            union = subset[0]
            for mask in subset[1:]:
                union = union | mask
            ok &= _POPCOUNT[union] >= size
    return ok


def shapes_relevance(objects: np.ndarray, preds: np.ndarray, count: np.ndarray) -> Relevance:
    """Exact :class:`Relevance` (bit storage) of captions ``(preds [C, 3], count [C])`` to scenes ``objects [N, M, 5]``."""
    num_images, num_captions = objects.shape[0], preds.shape[0]
    codes, inverse = np.unique(preds[preds >= 0], return_inverse=True)
    columns = np.full(preds.shape, -1, dtype=np.int64)
    columns[preds >= 0] = inverse.reshape(-1)
    masks = np.ascontiguousarray(predicate_masks(objects, codes).T)  # [P, N]
    # captions with equal structure have equal relevance: evaluate each structure once
    structure = np.concatenate([-np.sort(-columns, axis=1), count[:, None].astype(np.int64)], axis=1)  # [C, 4]
    unique, caption_structure = np.unique(structure, axis=0, return_inverse=True)
    caption_structure = caption_structure.reshape(-1)
    hits = np.empty((len(unique), num_images), dtype=bool)  # [U, N]
    for u, row in enumerate(unique):
        cols = [masks[int(p)] for p in row[:3] if p >= 0]
        if row[3] >= 0:
            hits[u] = _POPCOUNT[cols[0]] == row[3]
        elif len(cols) == 1:
            hits[u] = cols[0] != 0
        else:
            hits[u] = _hall(cols)
    bits = np.packbits(hits, axis=1)[caption_structure]  # [C, ceil(N / 8)]
    return Relevance.from_bits(num_images, num_captions, bits)
