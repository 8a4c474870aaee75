"""pcmr.evaluation.table.collapsed_recall_warning: an evaluation table whose R@K does not grow with K."""

from __future__ import annotations

from pcmr.evaluation.columns import recall
from pcmr.evaluation.table import collapsed_recall_warning


def test_collapsed_recalls():
    flat = {recall(d, k): v for d, v in (("i2t", 3.0), ("t2i", 1.0)) for k in (1, 5, 10)}
    assert "look collapsed" in collapsed_recall_warning([flat, flat])
    assert collapsed_recall_warning([flat, {**flat, recall("t2i", 10): 2.0}]) is None
    perfect = {key: 100.0 for key in flat}
    assert collapsed_recall_warning([perfect]) is None
    assert collapsed_recall_warning([{recall("i2t", 1): 1.0}]) is None
