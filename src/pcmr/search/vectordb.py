"""A Milvus collection as the candidate source of a gallery: embedded (Milvus Lite) or a server / cluster.

pcmr does not write its own distributed search: past one machine, the ANN vectors of a gallery live in
Milvus, which shards and replicates them, and pcmr keeps doing what it does on one machine: it asks
for ``C`` candidates per query and re-scores them exactly with the query's own similarity and
re-ranker (:class:`pcmr.search.searcher.CandidateSearcher`), reading the Gaussians from its own files
(the gallery index or a :class:`pcmr.search.store.GalleryStore`).

The vectors are those of the faiss backend (:mod:`pcmr.search.ann`): normalised means for cosine
(Milvus metric ``IP``), ``[m, s]`` for 2-Wasserstein and the other Euclidean layouts (metric ``L2``,
which Milvus reports as the squared distance). Each row's primary key is its gallery position.

``uri``: a local file name ending in ``.db`` opens Milvus Lite inside this process (``pip install
'pcmr[vectordb]'``; Linux and macOS); ``http://host:19530`` a Milvus server or cluster (token from the
environment variable ``PCMR_MILVUS_TOKEN``, e.g. ``user:password``). pcmr's settings (score, layout,
dimension) are kept in a collection property, so a collection is self-describing.

Build ids: every build of a gallery's collections draws a fresh id, which names the collections
(``PREFIX_image_<id>``, ``PREFIX_caption_<id>``) and is recorded in their settings and in the
index's ``index.json``; loading checks that they agree. So a second index built at the same uri
with the same prefix makes its own collections and never replaces another index's, and an index
rebuilt with ``--overwrite`` (or grown with ``--add``) keeps pointing at its old collections until
its new folder is in place; the collections it replaced are dropped only then
(:func:`drop_collection`). The settings also name the index folder being written (its ``owner``) and
whether that folder was saved (``committed``): collections of a build that was killed before its
folder was saved, or replaced by a build killed before it dropped them, are dropped by the next build
with the same prefix (:func:`drop_unfinished`).
"""

from __future__ import annotations

import json
import os
import re
import socket
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.locking import PathLock
from pcmr.search.ann import gallery_layout, gallery_vectors, query_vectors, scores_from_distances, vector_form

__all__ = ["MilvusCandidates", "collection_name", "drop_collection", "drop_unfinished", "milvus_client",
           "new_build_id", "resolve_uri"]

DESCRIPTION_FORMAT = "pcmr-candidates"
SETTINGS_PROPERTY = "pcmr.settings"  # collection property holding pcmr's settings as JSON
INSERT_ROWS = 10_000  # rows per insert request (Milvus caps a request at 64 MiB)
MILVUS_MAX_TOPK = 16_384
BUILD_ID_HEX = 16


def new_build_id() -> str:
    """A fresh build id: 16 random hexadecimal digits."""
    return uuid.uuid4().hex[:BUILD_ID_HEX]


def collection_name(prefix: str, modality: str, build_id: str) -> str:
    """The collection of one modality of one build: ``PREFIX_MODALITY_BUILDID``."""
    return f"{prefix}_{modality}_{build_id}"


def collection_prefix(name: str) -> str:
    """The prefix of a collection named by :func:`collection_name` (or ``PREFIX_MODALITY`` by older pcmr)."""
    match = re.match(rf"^(.*)_(image|caption)(_[0-9a-f]{{{BUILD_ID_HEX}}})?$", name)
    return match.group(1) if match else name


def _settings(client: Any, collection: str) -> dict[str, Any] | None:
    try:
        properties = client.describe_collection(collection).get("properties") or {}
        info = json.loads(properties.get(SETTINGS_PROPERTY) or "")
    except json.JSONDecodeError:
        return None
    return info if isinstance(info, dict) and info.get("format") == DESCRIPTION_FORMAT else None


def _referenced(index_dir: str, collection: str, build_id: str) -> bool:
    """Whether the index folder ``index_dir`` names collection ``collection`` of build ``build_id``."""
    try:
        info = json.loads((Path(index_dir) / "index.json").read_text(encoding="utf-8"))
        entries = list((info.get("ann") or {}).values())
    except (OSError, ValueError, AttributeError):
        return False
    return any(isinstance(e, dict) and e.get("collection") == collection and e.get("build_id") == build_id
               for e in entries)


