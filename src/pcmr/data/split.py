"""``RetrievalSplit``: one split of an image-caption dataset with its exact relevance relation.

A plain container: the dataset loaders build it, and the text, augmentation and batching
modules read it (:func:`pcmr.data.batching.train_loader` and friends); it imports none of them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from pcmr.data.errors import SkippedItem
from pcmr.data.images import ImageSource
from pcmr.relevance import RELEVANCE_MODES, Relevance, relevance_mode

__all__ = ["RetrievalSplit", "TRAINING_SPLITS", "RELEVANCE_MODES"]

TRAINING_SPLITS = ("train", "trainval", "train+restval", "train_minus_val")


class RetrievalSplit:
    """Images, captions and the relation ``rel(i, c)`` of one split (``docs/datasets.md``).

    Attributes:
        name: dataset name (``"shapes"``, ``"coco"``, ...); ``split``: split name.
        images: an :class:`~pcmr.data.images.ImageSource` (pixels or features).
        caption_texts: raw caption strings ``[N_cap]``.
        caption_image: int array ``[N_cap]``, the image each caption was written for.
        relevance: :class:`~pcmr.data.relevance.Relevance` (defaults to ``caption_image``).
        image_ids / caption_ids: dataset ids (COCO image id / caption annotation id where known).
        image_labels / caption_labels: BoolTensor ``[N, C]`` class labels for PMRP, or None.
            Captions take the labels of their source image (COCO convention); an all-False
            row means "no labels" (PMRP skips such queries).
        label_names: names of the ``C`` label columns, or None.
        skipped: items the loader left out (``on_error="skip"``), with the reason.
        info: JSON-ready dataset-specific details (e.g. shapes scenes, id kinds).
    """

    def __init__(
        self,
        *,
        name: str,
        split: str,
        images: ImageSource,
        caption_texts: Sequence[str],
        caption_image: np.ndarray,
        relevance: Relevance | None = None,
        image_ids: Sequence[Any] | None = None,
        caption_ids: Sequence[Any] | None = None,
        image_labels: torch.Tensor | None = None,
        label_names: Sequence[str] | None = None,
        skipped: Sequence[SkippedItem] = (),
        info: dict[str, Any] | None = None,
    ) -> None:
        num_images, num_captions = len(images), len(caption_texts)
        caption_image = np.asarray(caption_image, dtype=np.int64)
        if caption_image.shape != (num_captions,):
            raise ValueError(f"caption_image has shape {caption_image.shape}, expected ({num_captions},)")
        if num_captions and (caption_image.min() < 0 or caption_image.max() >= num_images):
            raise ValueError(f"caption_image out of range [0, {num_images})")
        self.name = name
        self.split = split
        self.images = images
        self.caption_texts = list(caption_texts)
        self.caption_image = caption_image
        self.relevance = relevance if relevance is not None else Relevance.from_source(caption_image, num_images)
        if (self.relevance.num_images, self.relevance.num_captions) != (num_images, num_captions):
            raise ValueError("relevance size does not match the split")
        self.image_ids = list(image_ids) if image_ids is not None else list(range(num_images))
        self.caption_ids = list(caption_ids) if caption_ids is not None else list(range(num_captions))
        if len(self.image_ids) != num_images or len(self.caption_ids) != num_captions:
            raise ValueError("image_ids / caption_ids lengths do not match the split")
        if image_labels is not None and (image_labels.dtype != torch.bool or image_labels.shape[0] != num_images):
            raise ValueError(f"image_labels must be BoolTensor [{num_images}, C]")
        self.image_labels = image_labels
        self.label_names = list(label_names) if label_names is not None else None
        self.skipped = list(skipped)
        self.info = dict(info or {})

    # sizes and relation ------------------------------------------------------------------
    @property
    def num_images(self) -> int:
        return len(self.images)

    @property
    def num_captions(self) -> int:
        return len(self.caption_texts)

    @property
    def is_training(self) -> bool:
        """Whether this is a training split (the only kind a vocabulary may be built from)."""
        return self.split in TRAINING_SPLITS

    @property
    def image_to_captions(self) -> list[list[int]]:
        """Relevant caption indices of each image (sparse form of ``relevance_matrix``)."""
        return self.relevance.image_to_captions

    @property
    def caption_to_images(self) -> list[list[int]]:
        """Relevant image indices of each caption."""
        return self.relevance.caption_to_images

    def relevance_matrix(self) -> torch.Tensor:
        """Dense BoolTensor ``[N_img, N_cap]`` of ``rel(i, c)``."""
        return self.relevance.matrix()

    @property
    def caption_labels(self) -> torch.Tensor | None:
        """BoolTensor ``[N_cap, C]``: each caption takes its source image's labels (COCO convention)."""
        if self.image_labels is None:
            return None
        return self.image_labels[torch.from_numpy(self.caption_image)]

    def source_relevance(self) -> Relevance:
        """The relation "caption ``c`` was written for image ``i``" (``caption_image``): what COCO /
        Flickr30k annotate, so a caption that fits another image counts as a negative there."""
        return Relevance.from_source(self.caption_image, self.num_images)

    def relevance_by_mode(self, mode: str) -> Relevance:
        """``"source"``: :meth:`source_relevance`; ``"exact"``: the split's relation (one of
        :data:`pcmr.relevance.RELEVANCE_MODES`)."""
        mode = relevance_mode(mode)
        return self.source_relevance() if mode == "source" else self.relevance

    def with_relevance(self, mode: str) -> RetrievalSplit:
        """This split with :meth:`relevance_by_mode` as its relation (a shallow copy sharing the
        images and captions; ``self`` itself for ``"exact"``). Training on
        ``with_relevance("source")`` makes the in-batch positives the written pairs only."""
        relevance = self.relevance_by_mode(mode)
        if relevance is self.relevance:
            return self
        other = copy.copy(self)
        other.relevance = relevance
        return other

    @property
    def source_captions(self) -> list[list[int]]:
        """For each image, the captions written for it (``caption_image == i``)."""
        order = np.argsort(self.caption_image, kind="stable")
        bounds = np.searchsorted(self.caption_image[order], np.arange(self.num_images + 1))
        return [order[bounds[i]: bounds[i + 1]].tolist() for i in range(self.num_images)]

    def __repr__(self) -> str:
        return (f"RetrievalSplit(name={self.name!r}, split={self.split!r}, images={self.num_images} "
                f"({self.images.kind}), captions={self.num_captions}, relevant_pairs={self.relevance.num_pairs})")
