"""Writing a gallery index folder: encoding a split with a trained model (``pcmr search INDEX --build``),
building one from saved embeddings (``--from-embeddings``) or appending saved embeddings to one
(``--add``), with the candidate source of ``backend`` (:mod:`pcmr.search.sources`) built over it.

One writer per index folder; the new folder is swapped in whole once complete (:mod:`pcmr.atomic`), and
the candidate sources of a replaced index that live outside its folder (database collections) are
dropped once the new one is in place. Progress lines go to ``say``, warnings to ``warn``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pcmr.atomic import write_folder, writing_folder
from pcmr.data import ENCODE_BATCH_SIZE
from pcmr.gaussian import Gaussian
from pcmr.hub import load, trained_similarity
from pcmr.progress import phase
from pcmr.run_defaults import default_split, load_split, run_defaults
from pcmr.search.ann import ann_score_for
from pcmr.search.candidate_sources import CANDIDATE_SOURCES, source_kind
from pcmr.search.compose import get_backend
from pcmr.search.embeddings import read_embeddings
from pcmr.search.gallery import GalleryIndex
from pcmr.search.manifest import (
    drop_replaced_sources,
    file_sha256,
    not_an_index,
    source_entries,
    stored_similarity,
)
from pcmr.search.sources import BuildSettings

__all__ = ["IndexWrite", "check_index_write", "check_source_target", "default_similarity", "write_index"]


def _quiet(line: str) -> None:
    """Print nothing (the default ``say`` / ``warn`` of the library)."""


@dataclass
class IndexWrite:
    """What to write into the index folder ``index``: one of ``build`` (a run folder, its ``model/`` or a
    ``save_pretrained`` folder; with ``data``, ``data_name``, ``split``, ``vocab``, ``batch_size``,
    ``on_disk``, ``store_dtype``), ``from_embeddings`` or ``add`` (a saved-embeddings file). ``backend``:
    the candidate source to build (auto / exact: none) for ``ann_score`` (None: from ``similarity``) over
    ``modalities``, with ``source``'s settings."""

    index: str
    build: str | None = None
    from_embeddings: str | None = None
    add: str | None = None
    data: str | None = None
    data_name: str | None = None
    split: str | None = None
    vocab: str | None = None
    batch_size: int = ENCODE_BATCH_SIZE
    overwrite: bool = False
    on_disk: bool = False
    store_dtype: str | None = None
    backend: str = "auto"
    ann_score: str | None = None
    similarity: str | None = None
    modalities: tuple[str, ...] = ("image", "caption")
    device: str | None = None
    source: BuildSettings = field(default_factory=BuildSettings)

    @property
    def writes(self) -> bool:
        return any(x is not None for x in (self.build, self.from_embeddings, self.add))


def default_similarity(spec: IndexWrite) -> str:
    """The similarity the model was trained with: the one of ``spec.build``, else the one the index folder
    records (small files only, nothing is loaded); cosine for ``from_embeddings`` or when none is recorded."""
    if spec.build:
        return trained_similarity(spec.build)
    if spec.from_embeddings:
        return "cosine"
    return stored_similarity(spec.index)


def check_index_write(spec: IndexWrite) -> None:
    """The settings of ``spec`` that can be refused before anything is loaded or encoded."""
    if sum(x is not None for x in (spec.build, spec.from_embeddings, spec.add)) > 1:
        raise ValueError("give only one of --build, --from-embeddings and --add")
    if (spec.on_disk or spec.store_dtype is not None) and spec.build is None:
        raise ValueError("--on-disk and --store-dtype apply to --build RUN_OR_MODEL only")
    if spec.store_dtype is not None and not spec.on_disk:
        raise ValueError("--store-dtype sets the precision of an --on-disk gallery; add --on-disk")


def check_source_target(spec: IndexWrite) -> None:
    """The candidate source's own checks (e.g. a database address) when ``spec`` builds an index."""
    engine = get_backend(spec.backend).engine
    if engine is not None and (spec.build or spec.from_embeddings):
        source_kind(engine).check_build(spec.source)


