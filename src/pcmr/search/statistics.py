"""The re-rankers' gallery statistics of an index (CSLS's ``r_Q``, the inverted softmax's normaliser;
HAL/RGM eqs. 5-6): computed once per gallery modality, similarity with its options, and re-weighting
with its parameters, kept with the index and saved in ``statistics.safetensors`` (described in
``index.json``).

The reference queries of a gallery modality are at most ``sample`` stored items of the other modality
(:func:`pcmr.search.searcher.reference_sample`); the values come from
:func:`pcmr.search.searcher.gallery_statistic`, the one function that computes them. A statistic of a
sampled score records how its samples were drawn (``samples``: ``common``, one set of draws per side); a
stored one drawn otherwise (an index saved by an earlier version) is not read, and is recomputed on
first use.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from safetensors.torch import load_file
from torch import Tensor

from pcmr.atomic import atomic_write_safetensors
from pcmr.inference import get_reranker, list_reweightings
from pcmr.search.searcher import Gallery, Scoring, gallery_statistic, reference_sample
from pcmr.similarity import get_similarity

#: how a sampled score's statistics draw their samples (``pcmr.similarity.common_draws``)
SAMPLES = "common"

__all__ = ["GalleryStatistics", "STATISTICS_FILE", "statistic_key"]

STATISTICS_FILE = "statistics.safetensors"


def statistic_key(modality: str, scoring: Scoring) -> str | None:
    """What a stored gallery statistic depends on, as a JSON string (None for uncacheable options)."""
    try:
        return json.dumps([modality, scoring.similarity, scoring.reranker.weighting.name,
                           vars(scoring.reranker.weighting), scoring.options], sort_keys=True)
    except TypeError:  # tensor or generator options
        return None


def _other(modality: str) -> str:
    return "caption" if modality == "image" else "image"


class GalleryStatistics:
    """Gallery statistics by :func:`statistic_key`; ``galleries(modality)`` gives the stored items of a
    modality (in memory or on disk)."""

    def __init__(self, galleries: Callable[[str], Gallery]) -> None:
        self.galleries = galleries
        self.entries: dict[str, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.entries.values())

    def clear(self) -> None:
        """Forget every statistic (the gallery or its reference queries changed)."""
        self.entries.clear()

    def get(self, gallery_modality: str, scoring: Scoring, sample: int) -> Tensor | None:
        """The statistic ``[G]`` of ``scoring``'s re-ranker over the ``gallery_modality`` items (None when it
        needs none), from at most ``sample`` reference queries; computed once and kept."""
        if not scoring.reranker.needs_gallery_statistic:
            return None
        gallery = self.galleries(gallery_modality)
        key = statistic_key(gallery_modality, scoring)
        entry = self.entries.get(key) if key is not None else None
        if entry is not None and entry["value"].shape[0] == gallery.num:
            return entry["value"]
        reference = reference_sample(self.galleries(scoring.query_modality), sample)
        value = gallery_statistic(scoring, reference, gallery)
        if key is not None:
            self.entries[key] = {"modality": gallery_modality, "similarity": scoring.similarity,
                                 "reranker": scoring.reranker.name, "params": scoring.reranker.parameters(),
                                 "options": scoring.options, "sample": sample, "value": value}
            if get_similarity(scoring.similarity).sampled:
                self.entries[key]["samples"] = SAMPLES
        return value

    def compute_defaults(self, gallery_modality: str, similarity: str, options: dict[str, Any], sample: int) -> None:
        """The statistic of every re-weighting that needs one, with its default parameters, for
        ``similarity`` (what an ANN backend built for that score serves without further work)."""
        if self.galleries(_other(gallery_modality)).num == 0:
            return
        for name in list_reweightings():
            reranker = get_reranker(name)
            if reranker.needs_gallery_statistic:
                self.get(gallery_modality, Scoring(similarity, _other(gallery_modality), options, reranker), sample)

    # ----------------------------------------------------------------- storage
    def save(self, folder: Path) -> list[dict[str, Any]]:
        """Write ``statistics.safetensors`` into ``folder`` (nothing without statistics); returns the
        entries' descriptions for ``index.json``."""
        if not self.entries:
            return []
        atomic_write_safetensors(folder / STATISTICS_FILE, {f"statistic_{i}": e["value"].detach().cpu().contiguous()
                                                            for i, e in enumerate(self.entries.values())})
        return [{k: v for k, v in e.items() if k != "value"} for e in self.entries.values()]

    def load(self, folder: Path, entries: list[dict[str, Any]], meta_path: Path) -> None:
        """Read the statistics that ``entries`` (field ``statistics`` of ``meta_path``) describe."""
        if not entries:
            return
        tensors = load_file(str(folder / STATISTICS_FILE))
        for i, entry in enumerate(entries):
            value = tensors.get(f"statistic_{i}")
            try:
                modality = entry["modality"]
                scoring = Scoring(entry["similarity"], _other(modality), dict(entry["options"]),
                                  get_reranker(entry["reranker"], **entry["params"]))
                size = self.galleries(modality).num
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{meta_path}: entry {i} of field 'statistics' is malformed ({err})") from None
            if value is None or value.shape != (size,):
                raise ValueError(f"{folder / STATISTICS_FILE}: 'statistic_{i}' must hold one value per {modality}")
            if get_similarity(scoring.similarity).sampled and entry.get("samples") != SAMPLES:
                continue  # drawn from another sampling: recomputed on first use
            key = statistic_key(modality, scoring)
            if key is not None:
                self.entries[key] = {**entry, "value": value}
