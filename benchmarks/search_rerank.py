"""Inverted softmax and CSLS over faiss candidates: how far 100 candidates are from the exact top-5, and
the cost of re-scoring every item (what ``pcmr search`` does by default for ``is`` / ``csls`` on
galleries of up to 50,000 items).

Gallery: the clustered mixture of ``benchmarks/search.py`` (docs/benchmarks.md), ``--images`` images
and ``--captions`` stored captions (the reference queries of the re-rankers' gallery statistics), a
faiss flat index built for the similarity's ANN score. One query per call, as ``pcmr serve`` runs
them; medians over ``--queries`` queries. Rows:

- ``100 candidates``: the faiss index's 100 nearest items re-scored and re-weighted (the former
  default): top-5 overlap with the exact backend;
- ``every item, faiss + re-score``: all items from the faiss index, each re-scored (the former way to
  get the exact result, ``--candidates N``);
- ``every item, exact generator``: the current default (every item scored in row chunks);
- ``exact backend``: ``--backend exact``.

Usage:
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/search_rerank.py --images 50000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pcmr.inference import get_reranker  # noqa: E402
from pcmr.search import GalleryIndex  # noqa: E402
from pcmr.search.ann import ann_score_for  # noqa: E402
from pcmr.search.searcher import CandidateSearcher, Scoring  # noqa: E402
from search import mixture, uptime  # noqa: E402


def median_ms(function, queries) -> float:
    times = []
    for q in range(queries.num):
        start = time.perf_counter()
        function(queries[q:q + 1])
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def bench(index: GalleryIndex, images, queries, similarity: str, rerank: str) -> None:
    def search(q, **kw):
        return index.search(q, k=5, similarity=similarity, rerank=rerank, **kw).indices

    exact = torch.cat([search(queries[q:q + 1], backend="exact") for q in range(queries.num)])
    few = torch.cat([search(queries[q:q + 1], backend="faiss", candidates=100) for q in range(queries.num)])
    overlap = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(few, exact)) / (5 * queries.num)
    scoring = Scoring(similarity, "caption", {}, get_reranker(rerank))
    statistic = index.statistics.get(index.images, index.captions, "image", scoring, 2000)
    whole = CandidateSearcher(index.ann["image"], images, scoring, statistic, candidates=images.num)
    rows = [("100 candidates", lambda q: search(q, backend="faiss", candidates=100), f"{overlap:.2f}"),
            ("every item, faiss + re-score", lambda q: whole.search(q, 5), "1.00"),
            ("every item, exact generator", lambda q: search(q, backend="faiss"), "1.00"),
            ("exact backend", lambda q: search(q, backend="exact"), "1.00")]
    for label, function, shared in rows:
        print(f"| {similarity} | {rerank} | {label} | {median_ms(function, queries):.1f} | {shared} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--captions", type=int, default=2_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--queries", type=int, default=15)
    args = parser.parse_args()
    torch.manual_seed(0)
    images = mixture(args.images, args.dim, 1000, seed=1)
    captions = mixture(args.captions, args.dim, 1000, seed=2)
    queries = mixture(args.queries, args.dim, 1000, seed=3)
    print(f"{args.images} images, {args.captions} captions, D={args.dim}, {args.queries} queries; {uptime()}")
    print("| similarity | re-ranker | variant | ms / query (median) | top-5 overlap with exact |")
    print("|---|---|---|---:|---:|")
    for similarity in ("cosine", "kl"):
        index = GalleryIndex(images, captions, image_ids=range(images.num), caption_ids=range(captions.num),
                             caption_texts=[""] * captions.num)
        index.build_ann(ann_score_for(similarity, images), ("image",), "flat")
        for rerank in ("is", "csls"):
            bench(index, images, queries, similarity, rerank)

if __name__ == "__main__":
    main()
