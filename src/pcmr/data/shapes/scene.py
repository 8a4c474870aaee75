"""Scenes of the built-in "shapes" benchmark: 1-4 objects on a 3 x 3 grid.

Each object has a shape, a colour, a size and a grid cell (column, row); two
objects never share a cell, so objects never overlap and position words ("on the
left" = column 0) are exact. Scenes are stored as an int array ``objects
[N, MAX_OBJECTS, 5]`` with fields (shape, colour, size, column, row) and -1 rows
for absent objects, plus rendering jitter that does not change any attribute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SHAPES", "SHAPE_PLURALS", "COLOURS", "COLOUR_RGB", "SIZES", "GRID", "MAX_OBJECTS", "FIELDS",
           "Scenes", "sample_scenes", "combination_labels", "combination_names", "parse_combinations"]

SHAPES = ("circle", "square", "triangle", "diamond", "cross")
SHAPE_PLURALS = ("circles", "squares", "triangles", "diamonds", "crosses")
COLOURS = ("red", "green", "blue", "yellow", "purple", "cyan")
COLOUR_RGB = np.array([(225, 45, 45), (45, 185, 65), (55, 95, 235), (235, 215, 45), (160, 70, 210),
                       (50, 210, 220)], dtype=np.float32)
SIZES = ("small", "large")
GRID = 3
MAX_OBJECTS = 4
FIELDS = ("shape", "colour", "size", "column", "row")
SHAPE, COLOUR, SIZE, COLUMN, ROW = range(5)


@dataclass
class Scenes:
    """A batch of scenes.

    Attributes:
        objects: int16 ``[N, MAX_OBJECTS, 5]`` (shape, colour, size, column, row); -1 = no object.
        jitter: float32 ``[N, MAX_OBJECTS, 3]``: offset inside the cell (x, y in [-1, 1]) and shade in [0, 1].
        background: float32 ``[N]`` grey level of the background (0-255).
    """

    objects: np.ndarray
    jitter: np.ndarray
    background: np.ndarray

    def __len__(self) -> int:
        return int(self.objects.shape[0])

    @property
    def num_objects(self) -> np.ndarray:
        """int ``[N]``: objects per scene."""
        return (self.objects[:, :, SHAPE] >= 0).sum(axis=1)

    def to_json(self) -> list[list[dict[str, Any]]]:
        """Scenes as readable lists of objects (for ``split.info["scenes"]`` and debugging)."""
        out = []
        for scene in self.objects:
            out.append([{"shape": SHAPES[o[SHAPE]], "colour": COLOURS[o[COLOUR]], "size": SIZES[o[SIZE]],
                         "column": int(o[COLUMN]), "row": int(o[ROW])} for o in scene if o[SHAPE] >= 0])
        return out


def combination_names() -> list[str]:
    """Names of the ``len(SHAPES) * len(COLOURS)`` label columns: ``"red circle"``, ..."""
    return [f"{colour} {shape}" for shape in SHAPES for colour in COLOURS]


def parse_combinations(names: list[str] | tuple[str, ...]) -> np.ndarray:
    """Bool ``[len(SHAPES), len(COLOURS)]`` marking combinations given as ``"colour shape"`` strings."""
    marked = np.zeros((len(SHAPES), len(COLOURS)), dtype=bool)
    for name in names:
        parts = str(name).split()
        if len(parts) != 2 or parts[0] not in COLOURS or parts[1] not in SHAPES:
            raise ValueError(f"unseen combination {name!r} is not '<colour> <shape>' with colour in {COLOURS} "
                             f"and shape in {SHAPES}")
        marked[SHAPES.index(parts[1]), COLOURS.index(parts[0])] = True
    return marked


def combination_labels(objects: np.ndarray) -> np.ndarray:
    """Multi-hot bool ``[N, len(SHAPES) * len(COLOURS)]`` over (shape, colour) present in each scene."""
    labels = np.zeros((objects.shape[0], len(SHAPES) * len(COLOURS)), dtype=bool)
    rows, slots = np.nonzero(objects[:, :, SHAPE] >= 0)
    labels[rows, objects[rows, slots, SHAPE] * len(COLOURS) + objects[rows, slots, COLOUR]] = True
    return labels


def sample_scenes(
    count: int,
    rng: np.random.Generator,
    *,
    min_objects: int = 1,
    max_objects: int = MAX_OBJECTS,
    allowed: np.ndarray | None = None,
    required: np.ndarray | None = None,
) -> Scenes:
    """Sample ``count`` scenes.

    Args:
        allowed: bool ``[len(SHAPES), len(COLOURS)]``, the (shape, colour) combinations objects may take
            (default: all).
        required: same form; when given, the first object of every scene takes one of these combinations
            (the held-out split) and the others any combination of ``allowed | required``.
    """
    if not 1 <= min_objects <= max_objects <= MAX_OBJECTS:
        raise ValueError(f"need 1 <= min_objects <= max_objects <= {MAX_OBJECTS}, got {min_objects}, {max_objects}")
    allowed = np.ones((len(SHAPES), len(COLOURS)), dtype=bool) if allowed is None else allowed
    pool = np.argwhere(allowed if required is None else allowed | required)  # [K, 2] (shape, colour)
    forced = None if required is None else np.argwhere(required)
    if len(pool) == 0 or (forced is not None and len(forced) == 0):
        raise ValueError("no (shape, colour) combination is available")
    objects = np.full((count, MAX_OBJECTS, 5), -1, dtype=np.int16)
    sizes = rng.integers(min_objects, max_objects + 1, size=count)
    for n in range(count):
        k = int(sizes[n])
        cells = rng.choice(GRID * GRID, size=k, replace=False)
        combos = pool[rng.integers(len(pool), size=k)]
        if forced is not None:
            combos[0] = forced[rng.integers(len(forced))]
        objects[n, :k, SHAPE] = combos[:, 0]
        objects[n, :k, COLOUR] = combos[:, 1]
        objects[n, :k, SIZE] = rng.integers(len(SIZES), size=k)
        objects[n, :k, COLUMN] = cells % GRID
        objects[n, :k, ROW] = cells // GRID
    jitter = np.concatenate([rng.uniform(-1, 1, (count, MAX_OBJECTS, 2)), rng.random((count, MAX_OBJECTS, 1))],
                            axis=2).astype(np.float32)
    background = rng.uniform(0, 70, count).astype(np.float32)
    return Scenes(objects=objects, jitter=jitter, background=background)
