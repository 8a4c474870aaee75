"""Evaluating one model under two relevance relations: ``exact`` and ``source``.

COCO and Flickr30k only annotate which captions were *written* for an image, so their protocol
counts a caption that fits another image as a miss ("source" relevance: false negatives
included). Where a dataset knows the relation exactly (the shapes grammar, CUB classes), pcmr
reports both: ``exact`` (the dataset's relation) and ``source`` (only the written caption counts),
so a reader sees how the COCO-style protocol ranks methods differently. A split whose relation is
just the written pairs (COCO, Flickr30k) has one mode, ``source``.

Each row of an :class:`~pcmr.report.Report` of an evaluation carries its mode in the ``relevance``
column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from pcmr.data.split import RetrievalSplit
from pcmr.relevance import relevance_mode
from pcmr.report import Report

__all__ = ["relevance_modes", "merge_relevance_results"]


def relevance_modes(split: RetrievalSplit, requested: Sequence[str] | None = None) -> dict[str, Tensor]:
    """``{mode: BoolTensor [N_img, N_cap]}`` for a split, the primary mode first.

    ``exact`` is the split's relation and is offered only where it differs from the written pairs;
    ``source`` is :meth:`~pcmr.data.RetrievalSplit.source_relevance`. ``requested`` keeps only those
    modes (None: every mode the split has); a requested mode the split does not know raises.
    """
    exact = split.relevance_matrix()
    source = split.source_relevance().matrix()
    modes = {"exact": exact, "source": source} if not bool((exact == source).all()) else {"source": source}
    if requested is None:
        return modes
    requested = [relevance_mode(mode) for mode in requested]
    for mode in requested:
        if mode not in modes:
            raise ValueError(
                f"relevance mode {mode!r}: split {getattr(split, 'name', '?')}/{getattr(split, 'split', '?')} "
                f"knows only the written pairs (modes: {', '.join(modes)})"
            )
    return {mode: modes[mode] for mode in modes if mode in requested}


def _tagged(row: dict[str, Any], mode: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        out[key] = value
        if key == "rerank":
            out["relevance"] = mode
    return out


def merge_relevance_results(results: Sequence[tuple[str, Report]]) -> Report:
    """One result from one result per mode: every row tagged with its ``relevance``; meta, skipped
    pairs and figures from the first (primary) mode."""
    first = results[0][1]
    merged = Report(title=first.title, meta=dict(first.meta), skipped=list(first.skipped), figures=dict(first.figures),
                    schema=first.schema)
    for mode, result in results:
        merged.rows.extend(_tagged(row, mode) for row in result.rows)
    modes = [mode for mode, _ in results]
    merged.meta["relevance_modes"] = modes
    notes = list(merged.meta.get("notes") or [])
    if "exact" in modes:
        notes.append("relevance: exact = the dataset's relation (every caption that fits an image); source = only "
                     "the captions written for an image count (the COCO / Flickr30k protocol, false negatives "
                     "included); PMRP, extra positive sets and figures are reported under the first mode")
    else:
        notes.append("relevance: source = the captions written for an image (the split knows no other relation)")
    merged.meta["notes"] = notes
    return merged
