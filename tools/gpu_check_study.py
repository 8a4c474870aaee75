"""Write the study file of ``tools/gpu_check.sh``: the shipped uncertainty study on ``--device`` (default
cuda), one seed, 2 epochs (a check that a study run trains and evaluates there, not a result).

Usage: ``python tools/gpu_check_study.py OUT.yaml [--device cuda] [--epochs 2] [--max-steps S]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml


def gpu_check_study(device: str = "cuda", epochs: int = 2, max_steps: int | None = None) -> dict:
    """The uncertainty study's YAML mapping with ``train.device`` and ``train.epochs`` set (and
    ``train.max_steps_per_epoch`` when ``max_steps`` is given), seed 0 only, without the drift runs and the power sizing."""
    from pcmr.study import find_study

    raw = yaml.safe_load(find_study("uncertainty").read_text(encoding="utf-8"))
    raw["name"] = f"uncertainty_{device.replace(':', '_')}_check"
    raw["seeds"] = [0]
    for entry in (raw.get("recipes") or {}).values():  # a recipe's own seeds: seed 0 alone as well
        if isinstance(entry, dict) and "seeds" in entry:
            entry["seeds"] = [0]
    raw.pop("power", None)  # seeds sized for a verdict: a device check judges nothing
    raw.pop("drift", None)  # re-runs of other seeds under a second thread count: no part of a device check
    raw["set"] = {**raw.get("set", {}), "train.device": device, "train.epochs": epochs}
    if max_steps is not None:
        raw["set"]["train.max_steps_per_epoch"] = max_steps
    return raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", help="study YAML to write")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=None, help="steps per epoch at most")
    args = parser.parse_args(argv)
    Path(args.out).write_text(yaml.safe_dump(gpu_check_study(args.device, args.epochs, args.max_steps), sort_keys=False),
                              encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
