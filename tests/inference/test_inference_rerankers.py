"""Rerankers by name, R@K through them, and lambda selection."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pcmr.inference import (
    DEFAULT_LAMBDA_GRID,
    csls,
    get_reranker,
    greedy_matching,
    inverted_softmax,
    list_matchings,
    list_rerankers,
    list_reweightings,
    relaxed_greedy_matching,
    reranker_parameters,
    select_lambda,
)


def loop_recall(lists, relevant, k):
    """R@K (percent) by loops: a query hits if one of its first k listed items is relevant."""
    hits = [any(bool(relevant[q, g]) for g in lists[q][:k]) for q in range(len(lists))]
    return 100.0 * sum(hits) / len(hits)


def stable_topk(scores, k):
    return np.argsort(-scores.double().numpy(), axis=1, kind="stable")[:, :k]


def retrieval_problem(num_queries=23, num_gallery=41, seed=0):
    """Scores with a few hub columns; each query has 1 or 2 relevant gallery items."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(num_queries, num_gallery, generator=gen)
    scores[:, :3] += 0.5  # hubs
    relevant = torch.zeros(num_queries, num_gallery, dtype=torch.bool)
    relevant[torch.arange(num_queries), torch.arange(num_queries) % num_gallery] = True
    relevant[torch.arange(0, num_queries, 2), 40] = True
    scores[relevant] += 0.3
    return scores, relevant


def test_list_and_parameters():
    names = list_rerankers()
    assert {"nns", "is", "csls", "gm", "rgm", "is+rgm", "csls+rgm"} <= set(names)
    # every part alone, then every composition of a non-identity re-weighting with a matching
    combined = [f"{w}+{m}" for w in list_reweightings() if w != "nns" for m in list_matchings()]
    assert names == list_reweightings() + list_matchings() + combined
    assert reranker_parameters("nns") == ()
    assert reranker_parameters("is+rgm") == ("beta", "lam", "backend")
    assert reranker_parameters("csls+rgm") == ("csls_k", "lam", "backend")
    reranker = get_reranker("csls+rgm", csls_k=5, lam=1.5, beta=None)  # None = unset flag
    assert (reranker.reweighting, reranker.matching, reranker.csls_k, reranker.lam) == ("csls", "rgm", 5, 1.5)
    assert get_reranker("is").returns_scores and not get_reranker("gm").returns_scores


def test_bad_names_and_parameters():
    with pytest.raises(ValueError, match="unknown re-ranker"):
        get_reranker("hungarian")
    with pytest.raises(ValueError, match="re-ranker .is.: unknown parameter .lam.; expected one of: beta"):
        get_reranker("is", lam=2.0)
    with pytest.raises(ValueError, match=r"unknown parameter .lambda_. \(did you mean .lam.\?\)"):
        get_reranker("rgm", lambda_=2.0)
    with pytest.raises(ValueError, match="lam must be > 0"):
        get_reranker("rgm", lam=0.0)
    with pytest.raises(ValueError, match="beta"):
        get_reranker("is", beta=-1.0)
    with pytest.raises(ValueError, match="csls_k"):
        get_reranker("csls", csls_k=0)
    with pytest.raises(ValueError, match="backend"):
        get_reranker("gm", backend="gpu")


@pytest.mark.parametrize("orientation", ["wide", "tall"])
def test_each_reranker_composes_its_parts(orientation):
    scores, _ = retrieval_problem()
    if orientation == "tall":
        scores = scores.T.contiguous()
    k = 5
    expected = {
        "nns": stable_topk(scores, k),
        "is": stable_topk(inverted_softmax(scores, beta=10.0), k),
        "csls": stable_topk(csls(scores, k=3), k),
        "gm": relaxed_greedy_matching(scores, k, 1.0).numpy(),
        "rgm": relaxed_greedy_matching(scores, k, 1.5).numpy(),
        "is+rgm": relaxed_greedy_matching(inverted_softmax(scores, beta=10.0), k, 1.5).numpy(),
        "csls+rgm": relaxed_greedy_matching(csls(scores, k=3), k, 1.5).numpy(),
    }
    for name in expected:  # the paper's re-rankers; every other composition: the registry tests below
        params = {"beta": 10.0, "csls_k": 3, "lam": 1.5}
        params = {key: value for key, value in params.items() if key in reranker_parameters(name)}
        got = get_reranker(name, **params).topk(scores, k)
        assert got.shape == (scores.shape[0], k) and got.dtype == torch.long
        np.testing.assert_array_equal(got.numpy(), expected[name], err_msg=name)


