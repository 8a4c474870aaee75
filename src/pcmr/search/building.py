"""Encoding for a gallery index: a retrieval split encoded into a new index (in memory, or batch by
batch into gallery stores on disk), and raw queries (caption texts, image files) encoded with the
index's model."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from pcmr.data import ENCODE_BATCH_SIZE, Vocabulary
from pcmr.data.registry import renders_images
from pcmr.data.split import RetrievalSplit
from pcmr.encode.inputs import (
    encode_image_files,
    encode_split,
    encode_split_chunks,
    encode_texts,
    image_input_size,
    image_input_transform,
    split_image_metadata,
)
from pcmr.gaussian import Gaussian
from pcmr.models.model import RetrievalModel
from pcmr.point_set import PointSet
from pcmr.search.image_files import files_source
from pcmr.search.manifest import STORE_DIRS
from pcmr.search.store import write_store
from pcmr.search.stored import StoredGallery

T = TypeVar("T", bound=StoredGallery)

__all__ = ["build_from_split", "build_on_disk", "encode_image_queries", "encode_text_queries"]

def build_from_split(cls: Callable[..., T], model: RetrievalModel, split: RetrievalSplit, vocab: Vocabulary, *, batch_size: int = ENCODE_BATCH_SIZE,
          device: torch.device | str | None = None, similarity_options: dict[str, dict[str, Any]] | None = None,
          meta: dict[str, Any] | None = None, progress: bool | None = False) -> T:
    """Encode every image and caption of a retrieval split with ``model`` (eval mode, no grad).

    ``split`` is a ``pcmr.data`` retrieval split (``image_ids``, ``caption_ids``, ``caption_texts``,
    loaders); ``vocab`` its vocabulary. The embeddings are kept on CPU.
    """

    images, captions = encode_split(model, split, vocab, batch_size=batch_size, device=device,
                                    progress=progress)
    source, image_metadata = _image_source(split)
    meta = {"num_images": split.num_images, "num_captions": split.num_captions,
            "image_size": image_input_size(split), **image_input_transform(split), **source, **(meta or {})}
    return cls(images.to("cpu"), captions.to("cpu"), image_ids=list(split.image_ids),
               caption_ids=list(split.caption_ids), caption_texts=list(split.caption_texts),
               image_metadata=image_metadata, similarity_options=similarity_options,
               meta=meta, model=model, vocab=vocab)

def build_on_disk(cls: Callable[..., T], model: RetrievalModel, split: RetrievalSplit, vocab: Vocabulary,
                  folder: str | os.PathLike[str], *, dtype: str = "float16", batch_size: int = ENCODE_BATCH_SIZE,
                  device: torch.device | str | None = None,
                  similarity_options: dict[str, dict[str, Any]] | None = None,
                  meta: dict[str, Any] | None = None, progress: bool | None = False) -> T:
    """Like :func:`build_from_split`, but each modality is encoded batch by batch straight into a
    :class:`~pcmr.search.store.GalleryStore` (``dtype`` float16 or float32) in ``folder``, the folder
    this index is then saved to: one encoding batch in memory, never the whole gallery. Build the
    candidates with :meth:`GalleryIndex.build_ann` (read from the stores shard by shard) before searching."""
    root = Path(folder)
    stores = {}
    for modality, total in (("image", split.num_images), ("caption", split.num_captions)):
        chunks = encode_split_chunks(model, split, vocab, modality, batch_size=batch_size, device=device,
                                     progress=progress)
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
    meta = {"num_images": split.num_images, "num_captions": split.num_captions,
            "image_size": image_input_size(split), **image_input_transform(split), **source, **(meta or {})}
    return cls(stores["image"], stores["caption"], image_ids=list(split.image_ids),
               caption_ids=list(split.caption_ids), caption_texts=list(split.caption_texts),
               image_metadata=image_metadata, similarity_options=similarity_options,
               meta=meta, model=model, vocab=vocab)


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


def _require_encoder(index: StoredGallery) -> tuple[RetrievalModel, Vocabulary]:
    if index.model is None or index.vocab is None:
        raise ValueError("this index holds no model/vocabulary (saved with include_model=False); "
                         "it can only be searched with Gaussian queries (GalleryIndex.search)")
    return index.model, index.vocab


def encode_text_queries(index: StoredGallery, texts: str | Sequence[str]) -> Gaussian:
    """Caption text(s) encoded with the index's model, ``Gaussian [Q, D]`` on the index's device."""
    model, vocab = _require_encoder(index)
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
        raise ValueError(f"text queries must be non-empty strings, got {texts!r}")
    return encode_texts(model, vocab, texts, device=index.device)


def encode_image_queries(index: StoredGallery,
                         paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> Gaussian:
    """Image file(s) decoded with Pillow, preprocessed like the gallery's images at test time (the index's
    ``image_size``, ``image_resize``, ``resize_size``; an index without ``image_resize``: a square resize)
    and encoded with the index's model, ``Gaussian [Q, D]``."""
    model, _ = _require_encoder(index)
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return encode_image_files(model, paths, device=index.device, image_size=index.meta.get("image_size"),
                              image_resize=index.meta.get("image_resize", "square"),
                              resize_size=index.meta.get("resize_size"))
