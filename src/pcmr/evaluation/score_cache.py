"""``ScoreCache``: the work of an evaluation that does not depend on the relevance relation.

One evaluation of a model reports one table per relevance mode (``exact``, ``source``, ...). The score
matrices, a matching's runs and the PMRP columns are the same under every mode, so they are computed
under the first mode and read back under the others. The contract, in one place:

- a cache belongs to one pair of embeddings (test and validation), one set of similarity options and
  one seed: :class:`pcmr.evaluation.RetrievalEvaluator` makes one per evaluation and hands it to each
  :func:`~pcmr.evaluation.evaluate.evaluate_embeddings` call of that evaluation (one per mode);
- :meth:`ScoreCache.score_matrix` computes each ``(similarity, part)`` matrix once (``part``: ``test``
  or ``val``), with the seed it is given;
- :meth:`ScoreCache.lambda_runs` and :meth:`ScoreCache.test_runs` hand out the dictionaries a matching's
  runs are kept in (``select_lambda``'s ``runs`` on validation, :class:`KeptRuns` on test): a mode that
  selects a lambda another mode selected runs no matching again;
- :meth:`ScoreCache.known_pmrp` / :meth:`ScoreCache.keep_pmrp`: the PMRP columns of a (similarity,
  re-ranker), which depend on the class labels only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.inference import Reranker
from pcmr.metrics.driver import DIRECTIONS
from pcmr.scoring import score_matrix

__all__ = ["KeptRuns", "ScoreCache"]


@dataclass
class ScoreCache:
    """The relevance-independent work of one evaluation (see the module docstring for the contract).

    Attributes:
        scores: ``{(similarity, "test" | "val"): S [N_img, N_cap]}``.
        runs: ``{(similarity, re-ranker, direction): {(lambda, K): lists [Q, K]}}``, the matching's runs of
            lambda selection on the validation scores (``select_lambda``'s ``runs``).
        test_runs: ``{(similarity, re-ranker, direction): {(parameters, K): lists [Q, K]}}``, a matching's
            runs on the test scores (a mode whose lambda another mode selected too matches nothing).
        pmrp: ``{(similarity, re-ranker): {column: value}}``, the PMRP columns (class labels only).
    """

    scores: dict[tuple[str, str], Tensor] = field(default_factory=dict)
    runs: dict[tuple[str, str, str], dict[tuple[float, int], Tensor]] = field(default_factory=dict)
    test_runs: dict[tuple[str, str, str], dict[tuple[Any, int], Tensor]] = field(default_factory=dict)
    pmrp: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def score_matrix(self, name: str, part: str, images: Gaussian, captions: Gaussian, options: dict[str, Any],
                     seed: int) -> Tensor:
        """``score_matrix(name, images, captions, options, seed=seed)``, computed once per ``(name, part)``."""
        if (name, part) not in self.scores:
            self.scores[(name, part)] = score_matrix(name, images, captions, options, seed=seed)
        return self.scores[(name, part)]

    def lambda_runs(self, name: str, rerank: str) -> dict[str, dict[tuple[float, int], Tensor]]:
        """Per direction, where the lambda selection of ``rerank`` on ``name``'s validation scores keeps its runs."""
        return {d: self.runs.setdefault((name, rerank, d), {}) for d in DIRECTIONS}

    def test_runs_of(self, name: str, rerank: str, direction: str) -> dict[tuple[Any, int], Tensor]:
        """Where a matching ``rerank`` keeps its runs on ``name``'s test scores in ``direction``."""
        return self.test_runs.setdefault((name, rerank, direction), {})

    def known_pmrp(self, name: str, rerank: str) -> dict[str, Any] | None:
        """The PMRP columns of ``(name, rerank)`` computed under an earlier mode, else None."""
        return self.pmrp.get((name, rerank))

    def keep_pmrp(self, name: str, rerank: str, columns: dict[str, Any]) -> None:
        """Remember the PMRP columns of ``(name, rerank)`` for the later modes."""
        self.pmrp[(name, rerank)] = columns


@dataclass(frozen=True)
class KeptRuns:
    """A matching re-ranker whose runs (``topk_rescored``) are kept in ``runs`` by its parameters and K:
    the driver's interface (``returns_scores``, ``fitted``, ``rescore``, ``topk_rescored``) for one
    direction of one score matrix."""

    reranker: Reranker
    runs: dict[tuple[Any, int], Tensor]

    @property
    def returns_scores(self) -> bool:
        return self.reranker.returns_scores

    def fitted(self, size: tuple[int, ...]) -> KeptRuns:
        return KeptRuns(self.reranker.fitted(size), self.runs)

    def rescore(self, scores: Tensor) -> Tensor:
        return self.reranker.rescore(scores)

    def topk_rescored(self, rescored: Tensor, k: int) -> Tensor:
        key = (tuple(sorted(self.reranker.parameters().items())), k)
        if key not in self.runs:
            self.runs[key] = self.reranker.topk_rescored(rescored, k)
        return self.runs[key]
