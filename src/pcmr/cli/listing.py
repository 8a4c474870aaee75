"""``pcmr list {models,similarities,losses,rerankers,datasets,recipes}``: what a config may name.

The names of pcmr's registries are written out here (:data:`BUILT_IN`), so listing them does not
import torch and answers at once; ``tests/cli/test_cli_startup.py`` checks that they are exactly what
the registries hold. Recipes are files, found as ``pcmr train`` finds them (``$PCMR_CONFIGS``,
``./configs``, the shipped ones).
"""

from __future__ import annotations

import argparse

from pcmr.train.recipes import list_recipes

__all__ = ["BUILT_IN", "KINDS", "add_parser", "run"]

#: the registered names of each kind, in listing order (as the registries' list_* functions give them)
BUILT_IN: dict[str, tuple[str, ...]] = {
    "models": ("gce", "gcie", "gie", "pcme", "pcme_mu_only", "probvse", "probvsrn", "pvse", "vsepp", "vsepp_wide"),
    "similarities": ("cosine", "l2", "kl", "kl_reverse", "min_kl", "js", "elk", "bhattacharyya", "wasserstein",
                     "mahalanobis_caption", "mahalanobis_image", "csd", "avg_l2", "match_prob", "max_cosine"),
    "losses": ("triplet_sum", "triplet_max", "triplet_semihard", "hal", "max_hal", "hal_released", "pcme", "pcme_csd",
               "calibpe", "pvse"),
    "rerankers": ("nns", "is", "csls", "gm", "rgm", "is+gm", "is+rgm", "csls+gm", "csls+rgm"),
    "datasets": ("coco", "cub", "flickr30k", "folder", "hf", "karpathy", "precomputed", "shapes", "webdataset"),
}

KINDS = (*BUILT_IN, "recipes")


def _names(kind: str) -> list[str]:
    if kind == "recipes":
        return list(list_recipes())
    return list(BUILT_IN[kind])


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "list",
        help="list the names a config or command may use",
        description="Print the registered models, similarities, losses, re-rankers, datasets or recipes.",
    )
    parser.add_argument("kind", choices=sorted(KINDS), help="what to list")
    return parser


def run(args: argparse.Namespace) -> int:
    for name in _names(args.kind):
        print(name)
    return 0
