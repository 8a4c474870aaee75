"""Re-rankers by name: registries of re-weightings and matchings, composed as ``"<re-weighting>+<matching>"``.

HAL/RGM §3.3 and Table 3. A re-ranker is a *re-weighting* of one direction's score matrix
(``nns``: none, ``is``: inverted softmax, ``csls``) followed by a way to turn the scores into ranked
lists: per-row top-k under the tie rule (no matching) or a *matching* (``gm``, ``rgm``). Names:

- a re-weighting alone (``"is"``): re-weighted scores, then per-row top-k;
- a matching alone (``"rgm"``): the matching on the raw scores;
- ``"<re-weighting>+<matching>"`` (``"csls+rgm"``): the matching on the re-weighted scores.

Each part is a frozen dataclass whose fields are its parameters (checked in ``__post_init__``); a
matching with a tunable parameter names it in ``tuned_parameter`` and gives its ``lambda_grid``. A
new re-ranker is one class + ``@register_reweighting`` / ``@register_matching``; every composition
with it is then accepted by ``get_reranker`` and listed by ``list_rerankers``.

``gm`` for a list length K is RGM with ``lam = 1`` (every gallery item used at most K times; the
paper's generalisation of GM to K-best lists, Table 3); for K = 1 it is greedy matching, with the
queries left unmatched (``Q > G``) completed by their best item. R@K under a matching is computed
from the run with ``k = K`` (capacities ``round(lam * k)`` change with k), so ``recall`` runs the
matching once per K. Formulas: docs/inference.md.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

import torch
from torch import Tensor

from pcmr.inference.matching import check_lam, relaxed_greedy_matching
from pcmr.inference.rescoring import (
    CSLS_K,
    IS_BETA,
    csls,
    csls_from_statistics,
    csls_gallery_statistic,
    inverted_softmax,
    inverted_softmax_gallery_statistic,
    row_top_mean,
)
from pcmr.metrics._relevance import RelevanceInput, SparseRelevance
from pcmr.metrics.defaults import DEFAULT_KS
from pcmr.metrics.driver import recall_from_lists
from pcmr.ranking.backend import BACKENDS
from pcmr.ranking.checks import check_positive_int, check_scores
from pcmr.ranking.topk import ordered_topk
from pcmr.registry import Registry
from pcmr.suggest import unknown_name

#: RGM's lambda candidates: from GM-like (1) to unconstrained (inf = top-k of the re-weighted scores).
DEFAULT_LAMBDA_GRID: tuple[float, ...] = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 10.0, math.inf)


def _parameters(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


class Reweighting(abc.ABC):
    """A re-weighting of one direction's scores ``[Q, G] -> [Q, G]``; subclasses are frozen dataclasses."""

    name: ClassVar[str]
    identity: ClassVar[bool] = False  # True only for "no re-weighting" (not listed in compositions)
    #: True when the re-weighting needs a per-gallery-item statistic of a reference query set
    #: (:meth:`gallery_statistic`) to re-score a new query's candidates (:meth:`rescore_candidates`).
    needs_gallery_statistic: ClassVar[bool] = False

    @abc.abstractmethod
    def rescore(self, scores: Tensor) -> Tensor:
        """The re-weighted scores ``[Q, G]`` of one direction's ``scores [Q, G]``."""

    def gallery_statistic(self, reference: Tensor) -> Tensor | None:
        """The per-item statistic ``[G]`` of the reference scores ``reference [R, G]`` that
        :meth:`rescore_candidates` needs (None when it needs none). Column-wise: a gallery read in
        column blocks gives the same values."""
        return None

    def rescore_candidates(self, scores: Tensor, statistic: Tensor | None) -> Tensor:
        """Re-weighted scores ``[Q, C]`` of new queries' candidate scores ``scores [Q, C]`` (``-inf``
        marks an unfilled slot), with ``statistic`` the candidates' gallery statistic ``[Q, C]``.
        The new queries are not part of the reference set."""
        return scores

    def fitted(self, size: tuple[int, ...]) -> Reweighting:
        """This re-weighting for a problem of ``size = (Q, G)`` (e.g. a neighbourhood clamped to it)."""
        return self

    @property
    def neighbourhood(self) -> int:
        """Scores each query's re-weighting reads besides its own (a candidate list must hold that many:
        CSLS's ``csls_k``); 1 for a re-weighting of each score alone."""
        return 1


