"""One search interface: every searcher answers ``search(queries, k) -> (indices [Q, k], scores [Q, k])``
with the query's own similarity and re-ranker, scored exactly.

- :class:`ExactSearcher` scores the whole gallery (streamed in row chunks for plain nearest-neighbour
  search, so a gallery on disk is searched with one chunk in memory);
- :class:`CandidateSearcher` asks a candidate source (a faiss :class:`~pcmr.search.ann.AnnIndex` or a
  vector database, anything with ``search(query, width) -> (scores, indices)``) for ``C`` candidates
  per query, re-scores them exactly (refine-by-exact; the Gaussians come from memory or from a
  :class:`~pcmr.search.store.GalleryStore` on disk) and re-weights them with the re-ranker.

A re-weighting that needs a statistic of a reference query set per gallery item (CSLS's ``r_Q``, the
inverted softmax's normaliser; HAL/RGM eqs. 5-6) gets it from :func:`gallery_statistic`, the one
function that computes it, whichever searcher uses it. New queries are never part of the reference
set, so a query's results do not depend on the other queries of the same call. Re-rankers whose
lists depend on all queries together (matchings: GM, RGM) have ``works_on_candidates`` False and
are refused here; the exact path of :class:`~pcmr.search.gallery.GalleryIndex` runs them.

Ties follow pcmr's one rule (``pcmr.ranking``): descending score, then lower gallery index.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.inference import Reranker, get_reranker
from pcmr.ranking.topk import ordered_topk_block
from pcmr.search.rescoring import oriented_scores, rescore_candidates
from pcmr.search.store import GalleryStore

__all__ = ["CandidateSearcher", "CandidateSource", "ExactSearcher", "Scoring", "Searcher", "gallery_chunks",
           "gallery_statistic", "reference_sample", "topk_of_candidates"]

DEFAULT_CANDIDATES = 100
DEFAULT_REFERENCE_SAMPLE = 2000
#: scores of the means alone: re-scoring them reads no log-variances from a store on disk
MEAN_ONLY_SCORES = ("cosine", "l2")

Gallery = Gaussian | GalleryStore


class CandidateSource(Protocol):
    """What proposes candidates: ``search(query [Q, D], width) -> (scores [Q, w], indices [Q, w])``
    (index ``-1`` for an unfilled slot); ``score`` names the score it ranks by and ``exact`` says
    whether its scores are exact values of that score."""

    score: str

    @property
    def exact(self) -> bool: ...

    def search(self, query: Gaussian, k: int) -> tuple[Tensor, Tensor]: ...


class Searcher(Protocol):
    def search(self, queries: Gaussian, k: int) -> tuple[Tensor, Tensor]: ...


@dataclass(frozen=True)
class Scoring:
    """What a search ranks by: ``similarity`` (a ``pcmr.similarity`` name) with its ``options``,
    from queries of ``query_modality`` (``"caption"``: text queries against images), then the
    re-ranker ``reranker``."""

    similarity: str
    query_modality: str = "caption"
    options: dict[str, Any] = field(default_factory=dict)
    reranker: Reranker = field(default_factory=lambda: get_reranker("nns"))


def gallery_chunks(gallery: Gallery, size: int = 65_536, *, need_logvar: bool = True
                   ) -> Iterator[tuple[int, Gaussian]]:
    """``(start, Gaussian)`` row blocks of an in-memory or on-disk gallery (``need_logvar=False``: the
    means alone of a store on disk)."""
    if isinstance(gallery, GalleryStore):
        yield from gallery.chunks(size, need_logvar=need_logvar)
        return
    for start in range(0, gallery.num, size):
        yield start, gallery[start:start + size]


def reference_sample(reference: Gallery, sample: int = DEFAULT_REFERENCE_SAMPLE, seed: int = 0) -> Gaussian:
    """At most ``sample`` rows of the reference queries (in memory or read from a store on disk), drawn
    with ``seed`` and kept in index order."""
    if reference.num == 0:
        raise ValueError("a re-ranker with a gallery statistic needs reference queries (stored items of the query "
                         "modality); the index has none")
    rows = torch.randperm(reference.num, generator=torch.Generator().manual_seed(seed))[:sample].sort().values
    return reference.rows(rows) if isinstance(reference, GalleryStore) else reference[rows]


def gallery_statistic(scoring: Scoring, reference: Gaussian, gallery: Gallery,
                      block_items: int = 65_536) -> Tensor | None:
    """The per-item statistic ``[G]`` that ``scoring.reranker`` needs (None if it needs none): its
    re-weighting's ``gallery_statistic`` of the exact scores of the ``R`` reference queries against
    the gallery, computed in column blocks of ``block_items`` (``[R, block_items]`` scores at a time)."""
    if not scoring.reranker.needs_gallery_statistic:
        return None
    weighting = scoring.reranker.weighting.fitted((reference.num, gallery.num))
    out = torch.empty(gallery.num)
    for start, block in gallery_chunks(gallery, block_items):
        scores = oriented_scores(scoring.similarity, reference, block, scoring.query_modality, scoring.options)
        value = weighting.gallery_statistic(scores.float())
        if value is None:
            raise ValueError(f"re-weighting {weighting.name!r} says it needs a gallery statistic but gives none")
        out[start:start + block.num] = value
    return out


def topk_of_candidates(scores: Tensor, indices: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Top-k of candidate lists ``scores, indices [Q, C]`` under the tie rule (descending score, then
    lower gallery index; unfilled slots ``-1`` last): ``(indices [Q, k], scores [Q, k])``."""
    key = torch.where(indices < 0, torch.iinfo(torch.long).max, indices)
    order = torch.argsort(key, dim=1, stable=True)
    scores, indices = scores.gather(1, order), indices.gather(1, order)
    values, cols = ordered_topk_block(scores, k)
    return indices.gather(1, cols), values