def _replaced(index_dir: str, collection: str) -> bool:
    """Whether the index folder ``index_dir`` is still a pcmr index whose manifest names another collection
    for the modality of ``collection`` (a rebuild or ``--add`` killed before it dropped what it replaced)."""
    modality = re.match(rf"^.*_(image|caption)_[0-9a-f]{{{BUILD_ID_HEX}}}$", collection)
    try:
        info = json.loads((Path(index_dir) / "index.json").read_text(encoding="utf-8"))
        entry = (info.get("ann") or {}).get(modality.group(1) if modality else "")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(entry, dict) and entry.get("engine") == "milvus" and entry.get("collection") != collection


def _being_written(index_dir: str) -> bool:
    """Whether another process holds the lock of ``index_dir`` (True when that cannot be checked)."""
    if not Path(index_dir).parent.is_dir():  # its folder is gone: nobody writes there
        return False
    try:
        with PathLock(index_dir):
            return False
    except OSError:  # PathLockedError, or a folder where no lock file can be made: keep its collections
        return True


def drop_unfinished(uri: str, prefix: str, keep: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Drop the orphan collections ``PREFIX_*_<build id>`` at ``uri``: written from this host, not in
    ``keep`` (those the caller is building), whose index folder is not being written by another process
    and does not name them, and that either were never committed (a build killed before its folder was
    saved) or were replaced (their index folder now names another collection for that modality: a
    rebuild or ``--add`` killed after its new folder was in place, before it dropped the old ones).
    Returns the names dropped. Collections an index names, those of a saved index whose folder is gone
    or moved, of other hosts and of other prefixes are never touched."""
    client = milvus_client(uri, create=True)
    pattern = re.compile(rf"^{re.escape(prefix)}_(image|caption)_[0-9a-f]{{{BUILD_ID_HEX}}}$")
    dropped = []
    for name in client.list_collections():
        if not pattern.match(name) or name in keep:
            continue
        info = _settings(client, name)
        owner = (info or {}).get("owner") or {}
        if info is None or owner.get("host") != socket.gethostname() or not owner.get("index"):
            continue
        if _referenced(owner["index"], name, str(info.get("build_id"))) or _being_written(owner["index"]):
            continue
        if info.get("committed") and not _replaced(owner["index"], name):
            continue  # a saved index's, whose folder is gone or moved: it may still be used from elsewhere
        client.drop_collection(name)
        dropped.append(name)
    return dropped


def drop_collection(uri: str, collection: str, build_id: str | None) -> bool:
    """Drop ``collection`` at ``uri`` if it still holds build ``build_id`` (an index that replaced its
    collections calls this once its new folder is in place). Returns whether it was dropped."""
    client = milvus_client(uri, create=True)
    if not client.has_collection(collection):
        return False
    info = _settings(client, collection)
    if info is None or info.get("build_id") != build_id:
        return False
    client.drop_collection(collection)
    return True


def resolve_uri(uri: str) -> str:
    """``uri`` as an index records it: a server address as given, a Milvus Lite file as an absolute
    path (so a query run from another directory opens the same file)."""
    if not isinstance(uri, str) or not uri:
        raise ValueError(f"--uri must be a Milvus Lite file (name.db) or a server address http://host:19530, "
                         f"got {uri!r}")
    if uri.startswith(("http://", "https://", "tcp://")):
        return uri
    if not uri.endswith(".db"):
        raise ValueError(f"a Milvus Lite uri must be a file name ending in .db, got {uri!r}")
    return os.path.abspath(uri)


def milvus_client(uri: str, *, create: bool = False) -> Any:
    """A ``pymilvus.MilvusClient`` for ``uri`` (module docstring); one clear error without the package.
    A Milvus Lite file that does not exist is created only with ``create`` (building); opening one
    raises FileNotFoundError instead of leaving an empty database behind."""
    uri = resolve_uri(uri)
    local = not uri.startswith(("http://", "https://", "tcp://"))
    if local and not create and not os.path.exists(uri):
        raise FileNotFoundError(f"Milvus Lite database {uri} not found; build it with "
                                "`pcmr search INDEX --build ... --backend milvus --uri FILE.db`")
    try:
        from pymilvus import MilvusClient
    except ImportError as err:  # pragma: no cover - depends on the installation
        raise ImportError("the milvus backend needs pymilvus (and milvus-lite for a local .db file): "
                          "pip install 'pcmr[vectordb]'") from err
    return MilvusClient(uri=uri, token=os.environ.get("PCMR_MILVUS_TOKEN", ""))


class MilvusCandidates:
    """Candidates from a Milvus collection: ``search(query, k) -> (scores [Q, k], indices [Q, k])`` like
    :class:`pcmr.search.ann.AnnIndex`. Scores are those of Milvus's index, used only to choose the
    candidates (``exact`` is False: pcmr re-scores them from its own full-precision gallery)."""

    engine = "milvus"
    exact = False

    def __init__(self, client: Any, uri: str, collection: str, score: str, layout: str, dim: int,
                 index_type: str, params: dict[str, Any], build_id: str | None = None,
                 settings: dict[str, Any] | None = None) -> None:
        self.client, self.uri, self.collection = client, uri, collection
        self.score, self.layout, self.dim, self.index_type = score, layout, dim, index_type
        self.params = dict(params)
        self.build_id = build_id
        self.settings = dict(settings or {})

    # ----------------------------------------------------------------- building
    @classmethod
    def create(cls, uri: str, collection: str, score: str, sample: Gaussian, num_items: int,
               index_type: str = "auto", *, nlist: int | None = None, nprobe: int = 32,
               build_id: str | None = None, owner: str | None = None) -> MilvusCandidates:
        """A new, empty collection for galleries laid out like ``sample`` (an existing collection of
        that name is an error: pcmr never replaces one silently); fill it with :meth:`add`, then call
        :meth:`finish` to build its index. ``index_type``: ``FLAT`` (exact), ``IVF_FLAT`` or ``auto``
        (FLAT up to 50,000 items). ``build_id`` and ``owner`` (the index folder being written) are
        recorded in its settings (module docstring)."""
        from pymilvus import DataType

        if not collection.replace("_", "a").isalnum() or not collection[:1].isalpha():
            raise ValueError(f"a Milvus collection name must start with a letter and hold letters, digits and "
                             f"underscores, got {collection!r}")
        kind = ("FLAT" if num_items <= 50_000 else "IVF_FLAT") if index_type == "auto" else index_type.upper()
        if kind not in ("FLAT", "IVF_FLAT"):
            raise ValueError(f"milvus index type must be auto, FLAT or IVF_FLAT, got {index_type!r}")
        layout = gallery_layout(score, sample)
        width = gallery_vectors(score, sample[:1], layout).shape[1]
        params: dict[str, Any] = {"metric": "IP" if vector_form(score).normalised else "L2"}
        if kind == "IVF_FLAT":
            params.update(nlist=int(nlist or max(1, min(4 * int(num_items ** 0.5), 65_536))), nprobe=int(nprobe))
        uri = resolve_uri(uri)
        client = milvus_client(uri, create=True)
        if client.has_collection(collection):
            raise FileExistsError(f"{uri}: Milvus collection {collection!r} already exists; pcmr does not replace "
                                  "it (drop it, or choose another name or --collection-prefix)")
        settings = {"format": DESCRIPTION_FORMAT, "score": score, "layout": layout, "dim": sample.dim,
                    "index_type": kind, "params": params, "build_id": build_id,
                    "owner": {"index": owner, "host": socket.gethostname()} if owner else None, "committed": False}
        description = json.dumps(settings)
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=width)
        client.create_collection(collection, schema=schema)
        client.alter_collection_properties(collection, properties={SETTINGS_PROPERTY: description})
        return cls(client, uri, collection, score, layout, sample.dim, kind, params, build_id, settings)

    def add(self, items: Gaussian, first_id: int | None = None, *, shard_size: int = INSERT_ROWS,
            progress: Any = None) -> None:
        """Insert ``items`` with primary keys ``first_id, first_id + 1, ...`` (their gallery positions;
        default: after the rows already there), ``shard_size`` rows per request; ``progress(n)`` is
        called with the rows inserted per request."""
        first_id = self.ntotal if first_id is None else first_id
        step = max(1, min(shard_size, INSERT_ROWS))
        if items.dim != self.dim:
            raise ValueError(f"items have D={items.dim}, the collection D={self.dim}")
        if items.num and gallery_layout(self.score, items) != self.layout:
            raise ValueError(f"items' variances ({items!r}) do not match the collection layout {self.layout!r}")
        for start in range(0, items.num, step):
            vectors = gallery_vectors(self.score, items[start:start + step], self.layout)
            rows = [{"id": first_id + start + i, "vector": v} for i, v in enumerate(vectors)]
            self.client.insert(self.collection, rows)
            if progress is not None:
                progress(len(rows))
        if self.index_type and self.client.list_indexes(self.collection):  # already built: make the rows visible
            self.client.flush(self.collection)

    def finish(self) -> None:
        """Build the collection's index and load it for search."""
        index_params = self.client.prepare_index_params()
        extra = {"nlist": self.params["nlist"]} if self.index_type == "IVF_FLAT" else {}
        index_params.add_index(field_name="vector", index_type=self.index_type, metric_type=self.params["metric"],
                               params=extra)
        self.client.flush(self.collection)
        self.client.create_index(self.collection, index_params)
        self.client.load_collection(self.collection)

    # ----------------------------------------------------------------- reading
    @classmethod
    def open(cls, uri: str, collection: str) -> MilvusCandidates:
        """Connect to a collection written by :meth:`create`; errors name the uri and the collection. A
        relative Milvus Lite path (written by an older pcmr) is taken from the working directory."""
        uri = resolve_uri(uri)
        client = milvus_client(uri)
        if not client.has_collection(collection):
            raise ValueError(f"{uri}: no Milvus collection {collection!r}; build it with "
                             "`pcmr search INDEX --build ... --backend milvus --uri URI`")
        info = _settings(client, collection)
        if info is None:
            raise ValueError(f"{uri}: collection {collection!r} was not written by pcmr (its property "
                             f"{SETTINGS_PROPERTY!r} does not hold {DESCRIPTION_FORMAT!r} settings)")
        client.load_collection(collection)
        return cls(client, uri, collection, info["score"], info["layout"], int(info["dim"]), info["index_type"],
                   info.get("params") or {}, info.get("build_id"), info)

    def commit(self) -> None:
        """Record that an index folder naming this collection was saved (it is then never taken for
        the leftover of a killed build)."""
        if self.settings.get("committed") or not self.settings:
            return
        self.settings["committed"] = True
        self.client.alter_collection_properties(self.collection,
                                                properties={SETTINGS_PROPERTY: json.dumps(self.settings)})

    @property
    def exhaustive(self) -> bool:
        """Whether a search for ``ntotal`` items returns every item (a FLAT collection within Milvus's top-k cap)."""
        return self.index_type == "FLAT" and self.ntotal <= MILVUS_MAX_TOPK

    @property
    def ntotal(self) -> int:
        stats = self.client.get_collection_stats(self.collection)
        return int(stats.get("row_count", 0))

    def set_search_params(self, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """IVF lists visited per query (``ef_search`` has no meaning here)."""
        if nprobe is not None and self.index_type == "IVF_FLAT":
            self.params["nprobe"] = int(nprobe)

    def search(self, query: Gaussian, k: int) -> tuple[Tensor, Tensor]:
        """``(scores [Q, k], indices [Q, k])`` best first, ``-1`` / ``-inf`` for unfilled slots."""
        if query.dim != self.dim:
            raise ValueError(f"query has D={query.dim}, the collection D={self.dim}")
        k = min(int(k), MILVUS_MAX_TOPK)
        vectors, constant = query_vectors(self.score, query, self.layout)
        search_params: dict[str, Any] = {"metric_type": self.params["metric"]}
        if self.index_type == "IVF_FLAT":
            search_params["params"] = {"nprobe": int(self.params.get("nprobe", 32))}
        found = self.client.search(self.collection, data=[v for v in vectors], limit=k,
                                   search_params=search_params, output_fields=[])
        indices = np.full((query.num, k), -1, dtype=np.int64)
        distances = np.full((query.num, k), np.inf if self.params["metric"] == "L2" else -np.inf, dtype=np.float32)
        for q, hits in enumerate(found):
            for r, hit in enumerate(hits):
                indices[q, r] = int(hit["id"])
                distances[q, r] = float(hit["distance"])
        scores = scores_from_distances(self.score, distances, constant)
        out = torch.from_numpy(indices)
        return scores.masked_fill(out < 0, float("-inf")), out

    def describe(self) -> dict[str, Any]:
        """What the gallery index stores to reconnect (``index.json``)."""
        return {"engine": self.engine, "uri": self.uri, "collection": self.collection, "build_id": self.build_id,
                "score": self.score, "index_type": self.index_type, "layout": self.layout, "dim": self.dim,
                "params": self.params}
