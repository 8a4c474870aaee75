"""Where a split's images come from: an in-memory pixel array, image files, or precomputed features.

Every source returns model-ready tensors: pixels as float ``[3, H, W]`` normalised
with the ImageNet mean/std (so 0 is the mean colour, the fill value of erasing),
features as float ``[F]`` or ``[R, F]`` unchanged.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from pcmr.data.errors import DataError, MissingDataError

__all__ = ["IMAGE_MEAN", "IMAGE_STD", "ImageSource", "ArrayImages", "FileImages", "FeatureImages",
           "normalize_pixels", "pil_to_pixels"]

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
    rgb = image.convert("RGB").resize((image_size, image_size), Image.Resampling.BICUBIC)
    return normalize_pixels(np.asarray(rgb, dtype=np.uint8))


class ImageSource(ABC):
    """Base of the image sources: ``len()``, ``kind`` ("pixels" | "features"), ``load(i) -> Tensor``."""

    kind: str = "pixels"

    @abstractmethod
    def __len__(self) -> int:
        """Number of images."""

    @abstractmethod
    def load(self, index: int) -> torch.Tensor:
        """The model-ready tensor of item ``index``."""


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


class FileImages(ImageSource):
    """Image files decoded with Pillow, converted to RGB and resized to ``image_size`` x ``image_size``.

    ``keys`` name each file's origin (e.g. ``"images[12] (cocoid 391895)"``) for errors.
    """

    kind = "pixels"

    def __init__(self, paths: Sequence[str], image_size: int = 224, keys: Sequence[str] | None = None) -> None:
        if image_size < 1:
            raise DataError(f"image_size={image_size}", location="image_size", expected="a positive integer")
        self.paths = list(paths)
        self.image_size = int(image_size)
        self.keys = list(keys) if keys is not None else [f"image {i}" for i in range(len(self.paths))]

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, index: int) -> torch.Tensor:
        path = self.paths[index]
        if not os.path.isfile(path):
            raise MissingDataError("image file not found", path=path, location=self.keys[index],
                                   expected="an image file")
        try:
            with Image.open(path) as image:
                return pil_to_pixels(image, self.image_size)
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
