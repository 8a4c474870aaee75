"""Greedy matching (GM) and relaxed greedy matching (RGM), HAL/RGM §3.3.3 and Algorithm 1; docs/inference.md.

Both scan the entries of ``S [Q, G]`` in the global order -- descending score, then ascending row
(query) index, then ascending column (gallery) index -- and accept ``(q, g)`` while row ``q`` holds
fewer than ``k`` items and column ``g`` has been used fewer than ``capacity`` times. GM is ``k = 1``,
``capacity = 1``. The scan is exact but never sorts all ``Q x G`` entries (see ``_stream.py``).

Ties: the "then row, then column" part of the order would hand tied entries to the queries and gallery
items stored first -- on an all-tied matrix whose captions are stored in image order, that is the
ground truth. So the matchings see the queries and the gallery in a random order drawn from
``seed`` (:data:`TIE_SEED` by default; ``seed=None`` keeps the storage order): tied entries are
resolved at random, the same way on every run, and a matrix without ties gives exactly the lists of
the plain scan.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pcmr.inference._stream import accept_pairs, complete_rows
from pcmr.ranking.backend import resolve_backend
from pcmr.ranking.checks import check_positive_int, check_scores
from pcmr.ranking.topk import ordered_topk

#: Seed of the random order of queries and gallery items in which the matchings break ties.
TIE_SEED = 0


def tie_orders(num_rows: int, num_cols: int, seed: int | None) -> tuple[Tensor, Tensor] | None:
    """The random orders ``(rows [Q], cols [G])`` (CPU LongTensors) in which a matching sees the queries and the
    gallery, drawn from ``seed``; None for ``seed=None`` (storage order)."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int (or None for the storage order), got {seed!r}")
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(num_rows, generator=generator), torch.randperm(num_cols, generator=generator)


#: The last permuted matrix, ``(source, its version, seed, permuted)``: matching the same unmodified tensor
#: again (another lambda or k, as lambda selection does) reuses it, and with it the stream's kept sort.
_last_permuted: list[tuple[Tensor, int, int, Tensor]] = []


def _permuted(scores: Tensor, orders: tuple[Tensor, Tensor] | None, seed: int | None) -> Tensor:
    """``scores`` with rows and columns in ``orders`` (``out[i, j] = scores[rows[i], cols[j]]``)."""
    if orders is None or seed is None:
        return scores
    if _last_permuted:
        source, version, kept_seed, permuted = _last_permuted[0]
        if source is scores and version == scores._version and kept_seed == seed:
            return permuted
    rows, cols = (o.to(scores.device) for o in orders)
    permuted = scores.index_select(0, rows).index_select(1, cols)
    _last_permuted[:] = [(scores, scores._version, seed, permuted)]
    return permuted


def _restored(lists: Tensor, orders: tuple[Tensor, Tensor] | None) -> Tensor:
    """Lists ``[Q, k]`` of the permuted problem back in the storage order (``-1`` stays ``-1``)."""
    if orders is None:
        return lists
    rows, cols = (o.to(lists.device) for o in orders)
    out = torch.empty_like(lists)
    out[rows] = torch.where(lists >= 0, cols[lists.clamp(min=0)], lists)
    return out


def check_lam(lam: float) -> float:
    """Check RGM's relaxation factor: a real number > 0 (``float("inf")`` allowed)."""
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or math.isnan(lam):
        raise TypeError(f"lam must be a positive real number (float('inf') allowed), got {lam!r}")
    if lam <= 0:
        raise ValueError(f"lam must be > 0 (the relaxation factor of RGM), got {lam}")
    return lam


def rgm_capacity(k: int, lam: float) -> int | float:
    """Uses allowed per gallery item: ``round(lam * k)`` (Python's round, half to even); ``inf`` for lam = inf."""
    check_lam(lam)
    if math.isinf(lam):
        return math.inf
    capacity = round(lam * k)
    if capacity < 1:
        raise ValueError(f"round(lam * k) must be >= 1 (uses allowed per gallery item), got lam={lam}, k={k}")
    return capacity


