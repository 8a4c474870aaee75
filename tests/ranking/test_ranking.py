"""pcmr.ranking: the one top-k under the tie rule, the block-size rule, the score check, the numba switch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcmr.ranking.blocks as blocks
from pcmr.metrics import evaluate_retrieval
from pcmr.ranking import (
    block_rows,
    check_scores,
    numba_disabled,
    numba_enabled,
    ordered_topk,
    ordered_topk_block,
    query_blocks,
    resolve_backend,
)


def sorted_reference(scores: torch.Tensor, k: int) -> np.ndarray:
    """Per row: indices of a stable descending sort (score, then lower index), first k."""
    return np.array([sorted(range(len(row)), key=lambda g: (-row[g], g))[:k]
                     for row in scores.double().tolist()], dtype=np.int64).reshape(scores.shape[0], -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [0, 1, 3, 7, 13, 20])
def test_ordered_topk_follows_the_tie_rule(dtype, k):
    gen = torch.Generator().manual_seed(k)
    scores = torch.randint(0, 3, (11, 13), generator=gen).to(dtype)  # many ties, inside and across the cut
    scores[2, 4] = float("inf")
    scores[5, :6] = float("-inf")
    values, indices = ordered_topk_block(scores, k)
    expected = sorted_reference(scores, min(k, 13))
    np.testing.assert_array_equal(indices.numpy(), expected)
    assert torch.equal(values, scores.gather(1, indices))
    if k >= 1:
        np.testing.assert_array_equal(ordered_topk(scores, k).numpy(), expected)


def test_ordered_topk_blocked_equals_unblocked(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (23, 9), generator=gen).float()
    whole = ordered_topk(scores, 4)
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 20)  # blocks of 2 rows, a short last one
    assert block_rows(9) == 2
    assert torch.equal(ordered_topk(scores, 4), whole)


def test_block_rows_and_query_blocks():
    assert block_rows(10, 3) == 3
    assert block_rows(blocks.BLOCK_ELEMENTS * 4) == 1
    assert list(query_blocks(7, 3)) == [(0, 3), (3, 6), (6, 7)]
    with pytest.raises(ValueError, match="block_size"):
        block_rows(10, 0)


def test_check_scores_both_modes():
    ok = torch.tensor([[0.0, float("inf")]])
    assert check_scores(ok) is ok
    with pytest.raises(ValueError, match="1 NaN"):
        check_scores(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match="finite"):
        check_scores(ok, finite=True)
    with pytest.raises(ValueError, match="at least one query"):
        check_scores(torch.zeros(0, 3), finite=True)
    with pytest.raises(ValueError, match="2-D"):
        check_scores(torch.zeros(3))
    with pytest.raises(ValueError, match="floating"):
        check_scores(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.Tensor"):
        check_scores([[0.0]])


def test_numba_switch_changes_the_path_not_the_values():
    gen = torch.Generator().manual_seed(5)
    scores = torch.randint(0, 5, (19, 31), generator=gen).float()
    relevance = torch.rand(19, 31, generator=gen) < 0.1
    default = evaluate_retrieval(scores, relevance)
    with numba_disabled():
        assert not numba_enabled()
        assert resolve_backend("auto") == "python"
        plain = evaluate_retrieval(scores, relevance)
    assert plain.to_dict() == default.to_dict()
    with pytest.raises(ValueError, match="backend"):
        resolve_backend("gpu")


def test_width_blocks_group_similar_widths_and_cover_every_query():
    widths = torch.tensor([0, 0, 1, 3, 40, 64, 65, 130, 131, 400, 401, 2000])
    found = list(blocks.width_blocks(widths, rows=4))
    assert found[0][0] == 0 and found[-1][1] == widths.numel()
    assert all(a[1] == b[0] for a, b in zip(found, found[1:]))
    for start, stop in found:
        assert 1 <= stop - start <= 4
        assert int(widths[stop - 1]) <= 2 * int(widths[start]) + 64


def test_ordered_topk_of_most_of_the_row_is_the_stable_sort():
    generator = torch.Generator().manual_seed(2)
    block = torch.randint(0, 4, (9, 17), generator=generator).float()  # many ties
    values, cols = torch.sort(block, dim=1, descending=True, stable=True)
    for k in range(1, 18):
        got_values, got_cols = ordered_topk_block(block, k)
        assert torch.equal(got_cols, cols[:, :k]) and torch.equal(got_values, values[:, :k])
