"""Whether a score matrix is degenerate: constant, or with most queries' top scores tied.

Such a score ranks nothing: every metric of pcmr counts tied items at chance (docs/metrics.md), so the
numbers are not inflated, but they describe no model either. The evaluation report flags such rows
(a ``warning`` per row, listed under "Warnings" in ``results.md`` and printed by ``pcmr evaluate``), and
training validation does not select a model on such a score (``pcmr.train.validation``).
"""

from __future__ import annotations

from torch import Tensor

__all__ = ["DEGENERATE_FRACTION", "degenerate_score_warning"]

#: share of queries with a tie at the top above which a score counts as degenerate
DEGENERATE_FRACTION = 0.5


def degenerate_score_warning(scores: Tensor, name: str = "the score") -> str | None:
    """A sentence when ``scores [N_img, N_cap]`` is constant or when, in either direction, more than
    :data:`DEGENERATE_FRACTION` of the queries have two or more items tied for their top score; else None."""
    if scores.numel() < 2:
        return None
    first = scores.reshape(-1)[0]
    if bool((scores == first).all()):
        return (f"degenerate score: every {name} value is {float(first):.6g} (a constant score ranks nothing; "
                f"ties count at chance level)")
    for direction, matrix in (("image->text", scores), ("text->image", scores.T)):
        if matrix.shape[1] < 2 or matrix.shape[0] == 0:
            continue
        top = matrix.topk(2, dim=1).values  # [Q, 2]
        share = float((top[:, 0] == top[:, 1]).double().mean())
        if share > DEGENERATE_FRACTION:
            return (f"degenerate score: {100 * share:.0f}% of the {direction} queries have items tied for their "
                    f"top {name} value (ties count at chance level; the ranking carries little information)")
    return None