class Matching(abc.ABC):
    """Ranked lists ``[Q, k]`` from (re-weighted) scores ``[Q, G]``; subclasses are frozen dataclasses."""

    name: ClassVar[str]
    tuned_parameter: ClassVar[str | None] = None  # chosen on validation data from lambda_grid
    lambda_grid: ClassVar[tuple[float, ...]] = ()
    #: True when the lists of one query depend on the other queries (capacities shared by a batch),
    #: so the matching runs on a whole score matrix and not on one query's candidate list.
    needs_all_queries: ClassVar[bool] = True

    @abc.abstractmethod
    def topk(self, rescored: Tensor, k: int) -> Tensor:
        """Ranked gallery indices ``[Q, k]`` (best first) of already re-weighted ``rescored [Q, G]``."""


def _check_part_name(name: str) -> None:
    """A part's name is not taken by the other kind of part and holds no ``+`` (compositions are
    ``"<re-weighting>+<matching>"``)."""
    if "+" in name or name in REWEIGHTINGS or name in MATCHINGS:
        raise ValueError(f"re-ranker part name {name!r} is taken or contains '+'")


#: the re-weightings by name, in registration order (``nns`` first: the identity)
REWEIGHTINGS: Registry[type[Reweighting]] = Registry("re-weighting", check_name=_check_part_name)
#: the matchings by name, in registration order
MATCHINGS: Registry[type[Matching]] = Registry("matching", check_name=_check_part_name)
_T = TypeVar("_T")


def register_reweighting(cls: _T) -> _T:
    """Class decorator: register a :class:`Reweighting` under ``cls.name``."""
    return REWEIGHTINGS.register(cls)


def register_matching(cls: _T) -> _T:
    """Class decorator: register a :class:`Matching` under ``cls.name``."""
    return MATCHINGS.register(cls)


@register_reweighting
@dataclass(frozen=True)
class NoReweighting(Reweighting):
    """Nearest-neighbour search (NNS): the scores as they are."""

    name: ClassVar[str] = "nns"
    identity: ClassVar[bool] = True

    def rescore(self, scores: Tensor) -> Tensor:
        return check_scores(scores, finite=True)


#: the name of the re-ranker that leaves the scores as they are (nearest-neighbour search)
NO_RERANKING = NoReweighting.name


@register_reweighting
@dataclass(frozen=True)
class InvertedSoftmax(Reweighting):
    """Inverted softmax (HAL/RGM eq. 5) with inverse temperature ``beta`` (paper: 30)."""

    name: ClassVar[str] = "is"
    beta: float = IS_BETA

    def __post_init__(self) -> None:
        beta = self.beta
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
            raise ValueError(f"beta must be a finite number > 0, got {beta!r}")

    needs_gallery_statistic: ClassVar[bool] = True

    def rescore(self, scores: Tensor) -> Tensor:
        return inverted_softmax(scores, beta=self.beta)

    def gallery_statistic(self, reference: Tensor) -> Tensor:
        """``log sum_r exp(beta S[r, g])`` over the reference queries (the normaliser of eq. 5)."""
        return inverted_softmax_gallery_statistic(reference, self.beta)

    def rescore_candidates(self, scores: Tensor, statistic: Tensor | None) -> Tensor:
        if statistic is None:
            raise ValueError("inverted softmax on candidates needs the gallery statistic of its reference queries")
        return (self.beta * scores - statistic).masked_fill(torch.isneginf(scores), float("-inf"))


@register_reweighting
@dataclass(frozen=True)
class CSLS(Reweighting):
    """Cross-domain similarity local scaling (HAL/RGM eq. 6) with neighbourhood ``csls_k`` (paper: 10)."""

    name: ClassVar[str] = "csls"
    csls_k: int = CSLS_K

    def __post_init__(self) -> None:
        check_positive_int(self.csls_k, "csls_k")

    needs_gallery_statistic: ClassVar[bool] = True

    def rescore(self, scores: Tensor) -> Tensor:
        return csls(scores, k=self.csls_k)

    def gallery_statistic(self, reference: Tensor) -> Tensor:
        """``r_Q [G]``: each item's mean score to its ``csls_k`` nearest reference queries."""
        return csls_gallery_statistic(reference, min(self.csls_k, reference.shape[0]))

    def rescore_candidates(self, scores: Tensor, statistic: Tensor | None) -> Tensor:
        """``2 S - r_G(q) - r_Q(g)`` with ``r_G(q)`` the mean of the query's ``csls_k`` best candidate
        scores (its ``csls_k`` nearest gallery items when those are among the candidates)."""
        if statistic is None:
            raise ValueError("CSLS on candidates needs the gallery statistic r_Q of its reference queries")
        out = csls_from_statistics(scores, row_top_mean(scores, self.csls_k), statistic)
        return out.masked_fill(torch.isneginf(scores), float("-inf"))

    @property
    def neighbourhood(self) -> int:
        return self.csls_k

    def fitted(self, size: tuple[int, ...]) -> CSLS:
        """The neighbourhood clamped to ``min(Q, G)``, so tiny galleries (or folds) still work."""
        return dataclasses.replace(self, csls_k=min(self.csls_k, *size))


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")


