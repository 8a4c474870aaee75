"""The one block-size rule: how many query rows of a ``[Q, G]`` score matrix are handled at once."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from torch import Tensor

#: Elements of a ``[rows, G]`` temporary block (float32: 32 MiB); bounds the memory of every blocked pass.
BLOCK_ELEMENTS = 1 << 23


def block_rows(num_cols: int, block_size: int | None = None) -> int:
    """Rows per block: ``block_size`` if given (>= 1), else ``BLOCK_ELEMENTS // num_cols`` (>= 1)."""
    if block_size is not None:
        if int(block_size) < 1:
            raise ValueError(f"block_size must be a positive number of queries, got {block_size}")
        return int(block_size)
    return max(1, BLOCK_ELEMENTS // max(num_cols, 1))


def query_blocks(num_queries: int, rows: int) -> Iterator[tuple[int, int]]:
    """Yield ``(start, stop)`` of consecutive query blocks; the last one may be short."""
    for start in range(0, num_queries, rows):
        yield start, min(start + rows, num_queries)


def width_blocks(sorted_widths: Tensor, rows: int, spread: int = 2, slack: int = 64) -> Iterator[tuple[int, int]]:
    """Yield ``(start, stop)`` of consecutive blocks of at most ``rows`` queries whose top-list widths
    ``sorted_widths [Q]`` (ascending) stay within ``spread * narrowest + slack`` of the block's
    narrowest: a block's top list is as wide as its widest query needs, so a few wide queries no
    longer make every narrow one build a wide list (the cost of a list grows with its width)."""
    widths = sorted_widths.tolist()
    start = 0
    while start < len(widths):
        stop = min(start + rows, len(widths))
        stop = max(start + 1, bisect.bisect_right(widths, spread * widths[start] + slack, start, stop))
        yield start, stop
        start = stop