def write_index(spec: IndexWrite, say: Callable[[str], None] = _quiet,
                warn: Callable[[str], None] = _quiet) -> GalleryIndex:
    """Build, or add to, the index folder of ``spec`` (module docstring) and return the index written."""
    check_index_write(spec)
    check_source_target(spec)
    with writing_folder(spec.index, "writing this index"):  # one writer per index; a killed one's copies put right
        if spec.build:
            return _build(spec, say, warn)
        if spec.from_embeddings:
            return _from_embeddings(spec, say, warn)
        if spec.add:
            return _add(spec, say)
    raise ValueError("nothing to write: give --build RUN_OR_MODEL, --from-embeddings FILE or --add FILE")


def _check_target(spec: IndexWrite) -> None:
    """A build never replaces an existing index without ``overwrite``, and never replaces anything that is
    not a pcmr gallery index (a run folder, documents), even with it."""
    target = Path(spec.index)
    if not os.path.lexists(target) or (target.is_dir() and not any(target.iterdir())):
        return
    problem = not_an_index(target)
    if problem is not None:
        raise FileExistsError(f"{problem}; --overwrite replaces only a whole gallery index: choose a new or "
                              "empty INDEX folder, or move those files out")
    if not spec.overwrite:
        raise FileExistsError(f"{target} already exists; pass --overwrite to replace it, or --add FILE to "
                              f"append items to the index")


def _save_new(index: GalleryIndex, spec: IndexWrite) -> None:
    """Write a newly built index; the folder is swapped in whole, so a replaced one leaves no file behind.
    The candidate sources of a replaced index outside its folder are dropped once the new one is in place."""
    replaced = source_entries(spec.index)

    def save(folder: Path) -> None:
        index.save(folder)

    write_folder(spec.index, save)
    index.commit_sources()
    drop_replaced_sources(replaced)


def _provenance(model: Any, split: Any, spec: IndexWrite) -> dict[str, Any]:
    return {"source": str(model.run_dir or model.source), "dataset": split.name, "split": spec.split}


def _build(spec: IndexWrite, say: Callable[[str], None], warn: Callable[[str], None]) -> GalleryIndex:
    _check_target(spec)
    assert spec.build is not None
    model = load(spec.build, device=spec.device or "cpu", vocabulary=spec.vocab)
    defaults = run_defaults(model)
    spec.split = spec.split or default_split(spec.data, defaults.data, defaults.split)
    split = load_split(spec.data, spec.split, defaults.data, spec.data_name, model=model)
    if spec.on_disk:
        return _build_on_disk(spec, model, split, say, warn)
    with phase(f"encoding the gallery ({split.num_images} images, {split.num_captions} captions)"):
        index = GalleryIndex.build(model, split, batch_size=spec.batch_size, device=spec.device,
                                   meta=_provenance(model, split, spec), progress=None)
    _build_source(index, spec, say, warn)
    _save_new(index, spec)
    say(f"built {spec.index}: {index.images.num} images, {index.captions.num} captions "
        f"({split.name}/{spec.split}, D={index.images.dim})")
    return index


def _build_on_disk(spec: IndexWrite, model: Any, split: Any, say: Callable[[str], None],
                   warn: Callable[[str], None]) -> GalleryIndex:
    """--build --on-disk: the stores, the candidate source and the statistics are written into the new
    index folder (swapped in whole once complete), then the index is opened from there."""
    over_store = [name for name, kind in CANDIDATE_SOURCES.items() if kind.over_store]
    if spec.backend not in ("auto", *over_store):
        raise ValueError(f"--on-disk answers through {'/'.join(over_store)} candidates; use --backend "
                         f"{over_store[0]} (or leave --backend out), got --backend {spec.backend}")
    spec.backend = spec.backend if spec.backend != "auto" else over_store[0]

    def write(folder: Path) -> None:
        with phase(f"encoding the gallery to disk ({split.num_images} images, {split.num_captions} captions)"):
            index = GalleryIndex.build_on_disk(model, split, folder, dtype=spec.store_dtype or "float16",
                                               batch_size=spec.batch_size, device=spec.device,
                                               meta=_provenance(model, split, spec), progress=None)
        _build_source(index, spec, say, warn)
        index.save(folder)

    write_folder(spec.index, write)
    index = GalleryIndex.load(spec.index, device=spec.device)
    say(f"built {spec.index}: {index.images.num} images, {index.captions.num} captions "
        f"({split.name}/{spec.split}, D={index.images.dim}), Gaussians on disk ({spec.store_dtype or 'float16'})")
    return index


