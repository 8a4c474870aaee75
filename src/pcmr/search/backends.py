"""Candidate sources of a gallery index: faiss indexes (:mod:`pcmr.search.ann`) or Milvus collections
(:mod:`pcmr.search.vectordb`) built over its stored items, and items appended to an index together
with its faiss indexes.

Building a source for a score also computes the gallery statistics of every re-weighting that needs
one (CSLS, inverted softmax, default parameters; :mod:`pcmr.search.statistics`), so those re-rankers
work on the backend as built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pcmr.gaussian import Gaussian
from pcmr.search.ann import ProgressCounter
from pcmr.search.ann import build_ann as build_ann_index
from pcmr.search.searcher import DEFAULT_REFERENCE_SAMPLE
from pcmr.search.stored import MODALITIES, StoredGallery
from pcmr.search.vectordb import (
    MilvusCandidates,
    collection_name,
    collection_prefix,
    drop_collection,
    drop_unfinished,
    new_build_id,
)

__all__ = ["add_items", "build_ann", "build_milvus", "commit_sources"]


def build_ann(index: StoredGallery, score: str = "cosine", modalities: Sequence[str] = MODALITIES,
              index_type: str = "auto", *, shard_size: int = 65_536, progress: bool | None = False,
              reference_sample: int = DEFAULT_REFERENCE_SAMPLE, **params: Any) -> dict[str, Any]:
    """A faiss index (:class:`pcmr.search.ann.AnnIndex`) over each gallery modality of ``index`` in
    ``modalities`` for ``score`` (cosine, l2, wasserstein or csd), filled in shards of ``shard_size``.

    ``index_type``: flat, ivf, hnsw, ivfpq (compressed) or auto (by gallery size); ``params``:
    ``nlist``, ``nprobe``, ``hnsw_m``, ``ef_construction``, ``ef_search``, ``train_size``, ``pq_m``,
    ``opq``, ``memory_budget``, ``refine``. Gallery statistics for ``score`` from at most
    ``reference_sample`` stored items of the other modality. Returns ``{modality: AnnIndex}``.
    """
    index.meta["reference_sample"] = int(reference_sample)
    for modality in modalities:
        gallery = index.gallery(modality)
        if gallery.num == 0:
            continue
        index.ann[modality] = build_ann_index(gallery, score, index_type, shard_size=shard_size, progress=progress,
                                              desc=f"{modality} index", **params)
        index.statistics.compute_defaults(modality, score, index.similarity_options.get(score, {}),
                                          int(reference_sample))
    return dict(index.ann)


def build_milvus(index: StoredGallery, uri: str, score: str = "cosine", modalities: Sequence[str] = MODALITIES,
                 index_type: str = "auto", *, collection_prefix: str = "pcmr", shard_size: int = 65_536,
                 reference_sample: int = DEFAULT_REFERENCE_SAMPLE, owner: str | None = None,
                 **params: Any) -> dict[str, Any]:
    """Write the ANN vectors of each modality in ``modalities`` to a new Milvus collection
    ``<collection_prefix>_<modality>_<build id>`` at ``uri`` (a Milvus Lite ``.db`` file, recorded as
    an absolute path, or a server address) and use it as ``index``'s candidate source; the Gaussians
    stay in the index's own files. ``owner``: the index folder this index will be saved to (recorded
    in the collections, so those of a killed build are recognised and dropped by the next build with
    the prefix, :func:`pcmr.search.vectordb.drop_unfinished`). A candidate source this replaces is
    dropped by :func:`commit_sources` once the index is saved. ``params``: ``nlist``, ``nprobe``
    (IVF_FLAT). Gallery statistics as in :func:`build_ann`."""
    index.refuse_on_disk("the milvus backend")
    index.meta["reference_sample"] = int(reference_sample)
    drop_unfinished(uri, collection_prefix)
    build_id = new_build_id()
    for modality in modalities:
        gallery = index.gallery(modality)
        assert isinstance(gallery, Gaussian)
        if gallery.num == 0:
            continue
        _replace_source(index, modality, _milvus_source(uri, collection_name(collection_prefix, modality, build_id),
                                                        score, gallery, index_type, shard_size, build_id, owner,
                                                        **params))
        index.statistics.compute_defaults(modality, score, index.similarity_options.get(score, {}),
                                          int(reference_sample))
    return dict(index.ann)


def _milvus_source(uri: str, collection: str, score: str, gallery: Gaussian, index_type: str, shard_size: int,
                   build_id: str, owner: str | None, **params: Any) -> MilvusCandidates:
    source = MilvusCandidates.create(uri, collection, score, gallery, gallery.num, index_type, build_id=build_id,
                                     owner=owner, **params)
    for start in range(0, gallery.num, shard_size):
        source.add(gallery[start:start + shard_size], first_id=start)
    source.finish()
    return source


def _replace_source(index: StoredGallery, modality: str, source: Any) -> None:
    old = index.ann.get(modality)
    if old is not None and old.engine == "milvus":
        index.replaced_sources.append(old)
    index.ann[modality] = source


def commit_sources(index: StoredGallery) -> None:
    """Once ``index`` is saved: mark its Milvus collections as belonging to a saved index and drop the
    ones it replaced (:func:`build_milvus`, :func:`add_items`), so they lived until the new folder was
    in place."""
    for source in index.ann.values():
        if source.engine == "milvus":
            source.commit()
    current = {(s.uri, s.collection) for s in index.ann.values() if s.engine == "milvus"}
    for old in index.replaced_sources:
        if (old.uri, old.collection) not in current:
            drop_collection(old.uri, old.collection, old.build_id)
    index.replaced_sources.clear()


def add_items(index: StoredGallery, modality: str, items: Gaussian, ids: Sequence[Any],
              metadata: Sequence[dict[str, Any]] | None, texts: Sequence[str] | None, *, shard_size: int = 65_536,
              progress: bool | None = False) -> None:
    """Append gallery items of ``modality`` to ``index`` and to its faiss index of that modality (when
    built); the cached statistics and uncertainties are recomputed on first use."""
    index.refuse_on_disk(f"adding {modality}s")
    old = index.gallery(modality)
    assert isinstance(old, Gaussian)
    if items.dim != old.dim:
        raise ValueError(f"new {modality}s have D={items.dim}, the index D={old.dim}")
    new_logvar, old_logvar = items.logvar, old.logvar
    if (new_logvar is None) != (old_logvar is None) or (
            new_logvar is not None and old_logvar is not None and old.num
            and new_logvar.shape[1] != old_logvar.shape[1]):
        raise ValueError(f"new {modality}s ({items!r}) must have the variance shape of the index ({old!r})")
    if len(ids) != items.num or (texts is not None and len(texts) != items.num):
        raise ValueError(f"give one id{' and one text' if texts is not None else ''} per new {modality}")
    if metadata is not None and len(metadata) != items.num:
        raise ValueError(f"give one metadata dict per new {modality} ({items.num}), got {len(metadata)}")
    items = items.to(device=old.device, dtype=old.dtype)
    merged = Gaussian(torch.cat([old.mean, items.mean]),
                      None if old_logvar is None or new_logvar is None else torch.cat([old_logvar, new_logvar]))
    source = index.ann.get(modality)
    if source is not None and source.engine == "milvus":
        # a new collection of old and new items under a new build id: the saved index keeps its own until
        # the new folder is in place (commit_sources drops it then)
        build_id = new_build_id()
        owner = (source.settings.get("owner") or {}).get("index")
        drop_unfinished(source.uri, collection_prefix(source.collection),  # of a killed --add or build
                        keep={s.collection for s in index.ann.values() if s.engine == "milvus"})
        _replace_source(index, modality, _milvus_source(
            source.uri, collection_name(collection_prefix(source.collection), modality, build_id), source.score,
            merged, source.index_type, shard_size, build_id, owner,
            **{k: v for k, v in source.params.items() if k in ("nlist", "nprobe")}))
    elif source is not None:
        bar = ProgressCounter(progress, items.num, f"{modality} index")
        try:
            index.ann[modality].add(items, shard_size=shard_size, progress=bar)
        finally:
            bar.close()
    index.append_items(modality, merged, ids, metadata, texts)
