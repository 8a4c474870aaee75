"""Splits of one's own captioned images: the part shared by the image-folder, webdataset and Hugging Face
formats (``pcmr.data.folder``, ``pcmr.data.shards``, ``pcmr.data.hf``).

A loader reads its files into :class:`OwnRecord` s (one per image: a key, the captions written for it and
the split a ``split`` column gives, if any) and :func:`build_own_split` makes the asked split of them:

- ``train`` / ``val`` / ``test``: the records' own ``split`` values when they give them (every record
  then must), else a seeded split by image: the keys sorted, shuffled with ``numpy.random.default_rng(seed)``,
  then cut at ``split_fractions`` (default 80 / 10 / 10 %, each of val and test at least one image), so one
  image's captions never fall in two splits and the split does not depend on the order of the rows;
- ``all``: every image, captioned or not (images without captions only appear here): the gallery of
  ``pcmr search --build``.

Relevance: each caption to the image it was written for.
"""

from __future__ import annotations

import os
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from pcmr.data.errors import DataError, SkippedItem, warn_skipped
from pcmr.data.images import (
    IMAGE_RESIZES,
    ImageSource,
    center_crop,
    normalize_pixels,
    pil_to_uint8,
    resize_shorter_side,
)
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import tokenize
from pcmr.suggest import unknown_name

__all__ = ["DecodedImages", "OWN_SPLITS", "ALL_SPLIT", "DEFAULT_SPLIT_FRACTIONS", "SPLIT_ALIASES", "OwnRecord", "build_own_split",
           "assign_splits", "split_name", "check_caption"]

#: the gallery split of the own-data formats: every image, captioned or not
ALL_SPLIT = "all"
#: splits the own-data formats offer
OWN_SPLITS = ("train", "val", "test", ALL_SPLIT)
#: train / val / test shares of the seeded split by image
DEFAULT_SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
#: spellings accepted in a ``split`` column (Hugging Face names its validation split ``validation``)
SPLIT_ALIASES = {"train": "train", "val": "val", "valid": "val", "validation": "val", "dev": "val", "test": "test"}


class DecodedImages(ImageSource):
    """Images decoded on demand from something other than a file path (a tar shard's byte range, a
    ``datasets`` row), made square as :class:`pcmr.data.images.FileImages` makes files: ``image_resize``
    ``"square"`` (bicubic resize) or ``"center_crop"`` (shorter side to ``resize_size``, default
    ``round(image_size * 8 / 7)``, then the central square). Subclasses give :meth:`decode`."""

    kind = "pixels"

    def __init__(self, count: int, image_size: int = 224, keys: Sequence[str] | None = None, *,
                 image_resize: str = "square", resize_size: int | None = None) -> None:
        if image_size < 1:
            raise DataError(f"image_size={image_size}", location="image_size", expected="a positive integer")
        if image_resize not in IMAGE_RESIZES:
            raise DataError(f"image_resize={image_resize!r}", location="image_resize", expected=f"one of {IMAGE_RESIZES}")
        resize_size = int(round(image_size * 8 / 7)) if resize_size is None else int(resize_size)
        if resize_size < image_size:
            raise DataError(f"resize_size={resize_size}", location="resize_size",
                            expected=f"an integer >= image_size ({image_size})")
        self.count, self.image_size, self.image_resize, self.resize_size = count, int(image_size), image_resize, resize_size
        self.keys = list(keys) if keys is not None else [f"image {i}" for i in range(count)]

    @abstractmethod
    def decode(self, index: int, convert: Callable[[Image.Image], Any]) -> Any:
        """``convert`` applied to item ``index`` opened as a Pillow image; a bad item raises :class:`DataError`."""

    def __len__(self) -> int:
        return self.count

    @property
    def crop_size(self) -> int:
        return self.image_size

    def load(self, index: int) -> torch.Tensor:
        return normalize_pixels(self.load_pixels(index))

    def load_pixels(self, index: int) -> np.ndarray:
        if self.image_resize == "square":
            return self.decode(index, lambda image: pil_to_uint8(image, self.image_size))
        cropped = center_crop(resize_shorter_side(self.load_pil(index), self.resize_size), self.image_size)
        return np.asarray(cropped, dtype=np.uint8)

    def load_pil(self, index: int) -> Image.Image:
        return self.decode(index, lambda image: image.convert("RGB"))


@dataclass
class OwnRecord:
    """One image of an own dataset: ``key`` (its file name or ``shard.tar/key``: the image id), the
    ``captions`` written for it, its ``split`` from the data (None: made by the seed), and ``location``
    (the file and line it was read from, for errors)."""

    key: str
    captions: list[str] = field(default_factory=list)
    split: str | None = None
    location: str = ""


def split_name(value: object, *, path: str | os.PathLike | None, location: str) -> str:
    """A ``split`` column value as ``train`` / ``val`` / ``test`` (``validation``, ``valid``, ``dev`` read as ``val``)."""
    if not isinstance(value, str) or value.strip().lower() not in SPLIT_ALIASES:
        raise DataError(f"split {value!r}", path=path, location=location,
                        expected="train, val (or validation) or test")
    return SPLIT_ALIASES[value.strip().lower()]