def _check_servable(reranker: Reranker) -> None:
    if not reranker.works_on_candidates:
        raise ValueError(f"re-ranker {reranker.name!r} matches all queries together ({reranker.matching}); it runs "
                         "on the exact backend over the whole gallery, not on candidate lists")


class ExactSearcher:
    """Scores every gallery item (module docstring). Plain nearest-neighbour search streams the gallery
    in chunks of ``chunk`` rows, keeping a running top-k; a re-weighting scores whole rows."""

    def __init__(self, gallery: Gallery, scoring: Scoring, statistic: Tensor | None = None, *,
                 chunk: int = 65_536) -> None:
        _check_servable(scoring.reranker)
        if scoring.reranker.needs_gallery_statistic and statistic is None:
            raise ValueError(f"re-ranker {scoring.reranker.name!r} needs its gallery statistic (gallery_statistic)")
        self.gallery, self.scoring, self.statistic, self.chunk = gallery, scoring, statistic, chunk

    def search(self, queries: Gaussian, k: int) -> tuple[Tensor, Tensor]:
        if not 1 <= k <= self.gallery.num:
            raise ValueError(f"k must be in [1, {self.gallery.num}] (the gallery size), got {k}")
        s = self.scoring
        plain = s.reranker.weighting.identity
        best_scores = torch.empty(queries.num, 0)
        best_indices = torch.empty(queries.num, 0, dtype=torch.long)
        rows = []
        need_logvar = s.similarity not in MEAN_ONLY_SCORES
        for start, block in gallery_chunks(self.gallery, self.chunk, need_logvar=need_logvar):
            scores = oriented_scores(s.similarity, queries, block, s.query_modality, s.options).float()  # [Q, B]
            if not plain:
                rows.append(scores)
                continue
            top_scores, top_cols = ordered_topk_block(scores, k)  # columns are in gallery order
            top_indices = top_cols + start
            best_indices, best_scores = topk_of_candidates(torch.cat([best_scores, top_scores], 1),
                                                           torch.cat([best_indices, top_indices], 1), k)
        if plain:
            return best_indices, best_scores
        scores = torch.cat(rows, 1)  # [Q, G]
        statistic = None if self.statistic is None else self.statistic.expand(queries.num, -1)
        rescored = s.reranker.weighting.rescore_candidates(scores, statistic)
        values, cols = ordered_topk_block(rescored, k)  # columns are gallery indices
        return cols, values


class CandidateSearcher:
    """Candidates from ``source``, re-scored exactly from ``gallery`` (module docstring).

    ``candidates``: ``C`` per query (at least ``k`` and the re-ranker's neighbourhood); the source's own
    scores are kept only when they are exact values of the query's similarity.
    """

    def __init__(self, source: CandidateSource, gallery: Gallery, scoring: Scoring,
                 statistic: Tensor | None = None, *, candidates: int | None = None) -> None:
        _check_servable(scoring.reranker)
        if scoring.reranker.needs_gallery_statistic and statistic is None:
            raise ValueError(f"re-ranker {scoring.reranker.name!r} needs its gallery statistic (gallery_statistic)")
        width = DEFAULT_CANDIDATES if candidates is None else candidates
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"candidates must be a positive integer, got {candidates!r}")
        self.source, self.gallery, self.scoring, self.statistic = source, gallery, scoring, statistic
        self.candidates = width

    def search(self, queries: Gaussian, k: int) -> tuple[Tensor, Tensor]:
        if not 1 <= k <= self.gallery.num:
            raise ValueError(f"k must be in [1, {self.gallery.num}] (the gallery size), got {k}")
        s = self.scoring
        neighbourhood = int(s.reranker.parameters().get("csls_k", 1))
        width = min(max(k, self.candidates, neighbourhood), self.gallery.num)
        source_scores, indices = self.source.search(queries, width)
        if self.source.exact and self.source.score == s.similarity:
            scores = source_scores
        else:
            need_logvar = s.similarity not in MEAN_ONLY_SCORES
            scores = rescore_candidates(s.similarity, queries, self.gallery, indices, s.query_modality, s.options,
                                        need_logvar=need_logvar)
        statistic = None if self.statistic is None else self.statistic[indices.clamp_min(0)]
        rescored = s.reranker.weighting.rescore_candidates(scores.float(), statistic)
        return topk_of_candidates(rescored, indices, k)

