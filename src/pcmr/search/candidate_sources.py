"""The registered kinds of candidate source (:mod:`pcmr.search.sources`): faiss and Milvus. A new vector
database is one module with its :class:`~pcmr.search.sources.SourceKind`, registered here."""

from __future__ import annotations

from pcmr.search.faiss_source import FaissSource
from pcmr.search.milvus_source import MilvusSource
from pcmr.search.sources import CANDIDATE_SOURCES, SourceKind, source_kind

__all__ = ["CANDIDATE_SOURCES", "SourceKind", "source_kind"]

for _kind in (FaissSource(), MilvusSource()):
    CANDIDATE_SOURCES.register(_kind, name=_kind.engine)
