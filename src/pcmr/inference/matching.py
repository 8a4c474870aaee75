"""Greedy matching (GM) and relaxed greedy matching (RGM), HAL/RGM §3.3.3 and Algorithm 1; docs/inference.md.

Both scan the entries of ``S [Q, G]`` in the global order -- descending score, then ascending row
(query) index, then ascending column (gallery) index -- and accept ``(q, g)`` while row ``q`` holds
fewer than ``k`` items and column ``g`` has been used fewer than ``capacity`` times. GM is ``k = 1``,
``capacity = 1``. The scan is exact but never sorts all ``Q x G`` entries (see ``_stream.py``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pcmr.inference._stream import accept_pairs, complete_rows
from pcmr.ranking.backend import resolve_backend
from pcmr.ranking.checks import check_positive_int, check_scores
from pcmr.ranking.topk import ordered_topk


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
    if capacity >= num_rows:  # no column can ever be refused: every row takes its own top-k
        return ordered_topk(scores, k)
    accepted, row_count, row_top = accept_pairs(scores, k, int(capacity), max_pairs, backend)
    return torch.from_numpy(complete_rows(accepted, row_count, row_top)).to(scores.device)


def greedy_matching(scores: Tensor, *, backend: str = "auto") -> Tensor:
    """One-to-one greedy matching (Kollias et al.; HAL/RGM §3.3.3): RGM's scan with ``k = 1``, capacity 1.

    Args:
        scores: ``[Q, G]`` finite, higher = better.
        backend: ``"auto"`` | ``"numba"`` | ``"python"``.
    Returns:
        LongTensor ``[Q]``: the gallery item matched to each query, ``-1`` where a query stays unmatched
        (exactly ``Q - G`` queries when ``Q > G``; none otherwise).
    """
    check_scores(scores, finite=True)
    backend = resolve_backend(backend)
    accepted = accept_pairs(scores, 1, 1, None, backend)[0]
    return torch.from_numpy(accepted[:, 0].copy()).to(scores.device)


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
