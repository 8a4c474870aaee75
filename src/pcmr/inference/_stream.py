"""Exact (relaxed) greedy matching without sorting every entry: a lazily merged per-row candidate stream.

The literal algorithm (HAL/RGM Algorithm 1) sorts all ``Q x G`` entries and scans them in the global
order (descending score, then row, then column). Only the scan *order* matters, so the same scan is
produced by a k-way merge of the rows, each row being its own sorted list: the merge repeatedly takes
the best head among the rows (a heap keyed by the global order). Each row's list is materialised
lazily: first its best ``c`` entries, then, only when the merge reaches the end of what was fetched
while the row still needs items, the next block (twice as many). A row's next block is needed only
when every one of its higher-scored entries has been processed, and until then it is represented in
the heap by a placeholder keyed by an upper bound on its unfetched scores, so nothing is ever taken
out of order. Exact shortcuts keep the stream small: rows leave the heap once they hold ``k``
items; columns already full are left out of later fetches (such entries could only be rejected);
and when many columns have filled up, rows whose buffered candidates all lie in full columns drop
them and are refilled together (instead of one round trip per row). Hence the accepted pairs, in
acceptance order, are exactly those of the literal algorithm, while the candidates held are
typically a small multiple of ``Q * k`` (the matrix itself is only read in blocks of rows).

A matrix of at most :data:`WHOLE_FETCH_ENTRIES` entries (evaluation-sized) is instead put in the
global order whole, by one stable sort of its flattened entries, and scanned linearly
(:func:`accept_pairs_sorted`): the same pairs in the same order, without the heap's per-entry cost,
and the order is kept for the next matching of the same tensor (lambda selection runs one per
lambda and K).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pcmr.ranking import greedy_loop
from pcmr.ranking.blocks import block_rows
from pcmr.ranking.greedy_loop import FINISHED
from pcmr.ranking.topk import ordered_topk, sort_row_segments

#: Rows refilled together at least (when that many are waiting), to keep round trips few.
MIN_REFILL_ROWS = 64
#: Look for rows whose buffered candidates are all in full columns each time G / this many more
#: columns have filled up.
DEAD_SCAN_FRACTION = 20


#: Score matrices of at most this many entries are fetched whole at the first pass (every row sorted
#: once): the merge then never returns for a refill. Each refill round trip costs a few hundred
#: microseconds of small operations, and on evaluation-sized matrices (validation 1,000 x 200, test
#: 2,500 x 500) the lazy stream made dozens of them per call.
WHOLE_FETCH_ENTRIES = 1 << 21


def initial_fetch_size(k: int, num_cols: int, num_rows: int | None = None) -> int:
    """Candidates fetched per row at first: the whole row when the matrix has at most
    :data:`WHOLE_FETCH_ENTRIES` entries, else a few times ``k`` (most rows finish within them); >= k."""
    if num_rows is not None and num_rows * num_cols <= WHOLE_FETCH_ENTRIES:
        return num_cols
    return min(num_cols, 4 * k + 16)


def fetch_candidates(
    scores: Tensor, rows: Tensor | None, threshold: Tensor, counts: Tensor, col_full: Tensor | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fetch the next block of candidates of each row in ``rows`` (None: every row, nothing fetched yet).

    Row ``r`` gets its entries with score ``< threshold[r]`` outside the full columns (``col_full``,
    None when no column is full): the best ``counts[r]`` of them plus any ties of the last one, so
    that everything left scores strictly less than the new threshold.

    Returns numpy arrays: ``lengths [R]``, ``cols [n]`` and ``vals [n]`` (float64; per row in the
    global order, rows one after another), the new ``threshold [R]`` (``-inf`` once a row is
    exhausted) and ``exhausted [R]``.
    """
    num_rows = scores.shape[0] if rows is None else rows.numel()
    count = counts.clamp(max=scores.shape[1])  # [R]
    width = min(int(count.max()) + 1, scores.shape[1])  # one more than needed: detects ties across the cut
    top_vals, top_cols = [], []
    step = block_rows(scores.shape[1])
    for start in range(0, num_rows, step):  # the only passes over the matrix: mask and topk, per block
        stop = min(start + step, num_rows)
        sub = _available(scores, None if rows is None else rows[start:stop], start, stop, threshold, col_full)
        values, cols = sub.topk(width, dim=1, sorted=True)  # [R_block, width]
        top_vals.append(values)
        top_cols.append(cols)
    top_val, top_col = torch.cat(top_vals), torch.cat(top_cols)  # [R, width]
    last = top_val.gather(1, (count - 1).unsqueeze(1)).squeeze(1)  # [R], the count-th best
    after = top_val.gather(1, count.clamp(max=width - 1).unsqueeze(1)).squeeze(1)  # [R], the next one
    after = after.masked_fill(count >= width, float("-inf"))
    exhausted = after == float("-inf")  # nothing is left beyond the first `count`
    straddle = ~exhausted & (after == last)  # ties across the cut: take the whole tie (rare)
    new_threshold = last.masked_fill(exhausted, float("-inf"))
    slot = torch.arange(int(count.max()), device=scores.device).unsqueeze(0)  # [1, c]
    keep = (slot < count.unsqueeze(1)) & (top_val[:, : slot.shape[1]] > float("-inf"))  # [R, c]
    vals = top_val[:, : slot.shape[1]].masked_fill(~keep, float("-inf"))
    vals, cols = sort_row_segments(vals, top_col[:, : slot.shape[1]], skip_neg_inf=True)  # kept entries first, in order
    lengths = keep.sum(dim=1)  # [R]
    taken = slot < lengths.unsqueeze(1)  # [R, c]
    row_id = taken.nonzero(as_tuple=True)[0]
    cols, vals = cols[taken], vals[taken]  # row-major: rows in order, each in the global order
    if bool(straddle.any()):
        tied_rows = straddle.nonzero().squeeze(1)  # [T]
        tied_row, tied_col, tied_val = _tie_closure(scores, rows, tied_rows, threshold, col_full, last)
        lengths[tied_rows] = torch.bincount(tied_row, minlength=num_rows)[tied_rows]
        fast = ~straddle[row_id]
        row_id = torch.cat([row_id[fast], tied_row])
        by_row = torch.sort(row_id, stable=True).indices  # rows in order, each keeping its own order
        cols = torch.cat([cols[fast], tied_col])[by_row]
        vals = torch.cat([vals[fast], tied_val])[by_row]
    return (
        lengths.cpu().numpy().astype(np.int64),
        cols.cpu().numpy().astype(np.int64),
        vals.to(torch.float64).cpu().numpy(),
        new_threshold.to(torch.float64).cpu().numpy(),
        exhausted.cpu().numpy(),
    )


