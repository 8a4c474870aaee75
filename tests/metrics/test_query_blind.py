"""The query-blind ranking's R-Precision against a brute-force expectation over every tie order."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from pcmr.metrics.query_blind import query_blind_r_precision, retrieval_skill
from pcmr.metrics.ranking import retrieval_metrics


def _brute_force(relevant: torch.Tensor) -> float:
    """Mean R-Precision over every gallery order that sorts by multiplicity (each tie order equally
    likely), computed by listing the orders and scoring each with the library's ranking metric."""
    rel = relevant.bool()
    multiplicity = rel.sum(0).tolist()
    orders = [p for p in itertools.permutations(range(rel.shape[1]))
              if all(multiplicity[p[i]] >= multiplicity[p[i + 1]] for i in range(len(p) - 1))]
    total = 0.0
    for order in orders:
        scores = torch.zeros(rel.shape, dtype=torch.float64)
        for place, g in enumerate(order):
            scores[:, g] = float(len(order) - place)
        total += retrieval_metrics(scores, rel)["r_precision"]
    return total / len(orders)


@pytest.mark.parametrize("seed", range(6))
def test_matches_every_tie_order(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    relevant = torch.rand((5, 6), generator=generator, dtype=torch.float64) < 0.45
    if not relevant.any():
        relevant[0, 0] = True
    assert query_blind_r_precision(relevant) == pytest.approx(_brute_force(relevant), abs=1e-9)


def test_queries_without_relevant_items_are_left_out() -> None:
    relevant = torch.tensor([[True, False, True], [False, False, False], [False, True, True]])
    assert query_blind_r_precision(relevant) == pytest.approx(_brute_force(relevant[[0, 2]]), abs=1e-9)
    assert math.isnan(query_blind_r_precision(torch.zeros(2, 3, dtype=torch.bool)))


def test_generic_gallery_item_first() -> None:
    # gallery item 0 is relevant to every query, item 1 to one; one relevant item per query scores 100 for
    # the queries whose item is the most generic and 0 for the other
    relevant = torch.tensor([[True, False], [True, False], [False, True]])
    assert query_blind_r_precision(relevant) == pytest.approx(100.0 * 2 / 3)


def test_rejects_a_vector() -> None:
    with pytest.raises(ValueError, match=r"\[Q, G\]"):
        query_blind_r_precision(torch.ones(3, dtype=torch.bool))


def test_retrieval_skill() -> None:
    assert retrieval_skill(90.0, 80.0) == pytest.approx(0.5)
    assert retrieval_skill(70.0, 80.0) == pytest.approx(-0.5)
    assert math.isnan(retrieval_skill(100.0, 100.0))