@register_matching
@dataclass(frozen=True)
class GreedyMatching(Matching):
    """Greedy matching (HAL/RGM §3.3.3) generalised to k-best lists: RGM with ``lam = 1``."""

    name: ClassVar[str] = "gm"
    backend: str = "auto"

    def __post_init__(self) -> None:
        _check_backend(self.backend)

    def topk(self, rescored: Tensor, k: int) -> Tensor:
        return relaxed_greedy_matching(rescored, k, 1.0, backend=self.backend)


@register_matching
@dataclass(frozen=True)
class RelaxedGreedyMatching(Matching):
    """Relaxed greedy matching (HAL/RGM Algorithm 1): item capacity ``round(lam * k)``."""

    name: ClassVar[str] = "rgm"
    tuned_parameter: ClassVar[str | None] = "lam"
    lambda_grid: ClassVar[tuple[float, ...]] = DEFAULT_LAMBDA_GRID
    lam: float = 2.0
    backend: str = "auto"

    def __post_init__(self) -> None:
        check_lam(self.lam)  # type and sign; round(lam * k) >= 1 is checked per k at run time
        _check_backend(self.backend)

    def topk(self, rescored: Tensor, k: int) -> Tensor:
        return relaxed_greedy_matching(rescored, k, self.lam, backend=self.backend)


@dataclass(frozen=True)
class Reranker:
    """A named re-ranker: a re-weighting followed by per-row top-k (``matcher`` None) or a matching.

    Parameters of the parts are readable as attributes (``get_reranker("csls+rgm").lam``).
    """

    name: str
    weighting: Reweighting
    matcher: Matching | None = None

    @property
    def reweighting(self) -> str:
        """Name of the re-weighting, ``"none"`` for NNS."""
        return "none" if self.weighting.identity else self.weighting.name

    @property
    def matching(self) -> str:
        """Name of the matching, ``"none"`` for per-row top-k."""
        return "none" if self.matcher is None else self.matcher.name

    @property
    def is_identity(self) -> bool:
        """True for nearest-neighbour search: the scores ranked as they are (no re-weighting, no matching)."""
        return self.weighting.identity and self.matcher is None

    @property
    def returns_scores(self) -> bool:
        """True without a matching (a re-weighted score matrix ranks the whole gallery); False for lists."""
        return self.matcher is None

    @property
    def works_on_candidates(self) -> bool:
        """True when each query can be answered from its own candidate list (re-scored exactly), as an
        ANN index or a vector database gives: no matching over all queries."""
        return self.matcher is None or not self.matcher.needs_all_queries

    @property
    def needs_gallery_statistic(self) -> bool:
        """True when the re-weighting needs a statistic of a reference query set per gallery item."""
        return self.weighting.needs_gallery_statistic

    @property
    def neighbourhood(self) -> int:
        """Scores per query the re-weighting reads (:attr:`Reweighting.neighbourhood`; CSLS's ``csls_k``)."""
        return self.weighting.neighbourhood

    @property
    def tuned_parameter(self) -> str | None:
        """The parameter chosen on validation data (``"lam"`` for RGM), or None."""
        return None if self.matcher is None else self.matcher.tuned_parameter

    @property
    def lambda_grid(self) -> tuple[float, ...]:
        return () if self.matcher is None else self.matcher.lambda_grid

    def parameters(self) -> dict[str, Any]:
        """Every parameter of both parts, by name."""
        parts = [self.weighting] + ([self.matcher] if self.matcher is not None else [])
        return {k: v for part in parts for k, v in dataclasses.asdict(cast(Any, part)).items()}  # concrete parts are dataclasses

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__") or key in ("name", "weighting", "matcher"):
            raise AttributeError(key)
        parameters = self.parameters()
        if key in parameters:
            return parameters[key]
        raise AttributeError(f"re-ranker '{self.name}': " + unknown_name("parameter", key, list(parameters)))

    def with_parameters(self, **params: Any) -> Reranker:
        """A copy with some parameters replaced (each goes to the part that owns it)."""
        weighting, matcher = self.weighting, self.matcher
        own = {k: v for k, v in params.items() if k in _parameters(type(weighting))}
        weighting = dataclasses.replace(cast(Any, weighting), **own) if own else weighting
        if matcher is not None:
            theirs = {k: v for k, v in params.items() if k in _parameters(type(matcher))}
            matcher = dataclasses.replace(cast(Any, matcher), **theirs) if theirs else matcher
        unknown = set(params) - set(self.parameters())
        if unknown:
            raise ValueError(f"re-ranker '{self.name}': " + unknown_name("parameter", sorted(unknown),
                                                                          list(self.parameters())))
        return Reranker(self.name, weighting, matcher)

    def fitted(self, size: tuple[int, ...]) -> Reranker:
        """This re-ranker for a problem of ``size = (Q, G)`` (CSLS's neighbourhood clamped to it)."""
        return Reranker(self.name, self.weighting.fitted(size), self.matcher)

    def rescore(self, scores: Tensor) -> Tensor:
        """The re-weighted score matrix ``[Q, G]`` (the input itself without a re-weighting)."""
        return self.weighting.rescore(scores)

    def topk(self, scores: Tensor, k: int) -> Tensor:
        """Ranked lists ``LongTensor[Q, k]`` for one direction's scores ``[Q, G]``.

        Without a matching: per-row top-k of the re-weighted scores (ties to the lower gallery index).
        With one: the matching's run with list length ``k`` on the re-weighted scores.
        """
        return self.topk_rescored(self.rescore(scores), k)

    def topk_rescored(self, rescored: Tensor, k: int) -> Tensor:
        """``topk`` for scores already re-weighted by ``self.rescore``."""
        check_positive_int(k, "k", rescored.shape[1], "the number of gallery items G")
        if self.matcher is None:
            return ordered_topk(rescored, k)
        return self.matcher.topk(rescored, k)

    def recall(self, scores: Tensor, relevant: RelevanceInput | SparseRelevance, ks: Iterable[int] = DEFAULT_KS) -> dict[str, float]:
        """``{"R@K": percent}`` for each K in ``ks``, one direction (``pcmr.metrics.driver.recall_from_lists``).

        ``relevant``: dense BoolTensor ``[Q, G]`` or a list of Q lists of positive gallery indices.
        Without a matching one ranking with the largest K serves every K; a matching runs once per K.
        """
        return self.recall_rescored(self.rescore(scores), relevant, ks)

    def recall_rescored(self, rescored: Tensor, relevant: RelevanceInput | SparseRelevance,
                        ks: Iterable[int] = DEFAULT_KS) -> dict[str, float]:
        """``recall`` for scores already re-weighted by ``self.rescore`` (re-weight once, match many times)."""
        return recall_from_lists(self, rescored, relevant, ks)


