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
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.search.ann import gallery_layout, gallery_vectors, query_vectors, scores_from_distances, vector_form

__all__ = ["MilvusCandidates", "milvus_client", "resolve_uri"]

DESCRIPTION_FORMAT = "pcmr-candidates"
SETTINGS_PROPERTY = "pcmr.settings"  # collection property holding pcmr's settings as JSON
INSERT_ROWS = 10_000  # rows per insert request (Milvus caps a request at 64 MiB)
MILVUS_MAX_TOPK = 16_384


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
                 index_type: str, params: dict[str, Any]) -> None:
        self.client, self.uri, self.collection = client, uri, collection
        self.score, self.layout, self.dim, self.index_type = score, layout, dim, index_type
        self.params = dict(params)

    # ----------------------------------------------------------------- building
    @classmethod
    def create(cls, uri: str, collection: str, score: str, sample: Gaussian, num_items: int,
               index_type: str = "auto", *, nlist: int | None = None, nprobe: int = 32) -> MilvusCandidates:
        """A new, empty collection (an existing one of that name is replaced) for galleries laid out
        like ``sample``; fill it with :meth:`add`, then call :meth:`finish` to build its index.
        ``index_type``: ``FLAT`` (exact), ``IVF_FLAT`` or ``auto`` (FLAT up to 50,000 items)."""
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
            client.drop_collection(collection)
        description = json.dumps({"format": DESCRIPTION_FORMAT, "score": score, "layout": layout, "dim": sample.dim,
                                  "index_type": kind, "params": params})
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=width)
        client.create_collection(collection, schema=schema)
        client.alter_collection_properties(collection, properties={SETTINGS_PROPERTY: description})
        return cls(client, uri, collection, score, layout, sample.dim, kind, params)

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
        try:
            properties = client.describe_collection(collection).get("properties") or {}
            info = json.loads(properties.get(SETTINGS_PROPERTY) or "")
        except json.JSONDecodeError:
            info = None
        if not isinstance(info, dict) or info.get("format") != DESCRIPTION_FORMAT:
            raise ValueError(f"{uri}: collection {collection!r} was not written by pcmr (its property "
                             f"{SETTINGS_PROPERTY!r} does not hold {DESCRIPTION_FORMAT!r} settings)")
        client.load_collection(collection)
        return cls(client, uri, collection, info["score"], info["layout"], int(info["dim"]), info["index_type"],
                   info.get("params") or {})

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
        return {"engine": self.engine, "uri": self.uri, "collection": self.collection, "score": self.score,
                "index_type": self.index_type, "layout": self.layout, "dim": self.dim, "params": self.params}
