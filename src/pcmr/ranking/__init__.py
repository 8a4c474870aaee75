"""The ranking core shared by ``pcmr.metrics`` and ``pcmr.inference``.

- ``ordered_topk`` / ``ordered_topk_block``: the one top-k under pcmr's tie rule (score descending,
  lower gallery index first; docs/metrics.md).
- ``block_rows`` / ``query_blocks``: the one block-size rule (``BLOCK_ELEMENTS`` per temporary block).
- ``check_scores``: the one score-matrix check.
- ``numba_enabled`` / ``numba_disabled``: the one numba switch; every compiled loop lives in
  ``pcmr.ranking._numba_kernels`` (imported only when used).
"""

from __future__ import annotations

from pcmr.ranking.backend import BACKENDS, numba_available, numba_disabled, numba_enabled, resolve_backend
from pcmr.ranking.blocks import BLOCK_ELEMENTS, block_rows, query_blocks
from pcmr.ranking.checks import check_positive_int, check_scores
from pcmr.ranking.topk import ordered_topk, ordered_topk_block, sort_row_segments

__all__ = [
    "BACKENDS",
    "BLOCK_ELEMENTS",
    "block_rows",
    "check_positive_int",
    "check_scores",
    "numba_available",
    "numba_disabled",
    "numba_enabled",
    "ordered_topk",
    "ordered_topk_block",
    "query_blocks",
    "resolve_backend",
    "sort_row_segments",
]