def list_reweightings() -> list[str]:
    """Registered re-weightings (``nns`` is the identity)."""
    return REWEIGHTINGS.names()


def list_matchings() -> list[str]:
    """Registered matchings."""
    return MATCHINGS.names()


def list_rerankers() -> list[str]:
    """Every name ``get_reranker`` accepts: re-weightings, matchings, then each
    ``"<re-weighting>+<matching>"`` of a non-identity re-weighting and a matching."""
    combined = [f"{w}+{m}" for w, cls in REWEIGHTINGS.items() if not cls.identity for m in MATCHINGS]
    return REWEIGHTINGS.names() + MATCHINGS.names() + combined


def _parts(name: str) -> tuple[type[Reweighting], type[Matching] | None]:
    if not isinstance(name, str) or name not in list_rerankers():
        raise ValueError(unknown_name("re-ranker", str(name), list_rerankers()))
    if name in REWEIGHTINGS:
        return REWEIGHTINGS.get(name), None
    if name in MATCHINGS:
        return NoReweighting, MATCHINGS.get(name)
    weighting, matching = name.split("+")
    return REWEIGHTINGS.get(weighting), MATCHINGS.get(matching)


def reranker_parameters(name: str) -> tuple[str, ...]:
    """The keyword parameters ``get_reranker(name, ...)`` accepts (e.g. ``("beta", "lam", "backend")``)."""
    weighting, matching = _parts(name)
    return _parameters(weighting) + (_parameters(matching) if matching is not None else ())


def get_reranker(name: str, **params: object) -> Reranker:
    """A ``Reranker`` by name (``list_rerankers()``), e.g. ``get_reranker("csls+rgm", csls_k=10, lam=1.5)``.

    Parameters set to None are ignored (unset command-line flags); a parameter the re-ranker does not
    use (see ``reranker_parameters(name)``) or an unknown one raises ValueError.
    """
    weighting, matching = _parts(name)
    given = {key: value for key, value in params.items() if value is not None}
    allowed = reranker_parameters(name)
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValueError(f"re-ranker '{name}': " + unknown_name("parameter", unknown, list(allowed)))
    own = {k: v for k, v in given.items() if k in _parameters(weighting)}
    matcher = None
    if matching is not None:
        matcher = matching(**{k: v for k, v in given.items() if k in _parameters(matching)})
    return Reranker(name, weighting(**own), matcher)
