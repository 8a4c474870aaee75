"""The study's steps beyond its runs (``pcmr.study.design``): the test-split check before anything
trains, the null of many untrained models, and the drift runs under a second thread count; and the
tables they write (``null.md``, ``drift.md``).

Files under ``OUT``:

- ``null/<recipe>.csv``: one row per untrained initialisation and relevance mode (columns ``recipe``,
  ``init``, ``relevance`` and the statistics under the trained runs' column names). Written in chunks,
  so a killed study resumes where it stopped.
- ``drift/runs/<name>/``: the drift runs, trained and evaluated as ``runs/<name>`` but with the drift's
  thread count (``pcmr study FILE --out OUT/drift --only I --threads T``).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pcmr.atomic import atomic_write_text
from pcmr.study import backend
from pcmr.study.claims import Judgement
from pcmr.study.report import read_results_csv
from pcmr.study.spec import StudyError, StudyRun, StudySpec

__all__ = ["DRIFT_DIR", "NULL_DIR", "check_test_split", "contrast_drift_lines", "drift_by_metric", "drift_markdown", "drift_runs",
           "null_markdown", "null_recipes", "read_null", "run_null"]

NULL_DIR = "null"
DRIFT_DIR = "drift"
#: initialisations evaluated between two writes of a null file
NULL_CHUNK = 10
_ID = ("run", "recipe", "variant", "seed", "similarity", "rerank", "relevance")


def check_test_split(spec: StudySpec, run: StudyRun) -> str:
    """The digest of ``run``'s test split; with ``distinct_test_split``, a :class:`StudyError` naming
    each fault of the split (repeated caption texts, items relevant to the whole other side)."""
    faults, digest = backend.split_faults(run.recipe, run.overrides)
    if spec.design.distinct_test_split and faults:
        raise StudyError("the study asks for a test split with distinct captions (distinct_test_split: true), "
                         "but " + "; ".join(faults) + ". Deduplicate it (shapes: distinct_captions: true, or the "
                         "multiplicity_distinct preset)")
    return digest


def null_recipes(spec: StudySpec) -> list[str]:
    """The recipes whose null the claims read (side ``a`` of every ``vs_null: true`` claim, or the recipe
    whose null it shares, ``untrained_null.same_as``), in file order: one null per distinct head."""
    null = spec.design.null
    wanted = {null.source(str(claim.a.recipe)) if null is not None else claim.a.recipe
              for claim in spec.claims if claim.null}
    return [entry.label for entry in spec.recipes if entry.label in wanted]


def _null_path(out: Path, recipe: str) -> Path:
    return Path(out) / NULL_DIR / f"{recipe}.csv"


def read_null(spec: StudySpec, out: str | Path) -> list[dict[str, Any]]:
    """Every null row of the study's null recipes found under ``out`` (none where a file is missing)."""
    rows: list[dict[str, Any]] = []
    for recipe in null_recipes(spec):
        path = _null_path(Path(out), recipe)
        if path.is_file():
            rows.extend(read_results_csv(path.read_text(encoding="utf-8")))
    return rows


def _csv(rows: Sequence[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None or (isinstance(v, float) and math.isnan(v)) else v)
                         for k, v in row.items()})
    return buffer.getvalue()


def run_null(spec: StudySpec, out: str | Path, sources: dict[str, Path],
             echo: Callable[[str], None] = print) -> list[Path]:
    """Evaluate the untrained initialisations of every null recipe that are not yet in ``OUT/null``, from the
    configuration of a finished run of it (``sources``: recipe -> run folder; any variant: the learning rate
    and budget do not change an untrained model). Returns the files written; a recipe without a finished
    run is left for later."""
    null = spec.design.null
    if null is None:
        return []
    written = []
    for recipe in null_recipes(spec):
        path = _null_path(Path(out), recipe)
        rows = read_results_csv(path.read_text(encoding="utf-8")) if path.is_file() else []
        wanted = [null.first_seed + i for i in range(null.inits)]
        done = {int(row["init"]) for row in rows}
        missing = [seed for seed in wanted if seed not in done]
        source = sources.get(recipe)
        if source is None and missing:
            echo(f"null of {recipe}: no finished run with its model yet; left for later")
            continue
        for start in range(0, len(missing), NULL_CHUNK):
            assert source is not None  # checked above: missing initialisations need a source run
            chunk = missing[start:start + NULL_CHUNK]
            new = backend.null_statistics(source, spec.relevance, spec.analysis, chunk)
            rows.extend({"recipe": recipe, **row} for row in new)
            atomic_write_text(path, _csv(rows))
            echo(f"null of {recipe}: {len({int(r['init']) for r in rows})} of {null.inits} initialisations")
        if missing or not path.is_file():
            atomic_write_text(path, _csv(rows))
        written.append(path)
    return written


def drift_runs(spec: StudySpec) -> list[StudyRun]:
    """The runs the drift step trains again (``drift``'s recipe, variant and seeds)."""
    drift = spec.design.drift
    if drift is None:
        return []
    return [run for run in spec.runs() if run.label in drift.recipes and run.variant == drift.variant
            and run.seed in drift.seeds]


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in row.items():
        if key in _ID or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not (math.isnan(value) or math.isinf(value)):
            out[key] = float(value)
    return out


