"""Hub-aware inference methods by name: an optional re-weighting followed by an optional matching.

SPEC §5 / HAL/RGM §3.3 and Table 3. Every method is the composition of
- a re-weighting of the score matrix: none (NNS), inverted softmax (``is``) or CSLS (``csls``), and
- a way to turn scores into ranked lists: per-row top-k, greedy matching (``gm``) or relaxed greedy
  matching (``rgm``).

``gm`` for a list length K is RGM with ``lam = 1`` (every gallery item used at most K times; the
paper's generalisation of GM to K-best lists, Table 3); for K = 1 it is greedy matching, with the
queries left unmatched (``Q > G``) completed by their best item. R@K under a matching method is
computed from the run with ``k = K`` (SPEC §5), so ``recall`` runs the matching once per K.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from torch import Tensor

from pcmr.inference._backend import BACKENDS
from pcmr.inference._ordering import check_positive_int, check_score_matrix, ordered_topk
from pcmr.inference.matching import check_lam, relaxed_greedy_matching
from pcmr.inference.rescoring import csls, inverted_softmax
from pcmr.metrics import recall_at_k_from_topk
from pcmr.metrics._relevance import RelevanceInput, SparseRelevance

# name -> (re-weighting, matching); an explicit table, no parsing of names
_RERANKERS: dict[str, tuple[str, str]] = {
    "nns": ("none", "none"),
    "is": ("is", "none"),
    "csls": ("csls", "none"),
    "gm": ("none", "gm"),
    "rgm": ("none", "rgm"),
    "is+rgm": ("is", "rgm"),
    "csls+rgm": ("csls", "rgm"),
}
_REWEIGHTING_PARAMETERS = {"none": (), "is": ("beta",), "csls": ("csls_k",)}
_MATCHING_PARAMETERS = {"none": (), "gm": ("backend",), "rgm": ("lam", "backend")}


def list_rerankers() -> list[str]:
    """Names accepted by ``get_reranker``: nns, is, csls, gm, rgm, is+rgm, csls+rgm."""
    return list(_RERANKERS)


def reranker_parameters(name: str) -> tuple[str, ...]:
    """The keyword parameters ``get_reranker(name, ...)`` accepts (e.g. ``("beta", "lam", "backend")``)."""
    reweighting, matching = _lookup(name)
    return _REWEIGHTING_PARAMETERS[reweighting] + _MATCHING_PARAMETERS[matching]


@dataclass(frozen=True)
class Reranker:
    """A named hub-aware inference method (configuration only; the math is in the functions it calls).

    Attributes:
        name: one of ``list_rerankers()``.
        reweighting: ``"none"`` | ``"is"`` | ``"csls"``; matching: ``"none"`` | ``"gm"`` | ``"rgm"``.
        beta: inverse temperature of the inverted softmax (HAL/RGM: 30).
        csls_k: neighbourhood size of CSLS (HAL/RGM: 10).
        lam: relaxation factor of RGM (choose it with ``select_lambda``; 2.0 is only a starting point).
        backend: acceptance loop of GM/RGM, ``"auto"`` | ``"numba"`` | ``"python"`` (identical lists).
    """

    name: str
    reweighting: str
    matching: str
    beta: float = 30.0
    csls_k: int = 10
    lam: float = 2.0
    backend: str = "auto"

    @property
    def returns_scores(self) -> bool:
        """True for nns / is / csls (a re-weighted score matrix); False for the matching methods (lists)."""
        return self.matching == "none"

    def rescore(self, scores: Tensor) -> Tensor:
        """The re-weighted score matrix ``[Q, G]`` (the input itself for nns, gm and rgm)."""
        if self.reweighting == "is":
            return inverted_softmax(scores, beta=self.beta)
        if self.reweighting == "csls":
            return csls(scores, k=self.csls_k)
        return check_score_matrix(scores)

    def topk(self, scores: Tensor, k: int) -> Tensor:
        """Ranked lists ``LongTensor[Q, k]`` for one direction's scores ``[Q, G]``.

        Score methods: per-row top-k of the re-weighted scores (ties to the lower gallery index).
        Matching methods: the GM / RGM run with list length ``k`` on the re-weighted scores.
        """
        return self._topk_rescored(self.rescore(scores), k)

    def recall(self, scores: Tensor, relevant: RelevanceInput | SparseRelevance, ks: Iterable[int] = (1, 5, 10)) -> dict[str, float]:
        """``{"R@K": percent}`` for each K in ``ks`` (SPEC §6), one direction.

        ``relevant``: dense BoolTensor ``[Q, G]`` or a list of Q lists of positive gallery indices (as
        ``pcmr.metrics.recall_at_k_from_topk`` takes it). Score methods rank once with the largest K;
        matching methods run once per K (R@K under RGM uses the run with ``k = K``, SPEC §5).
        """
        return self.recall_rescored(self.rescore(scores), relevant, ks)

    def recall_rescored(
        self, rescored: Tensor, relevant: RelevanceInput | SparseRelevance, ks: Iterable[int] = (1, 5, 10)
    ) -> dict[str, float]:
        """``recall`` for scores already re-weighted by ``self.rescore`` (re-weight once, match many times)."""

        ks = _check_ks(ks, rescored)
        if self.returns_scores:
            lists = self._topk_rescored(rescored, max(ks))
            return {f"R@{k}": recall_at_k_from_topk(lists, relevant, k=k) for k in ks}
        return {f"R@{k}": recall_at_k_from_topk(self._topk_rescored(rescored, k), relevant) for k in ks}

    def _topk_rescored(self, rescored: Tensor, k: int) -> Tensor:
        check_positive_int(k, "k", rescored.shape[1], "the number of gallery items G")
        if self.matching == "gm":
            return relaxed_greedy_matching(rescored, k, 1.0, backend=self.backend)
        if self.matching == "rgm":
            return relaxed_greedy_matching(rescored, k, self.lam, backend=self.backend)
        return ordered_topk(rescored, k)


def get_reranker(name: str, **params: object) -> Reranker:
    """A ``Reranker`` by name (``list_rerankers()``), e.g. ``get_reranker("csls+rgm", csls_k=10, lam=1.5)``.

    Parameters set to None are ignored (unset command-line flags); a parameter the method does not use
    (see ``reranker_parameters(name)``) or an unknown one raises ValueError.
    """
    reweighting, matching = _lookup(name)
    given = {key: value for key, value in params.items() if value is not None}
    allowed = _REWEIGHTING_PARAMETERS[reweighting] + _MATCHING_PARAMETERS[matching]
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValueError(f"reranker {name!r} takes the parameters {list(allowed)}, got unexpected {unknown}")
    if "beta" in given and (
        not isinstance(given["beta"], (int, float)) or not math.isfinite(given["beta"]) or given["beta"] <= 0
    ):
        raise ValueError(f"beta must be a finite number > 0, got {given['beta']!r}")
    if "csls_k" in given:
        check_positive_int(given["csls_k"], "csls_k")
    if "lam" in given:
        check_lam(given["lam"])  # type and sign; round(lam * k) >= 1 is checked per k at run time
    if "backend" in given and given["backend"] not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {given['backend']!r}")
    return Reranker(name=name, reweighting=reweighting, matching=matching, **given)  # type: ignore[arg-type]


def _lookup(name: str) -> tuple[str, str]:
    if name not in _RERANKERS:
        raise ValueError(f"unknown reranker {name!r}; choose one of {list_rerankers()}")
    return _RERANKERS[name]


def _check_ks(ks: Iterable[int], scores: Tensor) -> tuple[int, ...]:
    ks = tuple(ks)
    if not ks:
        raise ValueError("ks must name at least one K, e.g. (1, 5, 10)")
    for k in ks:
        check_positive_int(k, "each K in ks", scores.shape[1], "the number of gallery items G")
    return ks
