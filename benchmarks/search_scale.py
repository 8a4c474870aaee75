"""Search past one machine's memory: a compressed faiss index (IVF-PQ) over a gallery on disk, its
candidates re-scored exactly from the memory-mapped float16 store, and Milvus Lite beside it.

Gallery: the clustered mixture of ``benchmarks/search.py`` (docs/benchmarks.md), generated in chunks of
100,000 items straight into a :class:`pcmr.search.store.GalleryStore` (float16 ``mean`` and ``logvar``
files), never whole in memory. Each stage runs in its own child process, whose peak resident memory
(``VmHWM``, memory-mapped pages included) is reported with its result:

- ``generate``: the store (skipped when a complete one exists: the run can be resumed);
- ``truth``: the exact top-10 (cosine) of ``--truth-queries`` queries, streamed over the store;
- ``build``: the IVF-PQ index, trained on a sample and filled chunk by chunk from the store;
- ``serve``: queries/s and recall@10 of ``CandidateSearcher`` (faiss candidates + exact re-scoring
  from the store) for a sweep of nprobe and candidates C, all queries in blocks of 100;
- ``milvus`` (galleries up to ``--vectordb-max``): the same through a Milvus Lite collection.

Results go to ``DIR/results.jsonl`` (one JSON line per measurement); ``--plot`` draws
docs/figures/search_scaling.png from it, or, with ``--plot-from FILE``, from the rows of a JSON file
``{"rows": [...]}`` (docs/benchmark_logs/search_scaling_tables.json: the numbers of the tables in
docs/benchmarks.md, a null where the docs give none).

Usage (big files outside the repository; nice, logged, resumable):
    nice -n 10 .venv/bin/python benchmarks/search_scale.py /data/pcmr-search-bench --sizes 1000000,10000000 \
        > search_scale.log 2>&1
    .venv/bin/python benchmarks/search_scale.py /data/pcmr-search-bench --plot docs/figures/search_scaling.png
    .venv/bin/python benchmarks/search_scale.py --plot-from docs/benchmark_logs/search_scaling_tables.json \
        --plot docs/figures/search_scaling.png
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import peak_rss_bytes  # noqa: E402
from pcmr import Gaussian  # noqa: E402
from pcmr.atomic import atomic_write  # noqa: E402
from pcmr.search.ann import AnnIndex  # noqa: E402
from pcmr.search.searcher import CandidateSearcher, ExactSearcher, Scoring  # noqa: E402
from pcmr.search.store import GalleryStore, write_store  # noqa: E402
from search import mixture_chunks  # noqa: E402

SCORE = "cosine"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def emit(root: Path, row: dict) -> None:
    row = {**row, "peak_rss_gib": round(peak_rss_bytes() / 2**30, 3), "load": uptime().split("load average:")[-1]}
    print(json.dumps(row), flush=True)
    with open(root / "results.jsonl", "a") as handle:
        handle.write(json.dumps(row) + "\n")


def threads(n: int) -> None:
    import faiss

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)


def queries(args: argparse.Namespace) -> Gaussian:
    return next(mixture_chunks(args.queries, args.dim, args.clusters, seed=2, chunk=args.queries))


def stage_generate(root: Path, size: int, args: argparse.Namespace) -> None:
    folder = root / f"gallery-{size}"
    if (folder / "store.json").is_file():
        return
    start = time.perf_counter()
    first: list[Gaussian] = []

    def chunks():
        for chunk in mixture_chunks(size, args.dim, args.clusters, seed=1):
            if not first:
                first.append(chunk)
            yield chunk

    store = write_store(folder, chunks(), size, args.dim, args.dim, "float16")
    # float16 rounding: cosine scores of the first chunk against the queries, float32 vs stored float16
    exact32 = torch.nn.functional.normalize(first[0].mean, dim=1)
    stored = torch.nn.functional.normalize(store.rows(np.arange(first[0].num), need_logvar=False).mean, dim=1)
    q = torch.nn.functional.normalize(queries(args).mean[:200], dim=1)
    error = float((q @ exact32.T - q @ stored.T).abs().max())
    emit(root, {"stage": "generate", "size": size, "seconds": round(time.perf_counter() - start, 1),
                "disk_gib": round(sum(f.stat().st_size for f in folder.iterdir()) / 2**30, 2),
                "float16_cosine_max_abs_error": error})


def stage_truth(root: Path, size: int, args: argparse.Namespace) -> None:
    path = root / f"truth-{size}.npy"
    if path.is_file():
        return
    store = GalleryStore.open(root / f"gallery-{size}")
    sub = queries(args)[:args.truth_queries]
    start = time.perf_counter()
    _, indices = ExactSearcher(store, Scoring(SCORE), chunk=250_000).search(sub, 10)
    elapsed = time.perf_counter() - start
    np.save(path, indices.numpy())
    emit(root, {"stage": "truth", "size": size, "queries": sub.num, "seconds": round(elapsed, 1),
                "qps": round(sub.num / elapsed, 2)})


def stage_build(root: Path, size: int, args: argparse.Namespace) -> None:
    path = root / f"ivfpq{args.refine_tag}-{size}.faiss"
    if path.is_file():
        return
    threads(args.build_threads)  # faiss's OpenMP k-means slows down several-fold on an oversubscribed machine
    store = GalleryStore.open(root / f"gallery-{size}")
    start = time.perf_counter()
    rows = np.sort(np.random.default_rng(0).choice(size, min(args.train_size, size), replace=False))
    sample = store.rows(rows, need_logvar=False)
    ann = AnnIndex.create(SCORE, sample, "ivfpq", num_items=size, train_size=args.train_size,
                          memory_budget=int(args.memory_budget * 2**30), refine=args.refine or None)
    trained = time.perf_counter() - start
    del sample
    for _, chunk in store.chunks(250_000, need_logvar=False):
        ann.add(chunk, shard_size=250_000)
    elapsed = time.perf_counter() - start
    atomic_write(path, ann.write)
    (root / f"ivfpq{args.refine_tag}-{size}.json").write_text(json.dumps(ann.params))
    emit(root, {"stage": "build", "size": size, "threads": args.build_threads, "seconds": round(elapsed, 1),
                "train_seconds": round(trained, 1),
                "params": ann.params, "index_gib": round(path.stat().st_size / 2**30, 3)})


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(found[q, :10]) & set(truth[q])) / 10 for q in range(len(truth))]))


def measure(searcher, sub: Gaussian, truth: np.ndarray) -> tuple[float, float]:
    searcher.search(sub[:20], 10)  # warm-up
    start = time.perf_counter()
    found = torch.cat([searcher.search(sub[i:i + 100], 10)[1] for i in range(0, sub.num, 100)])
    elapsed = time.perf_counter() - start
    return sub.num / elapsed, recall_at(found[:len(truth)].numpy(), truth)


def stage_serve(root: Path, size: int, args: argparse.Namespace) -> None:
    start = time.perf_counter()
    store = GalleryStore.open(root / f"gallery-{size}")
    params = json.loads((root / f"ivfpq{args.refine_tag}-{size}.json").read_text())
    ann = AnnIndex.read(str(root / f"ivfpq{args.refine_tag}-{size}.faiss"), SCORE, "ivfpq", "none", args.dim, params)
    opened = time.perf_counter() - start
    truth = np.load(root / f"truth-{size}.npy")
    sub = queries(args)
    for nprobe in [int(v) for v in args.nprobe.split(",")]:
        ann.set_search_params(nprobe=nprobe)
        for c in [int(v) for v in args.candidates.split(",")]:
            qps, recall = measure(CandidateSearcher(ann, store, Scoring(SCORE), candidates=c), sub, truth)
            emit(root, {"stage": "serve", "backend": f"faiss-ivfpq{args.refine_tag}", "size": size,
                        "threads": args.threads,
                        "nprobe": nprobe, "C": c,
                        "qps": round(qps, 1), "recall@10": round(recall, 4), "open_seconds": round(opened, 2)})


def stage_milvus(root: Path, size: int, args: argparse.Namespace) -> None:
    from pcmr.search.vectordb import MilvusCandidates

    store = GalleryStore.open(root / f"gallery-{size}")
    uri = str(root / f"milvus-{size}.db")
    start = time.perf_counter()
    if not (root / f"milvus-{size}.done").is_file():
        if os.path.exists(uri):
            os.remove(uri)
        source = MilvusCandidates.create(uri, "gallery", SCORE, store.rows(np.arange(min(1000, size))), size)
        for begin, chunk in store.chunks(50_000, need_logvar=False):
            source.add(chunk, first_id=begin)
        source.finish()
        (root / f"milvus-{size}.done").write_text("ok")
        emit(root, {"stage": "milvus-build", "size": size, "seconds": round(time.perf_counter() - start, 1)})
    source = MilvusCandidates.open(uri, "gallery")
    truth = np.load(root / f"truth-{size}.npy")
    sub = queries(args)
    for c in [int(v) for v in args.candidates.split(",")][:1]:
        qps, recall = measure(CandidateSearcher(source, store, Scoring(SCORE), candidates=c), sub, truth)
        emit(root, {"stage": "serve", "backend": f"milvus-lite/{source.index_type}", "size": size, "C": c,
                    "qps": round(qps, 1), "recall@10": round(recall, 4)})


STAGES = {"generate": stage_generate, "truth": stage_truth, "build": stage_build, "serve": stage_serve,
          "milvus": stage_milvus}
#: the ``stage`` of a row of results.jsonl
ROW_STAGES = ("generate", "truth", "build", "serve", "milvus-build")


def _size_axis(ax, sizes: list[int]) -> None:
    """Gallery sizes on a log axis labelled 1M, 2M, 5M, 10M (1, 2, 5 times each power of ten in range)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log")
    low, high = min(sizes) / 1.5, max(sizes) * 1.5
    ax.set_xlim(low, high)
    ticks = [m * 10.0 ** e for e in range(0, 13) for m in (1, 2, 5) if low <= m * 10.0 ** e <= high]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(
        lambda v, _: f"{v / 1e6:g}M" if v >= 1e6 else f"{v / 1e3:g}k" if v >= 1e3 else f"{v:g}"))
    ax.set_xlabel("gallery items")
    ax.grid(alpha=0.3)


