"""The sequential acceptance loops of (relaxed) greedy matching: over a lazily merged candidate stream
(``advance_stream``) and over a matrix already put in the global order whole (``scan_sorted``).

The source is written once, in plain Python on 1-D arrays, so that it runs interpreted (backend
``"python"``) and compiled by numba (backend ``"numba"``, ``pcmr.ranking._numba_kernels``) with the same logic;
the two backends therefore give identical lists. It imports nothing.

Data layout of ``advance_stream`` (all 1-D; Q rows, G columns):
- ``cand_col`` / ``cand_val``: a buffer of fetched candidates. Row ``r`` owns the segment
  ``[row_pos[r], row_end[r])`` of it, sorted in the global order (score descending, then column
  ascending); ``row_pos`` advances as candidates are consumed.
- ``row_threshold[r]``: every entry of row ``r`` with score ``>= row_threshold[r]`` has been fetched
  (or skipped because its column was already full); the entries not fetched yet score strictly less.
  ``row_exhausted[r]``: nothing is left to fetch for row ``r``.
- A binary heap ``heap[:size]`` of rows, keyed by the row's head: its next buffered candidate
  (``head_val`` = score, ``head_tie`` = r) or, when the buffer is empty but the row is not exhausted,
  a placeholder (``head_val`` = row_threshold, ``head_tie`` = Q + r). Higher ``head_val`` first, then
  lower ``head_tie``: a real candidate precedes a placeholder of equal score (the unfetched entries
  score strictly less), and equal scores go to the lower row, as in the global order.
- ``state`` (int64): ``[heap size, number of full columns, number of accepted pairs, max pairs or -1]``.
"""

from __future__ import annotations

NEED_FETCH = 1
FINISHED = 0


def advance_stream(
    heap,
    dirty,
    num_dirty,
    state,
    head_val,
    head_tie,
    cand_col,
    cand_val,
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
):
    """Process candidates in the global order until the stream ends or a row needs more candidates.

    First restores the heap property at the heap positions listed in ``dirty[:num_dirty]`` (ascending;
    they are sifted from the last to the first, which is valid because their keys only lost priority).
    Then repeatedly takes the heap's top row: its next candidate ``(r, g)`` is accepted when row ``r``
    holds fewer than ``k`` items (always true for a row in the heap) and column ``g`` fewer than
    ``capacity`` (HAL/RGM Algorithm 1, line 14). Accepted columns go to ``accepted[r * k + count]``.

    Returns ``NEED_FETCH`` when the top of the heap is a placeholder (a row whose next entries must be
    fetched before anything else can be processed) and ``FINISHED`` when no pair can be accepted any more
    (every row full or exhausted, every column full, or ``max pairs`` reached).
    """
    size = state[0]
    j = num_dirty - 1
    while True:
        if j >= 0:
            position = dirty[j]
            j -= 1
            if position >= size:
                continue
        else:
            if size == 0 or state[1] == num_cols or state[2] == state[3]:
                state[0] = size
                return FINISHED
            r = heap[0]
            p = row_pos[r]
            if p == row_end[r]:
                if not row_exhausted[r]:
                    state[0] = size
                    return NEED_FETCH
                size -= 1
                heap[0] = heap[size]
                position = 0
            else:
                g = cand_col[p]
                p += 1
                row_pos[r] = p
                if col_count[g] < capacity:
                    accepted[r * k + row_count[r]] = g
                    row_count[r] += 1
                    col_count[g] += 1
                    state[2] += 1
                    if col_count[g] == capacity:
                        state[1] += 1
                if row_count[r] == k or (p == row_end[r] and row_exhausted[r]):
                    size -= 1
                    heap[0] = heap[size]
                elif p < row_end[r]:
                    head_val[r] = cand_val[p]
                else:
                    head_val[r] = row_threshold[r]
                    head_tie[r] = num_rows + r
                position = 0
        # sift heap[position] down to its place
        if size == 0:
            continue
        node = heap[position]
        value = head_val[node]
        tie = head_tie[node]
        while True:
            child = 2 * position + 1
            if child >= size:
                break
            other = child + 1
            if other < size:
                a = heap[other]
                b = heap[child]
                if head_val[a] > head_val[b] or (head_val[a] == head_val[b] and head_tie[a] < head_tie[b]):
                    child = other
            c = heap[child]
            if head_val[c] > value or (head_val[c] == value and head_tie[c] < tie):
                heap[position] = c
                position = child
            else:
                break
        heap[position] = node


def scan_sorted(order, num_rows, num_cols, k, capacity, max_pairs, row_count, col_count, accepted):
    """The acceptance rule over entries already in the global order: ``order`` holds the flat indices
    ``r * num_cols + g`` of the matrix's entries, best first (score descending, then row, then column).

    Accepts ``(r, g)`` while row ``r`` holds fewer than ``k`` items and column ``g`` fewer than
    ``capacity`` (HAL/RGM Algorithm 1, line 14), writing ``g`` to ``accepted[r * k + count]``; stops when
    every row or every column is full, after ``max_pairs`` pairs (``-1``: no limit), or at the end.
    Returns the number of accepted pairs.
    """
    full_rows = 0
    full_cols = 0
    pairs = 0
    for i in range(order.shape[0]):
        if full_rows == num_rows or full_cols == num_cols or pairs == max_pairs:
            break
        flat = order[i]
        r = flat // num_cols
        g = flat - r * num_cols
        if row_count[r] < k and col_count[g] < capacity:
            accepted[r * k + row_count[r]] = g
            row_count[r] += 1
            col_count[g] += 1
            pairs += 1
            if row_count[r] == k:
                full_rows += 1
            if col_count[g] == capacity:
                full_cols += 1
    return pairs
