"""The fused CPU metrics pass: ordered top list and best-positive tie counts in one read of the scores.

Wrappers around the compiled loops of ``pcmr.ranking._numba_kernels`` (see there for what they
compute), used by ``pcmr.metrics.scan`` when ``usable`` says so. Without numba (or on CUDA, or
switched off with ``pcmr.ranking.backend.numba_disabled``) ``pcmr.metrics.scan`` uses the torch path,
which gives identical results.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pcmr.ranking.backend import numba_enabled

# Columns handled together by one thread in scan_cols: long runs of each row of S (few pages per row).
_MAX_COLUMN_CHUNK = 4096


def thread_count() -> int:
    """Threads for the compiled loops: as many as torch uses (the user's choice), at most numba's pool
    size. Reading it does not start numba's thread pool."""
    import numba

    # numba.config sets its attributes at import time, so its stubs do not list them
    return max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]


@contextlib.contextmanager
def _threads() -> Iterator[int]:
    """Run numba's parallel loops on :func:`thread_count` threads, then restore. With one thread
    nothing touches numba's thread pool (the caller runs the ``*_serial`` loops): starting it leaves
    a spinning idle worker that slows every other process on the machine."""
    threads = thread_count()
    if threads == 1:
        yield 1
        return
    import numba

    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        yield threads
    finally:
        numba.set_num_threads(previous)


def usable(scores: Tensor) -> bool:
    """Whether the fused pass can serve ``scores`` (CPU, float32/float64, numba enabled)."""
    return scores.device.type == "cpu" and scores.dtype in (torch.float32, torch.float64) and numba_enabled()


def usable_for(gallery_ids: Tensor) -> bool:
    """Whether ``contains`` can run compiled for index lists ``gallery_ids`` (CPU, numba installed)."""
    return gallery_ids.device.type == "cpu" and numba_enabled()


def contains(indptr: Tensor, indices: Tensor, query_ids: Tensor, gallery_ids: Tensor) -> Tensor:
    """Whether ``gallery_ids [b, k]`` are among the sorted CSR positives of ``query_ids [b]``, bool ``[b, k]``."""
    from pcmr.ranking import _numba_kernels as kernels

    out = np.zeros(tuple(gallery_ids.shape), dtype=np.bool_)
    kernels.contains(indptr.numpy(), indices.numpy(), query_ids.long().contiguous().numpy(),
           gallery_ids.long().contiguous().numpy(), out)
    return torch.from_numpy(out)


def fused_scan(scores: Tensor, query_ids: Tensor, width: int, thr: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Top list and tie counts of the queries ``query_ids [b]`` (rows of ``scores [Q, G]``).

    ``thr [b, T]`` best-positive score per exact-rank target (``+inf`` when the query has none).
    Returns the ordered top gallery indices ``[b, width]`` and their scores ``[b, width]``, and per
    target the number of items scoring strictly above ``thr`` and exactly ``thr``, ``[b, T]`` each.
    """
    from pcmr.ranking import _numba_kernels as kernels

    scores = scores.detach()
    num = query_ids.numel()
    if num == 0:
        empty = torch.zeros(0, thr.shape[1], dtype=torch.long)
        return torch.zeros(0, width, dtype=torch.long), scores.new_zeros(0, width), empty, empty.clone()
    ids = query_ids.numpy()
    thr_np = thr.to(scores.dtype).numpy()
    top_val = np.empty((num, width), dtype=thr_np.dtype)
    top_idx = np.empty((num, width), dtype=np.int64)
    above = np.zeros((num, thr_np.shape[1]), dtype=np.int64)
    equal = np.zeros((num, thr_np.shape[1]), dtype=np.int64)
    loop: Any
    if scores.stride(1) != 1 and scores.stride(0) == 1:  # e.g. S.T: queries are columns of a row-major S
        matrix = scores.T.numpy()  # [G, Q]
        contiguous = int(ids[-1]) - int(ids[0]) == num - 1 and bool((np.diff(ids) == 1).all())
        matrix = matrix[:, int(ids[0]):int(ids[0]) + num] if contiguous else matrix[:, ids]  # [G, b]
        with _threads() as threads:
            chunk = min(_MAX_COLUMN_CHUNK, -(-num // threads))
            loop = kernels.scan_cols if threads > 1 else kernels.scan_cols_serial
            loop(matrix, thr_np, top_val, top_idx, above, equal, chunk)
    else:
        matrix = scores.numpy() if scores.stride(1) == 1 else scores.contiguous().numpy()
        with _threads() as threads:
            loop = kernels.scan_rows if threads > 1 else kernels.scan_rows_serial
            loop(matrix, ids, thr_np, top_val, top_idx, above, equal)
    return (torch.from_numpy(top_idx), torch.from_numpy(top_val), torch.from_numpy(above),
            torch.from_numpy(equal))
