"""The parser of ``pcmr convert`` (the run side: :mod:`pcmr.cli.convert`)."""

from __future__ import annotations

import argparse

from pcmr.catalog import COMMANDS

__all__ = ["FORMATS", "add_parser"]

#: the releases whose checkpoints are converted
FORMATS = ("pcme-release",)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "convert",
        help=COMMANDS["convert"][1],
        description="Convert a checkpoint of an official release (pcme-release: github.com/naver-ai/pcme) "
        "into a pcmr model folder with its vocabulary and learned similarity options.",
    )
    parser.add_argument("format", choices=FORMATS, help="which release wrote the checkpoint")
    parser.add_argument("checkpoint", help="the release's checkpoint file (.pth)")
    parser.add_argument("out", help="output folder (model/, vocab.json, similarity_options.json)")
    return parser