def scaling_figure(rows: list[dict]):
    """Three panels against the gallery size: peak resident memory of build and serve (the highest per
    size over the faiss index kinds), the build time (the last build per size of each index kind named
    by a row's ``backend``; rows without one make one line), and the best queries/s at recall@10 >= 0.9
    of each faiss index kind. A value that is None (or absent) leaves its row out of that panel.
    Returns the matplotlib Figure."""
    from pcmr.report.plots import legend_below, new_figure

    figure = new_figure(13.0, 4.6, layout="constrained")
    ax_mem, ax_build, ax_rate = figure.subplots(1, 3)
    sizes = sorted({int(r["size"]) for r in rows}) or [1]
    for stage, marker in (("build", "o"), ("serve", "s")):
        peaks: dict[int, float] = {}
        for r in rows:
            if r["stage"] == stage and r.get("backend", "faiss").startswith("faiss") \
                    and r.get("peak_rss_gib") is not None:
                peaks[r["size"]] = max(peaks.get(r["size"], 0.0), r["peak_rss_gib"])
        points = sorted(peaks.items())
        if points:
            ax_mem.plot([p[0] for p in points], [p[1] for p in points], marker=marker, label=f"{stage} peak")
    ax_mem.set(ylabel="peak resident memory (GiB)", title="memory")
    ax_mem.set_ylim(bottom=0)
    builds: dict[str, dict[int, float]] = {}  # the last build per size of each index kind
    for r in rows:
        if r["stage"] == "build" and r.get("seconds") is not None:
            builds.setdefault(r.get("backend", "IVF-PQ build"), {})[r["size"]] = r["seconds"]
    backends = sorted({r["backend"] for r in rows if r["stage"] in ("build", "serve")
                       and str(r.get("backend", "")).startswith("faiss")})
    colours = {backend: f"C{3 + number}" for number, backend in enumerate(backends)}
    for backend, line in sorted(builds.items()):
        points = sorted(line.items())
        ax_build.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=colours.get(backend, "C2"),
                      label=backend)
    ax_build.set(ylabel="seconds (1 thread)", title="build time")
    ax_build.set_ylim(bottom=0)
    best: dict[str, dict[int, float]] = {}
    for r in rows:
        if r["stage"] == "serve" and r["backend"].startswith("faiss") and r.get("qps") is not None \
                and r.get("recall@10") is not None and r["recall@10"] >= 0.9:
            line = best.setdefault(r["backend"], {})
            line[r["size"]] = max(line.get(r["size"], 0), r["qps"])
    for backend, line in sorted(best.items()):
        points = sorted(line.items())
        ax_rate.plot([p[0] for p in points], [p[1] for p in points], marker="s", color=colours[backend],
                     label=backend)
    ax_rate.set(ylabel="queries/s at recall@10 >= 0.9 (2 threads)", title="serving rate")
    ax_rate.set_ylim(bottom=0)
    for ax in (ax_mem, ax_build, ax_rate):
        _size_axis(ax, sizes)
        if ax.get_legend_handles_labels()[1]:
            legend_below(ax, figure, fontsize=8, frameon=False)
    figure.suptitle("search past memory: IVF-PQ from the gallery on disk", fontsize=11)
    return figure


