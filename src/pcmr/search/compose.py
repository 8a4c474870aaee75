"""Which search answers a query over a :class:`~pcmr.search.gallery.GalleryIndex`, and what it returns:
the candidate generator (exact, faiss or Milvus), the exact re-scorer and the re-ranker of
:mod:`pcmr.search.searcher`, composed for the query's similarity, re-ranker and backend, and the
:class:`SearchResults` (one :class:`SearchHit` per listed item, with its id, text or metadata) of the
top-k they find.

- ``backend="exact"``: every item scored exactly (:class:`~pcmr.search.searcher.ExactCandidates`);
- ``"faiss"`` / ``"milvus"``: the index's ANN source proposes candidates; ``"auto"``: the ANN source
  when the index has one for the gallery modality, else exact;
- re-rankers with a matching (gm, rgm, ``is+rgm`` ...) rank the whole gallery together with the
  stored items of the query modality as reference queries (:class:`~pcmr.search.searcher.MatchingRanker`);
  they need every item scored, so they run on the exact generator of an in-memory index;
- re-weightings with a gallery statistic (is, csls) re-order the gallery by a per-item statistic, so
  the ANN source's nearest neighbours need not hold their top-k. Without an explicit candidate
  count, every item is re-scored on galleries of at most :data:`RESCORE_ALL_MAX` items (the result is
  the exact search's); on larger galleries, or with fewer candidates asked for, the results carry a
  note that they may differ and how to get the exact ones.

The index is read here as data (the stored items, candidate sources, statistics and caches of
:class:`~pcmr.search.stored.StoredGallery`); what needs the index's own methods (the items'
uncertainties) is handed in by :meth:`GalleryIndex.search <pcmr.search.gallery.GalleryIndex.search>`,
so a search never calls back up into the index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.inference import Reranker, get_reranker
from pcmr.registry import Registry
from pcmr.scoring import check_similarity_supported, score_matrix
from pcmr.search.candidate_sources import CANDIDATE_SOURCES
from pcmr.search.searcher import (
    DEFAULT_CANDIDATES,
    DEFAULT_REFERENCE_SAMPLE,
    CandidateSearcher,
    CandidateSource,
    ExactCandidates,
    ExactRescorer,
    ExactSearcher,
    Gallery,
    MatchingRanker,
    Scoring,
    Search,
)
from pcmr.search.store import GalleryStore
from pcmr.search.stored import MODALITIES, StoredGallery
from pcmr.suggest import unknown_name

__all__ = ["BACKENDS", "SEARCH_BACKENDS", "Backend", "DEFAULT_TOP_K", "RESCORE_ALL_MAX", "SearchHit", "SearchResults",
           "backend_names", "candidate_count", "get_backend", "hits_of", "on_disk_refusal", "plan_search", "search_index",
           "search_notes", "trained_similarity"]

#: results per query when a search names no k (the library, pcmr search and pcmr serve)
DEFAULT_TOP_K = 10


# ----------------------------------------------------------------- what a search returns
@dataclass(frozen=True)
class SearchHit:
    """One retrieved gallery item. ``score`` is the (re-ranked) score, higher = better;
    ``uncertainty`` the item's uncertainty (None for point embeddings)."""

    rank: int
    index: int
    id: Any
    score: float
    uncertainty: float | None
    text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchResults:
    """Top-k results of Q queries.

    ``indices [Q, k]`` (gallery positions), ``scores [Q, k]``, ``uncertainty [Q, k]`` (None for a
    point gallery), ``query_uncertainty [Q]`` (None for point queries), ``hits[q]`` the same as
    :class:`SearchHit` objects.
    """

    query_modality: str
    gallery_modality: str
    similarity: str
    rerank: str
    indices: Tensor
    scores: Tensor
    uncertainty: Tensor | None
    query_uncertainty: Tensor | None
    hits: list[list[SearchHit]]
    #: lines for the user about how the results were found (e.g. a re-ranker over candidate lists
    #: that may differ from the exact search), printed once per call
    notes: list[str] = field(default_factory=list)

    def to_text(self, queries: Sequence[str] | None = None) -> str:
        """A plain-text listing: one block per query, one line per hit."""
        lines = []
        for q, hits in enumerate(self.hits):
            label = queries[q] if queries is not None else f"query {q}"
            unc = ""
            if self.query_uncertainty is not None:
                unc = f"  (query uncertainty {float(self.query_uncertainty[q]):.3f})"
            lines.append(f"{label}{unc}  [{self.similarity}, {self.rerank}]")
            lines.append(f"{'rank':>4}  {'score':>10}  {'uncert.':>9}  {'id':<12} item")
            for hit in hits:
                u = "-" if hit.uncertainty is None else f"{hit.uncertainty:.3f}"
                item = hit.text if hit.text is not None else json.dumps(hit.metadata, ensure_ascii=False)
                lines.append(f"{hit.rank:>4}  {hit.score:>10.4f}  {u:>9}  {str(hit.id):<12} {item}")
        return "\n".join(lines)


