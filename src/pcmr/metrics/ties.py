"""Rank metrics as expectations over the orders of tied scores (docs/metrics.md, "Ties").

Equal scores carry no information about which item comes first, so no metric may depend on the
order in which a dataset stores its items. Every rank metric of pcmr is the expected value of the
metric when each group of equal scores of a query is put in a uniformly random order (the groups
themselves keep their places). The expectations are exact and closed-form:

- the best positive of a query scores ``s*``; ``higher`` items score more, ``t`` items (``p`` of them
  positives) score exactly ``s*``. The first positive's rank is ``higher + X`` with ``X`` the position of
  the first of ``p`` marked items among ``t`` shuffled ones: ``P(X <= m) = 1 - C(t-p, m) / C(t, m)`` and
  ``E[X] = (t + 1) / (p + 1)``;
- for R-Precision and MAP@R (Musgrave et al. 2020) the positions ``1..R`` are walked group by group: a
  position inside a group of ``t`` items holding ``p`` positives is relevant with probability ``p / t``;
  given that, the expected number of positives before it within the group is ``(j - 1)(p - 1)/(t - 1)``
  (``j`` its place in the group), which gives ``E[rel(r) * #positives in the top r]``.

Without ties these are exactly the usual values.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["hit_probability", "expected_rank", "list_groups", "expected_precision_at_r", "first_group_with"]


def hit_probability(higher: Tensor, ties: Tensor, tied_positives: Tensor, k: int) -> Tensor:
    """Probability that a positive is within the first ``k`` items, float64 ``[Q]``.

    ``higher [Q]`` items score above the best positive, whose tie group has ``ties [Q] >= 1`` items of
    which ``tied_positives [Q] >= 1`` are positives; orders within the group are uniformly random.
    """
    t = ties.to(torch.float64)
    p = tied_positives.to(torch.float64)
    m = (k - higher).clamp(min=0).to(torch.float64).minimum(t)  # slots of the group within the top k
    # C(t - p, m) / C(t, m) = (t-p)! (t-m)! / ((t-p-m)! t!), zero once m > t - p
    log_miss = (torch.lgamma(t - p + 1) + torch.lgamma(t - m + 1) - torch.lgamma((t - p - m).clamp(min=0) + 1)
                - torch.lgamma(t + 1))
    miss = torch.where(m > t - p, torch.zeros_like(t), torch.exp(log_miss))
    return torch.where(m <= 0, torch.zeros_like(t), 1.0 - miss)


def expected_rank(higher: Tensor, ties: Tensor, tied_positives: Tensor) -> Tensor:
    """Expected 1-based rank of the first positive, ``higher + (t + 1) / (p + 1)``, float64 ``[Q]``."""
    return higher.to(torch.float64) + (ties.to(torch.float64) + 1) / (tied_positives.to(torch.float64) + 1)


def list_groups(values: Tensor, relevant: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Tie groups of ordered lists ``values [b, W]`` (descending) with relevance ``relevant [b, W]``.

    Returns per position ``[b, W]``: the group's first position (0-based), its size within the list,
    its positives within the list, and the positives before the group (all int64). The last group of a
    row may continue beyond the list; callers replace its size and positives by the row's totals.
    """
    b, width = values.shape
    device = values.device
    positions = torch.arange(width, device=device).expand(b, width)
    new = torch.ones(b, width, dtype=torch.bool, device=device)
    new[:, 1:] = values[:, 1:] != values[:, :-1]
    group = new.long().cumsum(1) - 1  # [b, W] group id within the row
    start = torch.where(new, positions, torch.zeros_like(positions)).cummax(1).values
    rel = relevant.long()
    size = torch.zeros(b, width, dtype=torch.long, device=device).scatter_add_(1, group, torch.ones_like(rel))
    positives = torch.zeros(b, width, dtype=torch.long, device=device).scatter_add_(1, group, rel)
    before = (rel.cumsum(1) - rel).gather(1, start)
    return start, size.gather(1, group), positives.gather(1, group), before


def _with_last_group(values: Tensor, size: Tensor, positives: Tensor, last_ties: Tensor | None,
                     last_positives: Tensor | None) -> tuple[Tensor, Tensor]:
    """Sizes and positives with each row's last group taken from the row totals where given (``>= 0``)."""
    if last_ties is None or last_positives is None:
        return size, positives
    in_last = (values == values[:, -1:]) & (last_ties[:, None] >= 0)
    return (torch.where(in_last, last_ties[:, None], size), torch.where(in_last, last_positives[:, None], positives))


def expected_precision_at_r(values: Tensor, relevant: Tensor, num_positives: Tensor,
                            last_ties: Tensor | None = None,
                            last_positives: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Expected R-Precision and MAP@R over tie orders, float64 ``[b]`` each.

    Args:
        values: ``[b, W]`` the ordered top scores of each query (descending; equal scores in any order).
        relevant: bool ``[b, W]``, whether the listed item is a positive.
        num_positives: ``R [b] >= 1`` (may exceed the positives in the gallery: they still count in R).
        last_ties / last_positives: ``[b]``, for rows whose last listed group continues beyond the list,
            the number of items of the whole row with that score and the positives among them; ``-1``
            (or None) where the list holds the whole group. ``W`` must cover every position ``<= R``.
    """
    start, size, positives, before = list_groups(values, relevant)
    size, positives = _with_last_group(values, size, positives, last_ties, last_positives)
    width = values.shape[1]
    positions = torch.arange(width, device=values.device, dtype=torch.float64)  # 0-based
    t, p = size.to(torch.float64), positives.to(torch.float64)
    share = p / t  # P(rel at this position)
    inside = (positions - start.to(torch.float64)) * (p - 1).clamp(min=0) / (t - 1).clamp(min=1)
    rel_times_hits = share * (before.to(torch.float64) + 1 + inside)  # E[rel(r) * |positives in top r|]
    r_float = num_positives.to(torch.float64)
    within = positions[None, :] < r_float[:, None]
    r_precision = torch.where(within, share, 0.0).sum(1) / r_float
    map_at_r = torch.where(within, rel_times_hits / (positions + 1), 0.0).sum(1) / r_float
    return r_precision, map_at_r


def first_group_with(values: Tensor, relevant: Tensor, last_ties: Tensor | None = None,
                     last_positives: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The first tie group of each list holding a positive: ``(found, higher, ties, tied_positives)``,
    ``[b]`` each (``found`` bool; the others meaningful where found). Arguments as in
    :func:`expected_precision_at_r`."""
    start, size, positives, _ = list_groups(values, relevant)
    size, positives = _with_last_group(values, size, positives, last_ties, last_positives)
    holds = positives > 0  # the last group may hold positives the list cut off
    found = holds.any(1)
    first = holds.to(torch.uint8).argmax(1, keepdim=True)  # [b, 1]
    return found, start.gather(1, first)[:, 0], size.gather(1, first)[:, 0], positives.gather(1, first)[:, 0]
