"""What a search returns: :class:`SearchResults` (indices, scores, uncertainties of the top-k of each
query) and one :class:`SearchHit` per listed item, with its id, text or metadata."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

__all__ = ["SearchHit", "SearchResults", "hits_of"]


@dataclass(frozen=True)
class SearchHit:
    """One retrieved gallery item. ``score`` is the (re-ranked) score, higher = better;
    ``uncertainty`` the item's uncertainty (None for point embeddings)."""

    rank: int
    index: int
    id: Any
    score: float
    uncertainty: float | None
    text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchResults:
    """Top-k results of Q queries.

    ``indices [Q, k]`` (gallery positions), ``scores [Q, k]``, ``uncertainty [Q, k]`` (None for a
    point gallery), ``query_uncertainty [Q]`` (None for point queries), ``hits[q]`` the same as
    :class:`SearchHit` objects.
    """

    query_modality: str
    gallery_modality: str
    similarity: str
    rerank: str
    indices: Tensor
    scores: Tensor
    uncertainty: Tensor | None
    query_uncertainty: Tensor | None
    hits: list[list[SearchHit]]
    #: lines for the user about how the results were found (e.g. a re-ranker over candidate lists
    #: that may differ from the exact search), printed once per call
    notes: list[str] = field(default_factory=list)

    def to_text(self, queries: Sequence[str] | None = None) -> str:
        """A plain-text listing: one block per query, one line per hit."""
        lines = []
        for q, hits in enumerate(self.hits):
            label = queries[q] if queries is not None else f"query {q}"
            unc = ""
            if self.query_uncertainty is not None:
                unc = f"  (query uncertainty {float(self.query_uncertainty[q]):.3f})"
            lines.append(f"{label}{unc}  [{self.similarity}, {self.rerank}]")
            lines.append(f"{'rank':>4}  {'score':>10}  {'uncert.':>9}  {'id':<12} item")
            for hit in hits:
                u = "-" if hit.uncertainty is None else f"{hit.uncertainty:.3f}"
                item = hit.text if hit.text is not None else json.dumps(hit.metadata, ensure_ascii=False)
                lines.append(f"{hit.rank:>4}  {hit.score:>10.4f}  {u:>9}  {str(hit.id):<12} {item}")
        return "\n".join(lines)


def hits_of(indices: Tensor, scores: Tensor, uncertainty: Tensor | None, ids: Sequence[Any],
            texts: Sequence[str] | None, metadata: Sequence[dict[str, Any]] | None) -> list[list[SearchHit]]:
    """:class:`SearchHit` rows of ``indices, scores [Q, k]`` (slots ``-1`` an approximate index could
    not fill are left out); ``texts`` for a caption gallery, ``metadata`` for an image gallery."""
    out = []
    index_rows, score_rows = indices.tolist(), scores.tolist()
    unc_rows = None if uncertainty is None else uncertainty.tolist()
    for q, (index_row, score_row) in enumerate(zip(index_rows, score_rows)):
        row = []
        for r, (i, score) in enumerate(zip(index_row, score_row)):
            if i < 0:
                continue
            text = texts[i] if texts is not None else None
            item_metadata = metadata[i] if metadata else {}
            unc = None if unc_rows is None else unc_rows[q][r]
            row.append(SearchHit(r + 1, i, ids[i], score, unc, text, item_metadata))
        out.append(row)
    return out
