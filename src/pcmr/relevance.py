"""The ground-truth relevance relation ``rel(i, c)`` between images and captions: pcmr's one ``Relevance`` type.

Datasets carry it (``RetrievalSplit.relevance``), batching reads in-batch sub-matrices of it,
and the metrics accept it wherever they accept a dense ``[Q, G]`` mask or positive lists
(:func:`pcmr.metrics` read it image -> caption, or caption -> image when the score matrix is
``[N_cap, N_img]``).

COCO/Flickr30k captions are relevant to exactly one image; CUB captions
to every image of their class; the built-in shapes data is many-to-many with
about a tenth of all pairs relevant. Two storages serve these cases:

- *keys*: the sorted unique ``i * N_cap + c`` of the relevant pairs (sparse
  relations: 8 bytes per relevant pair);
- *bits*: the dense matrix, one row per caption packed 8 images per byte
  (``numpy.packbits`` along images; dense relations: 1 bit per pair).

Both give the sparse lists, the dense matrix and any in-batch sub-matrix by
vectorised look-ups.
"""

from __future__ import annotations

import logging
import warnings
from functools import cached_property
from typing import Any, Literal

import numpy as np
import torch

__all__ = ["DIRECTIONS", "I2T", "Relevance", "RELEVANCE_MODES", "RelevanceMode", "T2I", "relevance_mode"]

#: the two retrieval directions: images query the captions (``i2t``), captions query the images (``t2i``)
I2T, T2I = "i2t", "t2i"
DIRECTIONS = (I2T, T2I)

#: Which pairs count as relevant, in training (``data.train_relevance``), in evaluation reports
#: (the ``relevance`` column) and in study files:
#:
#: - ``exact``: the dataset's known relation (the shapes grammar, CUB classes): every caption that
#:   fits an image;
#: - ``source``: only an image and the captions written for it (what COCO / Flickr30k annotate, so
#:   a caption that fits another image counts as a negative there).
RELEVANCE_MODES: tuple[str, ...] = ("exact", "source")
RelevanceMode = Literal["exact", "source"]
#: the older spelling of ``exact`` in training configs (``true``, also YAML's bare boolean)
_OLD_SPELLINGS: dict[Any, str] = {"true": "exact", True: "exact"}
_LOG = logging.getLogger("pcmr")


def relevance_mode(value: Any, where: str = "relevance mode") -> str:
    """``value`` as one of :data:`RELEVANCE_MODES`.

    The older spelling ``"true"`` (or the boolean ``true``) is read as ``"exact"`` with a
    ``DeprecationWarning`` and a logged warning; anything else raises ``ValueError`` naming
    ``where`` and the accepted modes.
    """
    if isinstance(value, (str, bool)) and value in _OLD_SPELLINGS and value is not False:
        message = (f"{where}: {value!r} is the old spelling of 'exact' (the dataset's relation); "
                   f"write 'exact'")
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        _LOG.warning(message)
        return _OLD_SPELLINGS[value]
    if isinstance(value, str) and value in RELEVANCE_MODES:
        return value
    raise ValueError(f"{where} expects one of {', '.join(repr(m) for m in RELEVANCE_MODES)} ('exact': the "
                     f"dataset's relation; 'source': only the pairs written together), got {value!r}")

_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


