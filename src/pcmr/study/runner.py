"""Running a study: each run trains and evaluates into ``OUT/runs/<name>``, finished runs are
skipped, and the results of every finished run are collected into ``OUT/results.csv``,
``OUT/summary.md``, ``OUT/claims.md`` and the other tables and figures (:func:`collect`).

A run is finished when its marker ``OUT/runs/<name>/study.json`` (the run's result rows) exists:
it is written atomically after training and evaluation, so a study killed at any moment resumes
where it stopped (an interrupted training continues from its newest checkpoint).

One study process works on an ``OUT`` folder at a time: a second ``pcmr study`` with the same
``--out`` is refused (:class:`pcmr.locking.PathLock` on ``OUT``) instead of marking the first one's
runs failed; the runs' own child processes work under their study's lock.

Every run is a fresh child process ``pcmr study FILE --out OUT --only I`` (``workers`` of them at a
time, each with ``OMP_NUM_THREADS`` and torch's thread count set to its share of the cores), so on one
machine its numbers depend only on its config and thread count, never on the runs that happened before
it in the same process (across machines they may differ: each run records its provenance,
:mod:`pcmr.study.provenance`); a child dies with its parent (Linux). After the runs, a study with a
design (:mod:`pcmr.study.design`) trains its drift runs and evaluates its null (:mod:`pcmr.study.steps`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pcmr.evaluation.columns import uncertainty_agreement
from pcmr.locking import PathLock
from pcmr.study import backend
from pcmr.study.analysis import mean_pairwise_spearman
from pcmr.study.benchmark import apply_benchmark, check_benchmark
from pcmr.study.claims import JudgeOptions, judge_claims
from pcmr.study.curves import Curves, curves_markdown, plot_validation_curves, read_curve
from pcmr.study.design import StudyDesign
from pcmr.study.ledger import MARKER, has_weights, restore_ledger, save_null, save_run
from pcmr.study.plots import plot_claims, plot_recipes
from pcmr.study.provenance import provenance, provenance_markdown
from pcmr.study.report import (
    agreement_markdown,
    by_paper_markdown,
    claims_markdown,
    recipes_markdown,
    results_csv,
    summary_markdown,
    times_markdown,
)
from pcmr.study.spec import StudyError, StudyRun, StudySpec
from pcmr.study.steps import (
    DRIFT_DIR,
    check_test_split,
    drift_by_metric,
    drift_markdown,
    drift_runs,
    null_markdown,
    read_null,
    run_null,
)

__all__ = ["MARKER", "StudyOutcome", "collect", "execute_run", "read_marker", "run_study", "threads_per_worker"]

MARKER_FORMAT = 1


@dataclass
class StudyOutcome:
    """What a call of :func:`run_study` did."""

    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)


def drift_parallelism(workers: int, threads: int, cores: int) -> int:
    """How many drift runs of ``threads`` threads run at a time: as many as ``cores`` hold, at least one
    and at most ``workers``."""
    return max(1, min(workers, cores // max(1, threads)))


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """``cores // workers`` (at least 1); ``cores`` defaults to the CPUs this process may use."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // workers)


def run_folder(out: Path, run: StudyRun) -> Path:
    return Path(out) / "runs" / run.name


