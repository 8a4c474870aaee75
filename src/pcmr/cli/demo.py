"""``pcmr demo``: train PCME and its deterministic "mu only" twin on the built-in shapes data,
evaluate both, print the comparison table and where the reports and plots were written."""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from pcmr.atomic import atomic_write_text
from pcmr.evaluation.columns import EVALUATION_COLUMNS, HS_SUM, RSUM, r_precision, recall
from pcmr.evaluation.model import evaluate
from pcmr.evaluation.table import collapsed_recall_warning
from pcmr.hub import load
from pcmr.inference import get_reranker
from pcmr.relevance import I2T, T2I
from pcmr.report import format_table, merge_rows
from pcmr.study.provenance import cpu_model
from pcmr.train.lifecycle import remove_run, start_run

__all__ = ["DEMO_OVERRIDES", "DEMO_RECIPES", "run"]

DEMO_RECIPES = ("pcme", "pcme_mu_only")

# demo size: about 4 minutes of CPU time in all (2 trainings + 2 evaluations), measured with one
# thread; 1000 training images (5000 captions, 39 steps per epoch), 6 epochs at lr 1e-3 (the
# recipes' 2e-4 is the papers' rate for long runs). The recipes train on `source` relevance (only
# the written pairs are positives, as the papers did on COCO); the demo trains on the built-in
# data's exact relation, which it knows and COCO does not.
DEMO_OVERRIDES = [
    "data.options={num_train: 1000, num_val: 200, num_test: 500}",
    "data.train_relevance=exact",
    "data.batch_size=128",
    "train.epochs=6",
    "train.lr=0.001",
]

# the comparison table's columns (the full table of each model is in its report)
DEMO_COLUMNS = [
    "model",
    "similarity",
    "rerank",
    "relevance",
    recall(I2T, 1),
    recall(T2I, 1),
    RSUM,
    r_precision(I2T),
    r_precision(T2I),
    HS_SUM,
]


def _prepare(out: Path) -> None:
    """Start from an empty ``out``; an earlier demo's folders are replaced, anything else is an error."""
    if not out.exists():
        out.mkdir(parents=True)
        return
    known = {*DEMO_RECIPES, "comparison.md"}
    unknown = [p.name for p in out.iterdir() if p.name not in known]
    if unknown:
        raise FileExistsError(
            f"--out {out} holds files that are not from pcmr demo ({', '.join(unknown[:3])}); "
            f"choose an empty or new folder"
        )
    for path in out.iterdir():
        remove_run(path) if path.is_dir() else path.unlink()  # a run folder only under its lock


def _comparison_rows(rows: list[dict[str, Any]], trained: dict[str, str]) -> list[dict[str, Any]]:
    """Exact relevance: NNS rows of every similarity, then the other re-rankers on each model's trained
    score; then source (COCO-style) relevance: NNS on each model's trained score."""
    def plain(row: dict[str, Any]) -> bool:  # nearest-neighbour search: no re-ranking
        return get_reranker(row["rerank"]).is_identity

    exact = [r for r in rows if r.get("relevance", "exact") == "exact"]
    nns = [r for r in exact if plain(r)]
    reranked = [r for r in exact if not plain(r) and r["similarity"] == trained.get(r["model"])]
    source = [r for r in rows if r.get("relevance") == "source" and plain(r)
              and r["similarity"] == trained.get(r["model"])]
    return sorted(nns + reranked, key=lambda r: (r["model"], not plain(r))) + source


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    _prepare(out)
    overrides = (DEMO_OVERRIDES + (["train.progress=true"] if args.progress else [])
                 + ([f"train.device={args.device}"] if args.device else []) + list(args.overrides))
    started, cpu_started = time.perf_counter(), cpu_seconds()
    results = []
    trained: dict[str, str] = {}
    for recipe in DEMO_RECIPES:
        print(f"[{time.perf_counter() - started:5.0f} s] training {recipe} ...", flush=True)
        summary, run_dir = start_run(recipe, overrides, out=out, name=recipe)
        print(
            f"[{time.perf_counter() - started:5.0f} s] {recipe}: selected epoch {summary['best_epoch']}, "
            f"validation {summary['select_on']} {summary['best_metric']:.2f}; evaluating ...",
            flush=True,
        )
        result = evaluate(load(run_dir), out_dir=run_dir / "evaluation", progress=args.progress)
        if collapsed_recall_warning(result.rows):
            print(f"warning: {recipe}: {collapsed_recall_warning(result.rows)}", file=sys.stderr, flush=True)
        trained[recipe] = summary["trained_similarity"]
        results.append((recipe, result))
    rows = _comparison_rows(merge_rows(results), trained)
    present = [c for c in DEMO_COLUMNS if any(r.get(c) is not None for r in rows)]
    table = format_table(rows, present, schema=EVALUATION_COLUMNS)
    atomic_write_text(
        out / "comparison.md",
        "# pcmr demo: pcme vs pcme_mu_only (shapes test split)\n\n"
        "Every similarity with nearest-neighbour search, and every re-ranker on the score each model was "
        "trained with, under the data's exact relevance; the last rows score the same rankings with source "
        "relevance (only the caption written for an image counts, the COCO protocol). Full tables: each "
        "run's evaluation/results.md.\n\n" + table + "\n",
    )
    elapsed = time.perf_counter() - started
    print()
    print(table)
    print()
    print(f"comparison table: {out / 'comparison.md'}")
    for recipe, _ in results:
        print(
            f"{recipe}: run {out / recipe}, report {out / recipe / 'evaluation' / 'results.md'}, "
            f"plots {out / recipe / 'evaluation' / 'plots'}"
        )
    print(f"total time: {elapsed:.0f} s ({cpu_seconds() - cpu_started:.0f} s of CPU time on {machine()})")
    return 0


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of its finished child processes, in seconds."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def machine() -> str:
    """``"2 logical CPUs (AMD EPYC), load average 1.2"``: what the wall time of a run depends on besides
    the work."""
    model = cpu_model()
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return f"{os.cpu_count()} logical CPUs{f' ({model})' if model else ''}{load}"
