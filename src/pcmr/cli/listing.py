"""``pcmr list {models,similarities,losses,rerankers,datasets,backends,producers,recipes}``: what a config or a
command may name.

The registries' names come from :data:`pcmr.catalog.REGISTERED`, their torch-free copy (checked
against every registry by ``tests/test_catalog.py``), so listing them answers at once. Recipes are
files, found as ``pcmr train`` finds them (``$PCMR_CONFIGS``, ``./configs``, the shipped ones).
"""

from __future__ import annotations

import argparse

from pcmr.catalog import REGISTERED
from pcmr.train.recipes import list_recipes

__all__ = ["names", "run"]


def names(kind: str) -> list[str]:
    """The names ``pcmr list KIND`` prints, in listing order."""
    if kind == "recipes":
        return list(list_recipes())
    return list(REGISTERED[kind])


def run(args: argparse.Namespace) -> int:
    for name in names(args.kind):
        print(name)
    return 0
