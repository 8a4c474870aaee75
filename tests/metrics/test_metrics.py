"""pcmr.metrics ranking metrics, recall from top-k lists and the report, against slow references."""

from __future__ import annotations

import contextlib
import math
import statistics

import pytest
import torch

from _tie_orders import expected_metrics
from pcmr.metrics import (
    first_positive_ranks,
    per_query_metrics,
    recall_at_k_from_topk,
    retrieval_metrics,
)
from pcmr.ranking import numba_disabled


def reference_order(row: list[float]) -> list[int]:
    """Gallery indices best first; ties: lower index first (the documented rule)."""
    return sorted(range(len(row)), key=lambda g: (-row[g], g))


def reference_metrics(scores: torch.Tensor, relevant: list[list[bool]], ks=(1, 5, 10)) -> dict[str, float]:
    """Slow, explicit float64 reference: a sorted list per query, loops for every metric."""
    ranks, r_precisions, maps = [], [], []
    num_skipped = 0
    for q, row in enumerate(scores.double().tolist()):
        positives = {g for g, is_pos in enumerate(relevant[q]) if is_pos}
        if not positives:
            num_skipped += 1
            continue
        order = reference_order(row)
        ranks.append(min(order.index(p) for p in positives) + 1)
        r = len(positives)
        hits = 0
        average = 0.0
        for position, g in enumerate(order[:r], start=1):
            if g in positives:
                hits += 1
                average += hits / position
        r_precisions.append(hits / r)
        maps.append(average / r)
    out = {f"R@{k}": 100.0 * sum(rank <= k for rank in ranks) / len(ranks) for k in ks}
    out["median_rank"] = float(statistics.median(ranks))
    out["mean_rank"] = sum(ranks) / len(ranks)
    out["r_precision"] = 100.0 * sum(r_precisions) / len(r_precisions)
    out["map_at_r"] = 100.0 * sum(maps) / len(maps)
    out["num_skipped"] = float(num_skipped)
    return out


def assert_same(ours: dict[str, float], theirs: dict[str, float]) -> None:
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("block_size", [1, 4, 7, None])
def test_retrieval_metrics_matches_reference_with_ties(dtype, block_size):
    """Many ties: every metric is its average over all 7! orders of the gallery."""
    generator = torch.Generator().manual_seed(3)
    scores = torch.randint(0, 3, (13, 7), generator=generator).to(dtype)  # many ties
    relevant = torch.rand(13, 7, generator=generator) < 0.3
    relevant[4] = False  # a query without positives
    relevant[5] = True  # every item relevant
    expected = expected_metrics(scores.double().tolist(), relevant.tolist(), ks=(1, 2, 3, 5))
    assert expected["num_skipped"] >= 1
    assert_same(retrieval_metrics(scores, relevant, ks=(1, 2, 3, 5), block_size=block_size), expected)
    sparse = [row.nonzero().flatten().tolist() for row in relevant]
    assert_same(retrieval_metrics(scores, sparse, ks=(1, 2, 3, 5), block_size=block_size), expected)
    with numba_disabled():  # the torch path (CUDA, or no numba) gives the same values
        assert_same(retrieval_metrics(scores, relevant, ks=(1, 2, 3, 5), block_size=block_size), expected)
        assert_same(retrieval_metrics(scores.T.contiguous().T, relevant, ks=(1, 2, 3, 5), block_size=block_size),
                    expected)


def test_retrieval_metrics_continuous_scores_and_wide_r():
    generator = torch.Generator().manual_seed(5)
    scores = torch.randn(17, 211, generator=generator, dtype=torch.float64)
    relevant = torch.rand(17, 211, generator=generator) < torch.linspace(0.01, 0.6, 17)[:, None]
    relevant[16] = False
    relevant[15, 3] = True
    expected = reference_metrics(scores, relevant.tolist())
    assert_same(retrieval_metrics(scores, relevant, block_size=5), expected)


def test_ties_give_expected_values_over_their_orders():
    scores = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    # the positive is one of 3 tied items: R@1 = 1/3, R@2 = 2/3, expected rank 2
    out = retrieval_metrics(scores, [[2]], ks=(1, 2, 3))
    assert out["R@1"] == pytest.approx(100 / 3) and out["R@2"] == pytest.approx(200 / 3) and out["R@3"] == 100.0
    assert out["median_rank"] == 2.0
    assert first_positive_ranks(scores, [[1]]).tolist() == [1]  # items scoring strictly higher, plus one
    # A tie across the top-R cut: R = 2, the positive (index 2) ties with index 1 for the second place.
    per_query = per_query_metrics(torch.tensor([[2.0, 1.0, 1.0, 0.0]]), [[0, 2]])
    assert per_query.r_precision.tolist() == [0.75]
    assert per_query.map_at_r.tolist() == [pytest.approx(0.75)]  # (1 + 1/2) / 2 or (1 + 2/2) / 2
    constant = torch.zeros(3, 6)
    assert per_query_metrics(constant, [[5], [0], [3, 4]]).expected_ranks().tolist() == [3.5, 3.5, pytest.approx(7 / 3)]


def test_infinite_scores_are_ranked():
    scores = torch.tensor([[float("-inf"), 0.0, float("inf")], [float("-inf"), float("-inf"), 1.0]])
    assert first_positive_ranks(scores, [[0], [1]]).tolist() == [3, 2]  # 1 + items scoring strictly higher
    assert per_query_metrics(scores, [[0], [1]]).expected_ranks().tolist() == [3.0, 2.5]  # two tied -inf


