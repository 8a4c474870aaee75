"""faiss as a kind of candidate source (:mod:`pcmr.search.sources`): an
:class:`~pcmr.search.ann.AnnIndex` per gallery modality, saved as ``ann-<modality>.faiss`` in the index
folder; items appended are added to it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pcmr.atomic import atomic_write
from pcmr.gaussian import Gaussian
from pcmr.progress import phase
from pcmr.search.ann import AnnIndex, ProgressCounter, build_ann, parse_memory
from pcmr.search.searcher import Gallery
from pcmr.search.sources import BuildSettings, SourceKind
from pcmr.search.stored import StoredGallery

__all__ = ["FaissSource", "build_faiss"]


def build_faiss(index: StoredGallery, score: str, modalities: Sequence[str], index_type: str, *, shard_size: int,
                progress: bool | None, reference_sample: int, **params: Any) -> dict[str, Any]:
    """A faiss index over each gallery modality of ``index`` in ``modalities`` for ``score``, and the gallery
    statistics of the re-weightings (:meth:`pcmr.search.gallery.GalleryIndex.build_ann`)."""
    index.meta["reference_sample"] = int(reference_sample)
    for modality in modalities:
        gallery = index.gallery(modality)
        if gallery.num == 0:
            continue
        index.ann[modality] = build_ann(gallery, score, index_type, shard_size=shard_size, progress=progress,
                                        desc=f"{modality} index", **params)
        reference = index.gallery("caption" if modality == "image" else "image")  # the reference queries
        index.statistics.compute_defaults(gallery, reference, modality, score, index.similarity_options.get(score, {}),
                                          int(reference_sample))
    return dict(index.ann)


def _params(settings: BuildSettings) -> dict[str, Any]:
    """The faiss parameters of ``settings``; the compressed-code ones only for ivfpq."""
    params: dict[str, Any] = {name: value for name, value in (
        ("nlist", settings.nlist), ("nprobe", settings.nprobe), ("hnsw_m", settings.hnsw_m),
        ("ef_search", settings.ef_search), ("pq_m", settings.pq_m)) if value is not None}
    if settings.index_type == "ivfpq":
        params["opq"] = bool(settings.opq)
        if settings.refine is not None:
            params["refine"] = settings.refine
        if settings.memory_budget is not None:
            params["memory_budget"] = parse_memory(settings.memory_budget)
    elif settings.opq or settings.memory_budget is not None or settings.pq_m is not None \
            or settings.refine is not None:
        raise ValueError("--pq-m, --opq, --refine and --memory-budget apply to --index-type ivfpq only")
    return params


class FaissSource(SourceKind):
    """faiss indexes in the index folder (module docstring)."""

    engine = "faiss"
    over_store = True

    def build(self, index: StoredGallery, score: str, modalities: Sequence[str], settings: BuildSettings,
              say: Callable[[str], None], warn: Callable[[str], None]) -> dict[str, Any]:
        params = _params(settings)
        with phase(f"building the faiss index ({settings.index_type}, score {score})"):
            built = build_faiss(index, score, modalities, settings.index_type, shard_size=settings.shard_size,
                                progress=None, reference_sample=settings.reference_sample, **params)
        notes: dict[str, list[str]] = {}
        for modality, ann in built.items():
            how = "chosen by gallery size" if settings.index_type == "auto" else "requested"
            params_text = ", ".join(f"{key}={value}" for key, value in ann.params.items()) or "none"
            say(f"faiss index over {ann.ntotal} {modality}s: {ann.index_type} ({how}), score {ann.score}, "
                f"params {params_text}")
            for note in ann.notes:
                notes.setdefault(note, []).append(modality)
        for note, built_over in notes.items():  # one line per cause, not one per faiss k-means
            warn(f"{' and '.join(built_over)} index{'es' if len(built_over) > 1 else ''}: {note}")
        return built

    def save(self, source: Any, folder: Path, modality: str) -> dict[str, Any]:
        name = f"ann-{modality}.faiss"
        atomic_write(folder / name, source.write)  # through Python's file I/O: a failed write raises
        return {"file": name, "score": source.score, "index_type": source.index_type, "layout": source.layout,
                "dim": source.dim, "ntotal": source.ntotal, "params": source.params}

    def reconnect(self, entry: dict[str, Any], modality: str, gallery: Gallery, file: Path | None,
                  meta_path: Path) -> Any:
        try:
            if file is None:
                raise KeyError("file")
            ann = AnnIndex.read(str(file), entry["score"], entry["index_type"], entry["layout"],
                                int(entry["dim"]), entry.get("params") or {})
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{meta_path}: field 'ann.{modality}' is malformed ({err})") from None
        except RuntimeError as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise ValueError(f"{file} cannot be read by faiss ({first}); the index is corrupted") from None
        if ann.ntotal != gallery.num or ann.dim != gallery.dim:
            raise ValueError(f"{file} holds {ann.ntotal} items of D={ann.dim} but the gallery has "
                             f"{gallery.num} {modality}s of D={gallery.dim}; the index files do not match")
        return ann

    def add(self, index: StoredGallery, modality: str, source: Any, items: Gaussian, merged: Gaussian,
            shard_size: int, progress: bool | None) -> Any:
        bar = ProgressCounter(progress, items.num, f"{modality} index")
        try:
            source.add(items, shard_size=shard_size, progress=bar)
        finally:
            bar.close()
        return source
