"""A search as a composition (as faiss's ``IndexRefine``): a candidate generator, an exact re-scorer,
a re-ranker. Every search answers ``search(queries, k) -> (scores [Q, k], indices [Q, k])``, the order
of every candidate generator (and of faiss).

- candidate generators (``search(queries, width) -> (scores [Q, w], indices [Q, w])``, index ``-1``
  for an unfilled slot): :class:`ExactCandidates` (every item scored exactly, streamed in row chunks),
  a faiss :class:`~pcmr.search.ann.AnnIndex` or a Milvus collection
  (:class:`~pcmr.search.vectordb.MilvusCandidates`);
- :class:`ExactRescorer`: the exact score of the query's similarity for each candidate (the
  generator's own scores when they are exact values of it, else read from memory or from a
  :class:`~pcmr.search.store.GalleryStore` on disk);
- re-rankers: :class:`ReweightingRanker` (nns, inverted softmax, CSLS: each query's own candidate
  list) and :class:`MatchingRanker` (gm, rgm and their compositions: all queries together, the stored
  items of the query modality as extra reference rows; HAL/RGM section 3.3.3).

:class:`Search` chains the three; :class:`ExactSearcher` (every item) and :class:`CandidateSearcher`
(an ANN source's candidates, re-weighted per query) are the chains ``pcmr.search.compose.plan_search``
builds, beside a matching over the whole gallery. A re-weighting that needs a statistic of a reference query set per gallery item (CSLS's
``r_Q``, the inverted softmax's normaliser; HAL/RGM eqs. 5-6) gets it from :func:`gallery_statistic`,
the one function that computes it. New queries are never part of that reference set, so a query's
results do not depend on the other queries of the same call.

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
from pcmr.scoring import reranked_topk
from pcmr.search.rescoring import oriented_scores, rescore_candidates
from pcmr.search.store import GalleryStore
from pcmr.similarity import get_similarity

__all__ = ["CandidateSearcher", "CandidateSource", "ExactCandidates", "ExactRescorer", "ExactSearcher",
           "MatchingRanker", "Ranker", "ReweightingRanker", "Scoring", "Search", "Searcher", "gallery_chunks",
           "gallery_statistic", "reference_sample", "topk_of_candidates"]

DEFAULT_CANDIDATES = 100
DEFAULT_REFERENCE_SAMPLE = 2000

Gallery = Gaussian | GalleryStore


class CandidateSource(Protocol):
    """A candidate generator: ``search(query [Q, D], width) -> (scores [Q, w], indices [Q, w])``
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

    @property
    def means_only(self) -> bool:
        """Whether the similarity reads the means alone (a store on disk then reads no log-variances)."""
        return get_similarity(self.similarity).means_only


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
    lower gallery index; unfilled slots ``-1`` last): ``(scores [Q, k], indices [Q, k])``."""
    key = torch.where(indices < 0, torch.iinfo(torch.long).max, indices)
    order = torch.argsort(key, dim=1, stable=True)
    scores, indices = scores.gather(1, order), indices.gather(1, order)
    values, cols = ordered_topk_block(scores, k)
    return values, indices.gather(1, cols)


# ----------------------------------------------------------------- candidate generators
class ExactCandidates:
    """Every gallery item scored exactly with the query's similarity: the ``width`` best per query
    (a running top-``width`` over row chunks of ``chunk`` items, so a gallery on disk is read one chunk
    at a time), or, for ``width`` at least the gallery size, every item in gallery order."""

    exact = True

    def __init__(self, gallery: Gallery, scoring: Scoring, *, chunk: int = 65_536) -> None:
        self.gallery, self.scoring, self.chunk = gallery, scoring, chunk
        self.score = scoring.similarity

    def search(self, query: Gaussian, k: int) -> tuple[Tensor, Tensor]:
        s = self.scoring
        chunks = gallery_chunks(self.gallery, self.chunk, need_logvar=not s.means_only)
        if k >= self.gallery.num:
            rows = [oriented_scores(s.similarity, query, block, s.query_modality, s.options).float()
                    for _, block in chunks]  # [Q, B] each
            scores = torch.cat(rows, 1) if rows else torch.zeros(query.num, 0)
            return scores, torch.arange(self.gallery.num).expand(query.num, -1)
        best_scores = torch.empty(query.num, 0)
        best_indices = torch.empty(query.num, 0, dtype=torch.long)
        for start, block in chunks:
            scores = oriented_scores(s.similarity, query, block, s.query_modality, s.options).float()  # [Q, B]
            top_scores, top_cols = ordered_topk_block(scores, k)  # columns are in gallery order
            best_scores, best_indices = topk_of_candidates(torch.cat([best_scores, top_scores], 1),
                                                           torch.cat([best_indices, top_cols + start], 1), k)
        return best_scores, best_indices


# ----------------------------------------------------------------- exact re-scorer
class ExactRescorer:
    """Exact scores ``[Q, C]`` of the query's similarity for each candidate: the generator's own when
    they are exact values of that similarity, else re-scored from ``gallery`` (refine-by-exact)."""

    def __init__(self, gallery: Gallery, scoring: Scoring) -> None:
        self.gallery, self.scoring = gallery, scoring

    def rescore(self, source: CandidateSource, queries: Gaussian, scores: Tensor, indices: Tensor) -> Tensor:
        s = self.scoring
        if source.exact and source.score == s.similarity:
            return scores.float()
        return rescore_candidates(s.similarity, queries, self.gallery, indices, s.query_modality, s.options,
                                  need_logvar=not s.means_only).float()


# ----------------------------------------------------------------- re-rankers
class Ranker(Protocol):
    """The last stage: ``rank(scores [Q, C], indices [Q, C], k) -> (scores [Q, k], indices [Q, k])``."""

    #: whether each query is ranked from its own candidate list (False: the whole gallery in order)
    works_on_candidates: bool

    def rank(self, scores: Tensor, indices: Tensor, k: int) -> tuple[Tensor, Tensor]: ...


class ReweightingRanker:
    """A re-weighting (nns, inverted softmax, CSLS) of each query's candidate scores, then the top-k
    under the tie rule. ``statistic [G]``: the re-weighting's gallery statistic (:func:`gallery_statistic`)
    when it needs one."""

    works_on_candidates = True

    def __init__(self, reranker: Reranker, statistic: Tensor | None = None) -> None:
        if not reranker.works_on_candidates:
            raise ValueError(f"re-ranker {reranker.name!r} matches all queries together ({reranker.matching}); it "
                             "runs on the exact backend over the whole gallery, not on candidate lists")
        if reranker.needs_gallery_statistic and statistic is None:
            raise ValueError(f"re-ranker {reranker.name!r} needs its gallery statistic (gallery_statistic)")
        self.reranker, self.statistic = reranker, statistic

    @property
    def neighbourhood(self) -> int:
        """Candidates the re-weighting reads per query besides the top-k (its ``neighbourhood``: CSLS's ``csls_k``)."""
        return int(self.reranker.neighbourhood)

    def rank(self, scores: Tensor, indices: Tensor, k: int) -> tuple[Tensor, Tensor]:
        statistic = None if self.statistic is None else self.statistic[indices.clamp_min(0)]
        rescored = self.reranker.weighting.rescore_candidates(scores.float(), statistic)
        return topk_of_candidates(rescored, indices, k)


class MatchingRanker:
    """A matching re-ranker (gm, rgm, ``<re-weighting>+<matching>``; HAL/RGM Algorithm 1): the new
    queries' score rows over the whole gallery are appended to ``reference [R, G]``, the scores of the
    stored items of the query modality (the queries the gallery would see in an evaluation); the
    re-ranker runs on that ``[R + Q, G]`` matrix and the new queries' lists are returned."""

    works_on_candidates = False

    def __init__(self, reranker: Reranker, reference: Tensor) -> None:
        if reranker.works_on_candidates:
            raise ValueError(f"re-ranker {reranker.name!r} works on candidate lists: use ReweightingRanker")
        self.reranker, self.reference = reranker, reference

    def rank(self, scores: Tensor, indices: Tensor, k: int) -> tuple[Tensor, Tensor]:
        if scores.shape[1] != self.reference.shape[1]:
            raise ValueError(f"a matching ranks the whole gallery ({self.reference.shape[1]} items), got candidate "
                             f"lists of {scores.shape[1]}")
        offset = self.reference.shape[0]
        values, found = reranked_topk(self.reranker, torch.cat([self.reference, scores], dim=0), k)
        return values[offset:], found[offset:]  # [Q, k]


# ----------------------------------------------------------------- the composition
class Search:
    """Candidates from ``generator`` (``width(k)`` per query), re-scored exactly by ``rescorer``, ranked by
    ``ranker``; see the module docstring."""

    def __init__(self, generator: CandidateSource, rescorer: ExactRescorer, ranker: Ranker,
                 gallery_size: int, candidates: int | None = None) -> None:
        if candidates is not None and (isinstance(candidates, bool) or not isinstance(candidates, int)
                                       or candidates < 1):
            raise ValueError(f"candidates must be a positive integer, got {candidates!r}")
        self.generator, self.rescorer, self.ranker = generator, rescorer, ranker
        self.gallery_size, self.candidates = gallery_size, candidates

    def width(self, k: int) -> int:
        """Candidates per query: the whole gallery for a matching or without a candidate count, else
        ``candidates`` raised to at least ``k`` and the re-weighting's neighbourhood (``candidates=1``:
        the top-k alone), at most the gallery."""
        if self.candidates is None or not self.ranker.works_on_candidates:
            return self.gallery_size
        neighbourhood = getattr(self.ranker, "neighbourhood", 1)
        return min(max(k, self.candidates, neighbourhood), self.gallery_size)

    def search(self, queries: Gaussian, k: int) -> tuple[Tensor, Tensor]:
        """``(scores [Q, k], indices [Q, k])`` of the ``k`` best gallery items per query (the order of a
        :class:`CandidateSource` and of faiss)."""
        if not 1 <= k <= self.gallery_size:
            raise ValueError(f"k must be in [1, {self.gallery_size}] (the gallery size), got {k}")
        source_scores, indices = self.generator.search(queries, self.width(k))
        scores = self.rescorer.rescore(self.generator, queries, source_scores, indices)
        return self.ranker.rank(scores, indices, k)


class ExactSearcher(Search):
    """Scores every gallery item (:class:`ExactCandidates`). Plain nearest-neighbour search streams the
    gallery in chunks of ``chunk`` rows, keeping a running top-k; a re-weighting scores whole rows."""

    def __init__(self, gallery: Gallery, scoring: Scoring, statistic: Tensor | None = None, *,
                 chunk: int = 65_536) -> None:
        plain = scoring.reranker.weighting.identity  # the running top-k alone; a re-weighting reads whole rows
        super().__init__(ExactCandidates(gallery, scoring, chunk=chunk), ExactRescorer(gallery, scoring),
                         ReweightingRanker(scoring.reranker, statistic), gallery.num,
                         candidates=1 if plain else None)


class CandidateSearcher(Search):
    """Candidates from ``source``, re-scored exactly from ``gallery`` (module docstring).

    ``candidates``: ``C`` per query (default 100; at least ``k`` and the re-ranker's neighbourhood); the
    source's own scores are kept only when they are exact values of the query's similarity.
    """

    def __init__(self, source: CandidateSource, gallery: Gallery, scoring: Scoring,
                 statistic: Tensor | None = None, *, candidates: int | None = None) -> None:
        ranker = ReweightingRanker(scoring.reranker, statistic)
        super().__init__(source, ExactRescorer(gallery, scoring), ranker, gallery.num,
                         DEFAULT_CANDIDATES if candidates is None else candidates)
        self.source, self.gallery, self.scoring, self.statistic = source, gallery, scoring, statistic
