"""Input checks and the relevance relation as the metrics take it.

A relevance relation between Q queries and G gallery items (:data:`RelevanceInput`) is accepted
as a dense boolean tensor ``[Q, G]``, as a list of Q lists of positive gallery indices (the form
needed when ``Q x G`` is large, e.g. the ECCV Caption positives) or as a dataset's
:class:`pcmr.relevance.Relevance` (``[N_img, N_cap]``, read transposed when the scores are
``[N_cap, N_img]``). Internally the sparse form is a CSR pair ``(indptr [Q+1], indices [nnz])``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from pcmr.ranking import fused_scan as kernel
from pcmr.ranking.checks import check_scores
from pcmr.relevance import Relevance

#: What the metrics accept as a relevance relation (besides :class:`SparseRelevance`).
RelevanceInput = Tensor | Sequence[Sequence[int]] | Relevance

__all__ = ["RelevanceInput", "SparseRelevance", "as_sparse", "check_scores", "from_pairs"]



class SparseRelevance:
    """A relevance relation in CSR form: positives of query q are ``indices[indptr[q]:indptr[q+1]]``.

    Indices are unique and sorted within each row. ``num_queries`` x ``num_gallery``.
    """

    def __init__(self, indptr: Tensor, indices: Tensor, num_gallery: int) -> None:
        self.indptr = indptr  # [Q + 1] int64
        self.indices = indices  # [nnz] int64
        self.num_gallery = num_gallery

    @property
    def num_queries(self) -> int:
        return self.indptr.numel() - 1

    def counts(self) -> Tensor:
        """Number of positives per query, LongTensor ``[Q]``."""
        return self.indptr[1:] - self.indptr[:-1]

    def to(self, device: torch.device) -> SparseRelevance:
        return SparseRelevance(self.indptr.to(device), self.indices.to(device), self.num_gallery)

    def rows(self, start: int, stop: int) -> tuple[Tensor, Tensor]:
        """Positives of queries ``start:stop`` as (row ids relative to start [n], gallery ids [n])."""
        lo = int(self.indptr[start])
        hi = int(self.indptr[stop])
        counts = self.indptr[start + 1 : stop + 1] - self.indptr[start:stop]
        row = torch.repeat_interleave(torch.arange(stop - start, device=self.indptr.device), counts)
        return row, self.indices[lo:hi]

    def contains(self, query_ids: Tensor, gallery_ids: Tensor) -> Tensor:
        """Whether ``gallery_ids [b, k]`` are positives of ``query_ids [b]``, bool ``[b, k]``."""
        if self.indices.numel() == 0:
            return torch.zeros(gallery_ids.shape, dtype=torch.bool, device=gallery_ids.device)
        if kernel.usable_for(gallery_ids):
            return kernel.contains(self.indptr, self.indices, query_ids, gallery_ids)
        # Positives of a query are sorted, so (query, gallery) keys are sorted over the whole relation.
        keys = self.__dict__.get("_keys")
        if keys is None:
            keys = self.__dict__["_keys"] = self.row_ids() * self.num_gallery + self.indices  # [nnz]
        wanted = query_ids[:, None] * self.num_gallery + gallery_ids  # [b, k]
        where = torch.searchsorted(keys, wanted.reshape(-1)).clamp(max=keys.numel() - 1)
        return (keys[where] == wanted.reshape(-1)).reshape(gallery_ids.shape)

    def row_ids(self) -> Tensor:
        """Query id of every stored positive, ``[nnz]`` (cached)."""
        cached = self.__dict__.get("_row_ids")
        if cached is None:
            cached = torch.repeat_interleave(torch.arange(self.num_queries, device=self.indptr.device),
                                             self.counts(), output_size=self.indices.numel())
            self.__dict__["_row_ids"] = cached
        return cached

    def select(self, query_ids: Tensor) -> tuple[Tensor, Tensor]:
        """Positives of the queries ``query_ids [b]`` as (position in query_ids [n], gallery ids [n])."""
        start, stop = int(query_ids[0]) if query_ids.numel() else 0, 0
        if query_ids.numel() and bool((query_ids == torch.arange(start, start + query_ids.numel(),
                                                                  device=query_ids.device)).all()):
            stop = start + query_ids.numel()
            lo, hi = int(self.indptr[start]), int(self.indptr[stop])
            return self.row_ids()[lo:hi] - start, self.indices[lo:hi]
        starts = self.indptr[query_ids]
        counts = self.indptr[query_ids + 1] - starts
        total = int(counts.sum())
        row = torch.repeat_interleave(torch.arange(query_ids.numel(), device=starts.device), counts,
                                      output_size=total)
        offsets = torch.cumsum(counts, 0) - counts  # [b] start of each query's run in the output
        within = torch.arange(total, device=starts.device) - offsets[row]
        return row, self.indices[starts[row] + within]

    def submatrix(self, query_ids: Tensor, gallery_ids: Tensor) -> SparseRelevance:
        """The relation restricted to ``query_ids [b]`` x ``gallery_ids [m]``, re-indexed ``[b, m]``."""
        local = torch.full((self.num_gallery,), -1, dtype=torch.long, device=self.indptr.device)
        local[gallery_ids] = torch.arange(gallery_ids.numel(), device=local.device)
        row, col = self.select(query_ids)
        col = local[col]
        keep = col >= 0
        return from_pairs(row[keep], col[keep], query_ids.numel(), gallery_ids.numel())

    def dense_rows(self, start: int, stop: int) -> Tensor:
        """Dense boolean block ``[stop - start, G]``."""
        row, col = self.rows(start, stop)
        block = torch.zeros(stop - start, self.num_gallery, dtype=torch.bool, device=self.indptr.device)
        block[row, col] = True
        return block

    def dense(self) -> Tensor:
        """The full dense boolean matrix ``[Q, G]``."""
        return self.dense_rows(0, self.num_queries)

    def transpose(self) -> SparseRelevance:
        """The relation seen from the gallery side, ``[G, Q]``."""
        row, col = self.rows(0, self.num_queries)
        return from_pairs(col, row, self.num_gallery, self.num_queries)


def from_pairs(rows: Tensor, cols: Tensor, num_rows: int, num_cols: int) -> SparseRelevance:
    """Build a CSR relation from (row, col) pairs; duplicates are removed."""
    key = torch.unique(rows.long() * num_cols + cols.long())  # sorted, unique
    rows = torch.div(key, num_cols, rounding_mode="floor")
    cols = key - rows * num_cols
    counts = torch.bincount(rows, minlength=num_rows)
    indptr = torch.zeros(num_rows + 1, dtype=torch.long, device=key.device)
    indptr[1:] = torch.cumsum(counts, 0)
    return SparseRelevance(indptr, cols, num_cols)


def as_sparse(relevant: RelevanceInput | SparseRelevance, num_queries: int, num_gallery: int,
              device: torch.device | None = None, name: str = "relevant") -> SparseRelevance:
    """Validate ``relevant`` against a ``[num_queries, num_gallery]`` score matrix and return CSR form."""
    if isinstance(relevant, SparseRelevance):
        if relevant.num_queries != num_queries or relevant.num_gallery != num_gallery:
            raise ValueError(
                f"{name} has shape [{relevant.num_queries}, {relevant.num_gallery}], "
                f"expected [{num_queries}, {num_gallery}] to match the scores"
            )
        return relevant.to(device) if device is not None else relevant
    if isinstance(relevant, Relevance):
        images, captions = (torch.from_numpy(a) for a in relevant.pairs())
        if (relevant.num_images, relevant.num_captions) == (num_queries, num_gallery):
            out = from_pairs(images, captions, num_queries, num_gallery)
        elif (relevant.num_captions, relevant.num_images) == (num_queries, num_gallery):
            out = from_pairs(captions, images, num_queries, num_gallery)
        else:
            raise ValueError(
                f"{name} relates {relevant.num_images} images and {relevant.num_captions} captions; "
                f"the scores are [{num_queries}, {num_gallery}]"
            )
        return out.to(device) if device is not None else out
    if isinstance(relevant, Tensor):
        if relevant.dim() != 2 or tuple(relevant.shape) != (num_queries, num_gallery):
            raise ValueError(
                f"{name} must be a boolean tensor of shape [{num_queries}, {num_gallery}] matching the "
                f"scores, got shape {tuple(relevant.shape)}"
            )
        if relevant.dtype != torch.bool:
            raise ValueError(f"{name} must be a boolean tensor (dtype torch.bool), got dtype {relevant.dtype}")
        rows, cols = relevant.nonzero(as_tuple=True)
        out = from_pairs(rows, cols, num_queries, num_gallery)
        return out.to(device) if device is not None else out
    if isinstance(relevant, (str, bytes)) or not isinstance(relevant, Sequence):
        raise TypeError(
            f"{name} must be a boolean tensor [Q, G] or a list of Q lists of positive gallery indices, "
            f"got {type(relevant).__name__}"
        )
    if len(relevant) != num_queries:
        raise ValueError(f"{name} has {len(relevant)} positive lists, expected one per query ({num_queries})")
    counts = [len(p) for p in relevant]
    flat = [int(i) for p in relevant for i in p]
    cols = torch.tensor(flat, dtype=torch.long)
    if cols.numel() and (int(cols.min()) < 0 or int(cols.max()) >= num_gallery):
        bad = int(cols.min()) if int(cols.min()) < 0 else int(cols.max())
        raise ValueError(f"{name} holds gallery index {bad}, expected indices in [0, {num_gallery})")
    rows = torch.repeat_interleave(torch.arange(num_queries), torch.tensor(counts, dtype=torch.long))
    out = from_pairs(rows, cols, num_queries, num_gallery)
    return out.to(device) if device is not None else out