def hits_of(indices: Tensor, scores: Tensor, uncertainty: Tensor | None, ids: Sequence[Any],
            texts: Sequence[str] | None, metadata: Sequence[dict[str, Any]] | None) -> list[list[SearchHit]]:
    """:class:`SearchHit` rows of ``indices, scores [Q, k]`` (slots ``-1`` an approximate index could
    not fill are left out); ``texts`` for a caption gallery, ``metadata`` for an image gallery."""
    out = []
    index_rows, score_rows = indices.tolist(), scores.tolist()
    unc_rows = None if uncertainty is None else uncertainty.tolist()
    for q, (index_row, score_row) in enumerate(zip(index_rows, score_rows)):
        row = []
        for r, (i, score) in enumerate(zip(index_row, score_row)):
            if i < 0:
                continue
            text = texts[i] if texts is not None else None
            item_metadata = metadata[i] if metadata else {}
            unc = None if unc_rows is None else unc_rows[q][r]
            row.append(SearchHit(r + 1, i, ids[i], score, unc, text, item_metadata))
        out.append(row)
    return out


# ----------------------------------------------------------------- the backends
@dataclass(frozen=True)
class Backend:
    """A search backend: ``engine``, the engine of the candidate source it requires (``faiss``, ``milvus``;
    None: none required), ``exact``: every item is scored exactly, no candidate source read."""

    name: str
    engine: str | None = None
    exact: bool = False


#: the search backends that need no candidate source, by name; every registered kind of candidate source
#: (:data:`pcmr.search.sources.CANDIDATE_SOURCES`: faiss, milvus) is a backend of its engine's name too
SEARCH_BACKENDS: Registry[Backend] = Registry("backend")
SEARCH_BACKENDS.register(Backend("auto"))  # the index's candidate source for the gallery modality when it has one, else exact
SEARCH_BACKENDS.register(Backend("exact", exact=True))


def backend_names() -> tuple[str, ...]:
    """Every search backend: auto, exact and one per registered kind of candidate source."""
    return (*SEARCH_BACKENDS.names(), *CANDIDATE_SOURCES.names())


#: the names of the search backends (``--backend``) when pcmr is loaded
BACKENDS = backend_names()


def get_backend(name: str) -> Backend:
    """The :class:`Backend` called ``name`` (ValueError naming the near miss and the accepted ones otherwise)."""
    found = SEARCH_BACKENDS.find(name)
    if found is not None:
        return found
    if name in CANDIDATE_SOURCES:
        return Backend(name, engine=name)
    raise ValueError(unknown_name("backend", name, list(backend_names())))


#: galleries up to this size are re-scored whole under a re-weighting with a gallery statistic
RESCORE_ALL_MAX = 50_000


def candidate_count(reranker: Reranker, gallery_size: int, candidates: int | None) -> tuple[int | None, str | None]:
    """Candidates per query for ``reranker`` over an ANN source, and a note when the result may differ
    from the exact search (module docstring). ``candidates``: the count asked for (None: default)."""
    if not reranker.needs_gallery_statistic:
        return candidates, None
    if candidates is None and gallery_size <= RESCORE_ALL_MAX:
        return gallery_size, None
    width = DEFAULT_CANDIDATES if candidates is None else candidates
    if width >= gallery_size:
        return width, None
    return width, (f"re-ranker {reranker.name!r} re-weights every item by a statistic of the whole gallery, so its "
                   f"top-k among {width} candidates per query may differ from the exact search; ask for "
                   f"{gallery_size} candidates (--candidates {gallery_size}) or the exact backend for the exact result")


