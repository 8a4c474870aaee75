"""A study's ledger: the result files of its finished runs, without weights, in a folder that can be
committed, so that a study of many hours resumes on a fresh checkout (``pcmr study ... --ledger DIR``).

A study folder ``OUT`` holds each run's weights and checkpoints, which are large and never committed;
once a run has finished, the study reads only a few small files of it: its marker ``study.json`` (the
result rows), ``item_uncertainty.json`` (seed agreement), ``run.json`` (validation curves, provenance),
``config.yaml``, ``vocab.json`` and ``similarity_options.json``. The ledger keeps exactly those:

- ``DIR/runs/<name>/``: each finished run, copied there the moment it finishes (the marker last, so a
  ledger run without its marker is ignored like an unfinished run);
- ``DIR/drift/runs/<name>/``: the drift runs likewise;
- ``DIR/null/<recipe>.csv``: the untrained initialisations evaluated so far.

Before a study starts, every ledger run that ``OUT`` lacks is copied into ``OUT`` (the marker last), so
the study skips it and collects it with the others. A run restored this way has no weights: the null of
untrained models reads its configuration from a run that has them (any finished run of the recipe), and
is left for later when none has (its ledger file keeps the initialisations already done).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pcmr.atomic import atomic_write_bytes
from pcmr.study.steps import DRIFT_DIR, NULL_DIR

__all__ = ["LEDGER_FILES", "MARKER", "has_weights", "restore_ledger", "save_null", "save_run"]

#: a run is finished when its marker (its result rows) exists
MARKER = "study.json"
#: the files of a finished run that the study reads, the marker last (it says the run is finished)
LEDGER_FILES = ("config.yaml", "vocab.json", "similarity_options.json", "run.json", "item_uncertainty.json", MARKER)
#: the sub-folders of a study folder whose runs the ledger keeps
RUN_GROUPS = ("runs", f"{DRIFT_DIR}/runs")


def _copy_files(source: Path, target: Path) -> int:
    """Copy the :data:`LEDGER_FILES` that ``source`` holds into ``target`` (each atomically, the marker
    last); returns how many were copied."""
    copied = 0
    for name in LEDGER_FILES:
        path = source / name
        if path.is_file():
            atomic_write_bytes(target / name, path.read_bytes())
            copied += 1
    return copied


def save_run(run_dir: Path, ledger_run_dir: Path) -> None:
    """Keep a finished run's result files (not its weights) in the ledger."""
    if not (Path(run_dir) / MARKER).is_file():
        raise FileNotFoundError(f"{run_dir}: not a finished run (no {MARKER}); nothing is kept in the ledger")
    Path(ledger_run_dir).mkdir(parents=True, exist_ok=True)
    _copy_files(Path(run_dir), Path(ledger_run_dir))


def save_null(out: Path, ledger: Path) -> list[Path]:
    """Keep the untrained null's files of ``OUT/null`` in the ledger; returns the files kept."""
    kept = []
    for path in sorted((Path(out) / NULL_DIR).glob("*.csv")):
        target = Path(ledger) / NULL_DIR / path.name
        atomic_write_bytes(target, path.read_bytes())
        kept.append(target)
    return kept


def _rows(path: Path) -> int:
    return max(0, len(path.read_text(encoding="utf-8").splitlines()) - 1) if path.is_file() else 0


def restore_ledger(ledger: Path, out: Path) -> list[str]:
    """Copy into ``OUT`` every finished run of the ledger that ``OUT`` does not hold finished, and each null
    file of the ledger that holds more initialisations than ``OUT``'s; returns the runs restored
    (``runs/<name>`` or ``drift/runs/<name>``). A ledger folder that does not exist restores nothing."""
    ledger, out = Path(ledger), Path(out)
    restored = []
    for group in RUN_GROUPS:
        folder = ledger / group
        if not folder.is_dir():
            continue
        for source in sorted(p for p in folder.iterdir() if p.is_dir()):
            target = out / group / source.name
            if not (source / MARKER).is_file() or (target / MARKER).is_file():
                continue
            if any((target / name).exists() for name in ("model", "checkpoints")):
                continue  # an unfinished run with its own checkpoints here: it resumes from them, nothing is lost
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            _copy_files(source, target)
            restored.append(f"{group}/{source.name}")
    for path in sorted((ledger / NULL_DIR).glob("*.csv")):
        target = out / NULL_DIR / path.name
        if _rows(path) > _rows(target):
            atomic_write_bytes(target, path.read_bytes())
    return restored


def has_weights(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds its selected model (a run restored from a ledger holds none)."""
    return (Path(run_dir) / "model").is_dir()
