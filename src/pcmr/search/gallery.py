"""A gallery index: the stored Gaussians of both modalities of a gallery and its manifest.

A :class:`GalleryIndex` holds the image Gaussians (searched by text queries) and the caption Gaussians
(searched by image queries), their ids, the caption texts and per-image metadata, the learned
similarity options of the model (e.g. PCME's match_prob ``a, b``), optionally the model and
vocabulary that encode new queries, its candidate sources (faiss indexes or Milvus collections) and
the re-rankers' gallery statistics. The model is a :class:`pcmr.Model` (what :func:`pcmr.load`
returns): the index is built from one (:meth:`GalleryIndex.build`), keeps it, encodes queries with its
``encode_text`` / ``encode_image`` and saves it as a ``save_pretrained`` folder. Each other job lives in
its own module; the methods here call it:

- :mod:`pcmr.search.manifest`: the folder on disk (``index.json`` with checksums, safetensors, no pickle),
  read into its parts, from which :meth:`GalleryIndex.load` makes the index;
- :mod:`pcmr.search.building`: encoding a split into a new index;
- :mod:`pcmr.search.backends`: building faiss / Milvus candidate sources (each kind in
  :mod:`pcmr.search.sources`), appending items;
- :class:`pcmr.search.searcher.GalleryStatistics`: the re-rankers' gallery statistics, computed once and
  saved;
- :mod:`pcmr.search.compose`: which candidate generator, exact re-scorer and re-ranker answer a query
  (:mod:`pcmr.search.searcher`), handed the index's data and never calling back into its methods.

Raw queries (caption texts, image files) are encoded here, by the model the index keeps
(:meth:`GalleryIndex.encode_texts`, :meth:`GalleryIndex.encode_images`).

Re-rankers that need a set of queries (inverted softmax, CSLS, relaxed greedy matching; HAL/RGM
section 3.3) use the *other modality of the gallery* as the reference query set: a text query is
re-ranked against the stored captions, an image query against the stored images. Re-weightings (IS,
CSLS) use a per-item statistic of at most ``meta["reference_sample"]`` (2000) of those reference
queries; matchings (GM, RGM) append the new queries as extra rows of the reference score matrix and
return their rows.

An index built *on disk* (:meth:`GalleryIndex.build_on_disk`, ``pcmr search --build RUN --on-disk``)
keeps each modality's Gaussians in a :class:`~pcmr.search.store.GalleryStore` folder written batch by
batch while encoding; it answers through its faiss candidates re-scored exactly from the rows read.
The exact backend and the matching re-rankers (gm, rgm), which score the whole gallery at once, are
refused on such an index.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pcmr.data import ENCODE_BATCH_SIZE
from pcmr.data.split import RetrievalSplit
from pcmr.device import resolve_device
from pcmr.gaussian import DEFAULT_UNCERTAINTY_MEASURE, Gaussian
from pcmr.hub import Model
from pcmr.search import backends, building, manifest
from pcmr.search.compose import DEFAULT_TOP_K, SearchHit, SearchResults, on_disk_refusal, search_index
from pcmr.search.manifest import INDEX_FORMAT, INDEX_VERSION
from pcmr.search.searcher import DEFAULT_REFERENCE_SAMPLE, Gallery, GalleryStatistics
from pcmr.search.store import GalleryStore
from pcmr.search.stored import MODALITIES

__all__ = ["GalleryIndex", "SearchHit", "SearchResults", "INDEX_FORMAT", "INDEX_VERSION"]


def _json_ids(ids: Sequence[Any], name: str) -> list[Any]:
    out = []
    for value in ids:
        if isinstance(value, Tensor):
            value = value.item()
        if not isinstance(value, (int, str)):
            raise ValueError(f"{name} must hold ints or strings (JSON-storable), got {type(value).__name__}")
        out.append(value)
    return out


class GalleryIndex:
    """Image and caption Gaussians of a gallery with ids, texts and metadata; see the module docstring.

    Args:
        images: ``Gaussian [N_img, D]``; captions: ``Gaussian [N_cap, D]`` (or both a
            :class:`~pcmr.search.store.GalleryStore` on disk, see :meth:`build_on_disk`).
        image_ids, caption_ids: one JSON-storable id (int or str) per item.
        caption_texts: ``N_cap`` strings.
        image_metadata: ``N_img`` JSON-storable dicts (e.g. file name, scene description) or None.
        similarity_options: learned options per similarity name (e.g. ``{"match_prob": {"a": .., "b": ..}}``).
        meta: provenance (model name, dataset, split, uncertainty measure ...), stored in ``index.json``.
        model: the :class:`pcmr.Model` that encodes new queries (optional; search by Gaussian works
            without it).
    """

    def __init__(self, images: Gallery, captions: Gallery, *, image_ids: Sequence[Any],
                 caption_ids: Sequence[Any], caption_texts: Sequence[str],
                 image_metadata: Sequence[dict[str, Any]] | None = None,
                 similarity_options: dict[str, dict[str, Any]] | None = None,
                 meta: dict[str, Any] | None = None, model: Model | None = None) -> None:
        if isinstance(images, GalleryStore) != isinstance(captions, GalleryStore):
            raise ValueError("images and captions must both be in memory or both be gallery stores on disk")
        if images.dim != captions.dim:
            raise ValueError(f"images have D={images.dim} but captions D={captions.dim}; expected the same D")
        for name, values, n in (("image_ids", image_ids, images.num), ("caption_ids", caption_ids, captions.num),
                                ("caption_texts", caption_texts, captions.num)):
            if len(values) != n:
                raise ValueError(f"{name} has {len(values)} entries, expected {n} (one per embedding)")
        if image_metadata is not None and len(image_metadata) != images.num:
            raise ValueError(f"image_metadata has {len(image_metadata)} entries, expected {images.num}")
        self.images = images
        self.captions = captions
        self.image_ids = _json_ids(image_ids, "image_ids")
        self.caption_ids = _json_ids(caption_ids, "caption_ids")
        self.caption_texts = [str(t) for t in caption_texts]
        self.image_metadata = [dict(m) for m in image_metadata] if image_metadata is not None else None
        self.similarity_options = {k: dict(v) for k, v in (similarity_options or {}).items()}
        self.meta = dict(meta or {})
        self.meta.setdefault("uncertainty_measure", DEFAULT_UNCERTAINTY_MEASURE)
        self.model = model
        #: gallery modality -> candidate source (pcmr.search.ann.AnnIndex or a Milvus collection)
        self.ann: dict[str, Any] = {}
        #: Milvus candidate sources replaced by a rebuild or ``add_*``, dropped by :meth:`commit_sources`
        self.replaced_sources: list[Any] = []
        #: the re-rankers' gallery statistics (CSLS, inverted softmax), saved with the index
        self.statistics = GalleryStatistics()
        #: scores of the stored items of one modality against the other (matchings' reference rows)
        self.reference_cache: dict[tuple[str, str, str], Tensor] = {}
        self.uncertainty_cache: dict[str, Tensor] = {}

    def __repr__(self) -> str:
        ann = ", ".join(f"{m}: {a.score}/{a.index_type}" for m, a in self.ann.items()) or "none"
        return (f"GalleryIndex(images={self.images.num}, captions={self.captions.num}, D={self.images.dim}, "
                f"model={'yes' if self.model is not None else 'no'}, ann={ann})")

    @property
    def on_disk(self) -> bool:
        """Whether the Gaussians are gallery stores on disk (:meth:`build_on_disk`)."""
        return isinstance(self.images, GalleryStore)

    def refuse_on_disk(self, what: str) -> None:
        """Raise one ValueError naming ``what`` and ``--on-disk`` when this index keeps its gallery on disk."""
        if self.on_disk:
            raise on_disk_refusal(what)

    # ----------------------------------------------------------------- building (pcmr.search.building)
    @classmethod
    def build(cls, model: Model, split: RetrievalSplit, *, batch_size: int = ENCODE_BATCH_SIZE,
              device: torch.device | str | None = None, meta: dict[str, Any] | None = None,
              progress: bool | None = False) -> GalleryIndex:
        """Encode every image and caption of a retrieval split with ``model`` (a :class:`pcmr.Model`, e.g.
        ``pcmr.load(RUN)``; eval mode, no grad; :func:`pcmr.search.building.build_from_split`). The
        embeddings are kept on CPU; the index keeps the model and its trained score parameters."""
        return building.build_from_split(cls, model, split, batch_size=batch_size, device=device, meta=meta,
                                         progress=progress)

    @classmethod
    def build_on_disk(cls, model: Model, split: RetrievalSplit, folder: str | os.PathLike[str], *,
                      dtype: str = "float16", batch_size: int = ENCODE_BATCH_SIZE,
                      device: torch.device | str | None = None, meta: dict[str, Any] | None = None,
                      progress: bool | None = False) -> GalleryIndex:
        """Like :meth:`build`, each modality encoded batch by batch into a gallery store (``dtype``
        float16 or float32) in ``folder``, the folder this index is then saved to
        (:func:`pcmr.search.building.build_on_disk`). Build its candidates with :meth:`build_ann`."""
        return building.build_on_disk(cls, model, split, folder, dtype=dtype, batch_size=batch_size,
                                      device=device, meta=meta, progress=progress)

    # ----------------------------------------------------------------- candidate sources (pcmr.search.backends)
    def build_ann(self, score: str = "cosine", modalities: Sequence[str] = MODALITIES, index_type: str = "auto",
                  *, shard_size: int = 65_536, progress: bool | None = False,
                  reference_sample: int = DEFAULT_REFERENCE_SAMPLE, **params: Any) -> dict[str, Any]:
        """faiss indexes over the galleries of ``modalities`` for ``score``
        (:func:`pcmr.search.backends.build_ann`). Returns ``{modality: AnnIndex}``."""
        return backends.build_ann(self, score, modalities, index_type, shard_size=shard_size, progress=progress,
                                  reference_sample=reference_sample, **params)

    def build_milvus(self, uri: str, score: str = "cosine", modalities: Sequence[str] = MODALITIES,
                     index_type: str = "auto", *, collection_prefix: str = "pcmr", shard_size: int = 65_536,
                     reference_sample: int = DEFAULT_REFERENCE_SAMPLE, owner: str | os.PathLike[str] | None = None,
                     **params: Any) -> dict[str, Any]:
        """New Milvus collections ``<collection_prefix>_<modality>_<build id>`` at ``uri`` as the candidate
        sources (:func:`pcmr.search.backends.build_milvus`); ``owner``: the folder the index will be
        saved to. Call :meth:`commit_sources` once it is saved."""
        return backends.build_milvus(self, uri, score, modalities, index_type, collection_prefix=collection_prefix,
                                     shard_size=shard_size, reference_sample=reference_sample,
                                     owner=None if owner is None else os.path.abspath(owner), **params)

    def commit_sources(self) -> None:
        """After the index is saved: mark its Milvus collections as saved and drop those that a rebuild or
        ``add_*`` replaced (:func:`pcmr.search.backends.commit_sources`); nothing to do for faiss."""
        backends.commit_sources(self)

    def add_images(self, images: Gaussian, image_ids: Sequence[Any],
                   image_metadata: Sequence[dict[str, Any]] | None = None, *, shard_size: int = 65_536,
                   progress: bool | None = False) -> None:
        """Append gallery images (and to the image ANN index, when built)."""
        backends.add_items(self, "image", images, image_ids, image_metadata, None, shard_size=shard_size,
                           progress=progress)

    def add_captions(self, captions: Gaussian, caption_ids: Sequence[Any], caption_texts: Sequence[str], *,
                     shard_size: int = 65_536, progress: bool | None = False) -> None:
        """Append gallery captions (and to the caption ANN index, when built)."""
        backends.add_items(self, "caption", captions, caption_ids, None, caption_texts, shard_size=shard_size,
                           progress=progress)

    def append_items(self, modality: str, merged: Gaussian, ids: Sequence[Any],
                     metadata: Sequence[dict[str, Any]] | None, texts: Sequence[str] | None) -> None:
        """Store ``merged`` (the old items of ``modality`` followed by new ones) with the new items' ids,
        metadata and texts; the caches that depend on the gallery are dropped."""
        added = merged.num - self.gallery(modality).num
        if modality == "image":
            if self.image_metadata is not None or metadata is not None:
                base = self.image_metadata or [{} for _ in range(self.images.num)]
                self.image_metadata = base + [dict(m) for m in (metadata or [{} for _ in range(added)])]
            self.images, self.image_ids = merged, self.image_ids + _json_ids(ids, "image_ids")
        else:
            self.captions, self.caption_ids = merged, self.caption_ids + _json_ids(ids, "caption_ids")
            self.caption_texts = self.caption_texts + [str(t) for t in texts or []]
        self.reference_cache.clear()
        self.uncertainty_cache.clear()
        self.statistics.clear()  # recomputed on first use: the gallery or its reference queries changed

    # ----------------------------------------------------------------- storage (pcmr.search.manifest)
    def save(self, directory: str | os.PathLike[str], include_model: bool = True) -> Path:
        """Write the index folder (:mod:`pcmr.search.manifest`). ``include_model=False`` stores only the
        embeddings (search by Gaussian queries still works)."""
        return manifest.save_index(self, directory, include_model)

    @classmethod
    def load(cls, directory: str | os.PathLike[str], device: torch.device | str | None = None,
             load_model: bool = True) -> GalleryIndex:
        """Read an index folder written by :meth:`save`; embeddings (and model) go to ``device``
        (default CPU). Raises FileNotFoundError / ValueError naming the file and the problem."""
        if device is not None:
            device = resolve_device(device, what="device")
        folder = manifest.read_index(directory, device, load_model)
        index = cls(folder.galleries["image"], folder.galleries["caption"], **folder.fields, model=folder.model)
        index.ann.update(folder.sources)
        index.statistics.load(folder.root, folder.statistics, folder.meta_path,
                              {modality: gallery.num for modality, gallery in folder.galleries.items()})
        index.uncertainty_cache.update(folder.uncertainty)
        return index

    # ----------------------------------------------------------------- stored items
    def gallery(self, modality: str) -> Gallery:
        """The stored Gaussians of one modality (``"image"`` or ``"caption"``): in memory, or a
        :class:`~pcmr.search.store.GalleryStore` for an on-disk index."""
        if modality not in MODALITIES:
            raise ValueError(f"modality must be one of {list(MODALITIES)}, got {modality!r}")
        return self.images if modality == "image" else self.captions

    def item(self, modality: str, position: int) -> Gaussian:
        """The stored Gaussian ``[1, D]`` of item ``position`` of ``modality`` (read from disk for an
        on-disk index)."""
        gallery = self.gallery(modality)
        if not 0 <= position < gallery.num:
            raise IndexError(f"{modality} {position} out of range [0, {gallery.num})")
        return gallery.rows(torch.tensor([position])) if isinstance(gallery, GalleryStore) else gallery[position]

    def item_uncertainty(self, modality: str) -> Tensor:
        """Uncertainty ``[N]`` of every stored item of ``modality`` (``meta["uncertainty_measure"]``), cached."""
        cached = self.uncertainty_cache.get(modality)
        gallery = self.gallery(modality)
        if cached is None or cached.shape[0] != gallery.num:
            measure = self.meta["uncertainty_measure"]
            cached = (torch.cat([chunk.uncertainty(measure) for _, chunk in gallery.chunks()])
                      if isinstance(gallery, GalleryStore) else gallery.uncertainty(measure))
            self.uncertainty_cache[modality] = cached
        return cached

    @property
    def device(self) -> torch.device:
        """Where the stored Gaussians (and queries encoded for them) live; CPU for an on-disk index."""
        return torch.device("cpu") if isinstance(self.images, GalleryStore) else self.images.device

    # ----------------------------------------------------------------- search (pcmr.search.compose)
    def search(self, query: Gaussian, k: int = DEFAULT_TOP_K, similarity: str = "cosine", rerank: str = "nns", *,
               modality: str = "caption", rerank_options: dict[str, Any] | None = None,
               backend: str = "auto", candidates: int | None = None, **options: Any) -> SearchResults:
        """Top-k gallery items for each query Gaussian (:func:`pcmr.search.compose.search_index`).

        Args:
            query: ``Gaussian [Q, D]`` of the query modality.
            k: number of results per query (at most the gallery size).
            similarity: a ``pcmr.similarity`` name; the stored learned options of that similarity are
                used, overridden by ``**options``.
            rerank: a ``pcmr.inference`` re-ranker name; those needing a query set use the stored
                items of the query modality as reference queries (module docstring).
            modality: the modality of the query: ``"caption"`` (text query, image results) or
                ``"image"`` (image query, caption results).
            rerank_options: parameters of the re-ranker by their names in ``pcmr.inference``:
                ``beta`` (is), ``csls_k`` (csls), ``lam`` (rgm), e.g. ``{"csls_k": 10}``; default:
                ``meta["rerank_options"]`` of the index, then the library defaults.
            backend: ``"exact"`` (score the whole gallery), ``"faiss"`` / ``"milvus"`` (candidates from the
                index's ANN source, re-scored exactly) or ``"auto"`` (the ANN source when built for the
                gallery). Re-rankers with a matching (gm, rgm) run on the exact backend only.
            candidates: ANN candidates per query re-scored exactly (default 100; under is/csls, every
                item on galleries of up to 50,000 items).

        Returns:
            :class:`SearchResults`; its ``notes`` say when an approximate answer may differ from the exact one.
        """
        gallery_modality = "image" if modality == "caption" else "caption"
        item_uncertainty = None
        if modality in MODALITIES and not self.gallery(gallery_modality).is_point:
            item_uncertainty = self.item_uncertainty(gallery_modality)
        return search_index(self, query, k, similarity, rerank, modality=modality, rerank_options=rerank_options,
                            backend=backend, candidates=candidates, item_uncertainty=item_uncertainty, **options)

    # ----------------------------------------------------------------- queries (the model the index keeps)
    def _encoder(self) -> Model:
        if self.model is None:
            raise ValueError("this index holds no model/vocabulary (saved with include_model=False); "
                             "it can only be searched with Gaussian queries (GalleryIndex.search)")
        return self.model

    def encode_texts(self, texts: str | Sequence[str]) -> Gaussian:
        """Caption text(s) encoded by the index's model (:meth:`pcmr.Model.encode_text`), ``Gaussian [Q, D]``."""
        model = self._encoder()
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
            raise ValueError(f"text queries must be non-empty strings, got {texts!r}")
        return model.encode_text(texts)

    def encode_images(self, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> Gaussian:
        """Image file(s) encoded by the index's model (:meth:`pcmr.Model.encode_image`: decoded with Pillow and
        preprocessed like the gallery's images at test time), ``Gaussian [Q, D]``."""
        model = self._encoder()
        if model.image_size is None:
            raise ValueError("this model reads precomputed image features, not pixels; image-file queries need a "
                             "model trained on pixel images")
        paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        return model.encode_image([os.fspath(p) for p in paths])

    def search_text(self, texts: str | Sequence[str], k: int = DEFAULT_TOP_K, similarity: str = "cosine",
                    rerank: str = "nns", **kwargs: Any) -> SearchResults:
        """Encode caption text(s) with the stored model (``Model.encode_text``) and search the image gallery."""
        return self.search(self.encode_texts(texts), k, similarity, rerank, modality="caption", **kwargs)

    def search_image(self, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], k: int = DEFAULT_TOP_K,
                     similarity: str = "cosine", rerank: str = "nns", **kwargs: Any) -> SearchResults:
        """Decode image file(s) with Pillow, preprocess them like the gallery's images, encode with the stored
        model (``Model.encode_image``) and search the caption gallery."""
        return self.search(self.encode_images(paths), k, similarity, rerank, modality="image", **kwargs)
