"""Greedy / relaxed greedy matching against literal full-sort implementations written here."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import pcmr.inference._stream as stream
import pcmr.ranking.blocks as ordering
from pcmr.inference import exact_assignment, greedy_matching, relaxed_greedy_matching, rgm_capacity

BACKENDS = ["python", "numba"]


def literal_rgm(scores, k, capacity, max_pairs=None, complete=True):
    """HAL/RGM Algorithm 1, literally: sort every entry (descending score, then row, then column), scan,
    accept while the row holds < k and the column < capacity; then complete short rows in score order."""
    s = np.asarray(scores, dtype=np.float64)
    num_rows, num_cols = s.shape
    order = np.argsort(-s.ravel(), kind="stable")  # ties: row-major index order = (row, column)
    row_count = [0] * num_rows
    col_count = [0] * num_cols
    lists = [[] for _ in range(num_rows)]
    matched = 0
    for flat in order:
        if max_pairs is not None and matched == max_pairs:
            break
        q, g = divmod(int(flat), num_cols)
        if row_count[q] < k and col_count[g] < capacity:
            lists[q].append(g)
            row_count[q] += 1
            col_count[g] += 1
            matched += 1
    if not complete:
        return lists
    for q in range(num_rows):
        ranked = [int(g) for g in np.argsort(-s[q], kind="stable")]
        lists[q] += [g for g in ranked if g not in lists[q]][: k - len(lists[q])]
    return np.array(lists, dtype=np.int64)


def literal_greedy(scores):
    lists = literal_rgm(scores, 1, 1, complete=False)
    return np.array([row[0] if row else -1 for row in lists], dtype=np.int64)


def random_scores(rng, num_rows, num_cols, ties, dtype=torch.float32):
    if ties:  # few distinct values: many exact ties, across rows and within rows
        values = rng.integers(0, 4, size=(num_rows, num_cols)).astype(np.float64)
    else:
        values = rng.standard_normal((num_rows, num_cols))
    return torch.tensor(values, dtype=dtype)


# (Q, G) in both orientations, primes, a single row / column
SHAPES = [(1, 1), (1, 7), (7, 1), (5, 13), (13, 5), (11, 11), (2, 29), (29, 3), (17, 23), (23, 17)]


@pytest.fixture(params=["whole", "lazy", "tiny"])
def fetch_policy(request, monkeypatch):
    """'whole' (the default for matrices this small) fetches every row whole at once; 'lazy' fetches
    a few times k per row as large matrices do; 'tiny' fetches k candidates per row (grown on demand),
    refills one row at a time and reads the matrix in blocks of a few rows, so that refills,
    placeholders and tie closures are exercised."""
    if request.param != "whole":
        monkeypatch.setattr(stream, "WHOLE_FETCH_ENTRIES", 0)
    if request.param == "tiny":
        monkeypatch.setattr(stream, "initial_fetch_size", lambda k, num_cols, num_rows=None: 1)
        monkeypatch.setattr(stream, "MIN_REFILL_ROWS", 1)
        monkeypatch.setattr(ordering, "BLOCK_ELEMENTS", 20)  # blocks of a few rows, a short last one
    return request.param


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ties", [True, False])
def test_rgm_equals_literal_algorithm(backend, ties, fetch_policy):
    rng = np.random.default_rng(1 + ties)
    for num_rows, num_cols in SHAPES:
        for k in sorted({1, 2, min(3, num_cols), num_cols}):
            if k > num_cols:
                continue
            for lam in (0.5, 1.0, 1.5, 2.0, 3.0):
                if round(lam * k) < 1:
                    continue
                scores = random_scores(rng, num_rows, num_cols, ties)
                expected = literal_rgm(scores, k, round(lam * k))
                got = relaxed_greedy_matching(scores, k, lam, backend=backend, seed=None)
                assert got.dtype == torch.long and got.shape == (num_rows, k)
                np.testing.assert_array_equal(
                    got.numpy(), expected, err_msg=f"{num_rows}x{num_cols} k={k} lam={lam}"
                )


@pytest.mark.parametrize("backend", BACKENDS)
def test_rgm_float64_and_larger_matrix(backend, fetch_policy):
    rng = np.random.default_rng(5)
    for num_rows, num_cols in [(37, 101), (101, 37)]:
        scores = random_scores(rng, num_rows, num_cols, ties=False, dtype=torch.float64)
        expected = literal_rgm(scores, 5, 10)
        np.testing.assert_array_equal(
            relaxed_greedy_matching(scores, 5, 2.0, backend=backend).numpy(), expected
        )
        ties = random_scores(rng, num_rows, num_cols, ties=True)
        expected = literal_rgm(ties, 4, 4)
        np.testing.assert_array_equal(
            relaxed_greedy_matching(ties, 4, 1.0, backend=backend, seed=None).numpy(), expected
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_pairs_reproduces_the_pseudocode_stop(backend):
    rng = np.random.default_rng(7)
    for num_rows, num_cols in [(19, 7), (7, 19), (12, 12)]:
        k = 3
        scores = random_scores(rng, num_rows, num_cols, ties=True)
        stop = min(num_rows, num_cols) * k  # Algorithm 1, line 11
        expected = literal_rgm(scores, k, 6, max_pairs=stop)
        got = relaxed_greedy_matching(scores, k, 2.0, max_pairs=stop, backend=backend, seed=None)
        np.testing.assert_array_equal(got.numpy(), expected)
        if num_rows <= num_cols:  # every row fills before the stop: same lists as the full scan
            np.testing.assert_array_equal(got.numpy(), literal_rgm(scores, k, 6))


def test_backends_agree_and_lam_inf_is_topk():
    rng = np.random.default_rng(11)
    for num_rows, num_cols in [(31, 47), (47, 31)]:
        for ties in (True, False):
            scores = random_scores(rng, num_rows, num_cols, ties)
            a = relaxed_greedy_matching(scores, 6, 1.5, backend="numba")
            b = relaxed_greedy_matching(scores, 6, 1.5, backend="python")
            assert torch.equal(a, b)
            topk = np.argsort(-scores.double().numpy(), axis=1, kind="stable")[:, :6]  # ties: lower index
            np.testing.assert_array_equal(relaxed_greedy_matching(scores, 6, math.inf, seed=None).numpy(), topk)
            np.testing.assert_array_equal(literal_rgm(scores, 6, math.inf), topk)
            # a capacity of at least Q can never bind either
            np.testing.assert_array_equal(relaxed_greedy_matching(scores, 6, float(num_rows), seed=None).numpy(), topk)


@pytest.mark.parametrize("backend", BACKENDS)
def test_capacities_never_exceeded(backend, fetch_policy):
    rng = np.random.default_rng(13)
    for num_rows, num_cols, k, lam in [(40, 9, 3, 1.0), (9, 40, 4, 0.5), (25, 25, 5, 2.0), (50, 8, 2, 1.5)]:
        capacity = rgm_capacity(k, lam)
        scores = random_scores(rng, num_rows, num_cols, ties=True)
        accepted, row_count, _ = stream.accept_pairs(scores, k, capacity, None, backend)
        uses = np.bincount(accepted[accepted >= 0], minlength=num_cols)
        assert uses.max() <= capacity
        assert np.array_equal((accepted >= 0).sum(axis=1), row_count)
        # acceptance stopped only because nothing could be accepted: a short row sees only full columns
        for q in np.flatnonzero(row_count < k):
            free = set(np.flatnonzero(uses < capacity)) - set(accepted[q, : row_count[q]].tolist())
            assert not free
        if (num_cols - k + 1) * capacity >= num_rows * k:  # then no row can stay short
            out = relaxed_greedy_matching(scores, k, lam, backend=backend).numpy()
            assert np.bincount(out.ravel(), minlength=num_cols).max() <= capacity


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_matching_equals_literal(backend, fetch_policy):
    rng = np.random.default_rng(17)
    for num_rows, num_cols in SHAPES:
        for ties in (True, False):
            scores = random_scores(rng, num_rows, num_cols, ties)
            got = greedy_matching(scores, backend=backend, seed=None)
            np.testing.assert_array_equal(got.numpy(), literal_greedy(scores))
            matched = got[got >= 0]
            assert matched.unique().numel() == matched.numel()  # one-to-one
            assert int((got < 0).sum()) == max(0, num_rows - num_cols)


def brute_force_assignment_value(scores):
    s = scores.double().numpy()
    num_rows, num_cols = s.shape
    if num_rows <= num_cols:
        return max(
            sum(s[q, g] for q, g in enumerate(cols))
            for cols in itertools.permutations(range(num_cols), num_rows)
        )
    return max(
        sum(s[q, g] for g, q in enumerate(rows)) for rows in itertools.permutations(range(num_rows), num_cols)
    )


def matching_value(scores, match):
    return sum(float(scores[q, g]) for q, g in enumerate(match.tolist()) if g >= 0)


def test_exact_assignment_and_greedy_relation():
    rng = np.random.default_rng(19)
    for num_rows, num_cols in [(4, 4), (3, 6), (6, 3), (5, 5)]:
        scores = torch.tensor(rng.random((num_rows, num_cols)))  # nonnegative
        exact = exact_assignment(scores)
        assert matching_value(scores, exact) == pytest.approx(brute_force_assignment_value(scores))
        assert int((exact < 0).sum()) == max(0, num_rows - num_cols)
        greedy = matching_value(scores, greedy_matching(scores))
        optimum = matching_value(scores, exact)
        assert greedy <= optimum + 1e-12
        assert greedy >= 0.5 * optimum - 1e-12  # greedy is a 1/2-approximation for nonnegative weights
    # a clearly dominant assignment: greedy finds the optimum
    perm = torch.tensor([3, 0, 4, 1, 2])
    scores = torch.rand(5, 5, dtype=torch.float64) * 0.1
    scores[torch.arange(5), perm] += 1.0
    assert torch.equal(greedy_matching(scores), perm)
    assert torch.equal(exact_assignment(scores), perm)


def test_bad_input_raises():
    good = torch.rand(4, 6)
    nan = good.clone()
    nan[1, 2] = float("nan")
    inf = good.clone()
    inf[0, 0] = float("inf")
    with pytest.raises(ValueError, match="NaN"):
        relaxed_greedy_matching(nan, 2, 1.0)
    with pytest.raises(ValueError, match="finite"):
        greedy_matching(inf)
    with pytest.raises(ValueError, match="2-D"):
        relaxed_greedy_matching(torch.rand(6), 2, 1.0)
    with pytest.raises(ValueError, match="2-D"):
        greedy_matching(torch.rand(2, 3, 4))
    with pytest.raises(ValueError, match="floating"):
        relaxed_greedy_matching(torch.ones(4, 6, dtype=torch.long), 2, 1.0)
    with pytest.raises(TypeError, match="torch.Tensor"):
        relaxed_greedy_matching(np.ones((4, 6)), 2, 1.0)
    with pytest.raises(ValueError, match="k must be <= the number of gallery items"):
        relaxed_greedy_matching(good, 7, 1.0)
    with pytest.raises(ValueError, match="k must be >= 1"):
        relaxed_greedy_matching(good, 0, 1.0)
    with pytest.raises(ValueError, match="lam must be > 0"):
        relaxed_greedy_matching(good, 2, 0.0)
    with pytest.raises(ValueError, match="lam must be > 0"):
        relaxed_greedy_matching(good, 2, -1.0)
    with pytest.raises(TypeError, match="lam"):
        relaxed_greedy_matching(good, 2, float("nan"))
    with pytest.raises(ValueError, match=r"round\(lam \* k\)"):
        relaxed_greedy_matching(good, 1, 0.4)
    with pytest.raises(ValueError, match="backend"):
        relaxed_greedy_matching(good, 2, 1.0, backend="cuda")
    with pytest.raises(ValueError, match="max_pairs"):
        relaxed_greedy_matching(good, 2, 1.0, max_pairs=0)
    with pytest.raises(ValueError, match="at least one query"):
        greedy_matching(torch.rand(0, 3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_anti_hub_columns_and_many_short_rows(backend, fetch_policy):
    """Columns nobody ranks high force deep scans with most columns full (rows skip dead candidates)."""
    rng = np.random.default_rng(23)
    for num_rows, num_cols, k, lam in [(60, 12, 3, 1.0), (12, 60, 2, 0.5), (45, 15, 4, 1.5)]:
        scores = random_scores(rng, num_rows, num_cols, ties=False)
        scores[:, 0] = -5.0  # wanted by nobody
        scores[:, 1] = -4.0 + 0.01 * torch.arange(num_rows, dtype=torch.float32)
        expected = literal_rgm(scores, k, round(lam * k))
        np.testing.assert_array_equal(
            relaxed_greedy_matching(scores, k, lam, backend=backend, seed=None).numpy(), expected
        )
        np.testing.assert_array_equal(
            greedy_matching(scores, backend=backend, seed=None).numpy(), literal_greedy(scores)
        )


def test_whole_matrix_order_is_reused_only_for_the_same_unmodified_matrix():
    """Matrices small enough are put in the global order whole once; matching the same tensor again
    (another lambda or k, as lambda selection does) reuses that order, and an in-place change of the
    tensor or another tensor at the same values does not see a stale one."""
    scores = random_scores(np.random.default_rng(4), 37, 19, ties=True)
    first = relaxed_greedy_matching(scores, 3, 1.0, seed=None)
    assert stream._last_global_order and stream._last_global_order[0][0] is scores
    again = relaxed_greedy_matching(scores, 5, 2.0, seed=None)  # served from the kept sort
    fresh = relaxed_greedy_matching(scores.clone(), 5, 2.0, seed=None)  # sorted anew
    assert torch.equal(again, fresh) and torch.equal(first, relaxed_greedy_matching(scores.clone(), 3, 1.0,
                                                                                  seed=None))
    scores.mul_(-1.0)  # in place: the version counter moves, the kept sort is not used
    flipped = relaxed_greedy_matching(scores, 3, 1.0, seed=None)
    assert torch.equal(flipped, relaxed_greedy_matching(scores.clone(), 3, 1.0, seed=None))
    assert not torch.equal(flipped, first)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matchings_break_ties_in_a_seeded_random_order(backend):
    """By default the matchings see queries and gallery in a random order drawn from the seed: the lists
    are the literal algorithm's on the permuted matrix, mapped back; without ties the seed changes nothing."""
    from pcmr.inference.matching import TIE_SEED, tie_orders

    rng = np.random.default_rng(8)
    for ties in (True, False):
        scores = random_scores(rng, 23, 17, ties)
        rows, cols = tie_orders(23, 17, TIE_SEED)
        permuted = scores[rows][:, cols]
        for k, lam in ((1, 1.0), (3, 1.5), (2, math.inf)):
            got = relaxed_greedy_matching(scores, k, lam, backend=backend)
            expected = np.empty((23, k), dtype=np.int64)
            expected[rows.numpy()] = cols.numpy()[literal_rgm(permuted, k, math.inf if math.isinf(lam) else round(lam * k))]
            np.testing.assert_array_equal(got.numpy(), expected)
            if not ties:
                np.testing.assert_array_equal(got.numpy(), literal_rgm(scores, k, round(lam * k) if not math.isinf(lam)
                                                                       else math.inf))
        greedy = greedy_matching(scores, backend=backend)
        expected = np.full(23, -1, dtype=np.int64)
        matched = literal_greedy(permuted)
        expected[rows.numpy()] = np.where(matched >= 0, cols.numpy()[np.maximum(matched, 0)], -1)
        np.testing.assert_array_equal(greedy.numpy(), expected)
    again = relaxed_greedy_matching(scores, 3, 1.5, seed=5)
    assert torch.equal(again, relaxed_greedy_matching(scores.clone(), 3, 1.5, seed=5))  # the kept permutation


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_global_order_is_the_stable_descending_sort(dtype):
    """The whole-matrix order (packed integer keys for float32) equals a stable descending sort of the
    flattened scores: signed zeros tie, extremes and ties keep row-major order, transposed views too."""
    special = [0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 3.4e38, -3.4e38, 0.5, 0.5, -2.0, 7.0, -0.0]
    rng = np.random.default_rng(3)
    matrices = [torch.tensor([special] * 7, dtype=dtype),
                random_scores(rng, 41, 29, ties=True, dtype=dtype),
                random_scores(rng, 29, 41, ties=False, dtype=dtype).T]
    for scores in matrices:
        stream._last_global_order.clear()
        reference = torch.sort(scores.reshape(-1) + 0.0, descending=True, stable=True).indices.numpy()
        np.testing.assert_array_equal(stream.global_order(scores), reference)
        literal = literal_rgm(scores, 2, 3)
        np.testing.assert_array_equal(relaxed_greedy_matching(scores, 2, 1.5, seed=None).numpy(), literal)
