"""Fused CPU pass (numba): ordered top list and best-positive rank counts in one read of the scores.

For each query the kernel streams its gallery scores once, in increasing gallery index, and keeps

* the ordered top ``width`` items under the tie rule (score descending, lower index first): an item
  enters a full list only if it beats the last entry *strictly* (an equal score has a higher index),
  and is inserted after every entry with a score ``>=`` its own;
* for each exact-rank target t, the number of items ranked before the best positive
  ``#{s > s*_t} + #{s == s*_t, index < index*_t}`` (rank = count + 1, SPEC §6).

``scan_rows`` reads queries as rows of ``S`` (image->text on ``S``), ``scan_cols`` as columns of
``S`` (text->image on ``S.T`` without a transposed copy: it walks the rows of ``S`` and updates a
chunk of columns at a time). numba is the optional extra ``pcmr[fast]``; without it (or on CUDA)
``pcmr.metrics.scan`` uses the torch path, which gives identical results.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import Tensor

# Columns handled together by one thread in scan_cols: long runs of each row of S (few pages per row).
_MAX_COLUMN_CHUNK = 4096


def _insert(top_val, top_idx, j, last, value, index):  # pragma: no cover - compiled
    """Insert (value, index) into the descending row j of the top list, whose free slot is ``last``."""
    p = last
    while p > 0 and top_val[j, p - 1] < value:
        top_val[j, p] = top_val[j, p - 1]
        top_idx[j, p] = top_idx[j, p - 1]
        p -= 1
    top_val[j, p] = value
    top_idx[j, p] = index


def _scan_rows(S, query_ids, thr, best_idx, top_val, top_idx, counts):  # pragma: no cover - compiled
    width = top_idx.shape[1]
    num_gallery = S.shape[1]
    for j in _prange(query_ids.shape[0]):
        row = S[query_ids[j]]
        for t in range(thr.shape[1]):  # before the best positive ties count too (lower index first)
            threshold = thr[j, t]
            split = min(max(best_idx[j, t], 0), num_gallery)
            count = 0
            for g in range(split):
                count += row[g] >= threshold
            for g in range(split, num_gallery):
                count += row[g] > threshold
            counts[j, t] = count
        if width == 0:
            continue
        for g in range(width):
            _insert_jit(top_val, top_idx, j, g, row[g], g)
        last = top_val[j, width - 1]
        for g in range(width, num_gallery):
            if row[g] > last:
                _insert_jit(top_val, top_idx, j, width - 1, row[g], g)
                last = top_val[j, width - 1]


def _scan_cols(S, thr, best_idx, top_val, top_idx, counts, chunk):  # pragma: no cover - compiled
    width = top_idx.shape[1]
    num_queries = S.shape[1]
    num_targets = thr.shape[1]
    num_chunks = (num_queries + chunk - 1) // chunk
    for c in _prange(num_chunks):
        lo = c * chunk
        hi = min(lo + chunk, num_queries)
        size = hi - lo
        threshold = np.ascontiguousarray(thr[lo:hi].T)  # [T, size]
        best = np.ascontiguousarray(best_idx[lo:hi].T)
        count = np.zeros((num_targets, size), dtype=np.int64)
        last = np.empty(size, dtype=S.dtype)
        for g in range(S.shape[0]):
            row = S[g, lo:hi]
            for t in range(num_targets):
                above, at, total = threshold[t], best[t], count[t]
                for j in range(size):  # vectorised: ties count before the best positive's index
                    total[j] += (row[j] > above[j]) | ((row[j] == above[j]) & (g < at[j]))
            if g < width:
                for j in range(size):
                    _insert_jit(top_val, top_idx, lo + j, g, row[j], g)
                    last[j] = top_val[lo + j, width - 1]
            elif width > 0:
                for j in range(size):
                    if row[j] > last[j]:
                        _insert_jit(top_val, top_idx, lo + j, width - 1, row[j], g)
                        last[j] = top_val[lo + j, width - 1]
        counts[lo:hi] = count.T


def _contains(indptr, indices, query_ids, gallery_ids, out):  # pragma: no cover - compiled
    for j in range(query_ids.shape[0]):  # little work per call: serial (no thread start-up)
        q = query_ids[j]
        positives = indices[indptr[q]:indptr[q + 1]]  # sorted
        if positives.shape[0] == 0:
            continue
        for k in range(gallery_ids.shape[1]):
            where = np.searchsorted(positives, gallery_ids[j, k])
            out[j, k] = where < positives.shape[0] and positives[where] == gallery_ids[j, k]


_insert_jit = _insert
_prange = range


@functools.lru_cache(maxsize=1)
def numba_available() -> bool:
    return importlib.util.find_spec("numba") is not None


@functools.lru_cache(maxsize=1)
def _compiled() -> tuple[Callable[..., None], Callable[..., None], Callable[..., None]]:
    import numba

    global _insert_jit, _prange
    _insert_jit = numba.njit(cache=True, nogil=True, inline="always")(_insert)
    _prange = numba.prange
    rows = numba.njit(cache=True, nogil=True, parallel=True)(_scan_rows)
    cols = numba.njit(cache=True, nogil=True, parallel=True)(_scan_cols)
    member = numba.njit(cache=True, nogil=True)(_contains)
    return rows, cols, member


@contextlib.contextmanager
def _threads() -> Iterator[int]:
    """Run numba's parallel loops on as many threads as torch uses (the user's choice), then restore."""
    import numba

    previous = numba.get_num_threads()
    threads = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(threads)
    try:
        yield threads
    finally:
        numba.set_num_threads(previous)


def usable(scores: Tensor) -> bool:
    """Whether the fused kernel can serve ``scores`` (CPU, float32/float64, numba installed)."""
    return scores.device.type == "cpu" and scores.dtype in (torch.float32, torch.float64) and numba_available()


def usable_for(gallery_ids: Tensor) -> bool:
    """Whether ``contains`` can run compiled for index lists ``gallery_ids`` (CPU, numba installed)."""
    return gallery_ids.device.type == "cpu" and numba_available()


def contains(indptr: Tensor, indices: Tensor, query_ids: Tensor, gallery_ids: Tensor) -> Tensor:
    """Whether ``gallery_ids [b, k]`` are among the sorted CSR positives of ``query_ids [b]``, bool ``[b, k]``."""
    member = _compiled()[2]
    out = np.zeros(tuple(gallery_ids.shape), dtype=np.bool_)
    member(indptr.numpy(), indices.numpy(), query_ids.long().contiguous().numpy(),
           gallery_ids.long().contiguous().numpy(), out)
    return torch.from_numpy(out)


def fused_scan(scores: Tensor, query_ids: Tensor, width: int, thr: Tensor, best_idx: Tensor) -> tuple[Tensor, Tensor]:
    """Top list and rank counts of the queries ``query_ids [b]`` (rows of ``scores [Q, G]``).

    ``thr [b, T]`` best-positive score per exact-rank target (``+inf`` with ``best_idx = -1`` when
    the query has none), ``best_idx [b, T]`` its gallery index. Returns the ordered top gallery
    indices ``[b, width]`` and the counts of items ranked before the best positive ``[b, T]``.
    """
    rows_kernel, cols_kernel, _ = _compiled()
    scores = scores.detach()
    num = query_ids.numel()
    if num == 0:
        return torch.zeros(0, width, dtype=torch.long), torch.zeros(0, thr.shape[1], dtype=torch.long)
    ids = query_ids.numpy()
    thr = thr.to(scores.dtype).numpy()
    best_idx = best_idx.numpy()
    top_val = np.empty((num, width), dtype=thr.dtype)
    top_idx = np.empty((num, width), dtype=np.int64)
    counts = np.zeros((num, thr.shape[1]), dtype=np.int64)
    if scores.stride(1) != 1 and scores.stride(0) == 1:  # e.g. S.T: queries are columns of a row-major S
        matrix = scores.T.numpy()  # [G, Q]
        contiguous = int(ids[-1]) - int(ids[0]) == num - 1 and bool((np.diff(ids) == 1).all())
        matrix = matrix[:, int(ids[0]):int(ids[0]) + num] if contiguous else matrix[:, ids]  # [G, b]
        with _threads() as threads:
            chunk = min(_MAX_COLUMN_CHUNK, -(-num // threads))
            cols_kernel(matrix, thr, best_idx, top_val, top_idx, counts, chunk)
    else:
        matrix = scores.numpy() if scores.stride(1) == 1 else scores.contiguous().numpy()
        with _threads():
            rows_kernel(matrix, ids, thr, best_idx, top_val, top_idx, counts)
    return torch.from_numpy(top_idx), torch.from_numpy(counts)