class Relevance:
    """Relevant (image, caption) pairs of one split.

    Args:
        num_images, num_captions: sizes of the split.
        image_index, caption_index: int arrays ``[P]`` of the relevant pairs (any order,
            duplicates allowed).
    """

    keys: np.ndarray | None  # int64 [P] sorted, or None when stored as bits
    bits: np.ndarray | None  # uint8 [N_cap, ceil(N_img / 8)], or None when stored as keys

    def __init__(self, num_images: int, num_captions: int, image_index: np.ndarray, caption_index: np.ndarray):
        image_index = np.asarray(image_index, dtype=np.int64).reshape(-1)
        caption_index = np.asarray(caption_index, dtype=np.int64).reshape(-1)
        if image_index.shape != caption_index.shape:
            raise ValueError(f"image_index {image_index.shape} and caption_index {caption_index.shape} differ")
        if image_index.size and (image_index.min() < 0 or image_index.max() >= num_images):
            raise ValueError(f"image_index out of range [0, {num_images})")
        if caption_index.size and (caption_index.min() < 0 or caption_index.max() >= num_captions):
            raise ValueError(f"caption_index out of range [0, {num_captions})")
        self.num_images = int(num_images)
        self.num_captions = int(num_captions)
        keys = np.sort(image_index * self.num_captions + caption_index)
        # one of the two storages is set: sorted keys [P] or packed bits [N_cap, ceil(N_img / 8)]
        self.keys: np.ndarray | None = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if keys.size else keys
        self.bits: np.ndarray | None = None

    @classmethod
    def from_keys(cls, num_images: int, num_captions: int, keys: np.ndarray) -> Relevance:
        """From the sorted keys ``i * num_captions + c`` (as stored in :attr:`keys`)."""
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        if keys.size and (keys[0] < 0 or keys[-1] >= num_images * num_captions or (np.diff(keys) <= 0).any()):
            raise ValueError(f"keys must be strictly increasing in [0, {num_images * num_captions})")
        relevance = cls.__new__(cls)
        relevance.num_images, relevance.num_captions = int(num_images), int(num_captions)
        relevance.keys, relevance.bits = keys, None
        return relevance

    @classmethod
    def from_bits(cls, num_images: int, num_captions: int, bits: np.ndarray) -> Relevance:
        """From the transposed dense matrix packed along images: uint8 ``[N_cap, ceil(N_img / 8)]``.

        Row ``c`` is ``np.packbits(rel[:, c])``.
        """
        bits = np.ascontiguousarray(bits, dtype=np.uint8)
        if bits.shape != (num_captions, (num_images + 7) // 8):
            raise ValueError(f"bits has shape {bits.shape}, expected ({num_captions}, {(num_images + 7) // 8})")
        relevance = cls.__new__(cls)
        relevance.num_images, relevance.num_captions = int(num_images), int(num_captions)
        relevance.keys, relevance.bits = None, bits
        return relevance

    @classmethod
    def from_caption_lists(cls, num_images: int, caption_to_images: list[np.ndarray] | list[list[int]]) -> Relevance:
        """From the relevant images of each caption."""
        lengths = np.array([len(x) for x in caption_to_images], dtype=np.int64)
        caption_index = np.repeat(np.arange(len(caption_to_images), dtype=np.int64), lengths)
        image_index = (np.concatenate([np.asarray(x, dtype=np.int64) for x in caption_to_images])
                       if len(caption_to_images) else np.zeros(0, np.int64))
        return cls(num_images, len(caption_to_images), image_index, caption_index)

    @classmethod
    def from_source(cls, caption_image: np.ndarray, num_images: int) -> Relevance:
        """One-to-one-image relation: caption ``c`` is relevant to its own image ``caption_image[c]`` only."""
        caption_image = np.asarray(caption_image, dtype=np.int64)
        return cls(num_images, len(caption_image), caption_image, np.arange(len(caption_image)))

    @classmethod
    def from_classes(cls, image_class: np.ndarray, caption_class: np.ndarray) -> Relevance:
        """Class-level relation (CUB): ``rel(i, c)`` iff image and caption share a class."""
        image_class = np.asarray(image_class, dtype=np.int64)
        caption_class = np.asarray(caption_class, dtype=np.int64)
        images, captions = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for label in np.unique(caption_class):
            img = np.flatnonzero(image_class == label)
            cap = np.flatnonzero(caption_class == label)
            images.append(np.repeat(img, len(cap)))
            captions.append(np.tile(cap, len(img)))
        return cls(len(image_class), len(caption_class), np.concatenate(images), np.concatenate(captions))

    # queries --------------------------------------------------------------------------------
    @property
    def num_pairs(self) -> int:
        """Number of relevant pairs."""
        if self.bits is not None:
            return int(_POPCOUNT[self.bits].sum())
        return int(self._sorted_keys().size)

    def columns(self, caption_index: np.ndarray) -> np.ndarray:
        """Dense bool ``[B, N_img]``: the relevant images of the captions ``caption_index``."""
        caption_index = np.asarray(caption_index, dtype=np.int64).reshape(-1)
        if self.bits is not None:
            return np.unpackbits(self.bits[caption_index], axis=1, count=self.num_images).astype(bool)
        return self.submatrix(np.arange(self.num_images), caption_index).T

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """All relevant pairs as ``(image_index [P], caption_index [P])`` (keys: by image; bits: by caption)."""
        if self.keys is not None:
            return self.keys // max(self.num_captions, 1), self.keys % max(self.num_captions, 1)
        images, captions = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for start in range(0, self.num_captions, 1024):
            rows, cols = np.nonzero(self.columns(np.arange(start, min(start + 1024, self.num_captions))))
            captions.append(rows.astype(np.int64) + start)
            images.append(cols.astype(np.int64))
        return np.concatenate(images), np.concatenate(captions)

    @cached_property
    def image_to_captions(self) -> list[list[int]]:
        """For each image, the sorted indices of its relevant captions."""
        image_index, caption_index = self.pairs()
        order = np.lexsort((caption_index, image_index))
        image_index, caption_index = image_index[order], caption_index[order]
        bounds = np.searchsorted(image_index, np.arange(self.num_images + 1))
        return [caption_index[bounds[i]: bounds[i + 1]].tolist() for i in range(self.num_images)]

    @cached_property
    def caption_to_images(self) -> list[list[int]]:
        """For each caption, the sorted indices of its relevant images."""
        image_index, caption_index = self.pairs()
        order = np.lexsort((image_index, caption_index))
        image_index, caption_index = image_index[order], caption_index[order]
        bounds = np.searchsorted(caption_index, np.arange(self.num_captions + 1))
        return [image_index[bounds[c]: bounds[c + 1]].tolist() for c in range(self.num_captions)]

    def submatrix(self, image_index: np.ndarray, caption_index: np.ndarray) -> np.ndarray:
        """Bool ``[B_img, B_cap]``: ``rel(image_index[a], caption_index[b])`` (the in-batch relation)."""
        image_index = np.asarray(image_index, dtype=np.int64).reshape(-1, 1)
        caption_index = np.asarray(caption_index, dtype=np.int64).reshape(1, -1)
        if self.bits is not None:
            packed = self.bits[caption_index, image_index >> 3]  # [B_img, B_cap]
            return ((packed >> (7 - (image_index & 7))) & 1).astype(bool)
        query = image_index * self.num_captions + caption_index  # [B_img, B_cap]
        keys = self._sorted_keys()
        if keys.size == 0:
            return np.zeros(query.shape, dtype=bool)
        position = np.minimum(np.searchsorted(keys, query), keys.size - 1)
        return keys[position] == query

    def _sorted_keys(self) -> np.ndarray:
        """The sorted pair keys ``image * N_cap + caption`` (only called when the bits storage is unset)."""
        if self.keys is None:
            raise RuntimeError("this Relevance stores packed bits, not keys")
        return self.keys

    def matrix(self) -> torch.Tensor:
        """Dense BoolTensor ``[N_img, N_cap]``."""
        if self.bits is not None:
            return torch.from_numpy(np.ascontiguousarray(self.columns(np.arange(self.num_captions)).T))
        dense = torch.zeros(self.num_images * self.num_captions, dtype=torch.bool)
        dense[torch.from_numpy(self.keys)] = True
        return dense.view(self.num_images, self.num_captions)

    def __repr__(self) -> str:
        storage = "bits" if self.bits is not None else "keys"
        return (f"Relevance(num_images={self.num_images}, num_captions={self.num_captions}, "
                f"pairs={self.num_pairs}, storage={storage!r})")
