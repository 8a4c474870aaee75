"""Hub-aware inference (HAL/RGM §3.3; SPEC §5): re-weight or constrain a score matrix at test time.

- ``inverted_softmax(scores, beta=30.0)`` (eq. 5, log space) and ``csls(scores, k=10)`` (eq. 6):
  re-weighted ``[Q, G]`` score matrices.
- ``greedy_matching(scores) -> LongTensor[Q]`` and ``relaxed_greedy_matching(scores, k, lam)
  -> LongTensor[Q, k]`` (Algorithm 1, exact, without sorting all ``Q x G`` entries; compiled loop with
  numba when available, identical interpreted fallback).
- ``exact_assignment(scores)``: the Hungarian reference (scipy) for small problems.
- ``list_rerankers()`` / ``get_reranker(name, **params)``: nns, is, csls, gm, rgm, is+rgm, csls+rgm by
  name, with ``Reranker.topk`` and ``Reranker.recall``; ``select_lambda`` picks RGM's lambda on validation.

Tie rule everywhere: descending score, then lower query (row) index, then lower gallery (column) index.
See docs/inference.md.
"""

from __future__ import annotations

from pcmr.inference._ordering import ordered_topk
from pcmr.inference.lambda_selection import DEFAULT_LAMBDA_GRID, LambdaSelection, select_lambda
from pcmr.inference.matching import exact_assignment, greedy_matching, relaxed_greedy_matching, rgm_capacity
from pcmr.inference.rerankers import Reranker, get_reranker, list_rerankers, reranker_parameters
from pcmr.inference.rescoring import csls, inverted_softmax

__all__ = [
    "DEFAULT_LAMBDA_GRID",
    "LambdaSelection",
    "Reranker",
    "csls",
    "exact_assignment",
    "get_reranker",
    "greedy_matching",
    "inverted_softmax",
    "list_rerankers",
    "ordered_topk",
    "relaxed_greedy_matching",
    "reranker_parameters",
    "rgm_capacity",
    "select_lambda",
]
