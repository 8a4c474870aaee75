"""Hub-aware inference (HAL/RGM §3.3): re-weight or constrain a score matrix at test time.

- ``inverted_softmax(scores, beta=30.0)`` (eq. 5, log space) and ``csls(scores, k=10)`` (eq. 6):
  re-weighted ``[Q, G]`` score matrices.
- ``greedy_matching(scores) -> LongTensor[Q]`` and ``relaxed_greedy_matching(scores, k, lam)
  -> LongTensor[Q, k]`` (Algorithm 1, exact, without sorting all ``Q x G`` entries; compiled loop with
  numba when available, identical interpreted fallback).
- ``exact_assignment(scores)``: the Hungarian reference (scipy) for small problems.
- ``list_rerankers()`` / ``get_reranker(name, **params)``: registries of re-weightings (nns, is, csls)
  and matchings (gm, rgm), composed by name (``"csls+rgm"``); ``Reranker.topk`` and ``Reranker.recall``;
  ``select_lambda`` picks RGM's lambda on validation. A new one: a class + ``register_reweighting`` or
  ``register_matching``.

Order of the scans: descending score, then lower query (row) index, then lower gallery (column) index;
the matchings see queries and gallery in a seeded random order, so ties never follow the storage
order (``pcmr.inference.matching.TIE_SEED``). See docs/inference.md.
"""

from __future__ import annotations

from pcmr.inference.lambda_selection import LambdaSelection, select_lambda
from pcmr.inference.matching import exact_assignment, greedy_matching, relaxed_greedy_matching, rgm_capacity
from pcmr.inference.rerankers import (
    DEFAULT_LAMBDA_GRID,
    MATCHINGS,
    NO_RERANKING,
    REWEIGHTINGS,
    Matching,
    Reranker,
    Reweighting,
    get_reranker,
    list_matchings,
    list_rerankers,
    list_reweightings,
    register_matching,
    register_reweighting,
    reranker_parameters,
)
from pcmr.inference.rescoring import (
    CSLS_K,
    IS_BETA,
    csls,
    csls_gallery_statistic,
    csls_statistics,
    inverted_softmax,
)
from pcmr.ranking.topk import ordered_topk

__all__ = [
    "CSLS_K",
    "DEFAULT_LAMBDA_GRID",
    "IS_BETA",
    "MATCHINGS",
    "NO_RERANKING",
    "REWEIGHTINGS",
    "LambdaSelection",
    "Matching",
    "Reranker",
    "Reweighting",
    "csls",
    "csls_gallery_statistic",
    "csls_statistics",
    "exact_assignment",
    "get_reranker",
    "greedy_matching",
    "inverted_softmax",
    "list_matchings",
    "list_rerankers",
    "list_reweightings",
    "ordered_topk",
    "register_matching",
    "register_reweighting",
    "relaxed_greedy_matching",
    "reranker_parameters",
    "rgm_capacity",
    "select_lambda",
]
