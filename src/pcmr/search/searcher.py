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

The exact scores every part reads are :func:`oriented_scores` (queries against a block of gallery
items, whichever direction the query comes from) and :func:`rescore_candidates` (each query against its
own candidates, read from memory or from a gallery store on disk: refine-by-exact).

The gallery statistics an index keeps (:class:`GalleryStatistics`) are computed once per gallery
modality, similarity with its options, and re-weighting with its parameters, and saved in
``statistics.safetensors`` (described in ``index.json``). The reference queries of a gallery modality
are at most ``sample`` stored items of the other modality (:func:`reference_sample`). A statistic of a
sampled score records how its samples were drawn (``samples``: ``common``, one set of draws per side);
a stored one drawn otherwise (an index saved by an earlier version) is not read, and is recomputed on
first use.

Ties follow pcmr's one rule (``pcmr.ranking``): descending score, then lower gallery index.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file
from torch import Tensor

from pcmr.atomic import atomic_write_safetensors
from pcmr.gaussian import Gaussian
from pcmr.inference import Reranker, get_reranker, list_reweightings
from pcmr.ranking.topk import ordered_topk_block
from pcmr.scoring import reranked_topk, score_matrix
from pcmr.search.store import GalleryStore
from pcmr.similarity import get_similarity, paired

__all__ = ["CandidateSearcher", "CandidateSource", "ExactCandidates", "ExactRescorer", "ExactSearcher",
           "GalleryStatistics", "MatchingRanker", "Ranker", "ReweightingRanker", "STATISTICS_FILE", "Scoring",
           "Search", "Searcher", "gallery_chunks", "gallery_statistic", "oriented_scores", "reference_sample",
           "rescore_candidates", "statistic_key", "topk_of_candidates"]

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


# ----------------------------------------------------------------- exact scores
def oriented_scores(similarity: str, query: Gaussian, gallery: Gaussian, query_modality: str,
                    options: dict[str, Any]) -> Tensor:
    """Exact scores ``[Q, G]`` of queries (rows) against gallery items, whatever the direction
    (a caption query scores ``S(image, caption)`` like every other caption). Sampled scores use each
    side's common draws, so a pair scores the same whichever items come with it."""

    if query_modality == "caption":
        return score_matrix(similarity, gallery, query, options, common=True).T  # [N_img, N_cap] -> [Q, G]
    return score_matrix(similarity, query, gallery, options, common=True)


def _take(gallery: Gallery, rows: Tensor, need_logvar: bool) -> Gaussian:
    if isinstance(gallery, GalleryStore):
        return gallery.rows(rows, need_logvar=need_logvar)
    return gallery[rows]


def rescore_candidates(similarity: str, query: Gaussian, gallery: Gallery, candidates: Tensor,
                       query_modality: str, options: dict[str, Any], *, need_logvar: bool = True) -> Tensor:
    """Exact scores ``[Q, C]`` of each query against its candidate rows ``candidates [Q, C]``
    (entries ``-1`` mark unfilled slots and score ``-inf``). Closed-form scores are evaluated on
    aligned pairs in one call; Monte-Carlo scores query by query through the path of the exact backend,
    with the common draws of each side (:func:`oriented_scores`). ``need_logvar=False`` reads only the
    means of a store (scores of the means)."""

    valid = candidates >= 0
    safe = candidates.clamp_min(0)
    num_queries, width = candidates.shape
    score = get_similarity(similarity)
    fast = None
    if score.batched_candidates:  # one batched call over each query's own candidates
        means = _take(gallery, safe.reshape(-1), False).mean.reshape(num_queries, width, -1)  # [Q, C, D]
        fast = score.candidate_scores(means, query.mean, options)
    if fast is not None:
        out = fast
    elif score.sampled:
        rows = [oriented_scores(similarity, query[q:q + 1], _take(gallery, safe[q], need_logvar), query_modality,
                                options)[0]
                for q in range(num_queries)]
        out = torch.stack(rows) if rows else torch.zeros(0, width)
    else:
        items = _take(gallery, safe.reshape(-1), need_logvar)
        repeated = query[torch.arange(num_queries).repeat_interleave(width)]
        pair = (items, repeated) if query_modality == "caption" else (repeated, items)
        with torch.no_grad():
            out = paired(similarity, *pair, **options).reshape(num_queries, width)
    return out.masked_fill(~valid, float("-inf"))


def gallery_chunks(gallery: Gallery, size: int = 65_536, *, need_logvar: bool = True
                   ) -> Iterator[tuple[int, Gaussian]]:
    """``(start, Gaussian)`` row blocks of an in-memory or on-disk gallery (``need_logvar=False``: the
    means alone of a store on disk)."""
    if isinstance(gallery, GalleryStore):
        yield from gallery.chunks(size, need_logvar=need_logvar)
        return
    for start in range(0, gallery.num, size):
        yield start, gallery[start:start + size]


# ----------------------------------------------------------------- gallery statistics
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


