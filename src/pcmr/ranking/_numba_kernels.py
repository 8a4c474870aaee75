"""Every numba-compiled loop of pcmr, in one module (imported only when numba is enabled).

- ``scan_rows`` / ``scan_cols`` (and their one-thread twins ``*_serial``): the fused metrics pass. For each query it streams the gallery
  scores once, in increasing gallery index, and keeps the ordered top ``width`` items under the tie
  rule (an item enters a full list only if it beats the last entry *strictly*, since an equal score
  has a higher index, and is inserted after every entry with a score ``>=`` its own) and, for each
  exact-rank target t, the number of items scoring strictly above the best positive, ``#{s > s*_t}``,
  and the number scoring exactly ``s*_t`` (the tie group of the best positive; the metrics take the
  expectation over its orders, ``pcmr.metrics.ties``). ``scan_rows`` reads queries
  as rows of ``S``; ``scan_cols`` as columns of ``S`` (text->image on ``S.T`` without a transposed
  copy: it walks the rows of ``S`` and updates a chunk of columns at a time).
- ``contains``: membership of top-list items in sorted CSR positives (binary search).
- ``advance_stream`` / ``scan_sorted``: the sequential acceptance loops of (relaxed) greedy matching
  (over the merged stream / over a matrix already in the global order), compiled from the same
  source that ``pcmr.ranking.greedy_loop`` runs interpreted.

Callers go through ``pcmr.ranking.fused_scan`` and ``pcmr.inference`` (switch:
``pcmr.ranking.backend``).
"""

from __future__ import annotations

import types
from typing import Any

import numba
import numpy as np
from numba import prange

from pcmr.ranking import greedy_loop

advance_stream = numba.njit(cache=True, nogil=True)(greedy_loop.advance_stream)
scan_sorted = numba.njit(cache=True, nogil=True)(greedy_loop.scan_sorted)


@numba.njit(cache=True, nogil=True, inline="always")
def _insert(top_val, top_idx, j, last, value, index):
    """Insert (value, index) into the descending row j of the top list, whose free slot is ``last``."""
    p = last
    while p > 0 and top_val[j, p - 1] < value:
        top_val[j, p] = top_val[j, p - 1]
        top_idx[j, p] = top_idx[j, p - 1]
        p -= 1
    top_val[j, p] = value
    top_idx[j, p] = index


@numba.njit(cache=True, nogil=True, parallel=True)
def scan_rows(S, query_ids, thr, top_val, top_idx, above, equal):
    width = top_idx.shape[1]
    num_gallery = S.shape[1]
    for j in prange(query_ids.shape[0]):
        row = S[query_ids[j]]
        for t in range(thr.shape[1]):
            threshold = thr[j, t]
            higher = 0
            same = 0
            for g in range(num_gallery):
                higher += row[g] > threshold
                same += row[g] == threshold
            above[j, t] = higher
            equal[j, t] = same
        if width == 0:
            continue
        for g in range(width):
            _insert(top_val, top_idx, j, g, row[g], g)
        last = top_val[j, width - 1]
        for g in range(width, num_gallery):
            if row[g] > last:
                _insert(top_val, top_idx, j, width - 1, row[g], g)
                last = top_val[j, width - 1]


@numba.njit(cache=True, nogil=True, parallel=True)
def scan_cols(S, thr, top_val, top_idx, above, equal, chunk):
    width = top_idx.shape[1]
    num_queries = S.shape[1]
    num_targets = thr.shape[1]
    num_chunks = (num_queries + chunk - 1) // chunk
    for c in prange(num_chunks):
        lo = c * chunk
        hi = min(lo + chunk, num_queries)
        size = hi - lo
        threshold = np.ascontiguousarray(thr[lo:hi].T)  # [T, size]
        count = np.zeros((num_targets, size), dtype=np.int64)
        same = np.zeros((num_targets, size), dtype=np.int64)
        last = np.empty(size, dtype=S.dtype)
        for g in range(S.shape[0]):
            row = S[g, lo:hi]
            for t in range(num_targets):
                level, higher, tied = threshold[t], count[t], same[t]
                for j in range(size):  # vectorised
                    higher[j] += row[j] > level[j]
                    tied[j] += row[j] == level[j]
            if g < width:
                for j in range(size):
                    _insert(top_val, top_idx, lo + j, g, row[j], g)
                    last[j] = top_val[lo + j, width - 1]
            elif width > 0:
                for j in range(size):
                    if row[j] > last[j]:
                        _insert(top_val, top_idx, lo + j, width - 1, row[j], g)
                        last[j] = top_val[lo + j, width - 1]
        above[lo:hi] = count.T
        equal[lo:hi] = same.T


#: The same two loops compiled without ``parallel``, for a process that runs one thread: calling a
#: parallel loop starts numba's OpenMP thread pool, whose idle worker keeps spinning on a core, and
#: with one such process per core (study workers, DDP on CPU, pytest-xdist) each training ran up to
#: 13x slower. A one-thread caller uses these and never starts the pool.
def _serial_twin(parallel_loop: Any, name: str) -> Any:
    """``parallel_loop``'s Python source compiled without ``parallel``, cached under its own name.

    numba's on-disk cache keys a function by qualified name and first line, not by its flags: a twin
    compiled from the same function object would share the parallel loop's cache file and could load
    the parallel machine code from it (and so start the pool). A copy renamed ``name`` gets its own file.
    """
    source = parallel_loop.py_func
    twin = types.FunctionType(source.__code__, source.__globals__, name, source.__defaults__, source.__closure__)
    twin.__qualname__ = name
    return numba.njit(cache=True, nogil=True)(twin)


scan_rows_serial = _serial_twin(scan_rows, "scan_rows_serial")
scan_cols_serial = _serial_twin(scan_cols, "scan_cols_serial")


@numba.njit(cache=True, nogil=True)
def contains(indptr, indices, query_ids, gallery_ids, out):
    for j in range(query_ids.shape[0]):  # little work per call: serial (no thread start-up)
        q = query_ids[j]
        positives = indices[indptr[q]:indptr[q + 1]]  # sorted
        if positives.shape[0] == 0:
            continue
        for k in range(gallery_ids.shape[1]):
            where = np.searchsorted(positives, gallery_ids[j, k])
            out[j, k] = where < positives.shape[0] and positives[where] == gallery_ids[j, k]
