"""Search at scale: the faiss backend of pcmr.search.GalleryIndex against the exact backend, and `pcmr serve` latency.

Gallery: ``--size`` Gaussians (default 1,000,000) of ``--dim`` (256) dimensions with diagonal
log-variances, drawn from a clustered mixture that mimics a trained model's embeddings (docs/benchmarks.md):
``--clusters`` centres ``c_k ~ N(0, I/D)``; an item of cluster k has mean ``c_k + 0.6 e / sqrt(D)``
(``e ~ N(0, I)``, cluster sizes Zipf-like); log-variance = a per-dimension profile ``b_d ~ N(-3, 0.5)``
shared by all items + a per-item offset ``N(0, 0.4)`` + per-entry noise ``N(0, 0.2)``. Queries (``--queries``,
1000) are fresh items of the same mixture (a caption near its image).

Reported, all in one run (``uptime`` load printed with the figures):
- exact backend (``GalleryIndex.search(backend="exact")``, queries in blocks of 100): queries/s for
  cosine and W2; its top-10 is the ground truth;
- for cosine and W2 on IVF and HNSW: build time, the index's resident memory, queries/s of
  ``GalleryIndex.search`` (all queries in one call) and recall@10 against the exact top-10, for a sweep
  of ``nprobe`` / ``ef_search``;
- match probability (sampled, re-scored exactly) via W2 or CSD candidates: recall@10 against the exact
  match-probability top-10 for a sweep of C (on ``--mp-queries`` queries: the exact ground truth costs
  ``J^2`` products per pair);
- median latency of one text query through `pcmr serve` (uvicorn on loopback, HTTP client) over a
  gallery of the same size, with a text encoder of the same dimension (untrained: latency does not
  depend on the weights).

Usage:
    flock /tmp/pcmr-bench.lock .venv/bin/python benchmarks/search.py                 # 1M, ~30 min
    .venv/bin/python benchmarks/search.py --size 100000 --index-types ivf,hnsw      # development
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import torch

from pcmr import Gaussian
from pcmr.search import GalleryIndex


def rss_gib() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**30


def mixture_chunks(num: int, dim: int, clusters: int, seed: int, chunk: int = 100_000) -> Iterator[Gaussian]:
    """The clustered mixture of the module docstring, ``chunk`` items at a time (a gallery of any size
    can be written to disk without holding it)."""
    gen = torch.Generator().manual_seed(1234)  # shared structure: centres, profile, cluster weights
    centres = torch.randn(clusters, dim, generator=gen) / dim**0.5
    profile = -3.0 + 0.5 * torch.randn(dim, generator=gen)
    weights = 1.0 / torch.arange(1, clusters + 1, dtype=torch.float64) ** 0.7
    gen = torch.Generator().manual_seed(seed)
    for start in range(0, num, chunk):
        n = min(chunk, num - start)
        label = torch.multinomial(weights, n, replacement=True, generator=gen)
        mean = centres[label] + 0.6 * torch.randn(n, dim, generator=gen) / dim**0.5
        logvar = profile + 0.4 * torch.randn(n, 1, generator=gen) + 0.2 * torch.randn(n, dim, generator=gen)
        yield Gaussian(mean, logvar)


def mixture(num: int, dim: int, clusters: int, seed: int, chunk: int = 100_000) -> Gaussian:
    """The clustered mixture of the module docstring, in memory."""
    return Gaussian.cat(list(mixture_chunks(num, dim, clusters, seed, chunk)))


def recall_at(found: torch.Tensor, truth: torch.Tensor) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(found[q, :k].tolist()) & set(truth[q].tolist())) / k
                          for q in range(truth.shape[0])]))


def exact_topk(index: GalleryIndex, queries: Gaussian, score: str, k: int = 10, block: int = 100,
               **options) -> tuple[torch.Tensor, float]:
    start = time.perf_counter()
    parts = [index.search(queries[i:i + block], k=k, similarity=score, backend="exact", **options).indices
             for i in range(0, queries.num, block)]
    return torch.cat(parts), time.perf_counter() - start


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def bench_ann(index: GalleryIndex, queries: Gaussian, score: str, kind: str, truth: torch.Tensor,
              sweep: list[int], args: argparse.Namespace) -> list[dict]:
    before = rss_gib()
    start = time.perf_counter()
    params = {"nlist": args.nlist} if kind == "ivf" and args.nlist else {}
    if kind == "hnsw":
        params = {"hnsw_m": args.hnsw_m, "ef_construction": args.ef_construction}
    index.build_ann(score, ("image",), kind, shard_size=100_000, **params)
    build = time.perf_counter() - start
    memory = rss_gib() - before
    ann = index.ann["image"]
    rows = []
    for value in sweep:
        ann.set_search_params(nprobe=value, ef_search=value)
        index.search(queries[:10], k=10, similarity=score)  # warm-up
        start = time.perf_counter()
        found = index.search(queries, k=10, similarity=score).indices
        elapsed = time.perf_counter() - start
        start = time.perf_counter()
        ann.search(queries, 10)
        raw = time.perf_counter() - start
        row = {"score": score, "index": kind, "param": ("nprobe" if kind == "ivf" else "ef_search"),
               "value": value, "build_s": round(build, 1), "index_gib": round(memory, 2),
               "qps": round(queries.num / elapsed, 1), "faiss_only_qps": round(queries.num / raw, 1),
               "recall@10": round(recall_at(found, truth), 4), "params": dict(ann.params)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def bench_match_prob(gallery: Gaussian, queries: Gaussian, args: argparse.Namespace) -> None:
    """Match probability (Monte Carlo, J = 7) via W2 or CSD candidates on the first ``--mp-size`` gallery items:
    recall@10 against the exact backend's match-probability top-10, and the Monte-Carlo noise floor
    (the exact backend against itself with another seed)."""
    size = min(args.mp_size, gallery.num)
    empty = Gaussian(torch.zeros(0, args.dim), torch.zeros(0, args.dim))
    index = GalleryIndex(gallery[:size], empty, image_ids=range(size), caption_ids=[], caption_texts=[],
                         similarity_options={"match_prob": {"a": args.mp_a, "b": args.mp_b}})
    sub = queries[:args.mp_queries]
    truth, elapsed = exact_topk(index, sub, "match_prob", block=sub.num)
    other, _ = exact_topk(index, sub, "match_prob", block=sub.num, generator=torch.Generator().manual_seed(99))
    print(json.dumps({"score": "match_prob", "index": "exact", "gallery": size, "qps": round(sub.num / elapsed, 2),
                      "noise_floor_recall@10": round(recall_at(other, truth), 4)}), flush=True)
    for generator in ("wasserstein", "csd"):
        index.build_ann(generator, ("image",), "ivf", shard_size=100_000)
        index.ann["image"].set_search_params(nprobe=64)
        candidates_recall(index, sub, truth, generator, size, args)


def candidates_recall(index: GalleryIndex, sub: Gaussian, truth: torch.Tensor, generator: str, size: int,
                      args: argparse.Namespace) -> None:
    for c in [int(v) for v in args.candidates.split(",")]:
        start = time.perf_counter()
        found = index.search(sub, k=10, similarity="match_prob", candidates=c).indices
        elapsed = time.perf_counter() - start
        print(json.dumps({"score": "match_prob", "index": f"ivf/{generator} candidates", "gallery": size, "C": c,
                          "nprobe": 64, "qps": round(sub.num / elapsed, 1),
                          "recall@10": round(recall_at(found, truth), 4)}), flush=True)


def serve_latency(gallery: Gaussian, args: argparse.Namespace) -> dict:
    """Median wall time of GET /api/search?text=... through uvicorn over ``gallery`` (cosine, IVF)."""
    import socket
    import threading

    import httpx
    import uvicorn

    from pcmr.data import Vocabulary
    from pcmr.hub import Model
    from pcmr.models import create_model
    from pcmr.search.service import create_app

    vocab = Vocabulary.build(["a red circle on the left", "two blue squares", "a small green triangle"])
    torch.manual_seed(0)
    model = Model(create_model("pcme", vocab_size=len(vocab), embed_dim=gallery.dim), vocab).eval()
    empty = Gaussian(torch.zeros(0, gallery.dim), torch.zeros(0, gallery.dim))
    index = GalleryIndex(gallery, empty, image_ids=range(gallery.num), caption_ids=[], caption_texts=[],
                         model=model)
    index.build_ann("cosine", ("image",), "ivf", shard_size=100_000,
                    **({"nlist": args.nlist} if args.nlist else {}))
    index.ann["image"].set_search_params(nprobe=args.serve_nprobe)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(index), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    texts = ["a red circle on the left", "two blue squares", "a small green triangle"]
    times = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        for i in range(args.serve_requests + 5):
            start = time.perf_counter()
            response = client.get("/api/search", params={"text": texts[i % 3], "k": 10})
            elapsed = time.perf_counter() - start
            assert response.status_code == 200, response.text
            if i >= 5:  # warm-up
                times.append(elapsed)
    server.should_exit = True
    thread.join(timeout=10)
    row = {"serve_items": gallery.num, "serve_index": "ivf/cosine", "nprobe": args.serve_nprobe,
           "requests": len(times), "median_ms": round(1000 * statistics.median(times), 1),
           "p90_ms": round(1000 * float(np.percentile(times, 90)), 1)}
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--scores", default="cosine,wasserstein")
    parser.add_argument("--index-types", default="ivf,hnsw")
    parser.add_argument("--nlist", type=int, default=None, help="IVF lists (default ~4 sqrt(N))")
    parser.add_argument("--nprobe", default="16,32,64,128", help="IVF sweep")
    parser.add_argument("--ef-search", default="32,64,128", help="HNSW sweep")
    parser.add_argument("--hnsw-m", type=int, default=16)
    parser.add_argument("--ef-construction", type=int, default=40)
    parser.add_argument("--mp-queries", type=int, default=50)
    parser.add_argument("--candidates", default="10,20,50,100,200")
    parser.add_argument("--mp-a", type=float, default=5.0, help="match probability a (PCME: sigmoid(-a d + b))")
    parser.add_argument("--mp-b", type=float, default=25.0, help="b: the sigmoid is centred at d = b / a = 5, "
                        "the typical distance of two samples of this mixture")
    parser.add_argument("--mp-size", type=int, default=50_000, help="gallery items for the match-probability part")
    parser.add_argument("--serve-requests", type=int, default=50)
    parser.add_argument("--serve-nprobe", type=int, default=16)
    parser.add_argument("--skip", default="", help="comma list of parts to skip: exact,ann,mp,serve")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    print(f"# {uptime()}", flush=True)
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, size {args.size}, D {args.dim}", flush=True)
    start = time.perf_counter()
    gallery = mixture(args.size, args.dim, args.clusters, seed=1)
    queries = mixture(args.queries, args.dim, args.clusters, seed=2)
    print(f"# generated in {time.perf_counter() - start:.1f} s, RSS {rss_gib():.2f} GiB", flush=True)
    empty = Gaussian(torch.zeros(0, args.dim), torch.zeros(0, args.dim))
    index = GalleryIndex(gallery, empty, image_ids=range(args.size), caption_ids=[], caption_texts=[])
    truth = {}
    for score in args.scores.split(","):
        truth[score], elapsed = exact_topk(index, queries, score)
        print(json.dumps({"score": score, "index": "exact", "qps": round(queries.num / elapsed, 1),
                          "recall@10": 1.0}), flush=True)
    if "ann" not in skip:
        for score in args.scores.split(","):
            for kind in args.index_types.split(","):
                sweep = args.nprobe if kind == "ivf" else args.ef_search
                bench_ann(index, queries, score, kind, truth[score], [int(v) for v in sweep.split(",")], args)
                index.ann.clear()
                gc.collect()
                print(f"# {uptime()}", flush=True)
    if "mp" not in skip:
        bench_match_prob(gallery, queries, args)
    if "serve" not in skip:
        del index, truth
        gc.collect()
        serve_latency(gallery, args)
    print(f"# {uptime()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
