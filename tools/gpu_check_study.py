"""Write the study file of ``tools/gpu_check.sh``: the shipped uncertainty study on ``--device`` (default
cuda), one seed, 2 epochs (a check that a study run trains and evaluates there, not a result).

Usage: ``python tools/gpu_check_study.py OUT.yaml [--device cuda] [--epochs 2]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml


def gpu_check_study(device: str = "cuda", epochs: int = 2) -> dict:
    """The uncertainty study's YAML mapping with ``train.device`` and ``train.epochs`` set and seed 0 only."""
    from pcmr.study import find_study

    raw = yaml.safe_load(find_study("uncertainty").read_text(encoding="utf-8"))
    raw["name"] = f"uncertainty_{device.replace(':', '_')}_check"
    raw["seeds"] = [0]
    raw["set"] = {**raw.get("set", {}), "train.device": device, "train.epochs": epochs}
    return raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", help="study YAML to write")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)
    Path(args.out).write_text(yaml.safe_dump(gpu_check_study(args.device, args.epochs), sort_keys=False),
                              encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
