"""Search: a gallery of Gaussians, the searchers that answer queries over it, and ``pcmr serve``.

- :mod:`pcmr.search.gallery`: :class:`GalleryIndex`, the saved gallery (embeddings, ids, texts,
  model) and which searcher answers a query;
- :mod:`pcmr.search.searcher`: one ``search(queries, k)`` for the exact searcher and the candidate
  searcher (ANN or vector-database candidates re-scored exactly), and the gallery statistics of the
  re-rankers (CSLS, inverted softmax);
- :mod:`pcmr.search.ann`: faiss indexes (flat, IVF, HNSW, compressed IVF-PQ) for cosine, l2, W2, CSD;
- :mod:`pcmr.search.store`: the full-precision gallery on disk, memory-mapped;
- :mod:`pcmr.search.vectordb`: a Milvus collection as the candidate source (embedded Milvus Lite or a
  Milvus server / cluster);
- :mod:`pcmr.search.rescoring`: exact scores of queries against gallery items or candidates;
- :mod:`pcmr.search.service`: the FastAPI application behind ``pcmr serve`` (optional extra).

See docs/search.md.
"""

from pcmr.search.gallery import GalleryIndex, SearchHit, SearchResults

__all__ = ["GalleryIndex", "SearchHit", "SearchResults"]