#: The last matrix sorted whole (the tensor itself, its version counter, its sorted columns and values):
#: lambda selection matches one re-weighted matrix once per (lambda, K), and sorts it only once.
_last_whole_sort: list[tuple[Tensor, int, np.ndarray, np.ndarray]] = []


def fetch_whole_rows(scores: Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`fetch_candidates` of every row of a finite ``scores`` when everything is fetched at once:
    one stable descending sort per row gives each row's entries in the global order (score
    descending, then column ascending); every row is exhausted. The sort of the last matrix is
    kept (with a reference to it, so it is reused only for that same tensor, unmodified)."""
    num_rows, num_cols = scores.shape
    cached = _last_whole_sort[0] if _last_whole_sort else None
    if cached is not None and cached[0] is scores and cached[1] == scores._version:
        cols, vals = cached[2], cached[3]
    else:
        sorted_vals, sorted_cols = torch.sort(scores, dim=1, descending=True, stable=True)  # [Q, G]
        cols = sorted_cols.reshape(-1).cpu().numpy().astype(np.int64)
        vals = sorted_vals.reshape(-1).to(torch.float64).cpu().numpy()
        _last_whole_sort[:] = [(scores, scores._version, cols, vals)]
    return (
        np.full(num_rows, num_cols, dtype=np.int64),
        cols,
        vals,
        np.full(num_rows, -np.inf),
        np.ones(num_rows, dtype=np.bool_),
    )


def _available(
    scores: Tensor, rows: Tensor | None, start: int, stop: int, threshold: Tensor, col_full: Tensor | None
) -> Tensor:
    """Rows ``start:stop`` of the request (``rows[...]`` or the matrix's own) with ``-inf`` where an
    entry was fetched before (score ``>= threshold``) or its column is full."""
    sub = scores[start:stop] if rows is None else scores.index_select(0, rows)  # [R_block, G]
    if rows is None and col_full is None:  # first fetch: everything is available
        return sub
    excluded = sub >= threshold[start:stop].to(sub.dtype).unsqueeze(1)  # [R_block, G]
    if col_full is not None:
        excluded |= col_full.unsqueeze(0)
    return sub.masked_fill(excluded, float("-inf"))


def _tie_closure(
    scores: Tensor,
    rows: Tensor | None,
    which: Tensor,
    threshold: Tensor,
    col_full: Tensor | None,
    last: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """All available entries ``>= last`` of the requested rows ``which``, per row in the global order.

    Returns (request row index, column, value), rows ascending.
    """
    matrix_rows = which if rows is None else rows[which]
    sub = scores.index_select(0, matrix_rows)  # [T, G]
    bound = threshold[which].to(sub.dtype).unsqueeze(1)
    take = (sub < bound) & (sub >= last[which].to(sub.dtype).unsqueeze(1))  # [T, G]
    if col_full is not None:
        take &= ~col_full.unsqueeze(0)
    local_row, col = take.nonzero(as_tuple=True)  # columns ascending within a row
    val = sub[local_row, col]
    by_value = torch.sort(val, descending=True, stable=True).indices
    by_row = torch.sort(local_row[by_value], stable=True).indices
    order = by_value[by_row]  # row ascending, then value descending, then column ascending
    return which[local_row[order]], col[order], val[order]


class _CandidateBuffer:
    """Growable flat storage of the rows' candidate segments (compacted when it runs out of room)."""

    def __init__(self, capacity: int) -> None:
        self.cols = np.empty(capacity, dtype=np.int64)
        self.vals = np.empty(capacity, dtype=np.float64)
        self.used = 0

    def append(
        self,
        rows: np.ndarray,
        lengths: np.ndarray,
        cols: np.ndarray,
        vals: np.ndarray,
        row_pos: np.ndarray,
        row_end: np.ndarray,
    ) -> None:
        """Store new segments for ``rows`` (whose old segments are used up) and point the rows at them."""
        size = cols.shape[0]
        if self.used + size > self.cols.shape[0]:
            self._compact(row_pos, row_end, size)
        start = self.used
        self.cols[start : start + size] = cols
        self.vals[start : start + size] = vals
        offsets = start + np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        row_pos[rows] = offsets
        row_end[rows] = offsets + lengths
        self.used = start + size

    def _compact(self, row_pos: np.ndarray, row_end: np.ndarray, incoming: int) -> None:
        live = np.flatnonzero(row_end > row_pos)  # rows with unconsumed candidates
        lengths = row_end[live] - row_pos[live]
        total = int(lengths.sum())
        capacity = max(2 * (total + incoming), self.cols.shape[0])
        new_start = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        source = np.repeat(row_pos[live] - new_start, lengths) + np.arange(total)
        cols = np.empty(capacity, dtype=np.int64)
        vals = np.empty(capacity, dtype=np.float64)
        cols[:total] = self.cols[source]
        vals[:total] = self.vals[source]
        self.cols, self.vals, self.used = cols, vals, total
        row_pos[live] = new_start
        row_end[live] = new_start + lengths


def accept_pairs(
    scores: Tensor, k: int, capacity: int, max_pairs: int | None, backend: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run the acceptance rule of HAL/RGM Algorithm 1 over the lazily merged stream.

    Args:
        scores: ``[Q, G]`` finite; ``k``: items per row; ``capacity``: uses per column (>= 1);
        ``max_pairs``: stop after this many accepted pairs (None: until no pair can be accepted);
        ``backend``: ``"numba"`` or ``"python"`` (resolved).
    Returns:
        ``accepted [Q, k]`` int64 numpy array (acceptance order, ``-1`` where a row stayed short),
        ``row_count [Q]`` and ``row_top [Q, k]``, each row's own top-k in the global order.
    """
    num_rows, num_cols = scores.shape
    if num_rows * num_cols <= WHOLE_FETCH_ENTRIES and initial_fetch_size(k, num_cols, num_rows) >= num_cols:
        return accept_pairs_sorted(scores, k, capacity, max_pairs, backend)
    device = scores.device
    run = stream_runner(backend)
    row_count = np.zeros(num_rows, dtype=np.int64)
    col_count = np.zeros(num_cols, dtype=np.int64)
    accepted = np.full(num_rows * k, -1, dtype=np.int64)
    row_pos = np.zeros(num_rows, dtype=np.int64)
    row_end = np.zeros(num_rows, dtype=np.int64)
    row_threshold = np.full(num_rows, np.inf)
    row_exhausted = np.zeros(num_rows, dtype=np.bool_)
    head_val = np.empty(num_rows, dtype=np.float64)
    head_tie = np.empty(num_rows, dtype=np.int64)
    fetch_size = np.full(num_rows, max(k, initial_fetch_size(k, num_cols, num_rows)), dtype=np.int64)
    buffer = _CandidateBuffer(max(1024, 2 * num_rows * int(fetch_size[0])))
    heap = np.arange(num_rows, dtype=np.int64)
    state = np.array([num_rows, 0, 0, -1 if max_pairs is None else max_pairs], dtype=np.int64)

    def refill(rows: np.ndarray, everything: bool = False) -> None:
        full = col_count >= capacity
        if everything and int(fetch_size[0]) >= num_cols:  # the whole matrix at once: one sort per row
            lengths, cols, vals, threshold, exhausted = fetch_whole_rows(scores)
        else:
            lengths, cols, vals, threshold, exhausted = fetch_candidates(
                scores,
                None if everything else torch.from_numpy(rows).to(device),
                torch.from_numpy(row_threshold[rows]).to(device),
                torch.from_numpy(fetch_size[rows]).to(device),
                torch.from_numpy(full).to(device) if bool(full.any()) else None,
            )
        buffer.append(rows, lengths, cols, vals, row_pos, row_end)
        row_threshold[rows] = threshold
        row_exhausted[rows] = exhausted
        fetch_size[rows] = np.minimum(2 * fetch_size[rows], num_cols)
        has_head = lengths > 0
        first = np.where(has_head, row_pos[rows], 0)
        # an exhausted row with nothing left sinks (head -inf) and leaves the heap when it surfaces
        head_val[rows] = np.where(has_head, buffer.vals[first], -np.inf)
        head_tie[rows] = rows

    refill(np.arange(num_rows, dtype=np.int64), everything=True)
    # nothing is full yet and every row got >= k candidates: its first k are its exact top-k
    row_top = buffer.cols[row_pos[:, None] + np.arange(k)[None, :]]  # [Q, k]
    dirty = np.arange(num_rows, dtype=np.int64)
    full_at_last_scan = 0
    while True:
        status = run(
            heap,
            dirty,
            dirty.shape[0],
            state,
            head_val,
            head_tie,
            buffer.cols,
            buffer.vals,
            row_pos,
            row_end,
            row_threshold,
            row_exhausted,
            row_count,
            col_count,
            accepted,
            k,
            capacity,
            num_rows,
            num_cols,
        )
        if status == FINISHED:
            break
        in_heap = heap[: state[0]]
        rows = _rows_to_refill(in_heap, row_pos, row_end, row_exhausted, row_threshold, head_val)
        drained = np.empty(0, dtype=np.int64)
        if state[1] - full_at_last_scan >= max(1, num_cols // DEAD_SCAN_FRACTION):
            # many columns filled up since the last look: rows whose buffered candidates all sit in full
            # columns (certain rejections) are refilled now, together, instead of one round trip each
            full_at_last_scan = int(state[1])
            dead = _dead_rows(in_heap, row_pos, row_end, buffer.cols, col_count >= capacity)
            drained = dead[row_exhausted[dead]]  # nothing left to fetch: empty them, they leave the heap
            row_pos[drained] = row_end[drained]
            head_val[drained] = -np.inf
            head_tie[drained] = drained
            rows = np.union1d(rows, dead[~row_exhausted[dead]])
        refill(rows)
        marked = np.zeros(num_rows, dtype=np.bool_)
        marked[rows] = True
        marked[drained] = True
        dirty = np.flatnonzero(marked[in_heap]).astype(np.int64)
    return accepted.reshape(num_rows, k), row_count, row_top


#: The last matrix put in the global order (the tensor, its version counter, the order and its rows'
#: own top-k lists by k): lambda selection matches one re-weighted matrix once per (lambda, K) and
#: orders it only once.
_last_global_order: list[tuple[Tensor, int, np.ndarray, dict[int, np.ndarray]]] = []


def global_order(scores: Tensor) -> np.ndarray:
    """Flat row-major indices ``r * G + g`` of every entry of ``scores [Q, G]`` in the global order of
    the scan (score descending, then row, then column): one stable descending sort of the flattened
    matrix. The order of the last matrix is kept (with a reference to it, so it is reused only for
    that same tensor, unmodified)."""
    cached = _last_global_order[0] if _last_global_order else None
    if cached is not None and cached[0] is scores and cached[1] == scores._version:
        return cached[2]
    flat = scores.reshape(-1) + 0.0  # -0.0 becomes 0.0: equal scores, ordered by position as the scan does
    position_bits = max(1, (flat.numel() - 1).bit_length())
    if flat.dtype == torch.float32 and position_bits <= 31:
        # one sort of distinct int64 keys (score descending in the high bits, position in the low ones)
        # gives the same order as a stable sort of the scores, at about half its cost
        bits = flat.view(torch.int32)  # [N]; as integers the negative floats run backwards
        ascending = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # int32 that orders as the scores do
        descending = 0x7FFFFFFF - ascending.to(torch.int64)  # in [0, 2^32)
        keys = (descending << position_bits) | torch.arange(flat.numel(), device=flat.device)
        order_t = torch.sort(keys).values & ((1 << position_bits) - 1)
    else:
        order_t = torch.sort(flat, descending=True, stable=True).indices
    order = order_t.cpu().numpy().astype(np.int64, copy=False)
    _last_global_order[:] = [(scores, scores._version, order, {})]
    return order


def accept_pairs_sorted(
    scores: Tensor, k: int, capacity: int, max_pairs: int | None, backend: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`accept_pairs` for a matrix small enough to be put in the global order whole
    (:func:`global_order`): one linear pass over that order (``greedy_loop.scan_sorted``) instead of
    the merged stream, with the same accepted pairs in the same order. ``row_top`` is every row's own
    top-k when a row is left short (computed once per matrix and k), else ``-1`` (nothing is completed)."""
    num_rows, num_cols = scores.shape
    order = global_order(scores)
    row_count = np.zeros(num_rows, dtype=np.int64)
    col_count = np.zeros(num_cols, dtype=np.int64)
    accepted = np.full(num_rows * k, -1, dtype=np.int64)
    arguments = (order, num_rows, num_cols, k, capacity, -1 if max_pairs is None else max_pairs,
                 row_count, col_count, accepted)
    if backend == "numba":
        from pcmr.ranking import _numba_kernels

        _numba_kernels.scan_sorted(*arguments)
    else:
        _as_memoryviews(greedy_loop.scan_sorted, *arguments)
    if not bool((row_count < k).any()):  # nothing to complete
        return accepted.reshape(num_rows, k), row_count, np.full((num_rows, k), -1, dtype=np.int64)
    kept = _last_global_order[0][3] if _last_global_order and _last_global_order[0][0] is scores else {}
    if k not in kept:  # each row's own top-k, once per matrix and k
        kept[k] = ordered_topk(scores, k).cpu().numpy()
    return accepted.reshape(num_rows, k), row_count, kept[k]


def _rows_to_refill(
    in_heap: np.ndarray,
    row_pos: np.ndarray,
    row_end: np.ndarray,
    row_exhausted: np.ndarray,
    row_threshold: np.ndarray,
    head_val: np.ndarray,
) -> np.ndarray:
    """Waiting rows whose unfetched entries may precede the best buffered candidate, plus the next few."""
    buffered = row_pos[in_heap] < row_end[in_heap]
    waiting = ~buffered & ~row_exhausted[in_heap]
    best_buffered = head_val[in_heap][buffered].max() if bool(buffered.any()) else -np.inf
    bound = row_threshold[in_heap]
    needed = waiting & (bound > best_buffered)
    if int(needed.sum()) < MIN_REFILL_ROWS:
        others = np.flatnonzero(waiting & ~needed)
        extra = MIN_REFILL_ROWS - int(needed.sum())
        if others.shape[0] > extra:
            others = others[np.argpartition(-bound[others], extra - 1)[:extra]]
        needed[others] = True
    return in_heap[needed]


def _dead_rows(
    in_heap: np.ndarray, row_pos: np.ndarray, row_end: np.ndarray, cols: np.ndarray, col_full: np.ndarray
) -> np.ndarray:
    """Heap rows holding buffered candidates that all lie in full columns (they can only be rejected)."""
    rows = in_heap[row_pos[in_heap] < row_end[in_heap]]
    lengths = row_end[rows] - row_pos[rows]
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    flat = np.repeat(row_pos[rows] - starts, lengths) + np.arange(int(lengths.sum()))
    if flat.shape[0] == 0:
        return rows
    alive = np.add.reduceat((~col_full[cols[flat]]).astype(np.int64), starts)  # [R]
    return rows[alive == 0]


def complete_rows(accepted: np.ndarray, row_count: np.ndarray, row_top: np.ndarray) -> np.ndarray:
    """Fill the rows left short with their best remaining items in the global order (capacities ignored).

    A row holding ``n < k`` accepted items takes the first ``k - n`` of its own top-k (``row_top``)
    that it does not hold yet. Returns the completed ``[Q, k]`` array.
    """
    k = accepted.shape[1]
    out = accepted.copy()
    short = np.flatnonzero(row_count < k)
    if short.shape[0] == 0:
        return out
    best = row_top[short]  # [R, k]
    taken = accepted[short]  # [R, k], -1 in the empty slots
    listed = (best[:, :, None] == taken[:, None, :]).any(axis=2)  # [R, k]
    fresh_first = np.argsort(listed, axis=1, kind="stable")  # items not held yet, in their order
    filler = np.take_along_axis(best, fresh_first, axis=1)  # [R, k]
    have = row_count[short][:, None]  # [R, 1]
    slot = np.arange(k)[None, :]  # [1, k]
    source = np.take_along_axis(filler, np.maximum(slot - have, 0), axis=1)
    out[short] = np.where(slot < have, taken, source)
    return out


def stream_runner(backend: str) -> Callable[..., int]:
    """``run(*arrays_and_ints) -> status`` (the arguments of ``greedy_loop.advance_stream``, numpy arrays
    for the arrays) for a resolved backend name: compiled (``"numba"``) or interpreted (``"python"``)."""
    if backend == "numba":
        from pcmr.ranking import _numba_kernels

        return _numba_kernels.advance_stream
    return _run_interpreted


def _run_interpreted(*args: Any) -> int:
    return _as_memoryviews(greedy_loop.advance_stream, *args)


def _as_memoryviews(loop: Callable[..., int], *args: Any) -> int:
    """``loop(*args)`` interpreted, with the arrays passed as memoryviews (they index a few times faster
    than numpy arrays from interpreted Python)."""
    return loop(*[memoryview(a) if hasattr(a, "__array_interface__") else a for a in args])