def drift_by_metric(pairs: Sequence[tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]]]]) -> dict[str, float]:
    """Per metric, the largest ``|first - second|`` over the matching rows (same similarity, re-ranker and
    relevance) of each pair of result-row lists (a run and its drift run)."""
    drift: dict[str, float] = {}
    for first, second in pairs:
        index = {tuple(str(r.get(k)) for k in ("similarity", "rerank", "relevance")): r for r in second}
        for row in first:
            other = index.get(tuple(str(row.get(k)) for k in ("similarity", "rerank", "relevance")))
            if other is None:
                continue
            values, again = _numbers(row), _numbers(other)
            for key in values.keys() & again.keys():
                drift[key] = max(drift.get(key, 0.0), abs(values[key] - again[key]))
    return drift


def contrast_drift_lines(judgements: Sequence[Judgement]) -> list[str]:
    """The table of each claim's contrast ``a - b`` per seed run twice (study / drift run) and its drift,
    the yardstick of the drift rule; claims whose both sides the drift runs do not hold are listed as not
    measured."""
    table, unmeasured = [], []
    for j in judgements:
        cells = j.cells or (j,)
        for cell in cells:
            name = j.claim.id + (f" [{cell.condition.get('variant', '?')}]" if j.cells else "")
            if not cell.drift_seeds:
                unmeasured.append(name)
                continue
            per_seed = "; ".join(f"s{seed}: {x:+.3f} / {y:+.3f}" for seed, x, y in cell.drift_seeds)
            table.append(f"| {name} | {cell.interval.mean:+.3f} | {cell.drift:.3f} | {per_seed} |")
    lines = ["## Drift of each claim's contrast", ""]
    if table:
        lines += ["| claim [cell] | mean a-b | drift of a-b | a-b per seed (study / drift) |", "|---|---:|---:|---|",
                  *table, ""]
    if unmeasured:
        lines += ["Not measured (the drift runs do not hold both sides): " + ", ".join(unmeasured) + ".", ""]
    return lines


def drift_markdown(spec: StudySpec, pairs: Sequence[tuple[str, Sequence[dict[str, Any]], Sequence[dict[str, Any]]]],
                   drift: dict[str, float], metrics: Sequence[str], threads: str, rerank: str = "nns",
                   judgements: Sequence[Judgement] = ()) -> str:
    """``drift.md``: each drift run's value of ``metrics`` (rows of re-ranker ``rerank``) under both thread
    counts, then the largest difference per metric (what an effect must exceed to read ``holds``)."""
    lines = [f"# {spec.name}: drift under a second thread count", ""]
    if spec.design.drift is None:
        return "\n".join([*lines, "(the study has no drift step)", ""])
    lines += [f"The runs {', '.join(spec.design.drift.recipes)}-{spec.design.drift.variant} (seeds "
              f"{', '.join(map(str, spec.design.drift.seeds))}) trained again with {spec.design.drift.threads} "
              f"torch threads (the study's own runs: {threads}). `max abs diff`: the largest absolute difference of a "
              "metric's level over the runs and all their rows (every similarity); the runs' columns show their first "
              "`nns` row. The level is not what a claim is compared with: each claim's contrast a - b is "
              "(`claims.md`, column `drift`, and the table of contrasts below).", ""]
    if not pairs:
        return "\n".join([*lines, "(no drift run finished)", ""])
    lines += ["| metric | max abs diff | " + " | ".join(f"{name} (study / drift)" for name, _, _ in pairs) + " |",
              "|---|---:|" + "---|" * len(pairs)]
    for metric in metrics:
        if metric not in drift:
            continue
        cells = []
        for _, first, second in pairs:
            a = next((r.get(metric) for r in first if r.get("rerank") == rerank and r.get(metric) is not None), None)
            b = next((r.get(metric) for r in second if r.get("rerank") == rerank and r.get(metric) is not None), None)
            cells.append("-" if a is None or b is None else f"{float(a):.3f} / {float(b):.3f}")
        lines.append(f"| {metric} | {drift[metric]:.3f} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", *(contrast_drift_lines(judgements) if judgements else [])])


def null_markdown(spec: StudySpec, null_rows: Sequence[dict[str, Any]], metrics: Sequence[str]) -> str:
    """``null.md``: per recipe, relevance mode and statistic, the null's size, mean, standard deviation and
    1st / 99th percentiles."""
    lines = [f"# {spec.name}: the null of untrained models", "",
             "Each statistic of untrained initialisations of each recipe's configuration on the test split "
             "(`null/<recipe>.csv`). Claims with `vs_null: true` test the trained seeds' mean against this "
             "sample's (Welch's interval) and report each seed's percentile in it.", "",
             "| recipe | relevance | statistic | inits | mean | sd | p1 | p99 |", "|---|---|---|---:|---:|---:|---:|---:|"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in null_rows:
        groups.setdefault((str(row.get("recipe")), str(row.get("relevance"))), []).append(row)
    for (recipe, relevance), rows in groups.items():
        for metric in metrics:
            values = sorted(float(r[metric]) for r in rows if isinstance(r.get(metric), (int, float))
                            and not math.isnan(float(r[metric])))
            if len(values) < 2:
                continue
            p1 = values[max(0, math.ceil(0.01 * len(values)) - 1)]
            p99 = values[min(len(values) - 1, math.ceil(0.99 * len(values)) - 1)]
            lines.append(f"| {recipe} | {relevance} | {metric} | {len(values)} | {statistics.fmean(values):+.3f} | "
                         f"{statistics.stdev(values):.3f} | {p1:+.3f} | {p99:+.3f} |")
    if not groups:
        lines.append("| (no null computed) | | | 0 | | | | |")
    return "\n".join([*lines, ""])