def read_marker(run_dir: Path) -> dict[str, Any] | None:
    """The marker of a finished run, or None when the run is not finished."""
    path = Path(run_dir) / MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != MARKER_FORMAT or not isinstance(data.get("rows"), list):
        return None
    return data


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def execute_run(spec: StudySpec, run: StudyRun, out: Path) -> dict[str, Any]:
    """Train (or resume) and evaluate one run, then write its marker; returns the marker."""
    run_dir = run_folder(out, run)
    digest = check_test_split(spec, run)  # refused before training where the study asks for distinct captions
    train_seconds = backend.train_run(run.recipe, run.overrides, run_dir)
    record = provenance(torch.get_num_threads(), digest)
    backend.record_provenance(run_dir, record)
    start = time.perf_counter()
    rows = backend.evaluate_run(run_dir, run.similarities, run.rerankers, spec.relevance, spec.analysis)
    ids = {"run": run.name, "recipe": run.label, "variant": run.variant, "seed": run.seed}
    marker = {"format": MARKER_FORMAT, "index": run.index, **ids, "recipe_file": run.recipe,
              "overrides": run.overrides, "train_seconds": train_seconds,
              "eval_seconds": time.perf_counter() - start, "provenance": record,
              "rows": [{**ids, **row} for row in rows]}
    marker = _json_safe(marker)
    if not _parent_alive():  # the study that started this child was killed: leave the run unfinished
        os._exit(1)
    backend.write_text(run_dir / MARKER, json.dumps(marker, indent=1) + "\n")
    return marker


def _child_command(spec: StudySpec, run: StudyRun, out: Path, threads: int) -> list[str]:
    if spec.source is None:
        raise ValueError("a study runs its runs as child processes: it must be read from a file (load_study)")
    part = ["--recipes", ",".join(spec.part)] if spec.part else []  # --only numbers the part's runs
    return [sys.executable, "-m", "pcmr", "study", str(spec.source), "--out", str(Path(out).resolve()),
            *part, "--only", str(run.index), "--threads", str(threads)]


PARENT_ENV = "PCMR_STUDY_PARENT"


def _die_with_parent() -> None:
    """In a child started by :func:`_run_children`: end this process when the study process dies.

    Linux kills it on the parent's death (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), where the kernel
    allows it; a daemon thread also checks the parent every :data:`PARENT_POLL_SECONDS` and ends the
    process once it is gone (sandboxes may refuse or not deliver the signal), and
    :func:`_parent_alive` is asked again just before a run writes its marker, so a run whose study
    was killed is never recorded as finished. Stops at once if the parent is already gone."""
    parent = os.environ.get(PARENT_ENV)
    if not parent:
        return
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # no libc / no prctl: the watchdog alone
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    if not _parent_alive():
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_SECONDS)
            if not _parent_alive():
                os._exit(1)

    threading.Thread(target=watch, name="pcmr-study-parent-watch", daemon=True).start()


PARENT_POLL_SECONDS = 0.1


def _parent_alive() -> bool:
    """True unless this process is a study child whose study process has died (it was re-parented)."""
    parent = os.environ.get(PARENT_ENV)
    return not parent or str(os.getppid()) == parent


