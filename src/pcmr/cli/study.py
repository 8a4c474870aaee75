"""``pcmr study STUDY [--out DIR] [--recipes A,B] [--workers N] [--only I] [--threads T] [--list]``: a grid of runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pcmr.study import find_study, list_studies, load_study, read_marker, run_study, select_recipes

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "study",
        help="run a study: recipes x variants x seeds, trained, evaluated and the papers' claims judged",
        description="Train and evaluate every run of a study file into DIR/runs/<name> (finished runs are "
        "skipped, so a killed study resumes), then write DIR/results.csv, DIR/summary.md and DIR/claims.md. "
        "See docs/study.md.",
    )
    parser.add_argument("study", metavar="STUDY", help=f"study YAML path, or a shipped study name ({', '.join(list_studies())})")
    parser.add_argument("--out", metavar="DIR", default=None, help="output folder (default: runs/<study name>)")
    parser.add_argument("--recipes", metavar="A,B", default=None,
                        help="run only these recipes of the study (comma-separated labels) and judge only the claims "
                        "that read them alone")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="runs at a time, each in its own process with cores // N threads (default 1)")
    parser.add_argument("--threads", type=int, default=None, metavar="T",
                        help="threads per run (default: the cores divided by --workers)")
    parser.add_argument("--only", type=int, default=None, metavar="I",
                        help="run number I alone (for job arrays; numbers from --list); writes no summary")
    parser.add_argument("--list", action="store_true", help="print the numbered runs and whether each is finished")
    parser.add_argument("--ledger", metavar="LEDGER", default=None,
                        help="a folder (meant to be committed) that keeps each finished run's result files, without "
                        "weights: its runs are restored into DIR first, and each run that finishes is kept there, so "
                        "a long study resumes on a fresh checkout")
    return parser


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
