"""Encoding a gallery index: a retrieval split encoded by a :class:`pcmr.Model` into a new index (in
memory, or batch by batch into gallery stores on disk) that keeps the model to encode queries
(:meth:`pcmr.search.gallery.GalleryIndex.encode_texts` / ``encode_images``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from pcmr.data import ENCODE_BATCH_SIZE
from pcmr.data.registry import renders_images
from pcmr.data.split import RetrievalSplit
from pcmr.encode.inputs import (
    encode_split,
    encode_split_chunks,
    image_input_size,
    image_input_transform,
    split_image_metadata,
)
from pcmr.gaussian import Gaussian
from pcmr.hub import Model
from pcmr.point_set import PointSet
from pcmr.search.image_files import files_source
from pcmr.search.manifest import STORE_DIRS
from pcmr.search.store import write_store
from pcmr.search.stored import StoredGallery

T = TypeVar("T", bound=StoredGallery)

__all__ = ["build_from_split", "build_on_disk", "query_encoder"]


def query_encoder(model: Model, split: RetrievalSplit) -> Model:
    """The model an index over ``split`` keeps to encode queries: ``model`` itself, with the test-time image
    transform of the gallery's images (:meth:`pcmr.Model.with_image_transform`: a shallow copy only when the
    gallery's images were brought to another size), so an image query is brought to the size the gallery
    was encoded at."""
    return model.with_image_transform(image_input_size(split), **image_input_transform(split))


def _meta(split: RetrievalSplit, source: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
    return {"num_images": split.num_images, "num_captions": split.num_captions, **source, **(meta or {})}


def build_from_split(cls: Callable[..., T], model: Model, split: RetrievalSplit, *, batch_size: int = ENCODE_BATCH_SIZE,
                     device: torch.device | str | None = None, meta: dict[str, Any] | None = None,
                     progress: bool | None = False) -> T:
    """Encode every image and caption of a retrieval split with ``model`` (a :class:`pcmr.Model`; eval
    mode, no grad). The embeddings are kept on CPU; the index keeps the model (:func:`query_encoder`)
    and its trained score parameters."""

    images, captions = encode_split(model.network, split, model.text_vocabulary, batch_size=batch_size,
                                    device=device, progress=progress)
    source, image_metadata = _image_source(split)
    return cls(images.to("cpu"), captions.to("cpu"), image_ids=list(split.image_ids),
               caption_ids=list(split.caption_ids), caption_texts=list(split.caption_texts),
               image_metadata=image_metadata, similarity_options=model.similarity_options,
               meta=_meta(split, source, meta), model=query_encoder(model, split))


def build_on_disk(cls: Callable[..., T], model: Model, split: RetrievalSplit, folder: str | os.PathLike[str], *,
                  dtype: str = "float16", batch_size: int = ENCODE_BATCH_SIZE, device: torch.device | str | None = None,
                  meta: dict[str, Any] | None = None, progress: bool | None = False) -> T:
    """Like :func:`build_from_split`, but each modality is encoded batch by batch straight into a
    :class:`~pcmr.search.store.GalleryStore` (``dtype`` float16 or float32) in ``folder``, the folder
    this index is then saved to: one encoding batch in memory, never the whole gallery. Build the
    candidates with :meth:`GalleryIndex.build_ann` (read from the stores shard by shard) before searching."""
    root = Path(folder)
    stores = {}
    for modality, total in (("image", split.num_images), ("caption", split.num_captions)):
        chunks = encode_split_chunks(model.network, split, model.text_vocabulary, modality, batch_size=batch_size,
                                     device=device, progress=progress)
        first = next(chunks, None)
        if first is None:
            raise ValueError(f"the {modality} loader yielded no batch; the split has no {modality}s")
        if isinstance(first, PointSet):
            raise ValueError("a gallery on disk holds one Gaussian per item; this model gives point sets "
                             "(PVSE), build its index without --on-disk")
        width = None if first.logvar is None else first.logvar.shape[1]

        def all_chunks(first: Gaussian = first, rest: Any = chunks) -> Any:
            yield first
            yield from rest

        stores[modality] = write_store(root / STORE_DIRS[modality], all_chunks(), total, first.dim, width, dtype)
    source, image_metadata = _image_source(split)
    return cls(stores["image"], stores["caption"], image_ids=list(split.image_ids),
               caption_ids=list(split.caption_ids), caption_texts=list(split.caption_texts),
               image_metadata=image_metadata, similarity_options=model.similarity_options,
               meta=_meta(split, source, meta), model=query_encoder(model, split))


def _image_source(split: Any) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """How ``pcmr serve`` can show the gallery's images, and the per-image metadata: the generator config of
    a dataset that renders its images (``DatasetSpec.renders_images``: shapes); for image files the folder holding them all
    (:func:`pcmr.search.image_files.files_source`), each ``path`` relative to it; else nothing."""
    metadata = split_image_metadata(split)
    name = getattr(split, "name", None)
    if isinstance(name, str) and renders_images(name) and "config" in getattr(split, "info", {}):
        config = {k: v for k, v in split.info["config"].items() if k != "version"}
        return {"image_source": {"kind": name, "split": split.split, "config": config}}, metadata
    if metadata and all("path" in m for m in metadata):
        source, relative = files_source([m["path"] for m in metadata])
        return {"image_source": source}, [{**m, "path": p} for m, p in zip(metadata, relative)]
    return {}, metadata