def _run_children(spec: StudySpec, pending: list[StudyRun], out: Path, workers: int, threads: int,
                  outcome: StudyOutcome, echo: Callable[[str], None], ledger: Path | None = None) -> None:
    """Run ``pending`` as child processes, ``workers`` at a time; each run that finishes is kept in
    ``ledger`` (its ``runs/<name>``) at once, when one is given."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "NUMBA_NUM_THREADS": str(threads), PARENT_ENV: str(os.getpid())}
    logs = Path(out) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    queue = list(pending)
    active: dict[str, tuple[subprocess.Popen[bytes], Any]] = {}
    started: dict[str, float] = {}
    finished = 0  # of this call's runs (``outcome.ran`` also holds those of an earlier call)
    try:
        while queue or active:
            while queue and len(active) < workers:
                run = queue.pop(0)
                log = open(logs / f"{run.name}.log", "ab")  # closed when the child ends
                process = subprocess.Popen(_child_command(spec, run, out, threads), stdout=log,
                                           stderr=subprocess.STDOUT, env=env)
                active[run.name] = (process, log)
                started[run.name] = time.perf_counter()
                echo(f"[{run.index}] {run.name}: started (pid {process.pid}, {threads} threads)")
            time.sleep(0.2)
            for name, (process, log) in list(active.items()):
                code = process.poll()
                if code is None:
                    continue
                log.close()
                del active[name]
                if code == 0 and read_marker(Path(out) / "runs" / name) is not None:
                    if ledger is not None:
                        save_run(Path(out) / "runs" / name, ledger / "runs" / name)
                    outcome.ran.append(name)
                    finished += 1
                    echo(f"{name}: done in {time.perf_counter() - started[name]:.0f} s "
                         f"({finished} of {len(pending)} finished)")
                else:
                    outcome.failed[name] = f"exit status {code}; see {logs / (name + '.log')}"
                    echo(f"{name}: failed (exit status {code}; log {logs / (name + '.log')})")
    finally:
        for process, _log in active.values():  # interrupted: stop the children this call started
            process.terminate()
        for process, log in active.values():
            process.wait()
            log.close()


def run_study(spec: StudySpec, out: str | Path, *, workers: int = 1, threads: int | None = None,
              only: int | None = None, echo: Callable[[str], None] = print,
              ledger: str | Path | None = None) -> StudyOutcome:
    """Run the unfinished runs of ``spec`` into ``out`` and (unless ``only``) collect the results.

    Args:
        workers: child processes at a time (each runs one run).
        threads: torch / OpenMP threads per run (default: the cores divided by ``workers``).
        only: run number ``only`` alone, in this process (``pcmr study --list`` numbers them), and
            collect nothing.
        ledger: a folder that keeps each finished run's result files, without weights
            (:mod:`pcmr.study.ledger`): its runs are restored into ``out`` first, and every run that
            finishes (drift runs and the null included) is kept there, so that the study resumes from a
            committed ledger on a fresh checkout.
    """
    out = Path(out)
    runs = spec.runs()
    if only is not None and not 0 <= only < len(runs):
        raise ValueError(f"--only {only}: the study has runs 0..{len(runs) - 1} (see --list)")
    threads = threads if threads is not None else threads_per_worker(workers)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    # one study process per --out (its own child processes run under its lock): a second is refused
    child = only is not None and os.environ.get(PARENT_ENV) is not None
    with contextlib.nullcontext() if child else PathLock(out, "running a study into it"):
        return _run_locked(spec, out, runs, workers, threads, only, echo, None if ledger is None else Path(ledger))


def _run_locked(spec: StudySpec, out: Path, runs: list[StudyRun], workers: int, threads: int, only: int | None,
                echo: Callable[[str], None], ledger: Path | None) -> StudyOutcome:
    selected = [runs[only]] if only is not None else runs
    outcome = StudyOutcome()
    if ledger is not None and only is None:
        restored = restore_ledger(ledger, out)
        if restored:
            echo(f"{len(restored)} finished runs restored from the ledger {ledger}")
    pending = []
    for run in selected:
        if read_marker(run_folder(out, run)) is not None:
            outcome.skipped.append(run.name)
        else:
            pending.append(run)
    if outcome.skipped and only is None:
        echo(f"{len(outcome.skipped)} of {len(runs)} runs already finished (skipped)")
    if only is None:
        for run in pending:  # every config checked before anything is trained
            try:
                backend.resolve_config(run.recipe, run.overrides)
            except (ValueError, TypeError, KeyError, FileNotFoundError) as err:
                raise StudyError(f"run {run.index} ({run.name}): {err}") from err
        if spec.design.distinct_test_split and runs:
            check_test_split(spec, runs[0])  # one clear error before anything trains
        _run_children(spec, pending, out, workers, threads, outcome, echo, ledger)
        _design_steps(spec, out, workers, threads, outcome, echo, ledger)
    else:
        _die_with_parent()
        torch.set_num_threads(threads)
        for run in pending:
            echo(f"[{run.index}] {run.name}: training and evaluating ({threads} threads)")
            execute_run(spec, run, out)
            outcome.ran.append(run.name)
    if only is None:
        outcome.written = collect(spec, out)
    return outcome


def _design_steps(spec: StudySpec, out: Path, workers: int, threads: int, outcome: StudyOutcome,
                  echo: Callable[[str], None], ledger: Path | None = None) -> None:
    """After the runs: the drift runs (``OUT/drift``, the drift's thread count) and the null of untrained
    models (``OUT/null``, in this process, alone: with the threads of every worker); see
    :mod:`pcmr.study.steps`."""
    drift = spec.design.drift
    if drift is not None:
        pending = [run for run in drift_runs(spec) if read_marker(run_folder(out / DRIFT_DIR, run)) is None]
        if pending:
            # as many at a time as the cores hold at the drift's thread count (no more than --workers): two
            # runs of 2 threads on 2 cores took 6x as long as one run after the other
            drift_workers = drift_parallelism(workers, drift.threads, threads * workers)
            echo(f"drift: {len(pending)} runs again with {drift.threads} threads, {drift_workers} at a time")
            _run_children(spec, pending, out / DRIFT_DIR, drift_workers, drift.threads, outcome, echo,
                          None if ledger is None else ledger / DRIFT_DIR)
    if spec.design.null is not None:
        torch.set_num_threads(threads * workers)
        sources: dict[str, Path] = {}
        for run in spec.runs():  # the first finished run of each recipe with its model (a run restored from a
            folder = run_folder(out, run)  # ledger has none): its configuration and vocabulary
            if run.label not in sources and read_marker(folder) is not None and has_weights(folder):
                sources[run.label] = folder
        run_null(spec, out, sources, echo)
        if ledger is not None:
            save_null(out, ledger)


def _finished_by_group(spec: StudySpec, out: Path) -> dict[tuple[str, str], list[StudyRun]]:
    """The finished runs of each (recipe label, variant), seeds in study order."""
    groups: dict[tuple[str, str], list[StudyRun]] = {}
    for run in spec.runs():
        if read_marker(run_folder(out, run)) is not None:
            groups.setdefault((run.label, run.variant), []).append(run)
    return groups


def seed_agreement(items: dict[tuple[str, str], list[dict[str, list[float]]]]) -> dict[tuple[str, str], dict[str, float]]:
    """Per (recipe, variant), how well each head's per-item uncertainty ranks agree across seeds:
    ``<side>_uncertainty_agreement`` (trained) and ``..._agreement_untrained`` (the untrained models of
    the same seeds), the mean pairwise Spearman rho (:func:`pcmr.study.analysis.mean_pairwise_spearman`).
    ``items``: the runs' :func:`pcmr.study.backend.read_item_uncertainty` mappings."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key, runs in items.items():
        columns: dict[str, float] = {}
        for side in ("image", "caption"):
            for untrained in (False, True):
                item_key = backend.item_uncertainty_key(side, untrained)
                series = [run[item_key] for run in runs if item_key in run]
                if len(series) >= 2:
                    value = mean_pairwise_spearman(series)
                    if not math.isnan(value):
                        columns[uncertainty_agreement(side, untrained)] = value
        if columns:
            out[key] = columns
    return out


def collect(spec: StudySpec, out: str | Path) -> list[Path]:
    """Write ``results.csv``, ``summary.md``, ``recipes.md``, ``claims.md``, ``times.md``, ``curves.md`` and the
    figures ``claims.png`` (every claim's interval), ``recipes.png`` (the first summary metric of every recipe)
    and ``curves.png`` (validation R-Precision against epochs) from the finished runs."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    markers: list[dict[str, Any]] = []
    missing = []
    curves: Curves = {}
    for run in spec.runs():
        marker = read_marker(run_folder(out, run))
        if marker is None:
            missing.append(run.name)
        else:
            markers.append(marker)
            rows.extend(marker["rows"])
            curves.setdefault((run.label, run.variant), []).append(read_curve(run_folder(out, run)))
    agreement = seed_agreement({key: [backend.read_item_uncertainty(run_folder(out, run)) for run in runs]
                                for key, runs in _finished_by_group(spec, out).items()})
    rows = [{**row, **agreement.get((str(row["recipe"]), str(row["variant"])), {})} for row in rows]
    written = {"results": out / "results.csv", "summary": out / "summary.md", "recipes": out / "recipes.md",
               "claims": out / "claims.md", "by_paper": out / "by_paper.md", "agreement": out / "agreement.md",
               "times": out / "times.md",
               "claims_plot": out / "claims.png",
               "recipes_plot": out / "recipes.png", "curves": out / "curves.md", "curves_plot": out / "curves.png"}
    backend.write_text(written["results"], results_csv(rows))
    backend.write_text(written["summary"], summary_markdown(rows, spec.summary_metrics, title=spec.name,
                                                            level=spec.level, seeds=spec.seeds, missing=missing))
    headline = {entry.label: entry.headline for entry in spec.recipes if entry.headline}
    backend.write_text(written["recipes"], recipes_markdown(rows, spec.summary_metrics, title=spec.name,
                                                            level=spec.level, headline=headline))
    benchmark = check_benchmark(spec.benchmark, rows) if spec.benchmark is not None else None
    null_rows = read_null(spec, out)
    drift_pairs = []
    for run in drift_runs(spec):
        first, second = read_marker(run_folder(out, run)), read_marker(run_folder(out / DRIFT_DIR, run))
        if first is not None and second is not None:
            drift_pairs.append((run.name, first["rows"], second["rows"]))
    drift = drift_by_metric([(a, b) for _, a, b in drift_pairs]) if drift_pairs else {}
    design = spec.design
    options = JudgeOptions(min_skill=design.gate.min_skill if design.gate is not None else None,
                           null_rows=null_rows, drift_rows=[row for _, _, again in drift_pairs for row in again],
                           primary=design.primary,
                           null_source=dict(design.null.same_as or {}) if design.null is not None else {})
    judgements, errors = judge_claims(spec.claims, rows, spec.level, options)
    judgements = apply_benchmark(judgements, benchmark)
    split = None
    if design.distinct_test_split and spec.runs():  # the counts of the split every claim reads
        split = backend.split_counts(spec.runs()[0].recipe, spec.runs()[0].overrides)
    backend.write_text(written["claims"], claims_markdown(judgements, title=spec.name, level=spec.level,
                                                          errors=errors, benchmark=benchmark, design=design,
                                                          split=split))
    backend.write_text(written["by_paper"], by_paper_markdown(judgements, title=spec.name, removed=design.removed))
    if design != StudyDesign():
        claim_metrics = list(dict.fromkeys(c.metric for c in spec.claims))
        extra = {"null": out / "null.md", "drift": out / "drift.md", "provenance": out / "provenance.md"}
        backend.write_text(extra["null"], null_markdown(spec, null_rows, claim_metrics))
        study_threads = ", ".join(sorted({str((m.get("provenance") or {}).get("threads", "?")) for m in markers}))
        backend.write_text(extra["drift"], drift_markdown(spec, drift_pairs, drift, claim_metrics, study_threads,
                                                          judgements=judgements))
        backend.write_text(extra["provenance"], "\n".join(provenance_markdown(markers, title=spec.name)))
        written.update(extra)
    backend.write_text(written["agreement"], agreement_markdown(agreement, title=spec.name))
    drift_markers = [m for m in (read_marker(run_folder(out / DRIFT_DIR, run)) for run in drift_runs(spec)) if m]
    backend.write_text(written["times"], times_markdown(markers, title=spec.name, drift=drift_markers))
    backend.write_text(written["curves"], curves_markdown(curves, title=spec.name))
    plot_claims(judgements, written["claims_plot"])
    plot_validation_curves(curves, written["curves_plot"])
    plot_recipes(rows, written["recipes_plot"], metric=spec.summary_metrics[0],
                 variants=spec.default_variants or tuple(spec.variants), level=spec.level, headline=headline)
    return list(written.values())
