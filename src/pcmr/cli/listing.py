"""``pcmr list {models,similarities,losses,rerankers,datasets,recipes}``: what a config may name."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pcmr.data import list_datasets
from pcmr.inference import list_rerankers
from pcmr.losses import list_losses
from pcmr.models import list_models
from pcmr.similarity import list_similarities
from pcmr.train.recipes import list_recipes

__all__ = ["add_parser", "run"]


def _models() -> list[str]:
    return list(list_models())


def _similarities() -> list[str]:
    return list(list_similarities())


def _losses() -> list[str]:
    return list(list_losses())


def _rerankers() -> list[str]:
    return list(list_rerankers())


def _datasets() -> list[str]:
    return list(list_datasets())


def _recipes() -> list[str]:
    return list(list_recipes())


KINDS: dict[str, Callable[[], list[str]]] = {
    "models": _models,
    "similarities": _similarities,
    "losses": _losses,
    "rerankers": _rerankers,
    "datasets": _datasets,
    "recipes": _recipes,
}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "list",
        help="list the names a config or command may use",
        description="Print the registered models, similarities, losses, re-rankers, datasets or recipes.",
    )
    parser.add_argument("kind", choices=sorted(KINDS), help="what to list")
    return parser


def run(args: argparse.Namespace) -> int:
    for name in KINDS[args.kind]():
        print(name)
    return 0
