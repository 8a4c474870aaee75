"""Inverted softmax (HAL/RGM eq. 5) and CSLS (eq. 6) against their formulas, in float64 loops."""

from __future__ import annotations

import math

import pytest
import torch

import pcmr.ranking.blocks as ordering
from pcmr.inference import csls, get_reranker, inverted_softmax


def reference_inverted_softmax(scores, beta):
    """log of eq. 5 by loops: beta*S[q,g] - log(sum over q' != q of exp(beta*S[q',g])), float64."""
    s = scores.double().tolist()
    out = torch.empty(len(s), len(s[0]), dtype=torch.float64)
    for q in range(len(s)):
        for g in range(len(s[0])):
            others = [beta * s[p][g] for p in range(len(s)) if p != q]
            top = max(others)
            out[q, g] = beta * s[q][g] - (top + math.log(sum(math.exp(x - top) for x in others)))
    return out


def reference_csls(scores, k):
    s = scores.double().tolist()
    num_rows, num_cols = len(s), len(s[0])
    row_mean = [sum(sorted(s[q], reverse=True)[:k]) / k for q in range(num_rows)]
    col_mean = [
        sum(sorted((s[q][g] for q in range(num_rows)), reverse=True)[:k]) / k for g in range(num_cols)
    ]
    out = torch.empty(num_rows, num_cols, dtype=torch.float64)
    for q in range(num_rows):
        for g in range(num_cols):
            out[q, g] = 2 * s[q][g] - row_mean[q] - col_mean[g]
    return out


@pytest.fixture(params=["one block", "small blocks"])
def blocks(request, monkeypatch):
    """'small blocks': blocks of 20 // G rows (at least 1), so most shapes end in a short last block."""
    if request.param == "small blocks":
        monkeypatch.setattr(ordering, "BLOCK_ELEMENTS", 20)
    return request.param


SHAPES = [(2, 1), (2, 5), (7, 3), (3, 7), (13, 11), (10, 17)]


@pytest.mark.parametrize("beta", [1.0, 30.0])
def test_inverted_softmax_matches_formula(beta, blocks):
    gen = torch.Generator().manual_seed(0)
    for num_rows, num_cols in SHAPES:
        scores = torch.rand(num_rows, num_cols, generator=gen, dtype=torch.float64) * 2 - 1
        got = inverted_softmax(scores, beta=beta)
        assert got.dtype == torch.float64 and got.shape == scores.shape
        torch.testing.assert_close(got, reference_inverted_softmax(scores, beta), rtol=1e-12, atol=1e-10)


def test_inverted_softmax_float32_ties_and_dominant_maximum(blocks):
    gen = torch.Generator().manual_seed(1)
    scores = torch.rand(11, 7, generator=gen)  # float32 default
    scores[4, 2] = 5.0  # a column maximum far above the rest: exp(-150) next to 1
    scores[:, 5] = 0.25  # a column of ties, maximum held by every row
    scores[3, 6] = scores[8, 6] = 2.0  # a tied maximum
    got = inverted_softmax(scores, beta=30.0)
    assert got.dtype == torch.float32
    expected = reference_inverted_softmax(scores, 30.0)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-4)
    assert torch.isfinite(got).all()
    # the dominant entry's normaliser is the sum over the others only (log1p(-exp(0)) would be -inf)
    assert got[4, 2] > 100


def test_inverted_softmax_ranking_equals_eq5_in_probability_space():
    gen = torch.Generator().manual_seed(2)
    scores = torch.rand(9, 13, generator=gen, dtype=torch.float64)
    beta = 3.0
    weights = torch.exp(beta * scores)  # [Q, G]
    eq5 = weights / (weights.sum(dim=0, keepdim=True) - weights)  # normaliser over q' != q
    torch.testing.assert_close(inverted_softmax(scores, beta=beta).exp(), eq5, rtol=1e-12, atol=0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_csls_matches_formula(k, blocks):
    gen = torch.Generator().manual_seed(3)
    for num_rows, num_cols in SHAPES:
        if k > min(num_rows, num_cols):
            continue
        scores = torch.randn(num_rows, num_cols, generator=gen, dtype=torch.float64)
        got = csls(scores, k=k)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, reference_csls(scores, k), rtol=1e-12, atol=1e-12)


def test_csls_float32_with_ties_and_default_k(blocks):
    scores = torch.randint(0, 3, (23, 19)).float()
    got = csls(scores)  # k = 10
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), reference_csls(scores, 10), rtol=1e-6, atol=1e-5)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="at least 2 queries"):
        inverted_softmax(torch.rand(1, 5))
    with pytest.raises(ValueError, match="beta"):
        inverted_softmax(torch.rand(3, 5), beta=0.0)
    with pytest.raises(ValueError, match="beta"):
        inverted_softmax(torch.rand(3, 5), beta=float("inf"))
    nan = torch.rand(3, 5)
    nan[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        inverted_softmax(nan)
    with pytest.raises(ValueError, match="NaN"):
        csls(nan, k=2)
    with pytest.raises(ValueError, match="2-D"):
        csls(torch.rand(5), k=1)
    with pytest.raises(ValueError, match=r"min\(Q, G\)"):
        csls(torch.rand(3, 20), k=4)
    with pytest.raises(ValueError, match="k must be >= 1"):
        csls(torch.rand(3, 20), k=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("value", [0.1, 0.7, -5.062048435211182, -13.37])
def test_csls_and_inverted_softmax_of_a_constant_matrix_are_constant(value, dtype):
    """Equal neighbourhoods give bit-equal means: a reduction that accumulates some columns in another
    order left last-bit differences, and csls+rgm then ranked a constant score by storage position."""
    from pcmr.inference.rescoring import csls_gallery_statistic, row_top_mean

    scores = torch.full((80, 403), value, dtype=dtype)
    assert csls(scores).unique().numel() == 1
    assert csls(scores.T.contiguous()).unique().numel() == 1
    assert csls_gallery_statistic(scores, 10).unique().numel() == 1
    assert row_top_mean(scores, 10).unique().numel() == 1
    assert inverted_softmax(scores).unique().numel() == 1
    lists = get_reranker("rgm", lam=5.0).topk(scores, 5)
    assert torch.equal(get_reranker("csls+rgm", lam=5.0).topk(scores, 5), lists)