#: how a sampled score's statistics draw their samples (``pcmr.similarity.common_draws``)
SAMPLES = "common"

STATISTICS_FILE = "statistics.safetensors"


def statistic_key(modality: str, scoring: Scoring) -> str | None:
    """What a stored gallery statistic depends on, as a JSON string (None for uncacheable options)."""
    try:
        return json.dumps([modality, scoring.similarity, scoring.reranker.weighting.name,
                           vars(scoring.reranker.weighting), scoring.options], sort_keys=True)
    except TypeError:  # tensor or generator options
        return None


def _other(modality: str) -> str:
    return "caption" if modality == "image" else "image"


class GalleryStatistics:
    """The gallery statistics of an index by :func:`statistic_key` (module docstring). Each call is given
    the stored items it reads: ``gallery``, the items of the gallery modality, and ``reference``, those of
    the other modality (the reference queries)."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.entries.values())

    def clear(self) -> None:
        """Forget every statistic (the gallery or its reference queries changed)."""
        self.entries.clear()

    def get(self, gallery: Gallery, reference: Gallery, gallery_modality: str, scoring: Scoring,
            sample: int) -> Tensor | None:
        """The statistic ``[G]`` of ``scoring``'s re-ranker over the ``gallery_modality`` items ``gallery``
        (None when it needs none), from at most ``sample`` of the ``reference`` queries; computed once and
        kept."""
        if not scoring.reranker.needs_gallery_statistic:
            return None
        key = statistic_key(gallery_modality, scoring)
        entry = self.entries.get(key) if key is not None else None
        if entry is not None and entry["value"].shape[0] == gallery.num:
            return entry["value"]
        value = gallery_statistic(scoring, reference_sample(reference, sample), gallery)
        if key is not None:
            self.entries[key] = {"modality": gallery_modality, "similarity": scoring.similarity,
                                 "reranker": scoring.reranker.name, "params": scoring.reranker.parameters(),
                                 "options": scoring.options, "sample": sample, "value": value}
            if get_similarity(scoring.similarity).sampled:
                self.entries[key]["samples"] = SAMPLES
        return value

    def compute_defaults(self, gallery: Gallery, reference: Gallery, gallery_modality: str, similarity: str,
                         options: dict[str, Any], sample: int) -> None:
        """The statistic of every re-weighting that needs one, with its default parameters, for
        ``similarity`` (what an ANN backend built for that score serves without further work)."""
        if reference.num == 0:
            return
        for name in list_reweightings():
            reranker = get_reranker(name)
            if reranker.needs_gallery_statistic:
                self.get(gallery, reference, gallery_modality,
                         Scoring(similarity, _other(gallery_modality), options, reranker), sample)

    def save(self, folder: Path) -> list[dict[str, Any]]:
        """Write ``statistics.safetensors`` into ``folder`` (nothing without statistics); returns the
        entries' descriptions for ``index.json``."""
        if not self.entries:
            return []
        atomic_write_safetensors(folder / STATISTICS_FILE, {f"statistic_{i}": e["value"].detach().cpu().contiguous()
                                                            for i, e in enumerate(self.entries.values())})
        return [{k: v for k, v in e.items() if k != "value"} for e in self.entries.values()]

    def load(self, folder: Path, entries: list[dict[str, Any]], meta_path: Path, sizes: Mapping[str, int]) -> None:
        """Read the statistics that ``entries`` (field ``statistics`` of ``meta_path``) describe, for a
        gallery of ``sizes[modality]`` items per modality."""
        if not entries:
            return
        tensors = load_file(str(folder / STATISTICS_FILE))
        for i, entry in enumerate(entries):
            value = tensors.get(f"statistic_{i}")
            try:
                modality = entry["modality"]
                scoring = Scoring(entry["similarity"], _other(modality), dict(entry["options"]),
                                  get_reranker(entry["reranker"], **entry["params"]))
                size = sizes[modality]
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{meta_path}: entry {i} of field 'statistics' is malformed ({err})") from None
            if value is None or value.shape != (size,):
                raise ValueError(f"{folder / STATISTICS_FILE}: 'statistic_{i}' must hold one value per {modality}")
            if get_similarity(scoring.similarity).sampled and entry.get("samples") != SAMPLES:
                continue  # drawn from another sampling: recomputed on first use
            key = statistic_key(modality, scoring)
            if key is not None:
                self.entries[key] = {**entry, "value": value}


# ----------------------------------------------------------------- candidate generators
def topk_of_candidates(scores: Tensor, indices: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Top-k of candidate lists ``scores, indices [Q, C]`` under the tie rule (descending score, then
    lower gallery index; unfilled slots ``-1`` last): ``(scores [Q, k], indices [Q, k])``."""
    key = torch.where(indices < 0, torch.iinfo(torch.long).max, indices)
    order = torch.argsort(key, dim=1, stable=True)
    scores, indices = scores.gather(1, order), indices.gather(1, order)
    values, cols = ordered_topk_block(scores, k)
    return values, indices.gather(1, cols)


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
