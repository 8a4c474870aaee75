"""Controlled sets of the shapes benchmark for the papers' analyses.

Binary selection (ProbVSE §5, Table 4; GCIE §3.4): each triplet holds a union
image C with two objects A and B in distinct grid cells, and the crops of C to
A's cell and to B's cell (upscaled to the image size). Captions: "A" (e.g.
"a red circle") and "A and B" ("a red circle and a blue square"); only shape and
colour are named, so they stay true after cropping. Exact relevance by the
grammar: caption A fits crop A and union C; caption "A and B" fits union C only.
The task: with caption A (resp. crop A) as query choose between crop A and
union C (resp. caption A and "A and B"); with "A and B" (resp. C) the paired item
is the answer.

Split layout (``load_dataset("shapes", "binary_selection")``): images are
``[crops A (N), crops B (N), unions C (N)]``, captions ``[captions A (N),
captions "A and B" (N)]``; ``split.info["roles"]`` holds the index arrays
``crop_a``, ``crop_b``, ``union``, ``caption_a``, ``caption_ab`` (``[N]`` each).

Occlusion and word-erasure series at fixed ratios (PCME Fig. 7) apply to any
split: :func:`pcmr.data.augment.occlusion_series`, :func:`pcmr.data.augment.word_erasure_series`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

from pcmr.data.shapes.config import ShapesConfig, split_seed
from pcmr.data.shapes.grammar import caption_text, encode_predicate
from pcmr.data.shapes.matching import shapes_relevance
from pcmr.data.shapes.render import render_scenes
from pcmr.data.shapes.scene import COLOUR, COLUMN, GRID, MAX_OBJECTS, ROW, SHAPE, Scenes, parse_combinations

__all__ = ["generate_binary_selection"]


def _crop_cell(image: np.ndarray, column: int, row: int) -> np.ndarray:
    size = image.shape[0]
    y0, y1 = round(row * size / GRID), round((row + 1) * size / GRID)
    x0, x1 = round(column * size / GRID), round((column + 1) * size / GRID)
    crop = Image.fromarray(np.ascontiguousarray(image[y0:y1, x0:x1]))
    return np.asarray(crop.resize((size, size), Image.Resampling.BILINEAR), dtype=np.uint8)


def generate_binary_selection(config: ShapesConfig) -> dict[str, Any]:
    """Arrays of the ``binary_selection`` split (same keys as the other splits, plus ``role_*``)."""
    count = config.num_binary_selection
    rng = np.random.default_rng(split_seed(config.seed, "binary_selection"))
    seen = np.argwhere(~parse_combinations(config.unseen_combinations))  # [K, 2] (shape, colour)
    union = Scenes(objects=np.full((count, MAX_OBJECTS, 5), -1, dtype=np.int16),
                   jitter=np.concatenate([rng.uniform(-1, 1, (count, MAX_OBJECTS, 2)),
                                          rng.random((count, MAX_OBJECTS, 1))], axis=2).astype(np.float32),
                   background=rng.uniform(0, 70, count).astype(np.float32))
    for n in range(count):
        first, second = rng.choice(len(seen), size=2, replace=False)  # A and B differ in shape or colour
        cells = rng.choice(GRID * GRID, size=2, replace=False)
        for slot, (combo, cell) in enumerate(((seen[first], cells[0]), (seen[second], cells[1]))):
            union.objects[n, slot] = (combo[0], combo[1], rng.integers(2), cell % GRID, cell // GRID)
    union_pixels = render_scenes(union, config.image_size)
    crops = [np.stack([_crop_cell(union_pixels[n], int(union.objects[n, slot, COLUMN]),
                                  int(union.objects[n, slot, ROW])) for n in range(count)])
             for slot in (0, 1)] if count else [union_pixels[:0], union_pixels[:0]]
    # scenes of the crops: the single object, now filling the centre cell
    crop_objects = []
    for slot in (0, 1):
        objects = np.full((count, MAX_OBJECTS, 5), -1, dtype=np.int16)
        objects[:, 0] = union.objects[:, slot]
        objects[:, 0, COLUMN] = objects[:, 0, ROW] = 1
        crop_objects.append(objects)
    objects = np.concatenate([crop_objects[0], crop_objects[1], union.objects])  # [3N, M, 5]
    preds = np.full((2 * count, 3), -1, dtype=np.int32)
    for n in range(count):
        for slot in (0, 1):
            a = union.objects[n, slot]
            code = encode_predicate((int(a[SHAPE]), int(a[COLOUR]), -1, -1, -1))
            if slot == 0:
                preds[n, 0] = code
            preds[count + n, slot] = code
    caption_count = np.full(2 * count, -1, dtype=np.int32)
    relevance = shapes_relevance(objects, preds, caption_count)
    index = np.arange(count, dtype=np.int64)
    return {
        "pixels": np.concatenate([crops[0], crops[1], union_pixels]),
        "objects": objects,
        "jitter": np.concatenate([union.jitter] * 3),
        "background": np.concatenate([union.background] * 3),
        "caption_preds": preds, "caption_count": caption_count,
        "caption_image": np.concatenate([index, 2 * count + index]),
        "relevance_bits": relevance.bits,
        "caption_texts": [caption_text(p, -1) for p in preds],
        "role_crop_a": index, "role_crop_b": count + index, "role_union": 2 * count + index,
        "role_caption_a": index, "role_caption_ab": count + index,
    }
