"""The parser of ``pcmr train`` (the run side: :mod:`pcmr.cli.train`)."""

from __future__ import annotations

import argparse

from pcmr.catalog import COMMANDS

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help=COMMANDS["train"][1],
        description=(
            "Train a model from a recipe: a YAML path or the name of a recipe (see `pcmr list recipes`). "
            "The run folder receives the resolved config, a JSONL log, checkpoints and the selected model."
        ),
    )
    parser.add_argument("config", nargs="?", metavar="CONFIG", help="recipe name (e.g. pcme) or YAML path")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value by its dotted key, e.g. --set train.epochs=3 --set model.embed_dim=64 "
        "(repeatable)",
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="train on the dataset in DIR, its format detected from its files: your own images with a "
        "captions.csv / captions.jsonl, a Hugging Face save_to_disk folder, webdataset .tar shards, or a "
        "COCO / Flickr30k / CUB / precomputed folder (sets data.name, data.root and clears the recipe's "
        "data.options; docs/datasets.md)",
    )
    parser.add_argument(
        "--resume",
        metavar="RUN",
        help="continue the run in folder RUN from its newest complete checkpoint (CONFIG is then omitted)",
    )
    parser.add_argument(
        "--out", default="runs", metavar="DIR", help="parent folder of new runs (default: runs)"
    )
    parser.add_argument("--name", metavar="NAME", help="run folder name (default: <recipe>-<date>-<time>)")
    parser.add_argument("--device", metavar="DEVICE", help="torch device, e.g. cpu or cuda (train.device)")
    bars = parser.add_mutually_exclusive_group()
    bars.add_argument("--progress", action="store_true",
                      help="progress bars even when output is not a terminal (train.progress=true)")
    bars.add_argument("--no-progress", action="store_true",
                      help="no progress bars and no per-epoch lines (train.progress=false); by default bars "
                           "are drawn only on a terminal, plain per-epoch lines otherwise")
    parser.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="train in N processes on this machine through torch.distributed.run (DDP; data.batch_size is "
        "the global batch); for several machines use torchrun directly (docs/training.md)",
    )
    return parser
