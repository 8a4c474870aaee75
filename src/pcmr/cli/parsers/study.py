"""The parser of ``pcmr study`` (the run side: :mod:`pcmr.cli.study`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pcmr
from pcmr.catalog import COMMANDS

__all__ = ["add_parser", "shipped_studies"]


def shipped_studies() -> list[str]:
    """The names of the study files shipped with pcmr (``pcmr/studies/*.yaml``), as
    :func:`pcmr.study.spec.list_studies` lists them, found without importing the study package."""
    return [path.stem for path in sorted((Path(pcmr.__file__).resolve().parent / "studies").glob("*.yaml"))]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "study",
        help=COMMANDS["study"][1],
        description="Train and evaluate every run of a study file into DIR/runs/<name> (finished runs are "
        "skipped, so a killed study resumes), then write DIR/results.csv, DIR/summary.md and DIR/claims.md. "
        "See docs/study.md.",
    )
    parser.add_argument("study", metavar="STUDY", help=f"study YAML path, or a shipped study name ({', '.join(shipped_studies())})")
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
