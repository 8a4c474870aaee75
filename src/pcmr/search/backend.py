"""The faiss backend of :class:`pcmr.index.GalleryIndex`: build the ANN structures, search them.

- ``cosine``, ``l2``, ``wasserstein``: answered by the ANN index of that score directly (a flat index
  gives exactly the exact backend's ranking and scores).
- every other score: the ANN index (built for cosine or W2) proposes ``C`` candidates per query,
  which are re-scored exactly with ``pcmr.similarity``; the top-k of those are returned.
- ``rerank="csls"``: ``2 S - r_G(q) - r_Q(g)`` over the candidates, with ``r_Q`` stored at build
  time (:func:`pcmr.search.rescoring.gallery_hubness`) and ``r_G(q)`` the mean of the query's ``k``
  best candidate scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.progress import progress_bar
from pcmr.search.ann import AnnIndex
from pcmr.search.rescoring import csls_from_terms, gallery_hubness, rescore_candidates

__all__ = ["DEFAULT_CANDIDATES", "FAISS_RERANKERS", "build_ann", "compute_hubness", "faiss_search"]

DEFAULT_CANDIDATES = 100
FAISS_RERANKERS = ("nns", "csls")
DEFAULT_CSLS_SAMPLE = 2000


class _Progress:
    """A tqdm bar on stderr: ``True`` always, ``None`` only on a terminal (pcmr.progress), ``False`` never."""

    def __init__(self, enabled: bool | None, total: int, desc: str) -> None:
        self.bar = progress_bar(total, desc, enabled=enabled)

    def __call__(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def build_ann(gallery: Gaussian, score: str, index_type: str = "auto", *, shard_size: int = 65_536,
              progress: bool | None = False, desc: str = "index", **params: Any) -> AnnIndex:
    """An :class:`AnnIndex` over ``gallery`` filled in shards of ``shard_size`` rows."""
    ann = AnnIndex.create(score, gallery, index_type, **params)
    bar = _Progress(progress, gallery.num, desc)
    try:
        ann.add(gallery, shard_size=shard_size, progress=bar)
    finally:
        bar.close()
    return ann


def compute_hubness(similarity: str, reference: Gaussian, gallery: Gaussian, query_modality: str, k: int,
                    options: dict[str, Any], sample: int = DEFAULT_CSLS_SAMPLE, seed: int = 0) -> Tensor:
    """``r_Q [G]`` from at most ``sample`` rows of the ``reference`` queries (drawn with ``seed``)."""
    if reference.num == 0:
        raise ValueError(f"CSLS needs reference queries of the {query_modality} modality; the index has none")
    rows = torch.randperm(reference.num, generator=torch.Generator().manual_seed(seed))[:sample].sort().values
    return gallery_hubness(similarity, reference[rows], gallery, query_modality, min(k, len(rows)), options)


def faiss_search(ann: AnnIndex, gallery: Gaussian, query: Gaussian, k: int, similarity: str, rerank: str,
                 query_modality: str, options: dict[str, Any], *, candidates: int | None = None,
                 hubness: dict[str, Any] | None = None, csls_k: int | None = None) -> tuple[Tensor, Tensor]:
    """``(indices [Q, k], scores [Q, k])`` of the faiss backend (module docstring).

    ``candidates`` (default 100, at least ``k``) is ``C`` for re-scored scores and CSLS; ``hubness``
    the stored ``{"similarity", "k", "r_q"}`` entry that CSLS needs.
    """
    if rerank not in FAISS_RERANKERS:
        raise ValueError(f"the faiss backend supports rerank {list(FAISS_RERANKERS)}, got {rerank!r}; "
                         "use backend 'exact' for the re-rankers that need the whole score matrix")
    width = max(k, DEFAULT_CANDIDATES if candidates is None else int(candidates))
    if width < 1:
        raise ValueError(f"candidates must be a positive integer, got {candidates}")
    direct = similarity == ann.score and rerank == "nns"
    scores, indices = ann.search(query, k if direct else width)
    if not direct and similarity != ann.score:
        scores = rescore_candidates(similarity, query, gallery, indices, query_modality, options)
    if rerank == "csls":
        scores = _csls(scores, indices, similarity, hubness, csls_k)
    if not direct:
        top = _top(scores, indices, k)
        scores, indices = top
    return indices, scores


def _csls(scores: Tensor, indices: Tensor, similarity: str, hubness: dict[str, Any] | None,
          csls_k: int | None) -> Tensor:
    if hubness is None or hubness["similarity"] != similarity:
        stored = None if hubness is None else hubness["similarity"]
        raise ValueError(f"CSLS on the faiss backend needs gallery hubness for {similarity!r} computed at build "
                         f"time (stored: {stored!r}); rebuild with --csls-similarity {similarity}")
    k = int(hubness["k"])
    if csls_k is not None and int(csls_k) != k:
        raise ValueError(f"the index stores CSLS hubness for csls_k={k}, got csls_k={csls_k}; rebuild with "
                         f"--csls-k {csls_k}")
    if scores.shape[1] < k:
        raise ValueError(f"CSLS with k={k} needs at least {k} candidates, got {scores.shape[1]}")
    top = scores.topk(k, dim=1).values  # [Q, k]
    valid = torch.isfinite(top)
    row_mean = top.where(valid, 0.0).sum(1) / valid.sum(1).clamp_min(1)  # r_G(q) over the candidates, [Q]
    col_mean = hubness["r_q"].to(scores.dtype)[indices.clamp_min(0)]  # [Q, C]
    out = csls_from_terms(scores, row_mean, col_mean)
    return out.masked_fill(indices < 0, float("-inf"))


def _top(scores: Tensor, indices: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Top-k of candidate lists: descending score, ties to the lower gallery index."""
    key = torch.where(indices < 0, torch.iinfo(torch.long).max, indices)
    order = torch.argsort(key, dim=1, stable=True)
    scores, indices = scores.gather(1, order), indices.gather(1, order)
    order = torch.argsort(scores, dim=1, descending=True, stable=True)[:, :k]
    return scores.gather(1, order), indices.gather(1, order)


def index_types_summary(anns: Sequence[AnnIndex]) -> str:
    return ", ".join(f"{a.score}/{a.index_type} ({a.ntotal} items)" for a in anns)
