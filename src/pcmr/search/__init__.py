"""Search at scale: the faiss backend of the gallery index and the ``pcmr serve`` web service.

- :mod:`pcmr.search.ann`: faiss indexes (flat, IVF, HNSW) for cosine, l2 and 2-Wasserstein, which
  are exact nearest-neighbour problems on fixed vectors;
- :mod:`pcmr.search.rescoring`: exact re-scoring of candidates and CSLS hubness terms;
- :mod:`pcmr.search.backend`: the faiss search path of :class:`pcmr.index.GalleryIndex`;
- :mod:`pcmr.search.service`: the FastAPI application behind ``pcmr serve`` (optional extra).

The index itself is :class:`pcmr.index.GalleryIndex` (it imports this package, not the reverse).
See docs/search.md.
"""
