"""Caption grammar of the "shapes" benchmark, at varying specificity.

A *description* constrains any subset of (shape, colour, size, column, row) of one
object (-1 = unconstrained) and reads as a noun phrase: "a shape", "something
red", "a large blue square on the left", "a small shape in the top right corner".

Caption kinds and their exact meaning:
- ``"a red circle"`` / ``"a large blue square and a green triangle"`` /
  ``"A, B and C"``: the image has *distinct* objects matching each description
  (an injective assignment of descriptions to objects exists);
- ``"two shapes"``, ``"three red shapes"``, ``"one circle"``: the image has
  exactly that many objects matching the (at most one-attribute) description.

A caption is stored as ``preds [3]`` (predicate ids, -1 padded) and ``count``
(-1 for the matching kind).
"""

from __future__ import annotations

import numpy as np

from pcmr.data.shapes.scene import (
    COLOUR,
    COLOURS,
    COLUMN,
    MAX_OBJECTS,
    ROW,
    SHAPE,
    SHAPE_PLURALS,
    SHAPES,
    SIZE,
    SIZES,
)

__all__ = ["NUMBER_WORDS", "encode_predicate", "decode_predicate", "describe", "describe_slots", "caption_text",
           "sample_captions", "MAX_DESCRIPTIONS", "CAPTION_STYLES", "SLOT_WILDCARDS", "SLOT_COLUMNS", "SLOT_ROWS"]

MAX_DESCRIPTIONS = 3
MAX_OBJECTS_DRAWS = MAX_OBJECTS  # uniform draws that pick the described objects of a "slots" caption
#: "natural": noun phrases of varying length ("a red circle on the left"); "slots": every description
#: fills the same seven words, "a <size> <colour> <shape> at <column> <row>", an unnamed attribute
#: taking its wildcard word, so that a caption's length does not depend on how much it says.
CAPTION_STYLES = ("natural", "slots")
#: wildcard word of each slot (size, colour, shape, column, row) in the "slots" style
SLOT_WILDCARDS = ("anysize", "anycolour", "shape", "anycolumn", "anyrow")
SLOT_COLUMNS = ("left", "centre", "right")
SLOT_ROWS = ("top", "middle", "bottom")
NUMBER_WORDS = ("zero", "one", "two", "three", "four")
_RADIX = (len(SHAPES) + 1, len(COLOURS) + 1, len(SIZES) + 1, 4, 4)  # +1 for the wildcard -1
_ATTRIBUTE_COUNT_PROBS = np.array([0.0, 0.12, 0.38, 0.33, 0.17])  # how many of 4 attribute groups are named
_ATTRIBUTE_COUNT_CDF = np.cumsum(_ATTRIBUTE_COUNT_PROBS)[:-1]
_GROUP_WEIGHTS = np.array([0.35, 0.35, 0.15, 0.15])  # shape, colour, size, position: how often each is named


def encode_predicate(pred: tuple[int, int, int, int, int]) -> int:
    """Mixed-radix id of a predicate (shape, colour, size, column, row), each -1 or a value."""
    code = 0
    for value, radix in zip(pred, _RADIX):
        code = code * radix + (int(value) + 1)
    return code


def decode_predicate(code: int) -> tuple[int, int, int, int, int]:
    """Inverse of :func:`encode_predicate`."""
    values = []
    for radix in reversed(_RADIX):
        values.append(code % radix - 1)
        code //= radix
    return tuple(reversed(values))  # type: ignore[return-value]


def _position_phrase(column: int, row: int) -> str:
    if column == 1 and row == 1:
        return "in the centre"
    if column >= 0 and row >= 0:
        return f"in the {('top', '', 'bottom')[row]} {('left', '', 'right')[column]} corner"
    if column >= 0:
        return ("on the left", "", "on the right")[column]
    return ("at the top", "", "at the bottom")[row]


def describe(pred: tuple[int, int, int, int, int]) -> str:
    """Noun phrase of one description: ``(0, 0, 1, 0, -1)`` -> ``"a large red circle on the left"``."""
    shape, colour, size, column, row = pred
    adjectives = ([SIZES[size]] if size >= 0 else []) + ([COLOURS[colour]] if colour >= 0 else [])
    if shape >= 0:
        phrase = " ".join(["a", *adjectives, SHAPES[shape]])
    elif colour >= 0 and size < 0:
        phrase = f"something {COLOURS[colour]}"
    else:
        phrase = " ".join(["a", *adjectives, "shape"])
    if column >= 0 or row >= 0:
        phrase += " " + _position_phrase(column, row)
    return phrase


