"""Kinds of candidate source: what builds, saves, reconnects to, grows and drops the ANN source of a
gallery index (faiss files, Milvus collections, a new vector database).

A :class:`SourceKind` is registered in :data:`CANDIDATE_SOURCES` under its ``engine`` name, the name
``--backend`` takes and ``index.json`` records; the index folder (:mod:`pcmr.search.manifest`), the
candidate sources of an index (:mod:`pcmr.search.backends`), the search backends
(:mod:`pcmr.search.compose`) and the building of an index (:mod:`pcmr.search.indexing`) ask the
registered kind and never name an engine. The built-in kinds are registered by
:mod:`pcmr.search.candidate_sources`; a new one is one module with one subclass registered there (or,
in a test, registered for the test and unregistered afterwards). Searching reads the source object
itself (:class:`pcmr.search.searcher.CandidateSource`: ``search(query, k)`` -> ``(scores, indices)``).

Without a source the exact backend scores every item (:class:`pcmr.search.searcher.ExactCandidates`):
it is not a kind, since there is nothing to build, save or drop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pcmr.gaussian import Gaussian
from pcmr.registry import Registry
from pcmr.search.searcher import DEFAULT_REFERENCE_SAMPLE, Gallery
from pcmr.search.stored import StoredGallery

__all__ = ["BuildSettings", "CANDIDATE_SOURCES", "FIRST_ENGINE", "SourceKind", "entry_engine", "replace_source",
           "source_kind"]

#: the engine of an ``index.json`` entry that names none (the first kind, whose entries never did)
FIRST_ENGINE = "faiss"


@dataclass
class BuildSettings:
    """How to build a candidate source (``pcmr search --build ... --backend ENGINE``): the index
    structure (``index_type``: auto, flat, ivf, hnsw, ivfpq; each kind says which it takes) and its
    parameters (None: the kind's default), rows per add, the reference sample of the gallery statistics,
    and for a database ``uri`` / ``collection_prefix``; ``options``: a kind's own further settings. ``owner``:
    the folder the index will be saved to."""

    index_type: str = "auto"
    nlist: int | None = None
    nprobe: int | None = None
    hnsw_m: int | None = None
    ef_search: int | None = None
    pq_m: int | None = None
    opq: bool = False
    refine: str | None = None
    memory_budget: str | None = None
    shard_size: int = 65_536
    reference_sample: int = DEFAULT_REFERENCE_SAMPLE
    uri: str | None = None
    collection_prefix: str = "pcmr"
    owner: str | None = None
    #: settings of a kind that the fields above do not name (a new database's own)
    options: dict[str, Any] = field(default_factory=dict)


class SourceKind(ABC):
    """One kind of candidate source (module docstring). ``engine``: its name; ``over_store``: it is built
    from an on-disk gallery (:class:`~pcmr.search.store.GalleryStore`) read shard by shard."""

    engine: ClassVar[str]
    over_store: ClassVar[bool] = False

    def check_build(self, settings: BuildSettings) -> None:
        """Refuse ``settings`` (ValueError, FileNotFoundError) before anything is encoded."""
        return None

    @abstractmethod
    def build(self, index: StoredGallery, score: str, modalities: Sequence[str], settings: BuildSettings,
              say: Callable[[str], None], warn: Callable[[str], None]) -> dict[str, Any]:
        """Build a source for ``score`` over each gallery modality of ``index`` in ``modalities`` into
        ``index.ann`` (with the gallery statistics of the re-weightings); ``say`` one line per source
        built, ``warn`` what the user should know. Returns ``{modality: source}``."""

    @abstractmethod
    def save(self, source: Any, folder: Path, modality: str) -> dict[str, Any]:
        """What ``index.json`` records of ``source`` (saved into ``folder`` when it is a file: its name
        under ``"file"``)."""

    @abstractmethod
    def reconnect(self, entry: dict[str, Any], modality: str, gallery: Gallery, file: Path | None,
                  meta_path: Path) -> Any:
        """The source an ``index.json`` entry names for ``modality``, checked to hold ``gallery``; ``file``:
        the path of the file the entry names under ``"file"`` (what :meth:`save` wrote into the index
        folder, under its checksums), checked to lie inside the index folder, None when it names none;
        ``meta_path``: the manifest (for messages)."""

    def add(self, index: StoredGallery, modality: str, source: Any, items: Gaussian, merged: Gaussian,
            shard_size: int, progress: bool | None) -> Any:
        """The source of ``modality`` once ``items`` are appended (``merged``: old and new items): the
        same source grown, or a new one (the old is dropped by :meth:`drop_source` once the index is saved)."""
        raise ValueError(f"items cannot be added to a {self.engine} candidate source")

    def commit(self, source: Any) -> None:
        """Once the index naming ``source`` is saved (a database marks its collection as in use)."""
        return None

    def key(self, source: Any) -> Any:
        """What tells two sources apart (a source replaced by itself is not dropped)."""
        return id(source)

    def drop_source(self, source: Any) -> None:
        """Drop a source a saved index no longer names (files go with their index folder)."""
        return None

    def drop_entry(self, entry: dict[str, Any]) -> None:
        """Drop the source an ``index.json`` entry of a replaced index names."""
        return None


#: the kinds of candidate source by engine name, in registration order
CANDIDATE_SOURCES: Registry[SourceKind] = Registry("candidate source")


def source_kind(engine: str) -> SourceKind:
    """The registered :class:`SourceKind` of ``engine`` (ValueError naming the known ones otherwise)."""
    return CANDIDATE_SOURCES.get(engine)


def entry_engine(entry: dict[str, Any]) -> str:
    """The engine of an ``index.json`` source entry."""
    return str(entry.get("engine", FIRST_ENGINE))


def replace_source(index: StoredGallery, modality: str, source: Any) -> None:
    """Make ``source`` the candidate source of ``modality``; the one it replaces is dropped once the
    index is saved (:func:`pcmr.search.backends.commit_sources`)."""
    old = index.ann.get(modality)
    if old is not None and old is not source:
        index.replaced_sources.append(old)
    index.ann[modality] = source