def test_queries_without_positives_are_skipped():
    scores = torch.randn(4, 6)
    out = retrieval_metrics(scores, [[], [1], [], [2, 3]])
    assert out["num_skipped"] == 2.0
    none = retrieval_metrics(scores, [[], [], [], []])
    assert none["num_skipped"] == 4.0 and math.isnan(none["R@1"])
    assert first_positive_ranks(scores, [[], [1], [], []]).tolist()[0] == 0


def test_errors_are_clear():
    scores = torch.randn(3, 5)
    nan_scores = scores.clone()
    nan_scores[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        retrieval_metrics(nan_scores, torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"shape \[3, 5\]"):
        retrieval_metrics(scores, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="boolean"):
        retrieval_metrics(scores, torch.ones(3, 5))
    with pytest.raises(ValueError, match="one per query"):
        retrieval_metrics(scores, [[0], [1]])
    with pytest.raises(ValueError, match=r"index 7"):
        retrieval_metrics(scores, [[0], [7], []])
    with pytest.raises(ValueError, match="2-D"):
        retrieval_metrics(torch.randn(5), [[0]])
    with pytest.raises(ValueError, match="ks"):
        retrieval_metrics(scores, [[0], [1], [2]], ks=(0,))
    with pytest.raises(TypeError, match="list of Q lists"):
        retrieval_metrics(scores, "abc")


def test_inf_minus_inf_is_not_mistaken_for_nan():
    scores = torch.tensor([[float("inf"), float("-inf"), 0.0]])
    assert retrieval_metrics(scores, [[0]])["R@1"] == 100.0


def reference_recall_from_topk(topk, relevant, k):
    hits = [any(relevant[q][g] for g in topk[q][:k]) for q in range(len(topk)) if any(relevant[q])]
    return 100.0 * sum(hits) / len(hits)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_recall_at_k_from_topk(k):
    generator = torch.Generator().manual_seed(11)
    scores = torch.randn(23, 19, generator=generator)
    topk = scores.topk(5, dim=1).indices
    relevant = torch.rand(23, 19, generator=generator) < 0.1
    relevant[0] = False
    expected = reference_recall_from_topk(topk.tolist(), relevant.tolist(), k)
    assert recall_at_k_from_topk(topk, relevant, k) == pytest.approx(expected, abs=1e-9)
    sparse = [row.nonzero().flatten().tolist() for row in relevant]
    assert recall_at_k_from_topk(topk, sparse, k) == pytest.approx(expected, abs=1e-9)


def test_recall_at_k_from_topk_agrees_with_scores():
    scores = torch.randn(29, 41, generator=torch.Generator().manual_seed(2))
    sparse = [[q % 41, (3 * q) % 41] for q in range(29)]
    topk = scores.topk(10, dim=1).indices
    full = retrieval_metrics(scores, sparse)
    assert recall_at_k_from_topk(topk, sparse, 5) == pytest.approx(full["R@5"], abs=1e-9)
    assert recall_at_k_from_topk(topk, sparse) == pytest.approx(full["R@10"], abs=1e-9)


def test_recall_at_k_from_topk_errors():
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k_from_topk(torch.zeros(2, 3, dtype=torch.long), [[0], [1]], k=4)
    with pytest.raises(ValueError, match="integer"):
        recall_at_k_from_topk(torch.zeros(2, 3), [[0], [1]])
    with pytest.raises(ValueError, match="outside"):
        recall_at_k_from_topk(torch.full((2, 3), 9), torch.ones(2, 4, dtype=torch.bool))


@pytest.mark.parametrize("block_size", [1, 3, None])
def test_ranks_read_from_top_lists_agree_with_counted_ranks_under_ties(block_size):
    """Extra positive sets read R@K from the top list (rank_limit): the same expectations over tie orders."""
    from pcmr.metrics._relevance import as_sparse
    from pcmr.metrics.ranking import summarize
    from pcmr.metrics.scan import Target, scan

    generator = torch.Generator().manual_seed(12)
    scores = torch.randint(0, 3, (17, 23), generator=generator).float()
    relevant = torch.rand(17, 23, generator=generator) < 0.15
    rel = as_sparse(relevant, 17, 23)
    for kernel in (True, False):
        result = scan(scores, [Target(rel), Target(rel, exact_ranks=False, rank_limit=4)], block_size=block_size,
                      use_kernel=kernel)
        counted, listed = (summarize(p, (1, 2, 3, 4)) for p in result.per_query)
        for key in ("R@1", "R@2", "R@3", "R@4", "r_precision", "map_at_r"):
            assert listed[key] == pytest.approx(counted[key], abs=1e-9), key


@pytest.mark.parametrize("kernel", [True, False])
def test_mixed_widths_in_blocks_of_similar_widths_match_reference(kernel):
    """Queries needing from 1 to G listed items (R-Precision's R), on a transposed view: the pass groups
    them into blocks of similar widths, and wide lists come from one sort of the row."""
    from pcmr.ranking.backend import numba_disabled

    generator = torch.Generator().manual_seed(8)
    scores = torch.randn(53, 23, generator=generator)  # [G, Q]: queries are its columns; no ties
    relevant = torch.rand(23, 53, generator=generator) < torch.linspace(0.02, 1.0, 23)[:, None]  # [Q, G]
    relevant[0, :] = False
    relevant[0, 5] = True
    expected = reference_metrics(scores.T, relevant.tolist())
    with numba_disabled() if not kernel else contextlib.nullcontext():
        for block_size in (None, 3):
            assert_same(retrieval_metrics(scores.T, relevant, block_size=block_size), expected)