def describe_slots(pred: tuple[int, int, int, int, int]) -> str:
    """Seven-word description of the "slots" style: ``(0, -1, 1, 0, -1)`` -> ``"a large anycolour circle at left anyrow"``."""
    shape, colour, size, column, row = pred
    words = (SIZES[size] if size >= 0 else SLOT_WILDCARDS[0], COLOURS[colour] if colour >= 0 else SLOT_WILDCARDS[1],
             SHAPES[shape] if shape >= 0 else SLOT_WILDCARDS[2], "at",
             SLOT_COLUMNS[column] if column >= 0 else SLOT_WILDCARDS[3], SLOT_ROWS[row] if row >= 0 else SLOT_WILDCARDS[4])
    return "a " + " ".join(words)


def caption_text(preds: np.ndarray, count: int, style: str = "natural") -> str:
    """Text of a caption from its predicate ids and count (see module docstring).

    ``style``: one of :data:`CAPTION_STYLES`; "slots" joins :func:`describe_slots` phrases with "and"
    (a counting caption has no "slots" form).
    """
    descriptions = [decode_predicate(int(p)) for p in preds if p >= 0]
    if style == "slots":
        if count >= 0:
            raise ValueError("a counting caption has no 'slots' form")
        return " and ".join(describe_slots(d) for d in descriptions)
    if count >= 0:
        shape, colour, size, _, _ = descriptions[0]
        adjective = SIZES[size] if size >= 0 else (COLOURS[colour] if colour >= 0 else "")
        noun = (SHAPES if count == 1 else SHAPE_PLURALS)[shape] if shape >= 0 else ("shape" if count == 1 else "shapes")
        return " ".join(word for word in (NUMBER_WORDS[count], adjective, noun) if word)
    phrases = [describe(d) for d in descriptions]
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _attribute_count_cdf(min_attributes: int) -> np.ndarray:
    """CDF of how many attribute groups a description names, conditioned on at least ``min_attributes``."""
    if min_attributes == 1:  # the unconditioned distribution (the first entry is already 0)
        return _ATTRIBUTE_COUNT_CDF
    probs = _ATTRIBUTE_COUNT_PROBS.copy()
    probs[:min_attributes] = 0.0
    return np.cumsum(probs / probs.sum())[:-1]


def _random_description(obj: np.ndarray, u: np.ndarray,
                        count_cdf: np.ndarray = _ATTRIBUTE_COUNT_CDF) -> tuple[int, int, int, int, int]:
    """Describe one object by a random subset of its attribute groups (shape, colour, size, position).

    ``u``: 6 uniform numbers in [0, 1) (how many groups, the weighted draw of groups, the position wording);
    ``count_cdf``: the CDF of how many groups are named (:func:`_attribute_count_cdf`).
    """
    number = int(np.searchsorted(count_cdf, u[0], side="right"))
    # weighted sampling without replacement (Efraimidis & Spirakis): the largest u^(1/w) win
    groups = np.argsort(-(u[1:5] ** (1.0 / _GROUP_WEIGHTS)))[:number]
    pred = [-1, -1, -1, -1, -1]
    for group in groups:
        if group < 3:
            field = (SHAPE, COLOUR, SIZE)[group]
            pred[field] = int(obj[field])
            continue
        column, row = int(obj[COLUMN]), int(obj[ROW])
        options = []
        if column == 1 and row == 1:
            options.append((1, 1))
        if column != 1:
            options.append((column, -1))
        if row != 1:
            options.append((-1, row))
        if column != 1 and row != 1:
            options.append((column, row))
        pred[COLUMN], pred[ROW] = options[int(u[5] * len(options))]
    return tuple(pred)  # type: ignore[return-value]


def _slot_description(obj: np.ndarray, u: np.ndarray, min_attributes: int) -> tuple[int, int, int, int, int]:
    """Name a uniformly drawn number (``min_attributes``..5) of the five slots of one object, chosen uniformly.

    ``u``: 6 uniform numbers in [0, 1) (how many slots, then the order in which slots are chosen).
    """
    number = min_attributes + int(u[0] * (6 - min_attributes))
    chosen = np.argsort(u[1:6])[:number]  # slots in field order: shape, colour, size, column, row
    pred = [-1, -1, -1, -1, -1]
    for field in chosen:
        pred[int(field)] = int(obj[int(field)])
    return tuple(pred)  # type: ignore[return-value]


