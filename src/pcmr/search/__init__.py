"""Search: a gallery of Gaussians, the searches that answer queries over it, and ``pcmr serve``.

- :mod:`pcmr.search.gallery`: :class:`GalleryIndex`, the stored items of a gallery (embeddings, ids,
  texts, model) and their manifest; it encodes raw queries with the model it keeps;
- :mod:`pcmr.search.manifest`: the index folder (``index.json`` with checksums, safetensors);
- :mod:`pcmr.search.building`: encoding a split into an index;
- :mod:`pcmr.search.session`: one typed search request, answered by a session that opens an index
  once (``pcmr search``, ``pcmr serve`` and the Python API);
- :mod:`pcmr.search.indexing`: writing an index folder (build, from saved embeddings, add);
- :mod:`pcmr.search.sources`: the kinds of candidate source (registered in
  :mod:`pcmr.search.candidate_sources`: :mod:`pcmr.search.faiss_source`, :mod:`pcmr.search.milvus_source`),
  each building, saving, reconnecting to, growing and dropping its sources;
- :mod:`pcmr.search.backends`: the candidate sources of an index, appended items;
- :mod:`pcmr.search.searcher`: a search as a composition (candidate generator, exact re-scorer,
  re-ranker) behind one ``search(queries, k)``, the exact scores of queries against gallery items or
  candidates, and the re-rankers' gallery statistics (CSLS, inverted softmax);
- :mod:`pcmr.search.compose`: which parts answer a query over an index, and what a search returns;
- :mod:`pcmr.search.ann`: faiss indexes (flat, IVF, HNSW, compressed IVF-PQ) for cosine, l2, W2, CSD;
- :mod:`pcmr.search.store`: the full-precision gallery on disk, memory-mapped;
- :mod:`pcmr.search.vectordb`: a Milvus collection as the candidate source (embedded Milvus Lite or a
  Milvus server / cluster);
- :mod:`pcmr.search.service`: the FastAPI application behind ``pcmr serve`` over a session (optional extra).

See docs/search.md.
"""

from pcmr.search.gallery import GalleryIndex, SearchHit, SearchResults
from pcmr.search.session import Abstention, SearchAnswer, SearchRequest, SearchSession

__all__ = ["Abstention", "GalleryIndex", "SearchAnswer", "SearchHit", "SearchRequest", "SearchResults",
           "SearchSession"]