def relaxed_greedy_matching(
    scores: Tensor,
    k: int,
    lam: float,
    *,
    max_pairs: int | None = None,
    backend: str = "auto",
    seed: int | None = TIE_SEED,
) -> Tensor:
    """Top-k lists under relaxed greedy matching (HAL/RGM Algorithm 1).

    Entries are scanned in the global order (descending score, then row, then column); ``(q, g)`` is
    accepted while query ``q`` holds fewer than ``k`` items and gallery item ``g`` has been accepted
    fewer than ``round(lam * k)`` times. Rows still short when no pair can be accepted any more (the
    gallery's capacity ran out, e.g. ``Q * k > G * round(lam * k)``) are completed with their best
    remaining items in the same order, ignoring capacities. ``lam = inf`` gives plain top-k (NNS).

    Args:
        scores: ``[Q, G]`` finite, higher = better; ``k``: list length, ``1 <= k <= G``;
        lam: relaxation factor ``> 0`` (``float("inf")`` allowed);
        max_pairs: stop accepting after this many pairs (Algorithm 1, line 11, stops at
            ``min(Q, G) * k``; this changes the lists only when ``Q > G``). Default: scan to the end.
        backend: ``"auto"`` | ``"numba"`` | ``"python"`` for the sequential loop (identical lists).
        seed: the random order of queries and gallery items that breaks ties (None: storage order).
    Returns:
        LongTensor ``[Q, k]`` on ``scores.device``: each row's accepted items in acceptance order,
        then (short rows only) the completion items.
    """
    check_scores(scores, finite=True)
    num_rows, num_cols = scores.shape
    check_positive_int(k, "k", num_cols, "the number of gallery items G")
    capacity = rgm_capacity(k, lam)
    if max_pairs is not None:
        check_positive_int(max_pairs, "max_pairs")
    backend = resolve_backend(backend)
    orders = tie_orders(num_rows, num_cols, seed)
    scores = _permuted(scores, orders, seed)
    if capacity >= num_rows:  # no column can ever be refused: every row takes its own top-k
        return _restored(ordered_topk(scores, k), orders)
    accepted, row_count, row_top = accept_pairs(scores, k, int(capacity), max_pairs, backend)
    return _restored(torch.from_numpy(complete_rows(accepted, row_count, row_top)).to(scores.device), orders)


def greedy_matching(scores: Tensor, *, backend: str = "auto", seed: int | None = TIE_SEED) -> Tensor:
    """One-to-one greedy matching (Kollias et al.; HAL/RGM §3.3.3): RGM's scan with ``k = 1``, capacity 1.

    Args:
        scores: ``[Q, G]`` finite, higher = better.
        backend: ``"auto"`` | ``"numba"`` | ``"python"``.
        seed: the random order of queries and gallery items that breaks ties (None: storage order).
    Returns:
        LongTensor ``[Q]``: the gallery item matched to each query, ``-1`` where a query stays unmatched
        (exactly ``Q - G`` queries when ``Q > G``; none otherwise).
    """
    check_scores(scores, finite=True)
    backend = resolve_backend(backend)
    orders = tie_orders(scores.shape[0], scores.shape[1], seed)
    accepted = accept_pairs(_permuted(scores, orders, seed), 1, 1, None, backend)[0]
    return _restored(torch.from_numpy(accepted[:, :1].copy()), orders)[:, 0].to(scores.device)


def exact_assignment(scores: Tensor) -> Tensor:
    """Maximum-weight one-to-one assignment (Hungarian; ``scipy.optimize.linear_sum_assignment``).

    The slow exact reference for greedy matching on small problems (cubic time). Returns LongTensor
    ``[Q]`` with the matched gallery item per query and ``-1`` for the ``Q - G`` unmatched queries
    when ``Q > G``. Needs scipy (``pip install scipy``).
    """
    check_scores(scores, finite=True)
    try:
        from scipy.optimize import linear_sum_assignment
    except ImportError as error:  # pragma: no cover - scipy is installed with the dev extra
        raise ImportError("exact_assignment needs scipy: pip install scipy") from error
    rows, cols = linear_sum_assignment(scores.detach().to("cpu", torch.float64).numpy(), maximize=True)
    out = torch.full((scores.shape[0],), -1, dtype=torch.long)
    out[torch.from_numpy(rows).long()] = torch.from_numpy(cols).long()
    return out.to(scores.device)
