"""Rasterise shapes scenes to uint8 RGB images with numpy (no anti-aliasing, deterministic)."""

from __future__ import annotations

import numpy as np

from pcmr.data.shapes.scene import COLOUR, COLOUR_RGB, COLUMN, GRID, ROW, SHAPE, SIZE, Scenes

__all__ = ["render_scenes", "shape_mask", "add_pixel_noise", "SIZE_RADIUS"]

SIZE_RADIUS = (0.26, 0.44)  # half-extent of small / large objects, as a fraction of the cell side


def shape_mask(shape: int, dx: np.ndarray, dy: np.ndarray, radius: float) -> np.ndarray:
    """Bool mask of a shape centred at 0 given pixel offsets ``dx [1, w]``, ``dy [h, 1]`` (y grows downwards)."""
    if shape == 0:  # circle
        return dx * dx + dy * dy <= radius * radius
    if shape == 1:  # square
        half = 0.82 * radius
        return (np.abs(dx) <= half) & (np.abs(dy) <= half)
    if shape == 2:  # triangle, apex up
        top, bottom = -radius, 0.8 * radius
        inside = (dy >= top) & (dy <= bottom)
        return inside & (np.abs(dx) <= (dy - top) / (bottom - top) * radius)
    if shape == 3:  # diamond
        return np.abs(dx) + np.abs(dy) <= radius
    if shape == 4:  # cross
        arm = 0.32 * radius
        return ((np.abs(dx) <= arm) & (np.abs(dy) <= radius)) | ((np.abs(dy) <= arm) & (np.abs(dx) <= radius))
    raise ValueError(f"shape index {shape} is not one of 0..4")


def render_scenes(scenes: Scenes, image_size: int = 64) -> np.ndarray:
    """uint8 ``[N, S, S, 3]`` images of ``scenes``; each object stays inside its grid cell."""
    if image_size < 2 * GRID:
        raise ValueError(f"image_size={image_size} is too small (need >= {2 * GRID})")
    count = len(scenes)
    images = np.empty((count, image_size, image_size, 3), dtype=np.uint8)
    cell = image_size / GRID
    for n in range(count):
        canvas = np.empty((image_size, image_size, 3), dtype=np.float32)
        canvas[:] = scenes.background[n]
        for slot, obj in enumerate(scenes.objects[n]):
            if obj[SHAPE] < 0:
                continue
            radius = SIZE_RADIUS[obj[SIZE]] * cell
            slack = max(0.0, 0.5 * cell - radius - 0.5)
            cx = (obj[COLUMN] + 0.5) * cell + scenes.jitter[n, slot, 0] * slack
            cy = (obj[ROW] + 0.5) * cell + scenes.jitter[n, slot, 1] * slack
            x0, x1 = int(max(0, np.floor(cx - radius))), int(min(image_size, np.ceil(cx + radius) + 1))
            y0, y1 = int(max(0, np.floor(cy - radius))), int(min(image_size, np.ceil(cy + radius) + 1))
            dx = (np.arange(x0, x1, dtype=np.float32) + 0.5 - cx)[None, :]
            dy = (np.arange(y0, y1, dtype=np.float32) + 0.5 - cy)[:, None]
            mask = shape_mask(int(obj[SHAPE]), dx, dy, radius)
            shade = 0.8 + 0.2 * scenes.jitter[n, slot, 2]
            canvas[y0:y1, x0:x1][mask] = COLOUR_RGB[obj[COLOUR]] * shade
        images[n] = canvas.astype(np.uint8)
    return images


def add_pixel_noise(images: np.ndarray, std: float, rng: np.random.Generator) -> np.ndarray:
    """uint8 ``images [N, S, S, 3]`` plus independent Gaussian noise of ``std`` (0-255 scale), clipped to
    [0, 255] and rounded. The objects' attributes, hence the relevance, do not change."""
    noisy = images.astype(np.float32) + rng.normal(0.0, std, images.shape).astype(np.float32)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)
