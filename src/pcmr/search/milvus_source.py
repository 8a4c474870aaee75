"""Milvus as a kind of candidate source (:mod:`pcmr.search.sources`): a collection per gallery
modality (:class:`~pcmr.search.vectordb.MilvusCandidates`) at a Milvus Lite file or a server; the index
folder records its uri, collection and build id. Appending items writes a new collection; a replaced
one is dropped once the new index folder is in place."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pcmr.gaussian import Gaussian
from pcmr.search.searcher import DEFAULT_REFERENCE_SAMPLE, Gallery
from pcmr.search.sources import BuildSettings, SourceKind, replace_source
from pcmr.search.stored import MODALITIES, StoredGallery
from pcmr.search.vectordb import (
    MilvusCandidates,
    collection_name,
    collection_prefix,
    drop_collection,
    drop_unfinished,
    new_build_id,
    resolve_uri,
)

__all__ = ["MILVUS_INDEX_TYPES", "MilvusSource", "build_milvus"]

#: --index-type of a Milvus build -> the Milvus index type
MILVUS_INDEX_TYPES = {"auto": "auto", "flat": "FLAT", "ivf": "IVF_FLAT"}


def build_milvus(index: StoredGallery, uri: str, score: str = "cosine", modalities: Sequence[str] = MODALITIES,
                 index_type: str = "auto", *, collection_prefix: str = "pcmr", shard_size: int = 65_536,
                 reference_sample: int = DEFAULT_REFERENCE_SAMPLE, owner: str | None = None,
                 **params: Any) -> dict[str, Any]:
    """Write the ANN vectors of each modality in ``modalities`` to a new Milvus collection
    ``<collection_prefix>_<modality>_<build id>`` at ``uri`` (a Milvus Lite ``.db`` file, recorded as
    an absolute path, or a server address) and use it as ``index``'s candidate source; the Gaussians
    stay in the index's own files. ``owner``: the index folder this index will be saved to (recorded
    in the collections, so those of a killed build are recognised and dropped by the next build with
    the prefix, :func:`pcmr.search.vectordb.drop_unfinished`). A candidate source this replaces is
    dropped by :func:`pcmr.search.backends.commit_sources` once the index is saved. ``params``:
    ``nlist``, ``nprobe`` (IVF_FLAT). Gallery statistics as in :func:`pcmr.search.backends.build_ann`."""
    index.refuse_on_disk("the milvus backend")
    index.meta["reference_sample"] = int(reference_sample)
    drop_unfinished(uri, collection_prefix)
    build_id = new_build_id()
    for modality in modalities:
        gallery = index.gallery(modality)
        assert isinstance(gallery, Gaussian)
        if gallery.num == 0:
            continue
        replace_source(index, modality, _collection(uri, collection_name(collection_prefix, modality, build_id),
                                                    score, gallery, index_type, shard_size, build_id, owner,
                                                    **params))
        reference = index.gallery("caption" if modality == "image" else "image")  # the reference queries
        index.statistics.compute_defaults(gallery, reference, modality, score, index.similarity_options.get(score, {}),
                                          int(reference_sample))
    return dict(index.ann)


def _collection(uri: str, collection: str, score: str, gallery: Gaussian, index_type: str, shard_size: int,
                build_id: str, owner: str | None, **params: Any) -> MilvusCandidates:
    source = MilvusCandidates.create(uri, collection, score, gallery, gallery.num, index_type, build_id=build_id,
                                     owner=owner, **params)
    for start in range(0, gallery.num, shard_size):
        source.add(gallery[start:start + shard_size], first_id=start)
    source.finish()
    return source


class MilvusSource(SourceKind):
    """Milvus collections (module docstring)."""

    engine = "milvus"

    def check_build(self, settings: BuildSettings) -> None:
        """The ``--uri``, its folder (a Milvus Lite file is created in an existing folder) and
        ``--index-type``, checked before any encoding."""
        if not settings.uri:
            raise ValueError("--backend milvus needs --uri: a Milvus Lite file (e.g. gallery.db) or a server "
                             "address (e.g. http://localhost:19530)")
        if settings.index_type not in MILVUS_INDEX_TYPES:
            raise ValueError(f"--backend milvus takes --index-type auto, flat or ivf, got {settings.index_type!r}")
        uri = resolve_uri(settings.uri)
        if uri.startswith(("http://", "https://", "tcp://")):
            return
        folder = Path(uri).parent
        if not folder.is_dir():
            raise FileNotFoundError(f"--uri {settings.uri}: the folder {folder} does not exist; create it first "
                                    f"(mkdir -p {folder}) or name a .db file in an existing folder")
        try:  # Milvus Lite writes its database and lock files there: a folder that refuses a file fails now
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as err:
            raise ValueError(f"--uri {settings.uri}: Milvus Lite cannot write {uri} ({err.strerror or err}); "
                             "name a .db file in a folder you can write") from None

    def build(self, index: StoredGallery, score: str, modalities: Sequence[str], settings: BuildSettings,
              say: Callable[[str], None], warn: Callable[[str], None]) -> dict[str, Any]:
        self.check_build(settings)
        assert settings.uri is not None
        extra = {k: v for k, v in (("nlist", settings.nlist), ("nprobe", settings.nprobe)) if v is not None}
        built = build_milvus(index, settings.uri, score, modalities,
                             MILVUS_INDEX_TYPES[settings.index_type], collection_prefix=settings.collection_prefix,
                             shard_size=settings.shard_size, owner=settings.owner,
                             reference_sample=settings.reference_sample, **extra)
        for modality, source in built.items():
            say(f"milvus collection {source.collection} at {source.uri}: {source.ntotal} {modality}s, "
                f"{source.index_type}, score {source.score}")
        return built

    def save(self, source: Any, folder: Path, modality: str) -> dict[str, Any]:
        return dict(source.describe())  # how to reconnect

    def reconnect(self, entry: dict[str, Any], modality: str, gallery: Gallery, file: Path | None,
                  meta_path: Path) -> Any:
        try:
            source = MilvusCandidates.open(entry["uri"], entry["collection"])
        except KeyError as err:
            raise ValueError(f"{meta_path}: a milvus entry of field 'ann' lacks {err}") from None
        if entry.get("build_id") != source.build_id:
            raise ValueError(f"{entry['uri']}: collection {entry['collection']!r} holds build "
                             f"{source.build_id or '(none recorded)'} but {meta_path} was saved with build "
                             f"{entry.get('build_id') or '(none recorded)'}; the collection was replaced by another "
                             "index, rebuild this one")
        if source.ntotal != gallery.num or source.dim != gallery.dim:
            raise ValueError(f"{entry['uri']}: collection {entry['collection']!r} holds {source.ntotal} items of "
                             f"D={source.dim} but the gallery has {gallery.num} of D={gallery.dim}; rebuild it")
        source.set_search_params(nprobe=(entry.get("params") or {}).get("nprobe"))
        return source

    def add(self, index: StoredGallery, modality: str, source: Any, items: Gaussian, merged: Gaussian,
            shard_size: int, progress: bool | None) -> Any:
        # a new collection of old and new items under a new build id: the saved index keeps its own until
        # the new folder is in place (commit_sources drops it then)
        build_id = new_build_id()
        owner = (source.settings.get("owner") or {}).get("index")
        drop_unfinished(source.uri, collection_prefix(source.collection),  # of a killed --add or build
                        keep={s.collection for s in index.ann.values() if s.engine == self.engine})
        new = _collection(source.uri, collection_name(collection_prefix(source.collection), modality, build_id),
                          source.score, merged, source.index_type, shard_size, build_id, owner,
                          **{k: v for k, v in source.params.items() if k in ("nlist", "nprobe")})
        replace_source(index, modality, new)
        return new

    def commit(self, source: Any) -> None:
        source.commit()

    def key(self, source: Any) -> Any:
        return (self.engine, source.uri, source.collection)

    def drop_source(self, source: Any) -> None:
        drop_collection(source.uri, source.collection, source.build_id)

    def drop_entry(self, entry: dict[str, Any]) -> None:
        if "collection" in entry:
            drop_collection(entry["uri"], entry["collection"], entry.get("build_id"))
