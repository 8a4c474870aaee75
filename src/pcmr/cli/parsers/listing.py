"""The parser of ``pcmr list`` (the run side: :mod:`pcmr.cli.listing`)."""

from __future__ import annotations

import argparse

from pcmr.catalog import COMMANDS, REGISTERED

__all__ = ["KINDS", "add_parser"]

#: what `pcmr list` lists: the registries' names and the recipes
KINDS = (*REGISTERED, "recipes")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "list",
        help=COMMANDS["list"][1],
        description="Print the registered models, similarities, losses, re-rankers, datasets, search backends, "
        "evaluation producers or recipes.",
    )
    parser.add_argument("kind", choices=sorted(KINDS), help="what to list")
    return parser