def _from_embeddings(spec: IndexWrite, say: Callable[[str], None], warn: Callable[[str], None]) -> GalleryIndex:
    _check_target(spec)
    assert spec.from_embeddings is not None
    saved = read_embeddings(spec.from_embeddings, shard_rows=spec.source.shard_size, progress=None)
    present = saved.images if saved.images is not None else saved.captions
    if present is None:
        raise ValueError(f"{spec.from_embeddings} holds neither image nor caption embeddings")
    empty = Gaussian(present.mean.new_zeros(0, present.dim),
                     None if present.logvar is None else present.logvar.new_zeros(0, present.logvar.shape[1]))
    index = GalleryIndex(saved.images if saved.images is not None else empty,
                         saved.captions if saved.captions is not None else empty,
                         image_ids=saved.image_ids, caption_ids=saved.caption_ids, caption_texts=saved.caption_texts,
                         image_metadata=saved.image_metadata,
                         meta={"source": str(spec.from_embeddings),
                               "source_sha256": file_sha256(spec.from_embeddings)})
    _build_source(index, spec, say, warn)
    _save_new(index, spec)
    say(f"built {spec.index}: {index.images.num} images, {index.captions.num} captions from "
        f"{spec.from_embeddings} (D={present.dim})")
    return index


def _add(spec: IndexWrite, say: Callable[[str], None]) -> GalleryIndex:
    assert spec.add is not None
    shard_size = spec.source.shard_size
    index = GalleryIndex.load(spec.index, device=spec.device)
    saved = read_embeddings(spec.add, shard_rows=shard_size, progress=None,
                            first_image_id=index.images.num, first_caption_id=index.captions.num)
    digest = file_sha256(spec.add)
    earlier = next((entry for entry in index.meta.get("added") or [] if isinstance(entry, dict)
                    and entry.get("sha256") == digest), None)
    if earlier is None and index.meta.get("source_sha256") == digest:
        earlier = {"file": index.meta.get("source"), "how": "built from"}
    if earlier is not None:
        raise FileExistsError(f"{spec.add} (SHA-256 {digest[:12]}...) is already in {spec.index}: "
                              f"{earlier.get('how', 'added')} {earlier.get('file')}; adding it again would give its "
                              "items twice (the index records the SHA-256 of every file added)")
    if saved.images is not None:
        index.add_images(saved.images, saved.image_ids, saved.image_metadata, shard_size=shard_size, progress=None)
    if saved.captions is not None:
        index.add_captions(saved.captions, saved.caption_ids, saved.caption_texts, shard_size=shard_size,
                           progress=None)
    index.meta["added"] = [*(index.meta.get("added") or []),
                           {"file": str(spec.add), "sha256": digest, "images": 0 if saved.images is None else
                            saved.images.num, "captions": 0 if saved.captions is None else saved.captions.num}]

    def save(folder: Path) -> None:
        index.save(folder)

    write_folder(spec.index, save)  # a new folder swapped in whole: the old index or the new, never a mix
    index.commit_sources()  # a database: the replaced collections are dropped once the new folder is in place
    say(f"added to {spec.index}: now {index.images.num} images, {index.captions.num} captions")
    return index


def _build_source(index: GalleryIndex, spec: IndexWrite, say: Callable[[str], None],
                  warn: Callable[[str], None]) -> None:
    """The candidate source of ``spec.backend`` over the new index (nothing for auto or exact)."""
    engine = get_backend(spec.backend).engine
    if engine is None:  # exact or auto: no candidate source to build
        return
    score = spec.ann_score or ann_score_for(spec.similarity or "cosine", index.images)
    spec.source.owner = os.path.abspath(spec.index)
    source_kind(engine).build(index, score, tuple(spec.modalities), spec.source, say, warn)