def trained_similarity(index: StoredGallery) -> str:
    """The similarity the index's model was trained with (the first of its ``similarity_options``, e.g.
    ``match_prob`` for PCME, searched with the trained ``a`` and ``b``), else ``cosine``: the default of
    ``pcmr search`` and ``pcmr serve``."""
    return next(iter(index.similarity_options), "cosine")


def search_notes(index: StoredGallery, rerank: str, *, backend: str = "auto", candidates: int | None = None,
                 rerank_options: dict[str, Any] | None = None) -> list[str]:
    """The notes every search of ``index`` with these settings will carry (e.g. for ``pcmr serve`` to
    print once at start): one per gallery modality whose ANN candidates may give another top-k than
    the exact search."""
    reranker = get_reranker(rerank, **(rerank_options or {}))
    notes = []
    for modality in MODALITIES:
        if reranker.works_on_candidates and _ann_source(index, backend, modality) is not None:
            _, note = candidate_count(reranker, _items(index, modality).num, candidates)
            if note:
                notes.append(f"{modality} gallery: {note}")
    return notes


def on_disk_refusal(what: str) -> ValueError:
    """The error for ``what`` asked of an index that keeps its gallery on disk."""
    return ValueError(f"{what} needs the whole gallery in memory, but this index keeps its Gaussians on disk "
                      "(built with --on-disk); it answers through its faiss candidates re-scored from disk. "
                      "Rebuild the index without --on-disk for this")


def _items(index: StoredGallery, modality: str) -> Gallery:
    """The stored items of ``modality`` (a modality already checked)."""
    return index.images if modality == "image" else index.captions


def _ann_source(index: StoredGallery, backend: str, gallery_modality: str) -> CandidateSource | None:
    """The ANN source (faiss or Milvus) that proposes candidates over ``gallery_modality``, or None for
    the exact generator."""
    spec = get_backend(backend)
    source = index.ann.get(gallery_modality)
    if spec.engine is not None and (source is None or source.engine != spec.engine):
        raise ValueError(f"backend {backend!r}: this index has no {backend} candidates over its "
                         f"{gallery_modality}s; build them with `pcmr search INDEX --build ... --backend {backend}`")
    return None if spec.exact else source


def _reference_scores(index: StoredGallery, similarity: str, modality: str, opts: dict[str, Any]) -> Tensor:
    """Scores ``[R, G]`` of the stored items of the query modality against the gallery (cached)."""
    try:
        key: tuple[str, str, str] | None = (similarity, modality, json.dumps(opts, sort_keys=True))
    except TypeError:  # tensor or generator options: not cacheable
        key = None
    if key is not None and key in index.reference_cache:
        return index.reference_cache[key]
    assert isinstance(index.images, Gaussian) and isinstance(index.captions, Gaussian)  # in memory
    pair = score_matrix(similarity, index.images, index.captions, opts, common=True)  # [N_img, N_cap]
    reference = pair if modality == "image" else pair.T
    if key is not None:
        index.reference_cache[key] = reference
    return reference


