"""Candidate sources of a gallery index: faiss indexes (:mod:`pcmr.search.ann`) or Milvus collections
(:mod:`pcmr.search.vectordb`) built over its stored items, and items appended to an index together
with its candidate sources. What differs between engines is their registered kind's
(:mod:`pcmr.search.sources`); this module asks the kind of each source.

Building a source for a score also computes the gallery statistics of every re-weighting that needs
one (CSLS, inverted softmax, default parameters; :class:`pcmr.search.searcher.GalleryStatistics`), so those re-rankers
work on the backend as built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pcmr.gaussian import Gaussian
from pcmr.search.candidate_sources import source_kind
from pcmr.search.faiss_source import build_faiss
from pcmr.search.milvus_source import build_milvus
from pcmr.search.searcher import DEFAULT_REFERENCE_SAMPLE
from pcmr.search.stored import MODALITIES, StoredGallery

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
    return build_faiss(index, score, modalities, index_type, shard_size=shard_size, progress=progress,
                       reference_sample=reference_sample, **params)


def commit_sources(index: StoredGallery) -> None:
    """Once ``index`` is saved: let each candidate source's kind mark it as belonging to a saved index
    (a database collection) and drop the sources it replaced (:func:`add_items`, a rebuild), so they
    lived until the new folder was in place."""
    for source in index.ann.values():
        source_kind(source.engine).commit(source)
    current = {source_kind(s.engine).key(s) for s in index.ann.values()}
    for old in index.replaced_sources:
        kind = source_kind(old.engine)
        if kind.key(old) not in current:
            kind.drop_source(old)
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
    if source is not None:
        source_kind(source.engine).add(index, modality, source, items, merged, shard_size, progress)
    index.append_items(modality, merged, ids, metadata, texts)