def plot(rows: list[dict], out: Path) -> None:
    from pcmr.report.plots import save_figure

    print(f"wrote {save_figure(scaling_figure(rows), out)}")


def results_rows(root: Path) -> list[dict]:
    """The rows of ``root/results.jsonl``, one per measurement."""
    return [json.loads(line) for line in (root / "results.jsonl").read_text().splitlines() if line.strip()]


def table_rows(path: Path) -> list[dict]:
    """The rows of a JSON file ``{"rows": [{"stage": ..., "size": ..., ...}, ...]}`` in the form of
    results.jsonl (docs/benchmark_logs/search_scaling_tables.json); ValueError naming the file and row
    when the form is not that."""
    try:
        rows = json.loads(Path(path).read_text()).get("rows")
    except (json.JSONDecodeError, AttributeError) as error:
        raise ValueError(f"{path}: expected a JSON object with a list 'rows' ({error})") from error
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: expected a JSON object with a non-empty list 'rows'")
    for number, row in enumerate(rows):
        if not isinstance(row, dict) or row.get("stage") not in ROW_STAGES or not isinstance(row.get("size"), int):
            raise ValueError(f"{path}: row {number} needs 'stage' (one of {sorted(ROW_STAGES)}) and an integer "
                             f"'size'; got {row!r}")
    return rows


