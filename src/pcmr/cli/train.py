"""``pcmr train CONFIG [--set key=value ...] [--nproc N]`` and ``pcmr train --resume RUN``.

``--nproc N`` (N > 1) starts ``N`` processes through ``torch.distributed.run`` (the
``torchrun`` launcher): ``pcmr train RECIPE --nproc 2`` is ``torchrun --standalone
--nproc-per-node 2 -m pcmr train RECIPE --name NAME`` with the run folder name fixed
beforehand. Inside ``torchrun`` (``WORLD_SIZE`` set), rank 0 creates the run folder and
tells the other processes its name.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import main as torchrun_main

import pcmr
from pcmr.data.registry import detect_format
from pcmr.train import ConfigError
from pcmr.train.distributed import shutdown_distributed
from pcmr.train.lifecycle import RESUME_OVERRIDABLE, resume_run
from pcmr.train.lifecycle import start_run as lifecycle_start_run
from pcmr.train.preemption import TrainingInterrupted, resume_command
from pcmr.train.recipes import find_recipe

__all__ = ["RESUME_OVERRIDABLE", "launch", "run", "start_run"]



def data_overrides(data: str) -> list[str]:
    """The ``--set`` items of ``--data DIR``: the detected format as ``data.name``, the folder as
    ``data.root`` (absolute) and no recipe ``data.options`` (they are the built-in data's settings)."""
    root = Path(data).expanduser()
    if not root.exists():
        raise ConfigError(f"--data {data}: no such file or folder")
    return [f"data.name={detect_format(root)}", f"data.root={root.resolve()}", "data.options={}"]


def _extra_overrides(args: argparse.Namespace) -> list[str]:
    if getattr(args, "data", None) and args.resume:
        raise ConfigError("--data names the dataset of a new run; a resumed run keeps its own (data.root may "
                          "be moved with --set data.root=DIR)")
    extra = (data_overrides(args.data) if getattr(args, "data", None) else []) + list(args.overrides)
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
    """A new run (:func:`pcmr.train.lifecycle.start_run`) or ``--resume RUN``
    (:func:`pcmr.train.lifecycle.resume_run`); returns ``(summary, run_dir)``."""

    if resume is not None:
        if recipe is not None:
            raise ConfigError("give either CONFIG (a new run) or --resume RUN (continue a run), not both")
        return resume_run(resume, overrides), Path(resume)
    if recipe is None:
        raise ConfigError("give a recipe (e.g. `pcmr train pcme`, see `pcmr list recipes`) or --resume RUN")
    return lifecycle_start_run(recipe, overrides, out=out, name=name)


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


def _worker_arguments(args: argparse.Namespace, name: str | None) -> list[str]:
    """``pcmr train`` arguments for each process (without ``--nproc``)."""
    argv = ["train"]
    if args.resume:
        argv += ["--resume", str(args.resume)]
    else:
        argv += [args.config, "--out", str(args.out)]
        if name:
            argv += ["--name", name]
        if getattr(args, "data", None):
            argv += ["--data", str(args.data)]
    for item in args.overrides:
        argv += ["--set", item]
    if args.device:
        argv += ["--device", args.device]
    if args.no_progress:
        argv.append("--no-progress")
    if args.progress:
        argv.append("--progress")
    if getattr(args, "debug", False):
        argv.append("--debug")
    return argv


def launch(args: argparse.Namespace) -> int:
    """Run ``pcmr train`` in ``args.nproc`` processes through ``torch.distributed.run``."""


    if args.resume:
        run_dir, name = Path(args.resume), None
    else:
        if args.config is None:
            raise ConfigError("give a recipe (e.g. `pcmr train pcme`, see `pcmr list recipes`) or --resume RUN")
        stem = find_recipe(args.config).stem
        name = args.name or f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir = Path(args.out) / name
    torchrun = ["--standalone", "--nproc-per-node", str(args.nproc), "--module", "pcmr"]
    hint = f"continue it with: {resume_command(run_dir, args.nproc)}"
    try:
        torchrun_main([*torchrun, *_worker_arguments(args, name)])
    except SignalException as exc:
        print(hint, file=sys.stderr)
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        codes = [failure.exitcode for failure in exc.failures.values()]
        code = next((c for c in codes if c and c > 0), 1)
        if code in (128 + 2, 128 + 15):  # stopped by SIGINT / SIGTERM after a checkpoint
            print(hint, file=sys.stderr)
        return code
    return 0  # rank 0 printed the run folder and the evaluate command


def run(args: argparse.Namespace) -> int:

    if args.nproc < 1:
        raise ConfigError(f"--nproc must be >= 1, got {args.nproc}")
    inside_torchrun = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1
    if args.nproc > 1:
        if inside_torchrun:
            raise ConfigError("--nproc starts its own processes; under torchrun leave it out")
        return launch(args)

    try:
        with _one_line_warnings():
            summary, run_dir = start_run(
                args.config, _extra_overrides(args), resume=args.resume, out=args.out, name=args.name
            )
    except TrainingInterrupted as exc:
        print(f"pcmr train: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        if args.resume:
            print(f"continue it with: pcmr train --resume {args.resume}", file=sys.stderr)
        else:
            print("continue it with: pcmr train --resume RUN (the run folder named above)", file=sys.stderr)
        raise
    finally:
        shutdown_distributed()
    if not _is_main_process():
        return 0
    best = summary.get("best_metric")
    shown = f"{best:.2f}" if isinstance(best, float) else "n/a"
    print(f"run folder: {run_dir}", file=sys.stdout)
    print(
        f"selected epoch {summary.get('best_epoch')} of {summary.get('epochs')} "
        f"({summary.get('select_on')} {shown} on validation, score {summary.get('validation_similarity')})"
    )
    print(f"evaluate it with: pcmr evaluate {run_dir}")
    return 0


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0") or 0) == 0