def sample_captions(objects: np.ndarray, per_image: int, rng: np.random.Generator, *, min_attributes: int = 1,
                    count_caption_rate: float = 0.1, style: str = "natural",
                    descriptions: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sample ``per_image`` true captions of each scene.

    ``min_attributes``: each description names at least this many of the object's attribute groups
    (shape, colour, size, position; in the "slots" style, of the five slots shape, colour, size, column,
    row, and 0 is allowed); ``count_caption_rate``: the share of counting captions ("natural" only);
    ``style``: one of :data:`CAPTION_STYLES`; ``descriptions``: every caption describes exactly this many
    distinct objects (None: 1-3 at random, as "natural" captions do; the "slots" style needs a number).
    Returns ``preds`` int32 ``[N * per_image, 3]`` and ``count`` int32 ``[N * per_image]``; caption
    ``n * per_image + j`` was written for scene ``n``.
    """
    if style == "slots":
        return _sample_slot_captions(objects, per_image, rng, min_attributes=min_attributes,
                                     descriptions=descriptions)
    count_cdf = _attribute_count_cdf(min_attributes)
    total = objects.shape[0] * per_image
    preds = np.full((total, MAX_DESCRIPTIONS), -1, dtype=np.int32)
    count = np.full(total, -1, dtype=np.int32)
    draws = rng.random((total, 3 + 6 * MAX_DESCRIPTIONS))  # all randomness of a caption, drawn at once
    for n in range(objects.shape[0]):
        present = objects[n][objects[n, :, SHAPE] >= 0]
        k = len(present)
        for j in range(per_image):
            c = n * per_image + j
            u = draws[c]
            if u[0] < count_caption_rate:  # counting caption, at most one attribute
                field = (-1, SHAPE, COLOUR, SIZE)[int(u[1] * 4)]
                pred = [-1, -1, -1, -1, -1]
                if field >= 0:
                    pred[field] = int(present[int(u[2] * k), field])
                count[c] = int(sum(all(p < 0 or o[f] == p for f, p in enumerate(pred)) for o in present))
                preds[c, 0] = encode_predicate((pred[0], pred[1], pred[2], pred[3], pred[4]))
                continue
            described = 3 if (k >= 3 and u[0] > 0.9) else (2 if (k >= 2 and u[0] > 0.65) else 1)
            if descriptions is not None:
                described = min(descriptions, k)
            chosen = np.argsort(u[1:1 + k])[:described]  # distinct objects, uniformly
            for slot, index in enumerate(chosen):
                preds[c, slot] = encode_predicate(_random_description(present[index], u[3 + 6 * slot: 9 + 6 * slot],
                                                                      count_cdf))
    return preds, count


def _sample_slot_captions(objects: np.ndarray, per_image: int, rng: np.random.Generator, *, min_attributes: int,
                          descriptions: int | None) -> tuple[np.ndarray, np.ndarray]:
    """"slots" captions: exactly ``descriptions`` distinct objects each, every slot named with equal chance."""
    if descriptions is None or not 1 <= descriptions <= MAX_DESCRIPTIONS:
        raise ValueError(f"'slots' captions need a fixed number of descriptions in 1..{MAX_DESCRIPTIONS}, "
                         f"got {descriptions}")
    total = objects.shape[0] * per_image
    preds = np.full((total, MAX_DESCRIPTIONS), -1, dtype=np.int32)
    count = np.full(total, -1, dtype=np.int32)
    draws = rng.random((total, 1 + MAX_OBJECTS_DRAWS + 6 * MAX_DESCRIPTIONS))
    for n in range(objects.shape[0]):
        present = objects[n][objects[n, :, SHAPE] >= 0]
        if len(present) < descriptions:
            raise ValueError(f"a scene with {len(present)} objects cannot take {descriptions} distinct descriptions")
        for j in range(per_image):
            c = n * per_image + j
            u = draws[c]
            chosen = np.argsort(u[1:1 + len(present)])[:descriptions]
            for slot, index in enumerate(chosen):
                start = 1 + MAX_OBJECTS_DRAWS + 6 * slot
                preds[c, slot] = encode_predicate(_slot_description(present[index], u[start: start + 6],
                                                                    min_attributes))
    return preds, count
