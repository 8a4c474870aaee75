"""Starting, resuming and finishing a run: the one lifecycle of a run folder.

``pcmr train`` (a new run, or ``--resume RUN``), ``pcmr demo`` and ``pcmr study`` all start runs
through this module, so every training holds the run folder's lock (:class:`pcmr.train.RunLock`),
a resumed run continues from its newest complete checkpoint, and a run folder is never trained
with a config other than its own:

- :func:`start_run`: a new run folder ``OUT/NAME`` from a recipe (refused when the folder exists
  and is not empty); under ``torchrun`` rank 0 makes the folder and tells the others its name;
- :func:`resume_run`: continue ``RUN`` from its own ``config.yaml``; only the keys of
  :data:`RESUME_OVERRIDABLE` may change (they do not change the computation);
- :func:`start_or_resume`: the study's case, a fixed run folder: a new run, the continuation of an
  interrupted one (its saved config must equal the requested one up to
  :data:`RESUME_OVERRIDABLE`), or nothing when its training finished.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pcmr.config import ConfigError, parse_override
from pcmr.train.config import RunConfig, load_config, save_config
from pcmr.train.distributed import broadcast_object, init_distributed
from pcmr.train.lock import LOCK_FILES, RunLock
from pcmr.train.recipes import find_recipe
from pcmr.train.run import CONFIG_FILE, RUN_FILE, check_config, resolve_image_size
from pcmr.train.trainer import Trainer

__all__ = ["RESUME_OVERRIDABLE", "ConfigMismatchError", "config_difference", "is_finished", "remove_run", "resume_run", "start_or_resume",
           "start_run"]

#: config keys that may differ when a run is resumed (they do not change the computation)
RESUME_OVERRIDABLE = ("train.device", "train.progress", "train.log_every", "train.loggers", "data.root",
                      "data.num_workers")


class ConfigMismatchError(ConfigError):
    """A run folder was trained with another config than the one requested (beyond
    :data:`RESUME_OVERRIDABLE`); the message names the first difference."""


def _comparable(config: RunConfig) -> dict[str, Any]:
    data = config.to_dict()
    for key in RESUME_OVERRIDABLE:
        section, name = key.split(".")
        data.get(section, {}).pop(name, None)
    return data


def _first_difference(a: Any, b: Any, prefix: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
    return f"{prefix.rstrip('.')}: {a!r} in the run folder, {b!r} requested"


def config_difference(saved: RunConfig, requested: RunConfig) -> str | None:
    """The first key where two configs differ (ignoring :data:`RESUME_OVERRIDABLE`), or None."""
    left, right = _comparable(saved), _comparable(requested)
    return None if left == right else _first_difference(left, right)


def _clear_run_folder(run_dir: Path) -> None:
    """Delete everything in ``run_dir`` but its lock files (the caller holds the lock)."""
    for entry in run_dir.iterdir():
        if entry.name in LOCK_FILES:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def killed_before_config(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds only what a start killed before its config was written leaves: the
    lock files and temporary files of an unfinished write (``.NAME.X.tmp``), and no config. Such a
    folder is started afresh by the same ``pcmr train --name``; any other file keeps it refused."""
    if not run_dir.is_dir() or (run_dir / CONFIG_FILE).exists():
        return False
    return all(entry.name in LOCK_FILES or (entry.name.startswith(".") and entry.name.endswith(".tmp"))
               for entry in run_dir.iterdir())


def remove_run(run_dir: str | Path) -> None:
    """Delete the run folder ``run_dir`` under its lock (refused with :class:`RunLockedError` while a
    live process trains it). The folder itself goes last, after the lock is released; one that
    another process has filled meanwhile is left in place."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return
    with RunLock(run_dir):
        _clear_run_folder(run_dir)
    with contextlib.suppress(OSError):  # not empty: another run took the folder in the meantime
        run_dir.rmdir()


def is_finished(run_dir: Path) -> bool:
    """Whether ``run_dir``'s summary (``run.json``) says its training finished."""
    summary = Path(run_dir) / RUN_FILE
    if not summary.is_file():
        return False
    try:
        return json.loads(summary.read_text(encoding="utf-8")).get("status") == "finished"
    except (OSError, json.JSONDecodeError):
        return False


