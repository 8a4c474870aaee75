"""The parser of ``pcmr demo`` (the run side: :mod:`pcmr.cli.demo`)."""

from __future__ import annotations

import argparse

from pcmr.catalog import COMMANDS

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "demo",
        help=COMMANDS["demo"][1],
        description=(
            "Train the pcme and pcme_mu_only recipes on the built-in shapes dataset, evaluate both with "
            "several similarities and re-rankers, and print the comparison table."
        ),
    )
    parser.add_argument(
        "--out", default="runs/demo", metavar="DIR", help="output folder (default: runs/demo)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra config override applied to both recipes (repeatable), e.g. --set train.epochs=2",
    )
    parser.add_argument("--device", default=None, metavar="DEVICE",
                        help="torch device of both trainings and evaluations, e.g. cuda (train.device; default cpu)")
    parser.add_argument("--progress", action="store_const", const=True, default=None,
                        help="progress bars even when output is not a terminal (default: bars only on a "
                             "terminal, plain per-epoch lines otherwise)")
    return parser
