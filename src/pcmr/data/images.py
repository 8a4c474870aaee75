"""Where a split's images come from: an in-memory pixel array, image files, or precomputed features.

Every source returns model-ready tensors: pixels as float ``[3, H, W]`` normalised
with the ImageNet mean/std (so 0 is the mean colour, the fill value of erasing),
features as float ``[F]`` or ``[R, F]`` unchanged.

Image files become square inputs in one of two ways (``image_resize``): ``"square"`` (a bicubic
resize of the whole image to ``image_size`` x ``image_size``) or ``"center_crop"`` (the shorter side
resized to ``resize_size``, bilinear, then the central ``image_size`` square: torchvision's
``Resize(256)`` + ``CenterCrop(224)``, the PCME release's evaluation transform and its CUB training
transform). :meth:`ImageSource.load_random_resized_crop` is the release's COCO training transform
(``RandomResizedCrop(224)`` + ``RandomHorizontalFlip()``), written here with Pillow and the
torchvision 0.2 arithmetic the release pins (:func:`random_resized_crop_box`).
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from pcmr.data.errors import DataError, MissingDataError

__all__ = ["IMAGE_MEAN", "IMAGE_STD", "IMAGE_RESIZES", "ImageSource", "ArrayImages", "FileImages", "FeatureImages",
           "normalize_pixels", "pil_to_pixels", "pil_to_uint8", "resize_shorter_side", "center_crop", "random_resized_crop_box",
           "random_resized_crop", "random_horizontal_flip", "Draws"]

#: how :class:`FileImages` makes a file a square input (``image_resize``)
IMAGE_RESIZES = ("square", "center_crop")

IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)


def normalize_pixels(pixels: np.ndarray) -> torch.Tensor:
    """uint8 ``[..., H, W, 3]`` -> float32 ``[..., 3, H, W]`` normalised with the ImageNet mean/std."""
    tensor = torch.from_numpy(np.array(pixels, dtype=np.float32)).div_(255.0)
    tensor = tensor.movedim(-1, -3)
    mean = torch.tensor(IMAGE_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGE_STD).view(3, 1, 1)
    return (tensor - mean) / std


def pil_to_pixels(image: Image.Image, image_size: int) -> torch.Tensor:
    """A Pillow image -> float ``[3, image_size, image_size]``: RGB, bicubic resize, ImageNet normalisation."""
    return normalize_pixels(pil_to_uint8(image, image_size))


def pil_to_uint8(image: Image.Image, image_size: int) -> np.ndarray:
    """A Pillow image -> uint8 ``[image_size, image_size, 3]``: RGB, bicubic resize."""
    rgb = image.convert("RGB").resize((image_size, image_size), Image.Resampling.BICUBIC)
    return np.asarray(rgb, dtype=np.uint8)


class Draws(Protocol):
    """The random draws the transforms take: a ``numpy.random.Generator`` has them."""

    def uniform(self, low: float, high: float) -> float:
        """A float uniform in ``[low, high)``."""

    def integers(self, low: int, high: int) -> int:
        """An integer uniform in ``[low, high)``."""

    def random(self) -> float:
        """A float uniform in ``[0, 1)``."""


def resize_shorter_side(image: Image.Image, size: int) -> Image.Image:
    """The shorter side resized to ``size`` (bilinear), the longer to ``int(size * long / short)``; an
    image whose shorter side already is ``size`` is returned as is (torchvision 0.2 ``Resize(size)``)."""
    width, height = image.size
    if min(width, height) == size:
        return image
    if width < height:
        return image.resize((size, int(size * height / width)), Image.Resampling.BILINEAR)
    return image.resize((int(size * width / height), size), Image.Resampling.BILINEAR)


def center_crop(image: Image.Image, size: int) -> Image.Image:
    """The central ``size`` x ``size`` square, its corner at ``round((H - size) / 2)``,
    ``round((W - size) / 2)`` (Python's rounding, as torchvision 0.2 ``CenterCrop``)."""
    width, height = image.size
    top, left = int(round((height - size) / 2.0)), int(round((width - size) / 2.0))
    return image.crop((left, top, left + size, top + size))


def random_resized_crop_box(width: int, height: int, rng: Draws, scale: tuple[float, float] = (0.08, 1.0),
                            ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` of torchvision 0.2's ``RandomResizedCrop`` (the version the PCME release pins).

    Up to 10 attempts: an area ``U(scale) * W * H`` and an aspect ratio ``r ~ U(ratio)`` (uniform, not
    log-uniform) give ``w = round(sqrt(A r))``, ``h = round(sqrt(A / r))``; with probability 1/2 (a draw
    made at every attempt) ``w`` and ``h`` swap when ``h / w`` lies in ``ratio``; a box that fits is placed
    uniformly. When no attempt fits: the central square of side ``min(W, H)``.
    """
    area = width * height
    for _ in range(10):
        target_area = rng.uniform(*scale) * area
        aspect_ratio = rng.uniform(*ratio)
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if rng.random() < 0.5 and min(ratio) <= h / w <= max(ratio):
            w, h = h, w
        if w <= width and h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    side = min(width, height)
    return (height - side) // 2, (width - side) // 2, side, side


def random_resized_crop(image: Image.Image, size: int, rng: Draws) -> Image.Image:
    """The box of :func:`random_resized_crop_box` cut out and resized to ``size`` x ``size`` (bilinear)."""
    top, left, h, w = random_resized_crop_box(image.size[0], image.size[1], rng)
    crop = image.crop((left, top, left + w, top + h))
    return crop.resize((size, size), Image.Resampling.BILINEAR)


def random_horizontal_flip(image: Image.Image, rng: Draws) -> Image.Image:
    """Mirrored left-right when ``rng.random() < 0.5`` (torchvision ``RandomHorizontalFlip()``)."""
    return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else image


class ImageSource(ABC):
    """Base of the image sources: ``len()``, ``kind`` ("pixels" | "features"), ``load(i) -> Tensor``."""

    kind: str = "pixels"

    @abstractmethod
    def __len__(self) -> int:
        """Number of images."""

    @abstractmethod
    def load(self, index: int) -> torch.Tensor:
        """The model-ready tensor of item ``index``."""

    def load_pixels(self, index: int) -> np.ndarray:
        """Item ``index`` as uint8 ``[S, S, 3]`` before normalisation (pixel sources only; ``load`` is
        :func:`normalize_pixels` of it)."""
        return np.asarray(self.load_pil(index).convert("RGB"), dtype=np.uint8)

    def load_batch(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Items ``indices`` stacked: uint8 ``[n, S, S, 3]`` (:meth:`load_pixels`) for pixel sources, float32
        ``[n, ...]`` for features (the training loader normalises pixels per batch)."""
        if self.kind == "pixels":
            rows = [self.load_pixels(int(i)) for i in indices]
            return np.stack(rows) if rows else np.zeros((0, self.crop_size, self.crop_size, 3), dtype=np.uint8)
        rows = [self.load(int(i)).numpy() for i in indices]
        return np.stack(rows) if rows else np.zeros((0, *self.load(0).shape), dtype=np.float32)

    def load_pil(self, index: int) -> Image.Image:
        """Item ``index`` as an RGB Pillow image (pixel sources only)."""
        raise ValueError(f"{type(self).__name__} holds precomputed features, not pixel images: random "
                         "resized crops need image files or pixel arrays")

    @property
    def crop_size(self) -> int:
        """The side of the square model input (pixel sources only)."""
        raise ValueError(f"{type(self).__name__} holds precomputed features, not pixel images")

    def load_random_resized_crop(self, index: int, rng: Draws) -> torch.Tensor:
        """Item ``index`` through the PCME release's COCO training transform: a random resized crop to
        :attr:`crop_size` then a random horizontal flip -> float ``[3, S, S]`` (ImageNet-normalised)."""
        return normalize_pixels(self.load_random_resized_crop_pixels(index, rng))

    def load_random_resized_crop_pixels(self, index: int, rng: Draws) -> np.ndarray:
        """:meth:`load_random_resized_crop` before normalisation: uint8 ``[S, S, 3]``."""
        image = random_horizontal_flip(random_resized_crop(self.load_pil(index), self.crop_size, rng), rng)
        return np.asarray(image, dtype=np.uint8)


class ArrayImages(ImageSource):
    """Pixels held in memory: uint8 ``[N, H, W, 3]`` (the built-in shapes data)."""

    kind = "pixels"

    def __init__(self, pixels: np.ndarray) -> None:
        if pixels.dtype != np.uint8 or pixels.ndim != 4 or pixels.shape[-1] != 3:
            raise ValueError(f"pixels must be uint8 [N, H, W, 3], got {pixels.dtype} {pixels.shape}")
        self.pixels = pixels

    def __len__(self) -> int:
        return int(self.pixels.shape[0])

    def load(self, index: int) -> torch.Tensor:
        return normalize_pixels(self.pixels[index])  # [3, H, W]

    def load_pixels(self, index: int) -> np.ndarray:
        return np.asarray(self.pixels[index])

    def load_batch(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self.pixels[np.asarray(indices, dtype=np.int64)])  # [n, H, W, 3]

    def load_pil(self, index: int) -> Image.Image:
        return Image.fromarray(self.pixels[index], mode="RGB")

    @property
    def crop_size(self) -> int:
        return int(self.pixels.shape[1])


class FileImages(ImageSource):
    """Image files decoded with Pillow, converted to RGB and made ``image_size`` x ``image_size``.

    ``image_resize``: ``"square"`` (bicubic resize of the whole image) or ``"center_crop"`` (shorter
    side to ``resize_size``, default ``round(image_size * 8 / 7)`` = 256 for 224, then the central
    square; the PCME release's evaluation transform). ``keys`` name each file's origin (e.g.
    ``"images[12] (cocoid 391895)"``) for errors.
    """

    kind = "pixels"

    def __init__(self, paths: Sequence[str], image_size: int = 224, keys: Sequence[str] | None = None, *,
                 image_resize: str = "square", resize_size: int | None = None) -> None:
        if image_size < 1:
            raise DataError(f"image_size={image_size}", location="image_size", expected="a positive integer")
        if image_resize not in IMAGE_RESIZES:
            raise DataError(f"image_resize={image_resize!r}", location="image_resize",
                            expected=f"one of {IMAGE_RESIZES}")
        resize_size = int(round(image_size * 8 / 7)) if resize_size is None else resize_size
        if isinstance(resize_size, bool) or not isinstance(resize_size, (int, np.integer)) or resize_size < image_size:
            raise DataError(f"resize_size={resize_size!r}", location="resize_size",
                            expected=f"an integer >= image_size ({image_size})")
        self.paths = list(paths)
        self.image_size, self.image_resize, self.resize_size = int(image_size), image_resize, int(resize_size)
        self.keys = list(keys) if keys is not None else [f"image {i}" for i in range(len(self.paths))]

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def crop_size(self) -> int:
        return self.image_size

    def load(self, index: int) -> torch.Tensor:
        return normalize_pixels(self.load_pixels(index))

    def load_pixels(self, index: int) -> np.ndarray:
        if self.image_resize == "square":
            return self._decode(index, lambda image: pil_to_uint8(image, self.image_size))
        cropped = center_crop(resize_shorter_side(self.load_pil(index), self.resize_size), self.image_size)
        return np.asarray(cropped, dtype=np.uint8)

    def load_pil(self, index: int) -> Image.Image:
        return self._decode(index, lambda image: image.convert("RGB"))

    def _decode(self, index: int, convert: Callable[[Image.Image], Any]) -> Any:
        path = self.paths[index]
        if not os.path.isfile(path):
            raise MissingDataError("image file not found", path=path, location=self.keys[index],
                                   expected="an image file")
        try:
            with Image.open(path) as image:
                return convert(image)
        except UnidentifiedImageError:
            raise DataError("image failed to decode (not a format Pillow recognises)", path=path, location=self.keys[index],
                            expected="a JPEG/PNG image Pillow can read") from None
        except (OSError, SyntaxError, ValueError) as err:  # a known format, damaged; the reason without the path
            reason = str(err).replace(repr(str(path)), "the file").replace(str(path), "the file")
            raise DataError(f"image failed to decode ({reason})", path=path, location=self.keys[index],
                            expected="a JPEG/PNG image Pillow can read") from None


class FeatureImages(ImageSource):
    """Precomputed image features: ``[N, F]`` (pooled) or ``[N, R, F]`` (regions), possibly memory-mapped."""

    kind = "features"

    def __init__(self, features: np.ndarray, path: str | os.PathLike | None = None) -> None:
        if features.ndim not in (2, 3):
            raise ValueError(f"features must be [N, F] or [N, R, F], got shape {features.shape}")
        self.features = features
        self.path = None if path is None else os.fspath(path)

    def __len__(self) -> int:
        return int(self.features.shape[0])

    def load(self, index: int) -> torch.Tensor:
        row = np.array(self.features[index], dtype=np.float32)  # [F] or [R, F]
        if not np.isfinite(row).all():
            raise DataError("image features hold NaN or inf", path=self.path, location=f"row {index}",
                            expected="finite feature values")
        return torch.from_numpy(row)

    def load_batch(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        index = np.asarray(indices, dtype=np.int64)
        rows = np.array(self.features[index], dtype=np.float32)  # [n, F] or [n, R, F]
        finite = np.isfinite(rows.reshape(len(index), -1)).all(axis=1)
        if not finite.all():
            raise DataError("image features hold NaN or inf", path=self.path,
                            location=f"row {int(index[np.argmin(finite)])}", expected="finite feature values")
        return rows