def resume_run(run_dir: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Continue ``run_dir`` from its newest complete checkpoint under the run lock; returns the
    run summary. ``overrides`` (``key=value``) may only change :data:`RESUME_OVERRIDABLE` keys."""
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError(f"--resume {run_dir}: not a run folder (no {CONFIG_FILE} in it)")
    for item in overrides:
        if ".".join(parse_override(item)[0]) not in RESUME_OVERRIDABLE:
            raise ConfigError(
                f"--set {item} cannot change a run being resumed; allowed keys: {', '.join(RESUME_OVERRIDABLE)}"
            )
    config = load_config(run_dir / CONFIG_FILE, list(overrides))
    check_config(config)
    with RunLock(run_dir):  # one training process per run folder
        return Trainer(config, run_dir, resume=True).fit()


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, deepest first: the folders that
    creating it makes."""
    missing = []
    for path in (folder, *folder.parents):
        if path.exists():
            break
        missing.append(path)
    return missing


def _remove_empty(folders: Sequence[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty; a folder holding anything stays, and so
    do the ones above it."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def start_run(recipe: str, overrides: Sequence[str], *, out: str | Path = "runs",
              name: str | None = None) -> tuple[dict[str, Any], Path]:
    """Train ``recipe`` (a shipped recipe name or a YAML path) with ``overrides`` into a new run
    folder ``out/name`` (default name: ``<recipe>-<date>-<time>``); returns ``(summary, run_dir)``."""
    path = find_recipe(recipe)
    config = load_config(path, list(overrides))
    check_config(config)
    size_note = resolve_image_size(config)
    context = init_distributed(config.train.device)
    run_dir = Path(out) / (name or f"{path.stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    error = None
    created = _missing_folders(run_dir) if context.is_main else []  # what a failure may take away again
    if context.is_main:  # rank 0 makes the folder; the others learn its name (or the error)
        if run_dir.exists() and any(run_dir.iterdir()) and not killed_before_config(run_dir):
            error = f"run folder {run_dir} already exists; choose another --name or continue it with --resume"
        else:
            run_dir.mkdir(parents=True, exist_ok=True)
    run_dir, error = broadcast_object(context, (run_dir, error))
    if error is not None:
        raise ConfigError(error)
    with RunLock(run_dir):  # one training run per run folder (rank 0 holds the lock)
        if context.is_main:
            if killed_before_config(run_dir):  # a start killed before its config was written: afresh
                _clear_run_folder(run_dir)
            save_config(config, run_dir / CONFIG_FILE)
        # the other ranks write into the folder (the vocabulary) only once rank 0 has cleared it
        broadcast_object(context, None)
        try:
            trainer = Trainer(config, run_dir, context=context)
        except BaseException:  # nothing trained yet: do not leave a half-made run folder behind
            if context.is_main:
                shutil.rmtree(run_dir, ignore_errors=True)
                _remove_empty(created[1:])  # nor an empty --out made for it
            raise
        if context.is_main:
            where = f" in {context.world_size} processes" if context.enabled else ""
            if size_note:
                print(size_note, file=sys.stderr, flush=True)
            print(f"training {path.stem} into {run_dir}{where}", file=sys.stderr, flush=True)
        return trainer.fit(), run_dir


def start_or_resume(config: RunConfig, run_dir: str | Path) -> dict[str, Any] | None:
    """Train ``config`` into the fixed folder ``run_dir``, under the run lock: a new run, or the
    continuation of an interrupted one, or nothing when its training finished (returns None).

    A folder killed before its config was written is started afresh. A folder holding another
    config (beyond :data:`RESUME_OVERRIDABLE`) raises :class:`ConfigMismatchError` naming the first difference.
    """
    run_dir = Path(run_dir)
    saved_path = run_dir / CONFIG_FILE
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(run_dir):
        if not saved_path.is_file():  # new, or killed before its config was written: start afresh
            _clear_run_folder(run_dir)
            save_config(config, saved_path)
            return Trainer(config, run_dir).fit()
        saved = load_config(saved_path)
        difference = config_difference(saved, config)
        if difference is not None:
            raise ConfigMismatchError(f"run folder {run_dir} was trained with another config ({difference}); "
                              f"delete the folder to train it again with this config")
        if is_finished(run_dir):
            return None
        return Trainer(saved, run_dir, resume=True).fit()