def test_gm_top1_is_greedy_matching_completed():
    scores, _ = retrieval_problem()
    for matrix in (scores, scores.T.contiguous()):
        top1 = get_reranker("gm").topk(matrix, 1)[:, 0]
        matched = greedy_matching(matrix)
        assert torch.equal(top1[matched >= 0], matched[matched >= 0])
        # unmatched queries (Q > G) get their own best item
        unmatched = matched < 0
        assert torch.equal(top1[unmatched], torch.from_numpy(stable_topk(matrix, 1)[:, 0])[unmatched])


def test_recall_uses_the_run_with_k_equal_to_K():
    scores, relevant = retrieval_problem()
    for name in list_rerankers():
        reranker = get_reranker(name)
        got = reranker.recall(scores, relevant, ks=(1, 5, 10))
        assert list(got) == ["R@1", "R@5", "R@10"]
        for k in (1, 5, 10):
            lists = reranker.topk(scores, k).tolist()  # its own run for each K
            assert got[f"R@{k}"] == pytest.approx(loop_recall(lists, relevant, k)), (name, k)
    # sparse relevance lists give the same numbers
    sparse = [torch.nonzero(row).squeeze(1).tolist() for row in relevant]
    assert get_reranker("rgm").recall(scores, sparse) == pytest.approx(
        get_reranker("rgm").recall(scores, relevant)
    )


def test_rgm_lists_differ_from_a_prefix_of_a_longer_run():
    """Why R@K must use the run with k = K: capacities round(lam * k) change with k."""
    scores, _ = retrieval_problem()
    short = relaxed_greedy_matching(scores, 1, 1.0)
    long = relaxed_greedy_matching(scores, 5, 1.0)
    assert not torch.equal(short[:, 0], long[:, 0])


def test_select_lambda_picks_best_sum_with_ties_to_larger_lambda():
    scores, relevant = retrieval_problem()
    grid = (1.0, 1.5, 2.0, math.inf)
    selection = select_lambda(scores, relevant, ks=(1, 5), grid=grid)
    assert list(selection.table) == list(grid)
    for lam, row in selection.table.items():
        expected = get_reranker("rgm", lam=lam).recall(scores, relevant, ks=(1, 5))
        assert row["R@1"] == pytest.approx(expected["R@1"]) and row["R@5"] == pytest.approx(expected["R@5"])
        assert row["sum"] == pytest.approx(expected["R@1"] + expected["R@5"])
    best_sum = max(row["sum"] for row in selection.table.values())
    tied = [lam for lam, row in selection.table.items() if row["sum"] == best_sum]
    assert selection.best_lam == max(tied)
    # lam = inf is NNS on the (re-weighted) scores
    nns = get_reranker("csls", csls_k=3).recall(scores, relevant, ks=(1, 5))
    combined = select_lambda(scores, relevant, ks=(1, 5), grid=(math.inf,), method="csls+rgm", csls_k=3)
    assert combined.table[math.inf]["R@1"] == pytest.approx(nns["R@1"])
    assert combined.method == "csls+rgm" and combined.ks == (1, 5)
    assert DEFAULT_LAMBDA_GRID[0] == 1.0 and math.isinf(DEFAULT_LAMBDA_GRID[-1])


