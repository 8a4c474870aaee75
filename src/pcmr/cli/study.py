"""``pcmr study STUDY [--out DIR] [--recipes A,B] [--workers N] [--only I] [--threads T] [--list]``: a grid of runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pcmr.study import find_study, load_study, read_marker, run_study, select_recipes

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:

    spec = load_study(find_study(args.study))
    if args.recipes is not None:
        spec = select_recipes(spec, [label.strip() for label in args.recipes.split(",") if label.strip()])
    out = Path(args.out) if args.out else Path("runs") / spec.name
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    runs = spec.runs()
    if args.list:
        for item in runs:
            done = any(read_marker(folder / "runs" / item.name) is not None
                       for folder in (out, *([Path(args.ledger)] if args.ledger else [])))
            print(f"{item.index}\t{item.name}\t{'finished' if done else 'pending'}")
        return 0
    outcome = run_study(spec, out, workers=args.workers, threads=args.threads, only=args.only,
                        echo=lambda line: print(line, file=sys.stderr, flush=True), ledger=args.ledger)
    for path in outcome.written:
        print(f"wrote {path}")
    if outcome.failed:
        for name, reason in outcome.failed.items():
            print(f"run {name} failed: {reason}", file=sys.stderr)
        return 1
    return 0
