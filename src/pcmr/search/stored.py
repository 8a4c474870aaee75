"""What the parts of the search read from a gallery index (:class:`pcmr.search.gallery.GalleryIndex`
satisfies it): its stored items, their ids, texts and metadata, the model that encodes queries (a :class:`pcmr.Model`), its
candidate sources, statistics and caches. The modules that do one job on an index (manifest,
building, backends, compose) depend on this protocol, not on the class, so nothing imports the
gallery back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.hub import Model
from pcmr.search.searcher import Gallery, GalleryStatistics

__all__ = ["MODALITIES", "StoredGallery"]

#: the two modalities of a gallery, in the order an index stores them
MODALITIES = ("image", "caption")


class StoredGallery(Protocol):
    images: Gallery
    captions: Gallery
    image_ids: list[Any]
    caption_ids: list[Any]
    caption_texts: list[str]
    image_metadata: list[dict[str, Any]] | None
    similarity_options: dict[str, dict[str, Any]]
    meta: dict[str, Any]
    model: Model | None
    ann: dict[str, Any]
    replaced_sources: list[Any]
    statistics: GalleryStatistics
    reference_cache: dict[tuple[str, str, str], Tensor]
    uncertainty_cache: dict[str, Tensor]

    @property
    def on_disk(self) -> bool: ...

    @property
    def device(self) -> torch.device: ...

    def gallery(self, modality: str) -> Gallery: ...

    def item_uncertainty(self, modality: str) -> Tensor: ...

    def refuse_on_disk(self, what: str) -> None: ...

    def append_items(self, modality: str, merged: Gaussian, ids: Sequence[Any],
                     metadata: Sequence[dict[str, Any]] | None, texts: Sequence[str] | None) -> None: ...