def table(root: Path) -> None:
    """The results as Markdown tables (docs/benchmarks.md), the last row of each measurement."""
    rows = results_rows(root)
    last: dict = {}
    for r in rows:
        last[(r["stage"], r["size"], r.get("backend"), r.get("nprobe"), r.get("C"))] = r
    print("| stage | items | seconds | peak RSS GiB | details | load |\n|---|---|---|---|---|---|")
    for (stage, size, *_), r in last.items():
        if stage != "serve":
            details = {k: v for k, v in r.items() if k not in ("stage", "size", "seconds", "peak_rss_gib", "load")}
            print(f"| {stage} | {size:,} | {r.get('seconds', '-')} | {r['peak_rss_gib']} | {json.dumps(details)} | "
                  f"{r['load'].strip()} |")
    print("\n| items | backend | nprobe | C | queries/s | recall@10 | peak RSS GiB | load |\n|---|---|---|---|---|---|---|---|")
    for (stage, size, *_), r in last.items():
        if stage == "serve":
            print(f"| {size:,} | {r['backend']} | {r.get('nprobe', '-')} | {r['C']} | {r['qps']} | {r['recall@10']} | "
                  f"{r['peak_rss_gib']} | {r['load'].strip()} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", nargs="?", help="folder for the stores, indexes and results.jsonl "
                        "(outside the repository; not needed with --plot-from)")
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--truth-queries", type=int, default=200)
    parser.add_argument("--train-size", type=int, default=100_000)
    parser.add_argument("--memory-budget", type=float, default=1.0, help="GiB for the IVF-PQ index (picks nlist, m)")
    parser.add_argument("--nprobe", default="16,32")
    parser.add_argument("--candidates", default="100,200,400")
    parser.add_argument("--vectordb-max", type=int, default=1_000_000)
    parser.add_argument("--stages", default="generate,truth,build,serve,milvus")
    parser.add_argument("--refine", default="", help="IVF-PQ refine code (SQ8 or SQfp16; default none)")
    parser.add_argument("--threads", type=int, default=2, help="threads of the queries (torch and faiss)")
    parser.add_argument("--build-threads", type=int, default=1, help="threads of the index build")
    parser.add_argument("--stage", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--plot", default=None, metavar="PNG")
    parser.add_argument("--plot-from", default=None, metavar="JSON",
                        help="with --plot: draw from this file's rows instead of ROOT/results.jsonl")
    parser.add_argument("--table", action="store_true", help="print results.jsonl as Markdown tables")
    args = parser.parse_args()
    args.refine_tag = f"-{args.refine.lower()}" if args.refine else ""
    if args.plot_from:
        if not args.plot:
            parser.error("--plot-from needs --plot PNG")
        plot(table_rows(Path(args.plot_from)), Path(args.plot))
        return 0
    if args.root is None:
        parser.error("the folder ROOT is needed (except with --plot-from)")
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    if args.plot:
        plot(results_rows(root), Path(args.plot))
        return 0
    if args.table:
        table(root)
        return 0
    if args.stage:
        threads(args.threads)
        STAGES[args.stage](root, int(args.sizes), args)
        return 0
    print(f"# {uptime()}", flush=True)
    for size in [int(v) for v in args.sizes.split(",")]:
        for stage in args.stages.split(","):
            if stage == "milvus" and size > args.vectordb_max:
                continue
            passed = {"--dim": args.dim, "--clusters": args.clusters, "--queries": args.queries,
                      "--truth-queries": args.truth_queries, "--train-size": args.train_size,
                      "--memory-budget": args.memory_budget, "--nprobe": args.nprobe,
                      "--candidates": args.candidates, "--threads": args.threads,
                      "--build-threads": args.build_threads, "--refine": args.refine}
            argv = [sys.executable, __file__, str(root), *[str(x) for kv in passed.items() for x in kv],
                    "--sizes", str(size), "--stage", stage]
            code = subprocess.run(argv).returncode
            if code:
                print(f"# stage {stage} at {size} failed with exit code {code}", flush=True)
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