def plan_search(index: StoredGallery, gallery_modality: str, scoring: Scoring, *,
                backend: str = "auto", candidates: int | None = None) -> tuple[Search, list[str]]:
    """The :class:`~pcmr.search.searcher.Search` that answers ``scoring`` over ``gallery_modality``,
    and the notes its results carry (module docstring)."""
    gallery = _items(index, gallery_modality)
    reranker = scoring.reranker
    source = _ann_source(index, backend, gallery_modality)
    on_disk = isinstance(gallery, GalleryStore)
    if on_disk and get_backend(backend).exact:
        raise on_disk_refusal("the exact backend")
    if not reranker.works_on_candidates:
        if on_disk:
            raise on_disk_refusal(f"re-ranker {reranker.name!r} (a matching of all queries together)")
        if source is not None:
            raise ValueError(f"re-ranker {reranker.name!r} matches all queries together, so it cannot run on "
                             "candidate lists of the faiss backend; use backend 'exact'")
        assert isinstance(gallery, Gaussian)
        reference = _reference_scores(index, scoring.similarity, scoring.query_modality, scoring.options)
        whole = ExactCandidates(gallery, scoring, chunk=max(1, gallery.num))
        return Search(whole, ExactRescorer(gallery, scoring),
                      MatchingRanker(reranker, reference), gallery.num), []
    if on_disk and source is None:
        raise ValueError(f"this on-disk index has no faiss candidates over its {gallery_modality}s; "
                         "build it with `pcmr search INDEX --build RUN --on-disk` without --modality")
    sample = int(index.meta.get("reference_sample", DEFAULT_REFERENCE_SAMPLE))
    statistic = index.statistics.get(gallery, _items(index, scoring.query_modality), gallery_modality, scoring, sample)
    if source is None:
        return ExactSearcher(gallery, scoring, statistic), []
    width, note = candidate_count(reranker, gallery.num, candidates)
    width = DEFAULT_CANDIDATES if width is None else width
    generator: CandidateSource = source
    if width >= gallery.num and (gallery.num > DEFAULT_CANDIDATES or not getattr(source, "exhaustive", False)):
        # every item is re-scored: the exact generator scores them in row chunks, faster than asking the
        # ANN source for all of them and re-scoring each, and complete where an approximate index may
        # leave slots empty (galleries within the default count keep the source's list)
        generator = ExactCandidates(gallery, scoring)
    return CandidateSearcher(generator, gallery, scoring, statistic, candidates=width), [note] if note else []


def search_index(index: StoredGallery, query: Gaussian, k: int = DEFAULT_TOP_K, similarity: str = "cosine",
                 rerank: str = "nns", *, modality: str = "caption", rerank_options: dict[str, Any] | None = None,
                 backend: str = "auto", candidates: int | None = None, item_uncertainty: Tensor | None = None,
                 **options: Any) -> SearchResults:
    """Top-k gallery items of ``index`` for each query Gaussian; the arguments of
    :meth:`pcmr.search.gallery.GalleryIndex.search`, and ``item_uncertainty [G]``, the uncertainty of every
    item of the gallery searched (None for point embeddings)."""
    if modality not in MODALITIES:
        raise ValueError(f"modality (of the query) must be one of {list(MODALITIES)}, got {modality!r}")
    gallery_modality = "image" if modality == "caption" else "caption"
    gallery = _items(index, gallery_modality)
    if query.dim != gallery.dim:
        raise ValueError(f"query has D={query.dim}, the index D={gallery.dim}")
    if not 1 <= k <= gallery.num:
        raise ValueError(f"k must be in [1, {gallery.num}] (the gallery size), got {k}")
    opts = {**index.similarity_options.get(similarity, {}), **options}
    params = dict(rerank_options if rerank_options is not None
                  else (index.meta.get("rerank_options") or {}).get(rerank, {}))
    reranker = get_reranker(rerank, **params)
    if isinstance(gallery, GalleryStore):
        query = query.to(device="cpu", dtype=torch.float32)
        probe = gallery.rows(torch.zeros(1, dtype=torch.long))  # one row: the variance shape the similarity checks
    else:
        query = query.to(device=gallery.device, dtype=gallery.dtype)
        probe = gallery
    images, captions = (probe, query) if modality == "caption" else (query, probe)
    check_similarity_supported(similarity, images, captions, opts)
    search, notes = plan_search(index, gallery_modality, Scoring(similarity, modality, opts, reranker),
                                backend=backend, candidates=candidates)
    scores, indices = search.search(query, k)
    uncertainty = None if item_uncertainty is None else item_uncertainty[indices.clamp_min(0)]  # [Q, k]
    query_unc = None if query.is_point else query.uncertainty(index.meta["uncertainty_measure"])
    caption_gallery = gallery_modality == "caption"
    hits = hits_of(indices, scores, uncertainty, index.caption_ids if caption_gallery else index.image_ids,
                   index.caption_texts if caption_gallery else None,
                   None if caption_gallery else index.image_metadata)
    return SearchResults(modality, gallery_modality, similarity, rerank, indices, scores, uncertainty, query_unc,
                         hits, notes)
