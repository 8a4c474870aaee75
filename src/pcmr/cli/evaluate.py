"""``pcmr evaluate RUN_OR_MODEL``: the evaluation table of a trained model (pcmr.evaluation).

``RUN_OR_MODEL`` is a run folder written by ``pcmr train`` (``config.yaml``, ``model/``,
``vocab.json``, ``similarity_options.json``) or a model folder written by
``pcmr.models.save_model`` (then ``--data`` is required and the vocabulary is ``--vocab``, or a
``vocab.json`` inside the folder or next to it). Defaults for the data, split, similarities and
re-rankers come from the run's config; flags override them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pcmr.config import ConfigError, parse_override
from pcmr.data import ENCODE_BATCH_SIZE
from pcmr.evaluation import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES, evaluate_model
from pcmr.evaluation.evaluator import needs_validation
from pcmr.similarity import list_similarities
from pcmr.train.loading import LoadedModel, load_run_or_model, load_split

__all__ = ["add_parser", "run", "LoadedModel", "load_run_or_model", "load_split", "parse_names"]


def parse_names(values: list[str] | None) -> list[str] | None:
    """``["cosine,kl", "elk"]`` -> ``["cosine", "kl", "elk"]``; None stays None."""
    if values is None:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _parse_option(item: str) -> tuple[str, str, Any]:
    """``match_prob.a=12.5`` -> ``("match_prob", "a", 12.5)`` (the value read as in ``--set``)."""
    try:
        path, value = parse_override(item)
    except ConfigError:
        path, value = [], None
    if len(path) != 2:
        raise ValueError(
            f"--option {item!r}: expected NAME.OPTION=VALUE, e.g. match_prob.a=12.5 or csls.csls_k=10"
        )
    return path[0], path[1], value


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "evaluate",
        help="evaluation table of a trained model (all similarities x re-rankers)",
        description="Encode a split with a trained model and report R@1/5/10 both ways, rsum, R-Precision, "
        "MAP@R, PMRP (where labels exist) and hs-sum for each similarity x re-ranker, as Markdown, "
        "CSV, JSON and PNG plots. See docs/evaluation.md.",
    )
    parser.add_argument(
        "run_or_model",
        metavar="RUN_OR_MODEL",
        help="run folder from `pcmr train`, or a model folder from pcmr.models.save_model",
    )
    parser.add_argument(
        "--data",
        metavar="NAME_OR_PATH",
        default=None,
        help="dataset name (see `pcmr list datasets`) or dataset folder (default: the run's data)",
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
    parser.add_argument("--vocab", default=None, help="vocab.json of the training run (model folders only)")
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output folder (default: RUN/eval-SPLIT for a run, ./eval-SPLIT otherwise)",
    )
    parser.add_argument("--batch-size", type=int, default=None, help=f"items per encoding batch (default {ENCODE_BATCH_SIZE})")
    parser.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda (default: cpu)")
    parser.add_argument("--progress", action="store_const", const=True, default=None,
                        help="progress bars while encoding even when output is not a terminal "
                             "(default: bars only on a terminal)")
    return parser


def run(args: argparse.Namespace) -> int:
    loaded = load_run_or_model(args.run_or_model, args.vocab, args.device or "cpu")
    config = loaded.config

    def split_of(name: str) -> Any:
        return load_split(args.data, name, config, args.data_name)

    eval_cfg = config.eval if config is not None else None
    split_name = args.split or (eval_cfg.split if eval_cfg else "test")
    val_name = args.val_split or (config.data.val_split if config is not None else "val")
    similarities = parse_names(args.similarity) or (
        list(eval_cfg.similarities) if eval_cfg else list(DEFAULT_SIMILARITIES)
    )
    rerankers = parse_names(args.rerank) or (
        list(eval_cfg.rerankers) if eval_cfg else list(DEFAULT_RERANKERS)
    )
    similarity_options = {k: dict(v) for k, v in loaded.similarity_options.items()}
    rerank_options: dict[str, dict[str, Any]] = {}
    for item in args.option:
        owner, option, value = _parse_option(item)
        target = similarity_options if owner in list_similarities() else rerank_options
        target.setdefault(owner, {})[option] = value
    needs_val = needs_validation(rerankers, rerank_options)
    split = split_of(split_name)
    val_split = split_of(val_name) if needs_val else None
    batch_size = args.batch_size or (eval_cfg.batch_size if eval_cfg else ENCODE_BATCH_SIZE)
    out = (
        Path(args.out)
        if args.out
        else (loaded.source / f"eval-{split_name}" if config is not None else Path(f"eval-{split_name}"))
    )
    result = evaluate_model(
        loaded.model,
        split,
        loaded.vocab,
        similarities=similarities,
        rerankers=rerankers,
        similarity_options=similarity_options,
        rerank_options=rerank_options,
        val_split=val_split,
        batch_size=batch_size,
        device=args.device,
        progress=args.progress,
        num_folds=args.folds,
        meta={"run": str(loaded.source)},
    )
    written = result.save(out)
    print(result.to_markdown())
    print(f"wrote {', '.join(str(p) for p in written.values())}")
    return 0