def test_select_lambda_bad_input():
    scores, relevant = retrieval_problem()
    with pytest.raises(ValueError, match="method"):
        select_lambda(scores, relevant, method="is")
    with pytest.raises(ValueError, match="round"):
        select_lambda(scores, relevant, ks=(1,), grid=(0.4, 1.0))
    with pytest.raises(ValueError, match="> 0"):
        select_lambda(scores, relevant, grid=(0.0,))
    with pytest.raises(ValueError, match="grid"):
        select_lambda(scores, relevant, grid=())
    with pytest.raises(ValueError, match="chooses lam"):
        select_lambda(scores, relevant, lam=2.0)
    with pytest.raises(ValueError, match="ks"):
        get_reranker("nns").recall(scores, relevant, ks=())
    with pytest.raises(ValueError, match="gallery items"):
        get_reranker("rgm").recall(scores, relevant, ks=(1, 100))


def _parameters_for(name):
    """Small-problem parameters for the re-rankers that take them (others keep their defaults)."""
    params = {"beta": 10.0, "csls_k": 3, "lam": 1.5}
    return {key: value for key, value in params.items() if key in reranker_parameters(name)}


@pytest.mark.parametrize("name", list_reweightings())
def test_every_reweighting_is_permutation_equivariant_and_ranks_like_a_stable_sort(name):
    """Invariants of any re-weighting: relabelling queries / gallery items relabels the output, and
    its re-ranker's lists are the stable descending argsort of the re-scored matrix."""
    gen = torch.Generator().manual_seed(3)
    scores = torch.rand(17, 13, generator=gen, dtype=torch.float64)
    reranker = get_reranker(name, **_parameters_for(name))
    rescored = reranker.rescore(scores)
    assert rescored.shape == scores.shape and rescored.dtype == scores.dtype
    assert bool(torch.isfinite(rescored).all())
    rows, cols = torch.randperm(17, generator=gen), torch.randperm(13, generator=gen)
    permuted = reranker.rescore(scores[rows][:, cols])
    torch.testing.assert_close(permuted, rescored[rows][:, cols], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(reranker.topk(scores, 4).numpy(), stable_topk(rescored, 4))


@pytest.mark.parametrize("name", list_matchings())
@pytest.mark.parametrize("orientation", ["wide", "tall"])
def test_every_matching_gives_valid_lists_and_is_permutation_equivariant(name, orientation):
    """Invariants of any matching on tie-free scores: k distinct gallery items per row, and relabelling
    queries / gallery items relabels the lists (the scan order depends on the scores only)."""
    scores, _ = retrieval_problem(seed=4)
    if orientation == "tall":
        scores = scores.T.contiguous()
    num_queries, num_gallery = scores.shape
    reranker = get_reranker(name, **_parameters_for(name))
    for k in (1, 4):
        lists = reranker.topk(scores, k)
        assert lists.shape == (num_queries, k) and lists.dtype == torch.long
        assert int(lists.min()) >= 0 and int(lists.max()) < num_gallery
        assert all(len(set(row)) == k for row in lists.tolist())
        rows = torch.randperm(num_queries, generator=torch.Generator().manual_seed(k))
        cols = torch.randperm(num_gallery, generator=torch.Generator().manual_seed(k + 7))
        moved = reranker.topk(scores[rows][:, cols], k)
        assert torch.equal(cols[moved], lists[rows])


@pytest.mark.parametrize("name", [n for n in list_rerankers() if "+" in n])
def test_every_composition_is_its_matching_on_its_reweighted_scores(name):
    """``"<w>+<m>"`` is matching m run on the scores re-weighted by w (no special case per name)."""
    weighting, matching = name.split("+")
    scores, _ = retrieval_problem()
    params = _parameters_for(name)
    rescored = get_reranker(weighting, **{k: v for k, v in params.items() if k in reranker_parameters(weighting)})
    matcher = get_reranker(matching, **{k: v for k, v in params.items() if k in reranker_parameters(matching)})
    for k in (1, 5):
        expected = matcher.topk(rescored.rescore(scores), k)
        assert torch.equal(get_reranker(name, **params).topk(scores, k), expected)
    assert reranker_parameters(name) == reranker_parameters(weighting) + reranker_parameters(matching)
