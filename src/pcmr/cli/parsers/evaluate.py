"""The parser of ``pcmr evaluate`` (the run side: :mod:`pcmr.cli.evaluate`)."""

from __future__ import annotations

import argparse

from pcmr.arguments import positive_int
from pcmr.catalog import COMMANDS, DEFAULT_RERANKERS, DEFAULT_SIMILARITIES, ENCODE_BATCH_SIZE

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "evaluate",
        help=COMMANDS["evaluate"][1],
        description="Encode a split with a trained model and report R@1/5/10 both ways, rsum, R-Precision, "
        "MAP@R, PMRP (where labels exist) and hs-sum for each similarity x re-ranker, as Markdown, "
        "CSV, JSON and PNG plots. See docs/evaluation.md.",
    )
    parser.add_argument(
        "run_or_model",
        metavar="RUN_OR_MODEL",
        help="run folder from `pcmr train`, its model/ folder, or a folder from Model.save_pretrained",
    )
    parser.add_argument(
        "--data",
        metavar="NAME_OR_PATH",
        default=None,
        help="dataset name (see `pcmr list datasets`) or dataset folder (default: the run's data, as "
        "the run folder or the model folder records it)",
    )
    parser.add_argument(
        "--data-name",
        default=None,
        metavar="NAME",
        help="dataset format of a --data folder (default: detected from its files)",
    )
    parser.add_argument(
        "--split", default=None, help="split to evaluate (default: the run's eval.split, or test)"
    )
    parser.add_argument(
        "--val-split",
        default=None,
        help="split used to select RGM's lambda (default: the run's data.val_split, or val)",
    )
    parser.add_argument(
        "--similarity",
        action="append",
        metavar="NAMES",
        help="comma-separated similarity names or 'all' (default: the run's eval.similarities, "
        f"else {','.join(DEFAULT_SIMILARITIES)}); repeatable",
    )
    parser.add_argument(
        "--rerank",
        action="append",
        metavar="NAMES",
        help=f"comma-separated re-ranker names or 'all' (default: {','.join(DEFAULT_RERANKERS)}); repeatable",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME.OPTION=VALUE",
        help="a similarity or re-ranker option, e.g. match_prob.a=12.5, is.beta=30, "
        "csls.csls_k=10, csls+rgm.lam=2; repeatable",
    )
    parser.add_argument(
        "--folds",
        type=int,
        default=None,
        metavar="N",
        help="also report R@K averaged over N consecutive image folds, each re-scored on its own "
        "(default: 5 on COCO 5K-test, the COCO 1K protocol; none otherwise)",
    )
    parser.add_argument("--vocab", default=None,
                        help="vocab.json of the training run (default: the model folder's vocabulary.json, or the "
                        "vocab.json beside it)")
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output folder (default: RUN/eval-SPLIT for a run, ./eval-SPLIT otherwise)",
    )
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier report in the output folder (the whole folder is swapped "
                        "in at once, so no figure of the old report stays)")
    parser.add_argument("--batch-size", type=positive_int, default=None, help=f"items per encoding batch (default {ENCODE_BATCH_SIZE})")
    parser.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda (default: the run's train.device "
                        "when this machine has it, else cpu)")
    parser.add_argument("--no-corruption", dest="corruption", action="store_false",
                        help="skip the uncertainty-vs-corruption figure (it re-encodes up to 256 images and "
                        "captions at 9 occlusion and word-erasure ratios, the slowest phase on a small split)")
    parser.add_argument("--progress", action="store_const", const=True, default=None,
                        help="progress bars while encoding even when output is not a terminal "
                             "(default: bars only on a terminal)")
    return parser
