"""``pcmr train CONFIG [--set key=value ...]`` and ``pcmr train --resume RUN``."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pcmr
from pcmr.config import parse_override
from pcmr.train import ConfigError, Trainer, check_config, load_config, save_config
from pcmr.train.lock import RunLock
from pcmr.train.recipes import find_recipe
from pcmr.train.run import CONFIG_FILE

__all__ = ["RESUME_OVERRIDABLE", "add_parser", "run", "start_run"]

# keys that may change when resuming (they do not change the computation)
RESUME_OVERRIDABLE = ("train.device", "train.progress", "train.log_every", "data.root", "data.num_workers")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train a model from a recipe (a shipped recipe name or a YAML path) or resume a run",
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
    return parser


def _extra_overrides(args: argparse.Namespace) -> list[str]:
    extra = list(args.overrides)
    if args.device:
        extra.append(f"train.device={args.device}")
    if args.no_progress:
        extra.append("train.progress=false")
    if args.progress:
        extra.append("train.progress=true")
    return extra


def start_run(
    recipe: str | None,
    overrides: list[str],
    *,
    resume: str | None = None,
    out: str | Path = "runs",
    name: str | None = None,
) -> tuple[dict[str, Any], Path]:
    """Resolve the config, prepare the run folder, train; return ``(summary, run_dir)``."""

    if resume is not None:
        if recipe is not None:
            raise ConfigError("give either CONFIG (a new run) or --resume RUN (continue a run), not both")
        run_dir = Path(resume)
        if not (run_dir / CONFIG_FILE).is_file():
            raise ConfigError(f"--resume {run_dir}: not a run folder (no {CONFIG_FILE} in it)")
        for item in overrides:
            if ".".join(parse_override(item)[0]) not in RESUME_OVERRIDABLE:
                raise ConfigError(
                    f"--set {item} cannot change a run being resumed; allowed keys: {', '.join(RESUME_OVERRIDABLE)}"
                )
        config = load_config(run_dir / CONFIG_FILE, overrides)
        check_config(config)
        with RunLock(run_dir):  # one training process per run folder
            return Trainer(config, run_dir, resume=True).fit(), run_dir

    if recipe is None:
        raise ConfigError("give a recipe (e.g. `pcmr train pcme`, see `pcmr list recipes`) or --resume RUN")
    path = find_recipe(recipe)
    config = load_config(path, overrides)
    check_config(config)
    run_dir = Path(out) / (name or f"{path.stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ConfigError(
            f"run folder {run_dir} already exists; choose another --name or continue it with --resume"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(run_dir):  # one training process per run folder
        save_config(config, run_dir / CONFIG_FILE)
        try:
            trainer = Trainer(config, run_dir)
        except BaseException:  # nothing trained yet: do not leave a half-made run folder behind
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        print(f"training {path.stem} into {run_dir}", file=sys.stderr, flush=True)
        return trainer.fit(), run_dir


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[None]:
    """pcmr's own warnings (a skipped bad checkpoint, a stale lock taken over, skipped data items) as
    ``pcmr train: warning: ...`` lines; other warnings are shown as usual."""
    package = os.path.dirname(os.path.abspath(pcmr.__file__))
    with warnings.catch_warnings():
        previous = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, UserWarning) and os.path.abspath(filename).startswith(package):
                print(f"pcmr train: warning: {message}", file=sys.stderr, flush=True)
            else:
                previous(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def run(args: argparse.Namespace) -> int:
    try:
        with _one_line_warnings():
            summary, run_dir = start_run(
                args.config, _extra_overrides(args), resume=args.resume, out=args.out, name=args.name
            )
    except KeyboardInterrupt:
        if args.resume:
            print(f"continue it with: pcmr train --resume {args.resume}", file=sys.stderr)
        else:
            print("continue it with: pcmr train --resume RUN (the run folder named above)", file=sys.stderr)
        raise
    best = summary.get("best_metric")
    shown = f"{best:.2f}" if isinstance(best, float) else "n/a"
    print(f"run folder: {run_dir}", file=sys.stdout)
    print(
        f"selected epoch {summary.get('best_epoch')} of {summary.get('epochs')} "
        f"({summary.get('select_on')} {shown} on validation, score {summary.get('validation_similarity')})"
    )
    print(f"evaluate it with: pcmr evaluate {run_dir}")
    return 0