def check_caption(text: object, *, path: str | os.PathLike | None, location: str) -> str:
    """A caption checked to be a string with words; returned stripped."""
    if not isinstance(text, str):
        raise DataError(f"caption is a {type(text).__name__}", path=path, location=location,
                        expected="a caption string (or a list of them)")
    if not tokenize(text):
        raise DataError("empty caption", path=path, location=location, expected="a caption with words")
    return text.strip()


def assign_splits(keys: Sequence[str], seed: int, fractions: Sequence[float], *,
                  path: str | os.PathLike | None = None) -> dict[str, str]:
    """The seeded split by image: key -> ``train`` / ``val`` / ``test``.

    The distinct keys are sorted, permuted by ``numpy.random.default_rng(seed)`` and cut into
    ``round(f_val n)`` val and ``round(f_test n)`` test images (each at least 1 when its share is
    positive), the rest train (at least 1)."""
    if len(fractions) != 3 or any(not isinstance(f, (int, float)) or f < 0 for f in fractions) or fractions[0] <= 0 \
            or abs(sum(fractions) - 1.0) > 1e-6:
        raise DataError(f"split_fractions={list(fractions)!r}", location="split_fractions",
                        expected="three shares [train, val, test], non-negative, train > 0, summing to 1")
    ordered = sorted(set(keys))
    n = len(ordered)
    n_val = max(1, round(fractions[1] * n)) if fractions[1] > 0 else 0
    n_test = max(1, round(fractions[2] * n)) if fractions[2] > 0 else 0
    if n - n_val - n_test < 1:
        raise DataError(f"{n} captioned image(s) cannot be split into train / val / test", path=path,
                        location="split", expected=f"at least {n_val + n_test + 1} captioned images, or a 'split' "
                        "column naming each image's split")
    order = np.random.default_rng(seed).permutation(n)
    out = {}
    for rank, position in enumerate(order.tolist()):
        out[ordered[position]] = "val" if rank < n_val else "test" if rank < n_val + n_test else "train"
    return out


def build_own_split(records: Sequence[OwnRecord], split: str, *, name: str, path: str | os.PathLike,
                    make_images: Callable[[list[int]], ImageSource], seed: int = 0,
                    split_fractions: Sequence[float] = DEFAULT_SPLIT_FRACTIONS,
                    skipped: Sequence[SkippedItem] = (), info: dict[str, Any] | None = None) -> RetrievalSplit:
    """The split ``split`` (:data:`OWN_SPLITS`) of ``records``: ``make_images(record indices)`` gives the
    image source of the chosen records in that order. Caption ids number the captions of all records in
    order (so an id names the same caption in every split)."""
    if split not in OWN_SPLITS:
        raise DataError(unknown_name("split", split, OWN_SPLITS), path=path, location="split")
    captioned = [r for r in records if r.captions]
    if not captioned:
        warn_skipped(f"{name} {split}", skipped)
        raise DataError("no image has a caption", path=path, location="captions",
                        expected="at least one image with a caption")
    given = [r for r in captioned if r.split is not None]
    if given and len(given) != len(captioned):
        missing = next(r for r in captioned if r.split is None)
        raise DataError("some images name their split and this one does not", path=path, location=missing.location,
                        expected="a 'split' value (train, val or test) on every image, or on none")
    how = "given" if given else "seeded"
    if split == ALL_SPLIT:
        chosen = list(range(len(records)))
    else:
        splits = ({r.key: r.split for r in captioned} if given
                  else assign_splits([r.key for r in captioned], seed, split_fractions, path=path))
        chosen = [i for i, r in enumerate(records) if r.captions and splits[r.key] == split]
        if not chosen:
            present = sorted({str(s) for s in splits.values()})
            raise DataError(f"no image is in split {split!r}", path=path, location="split",
                            expected=f"one of the splits present: {present}, or {ALL_SPLIT!r} (every image)")
    first_id = np.concatenate([[0], np.cumsum([len(r.captions) for r in records])]).astype(int).tolist()
    texts: list[str] = []
    caption_image: list[int] = []
    caption_ids: list[int] = []
    for position, index in enumerate(chosen):
        record = records[index]
        texts.extend(record.captions)
        caption_image.extend([position] * len(record.captions))
        caption_ids.extend(range(first_id[index], first_id[index] + len(record.captions)))
    warn_skipped(f"{name} {split}", skipped)
    return RetrievalSplit(
        name=name, split=split, images=make_images(chosen), caption_texts=texts,
        caption_image=np.asarray(caption_image, dtype=np.int64), image_ids=[records[i].key for i in chosen],
        caption_ids=caption_ids, skipped=list(skipped),
        info={"root": os.fspath(path), "splits": how, "split_seed": seed if how == "seeded" else None,
              "split_fractions": list(split_fractions) if how == "seeded" else None,
              "image_id_kind": "file", "describe_images": True, **(info or {})},
    )
