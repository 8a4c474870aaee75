"""The study's tables: ``results.csv``, ``summary.md``, ``recipes.md``, ``claims.md`` and ``times.md``.

Every table is printed by the one result layer (:func:`pcmr.report.format_table`, and
:class:`pcmr.report.Report` for ``results.csv``), metric columns titled by the evaluation's column
schema (:data:`STUDY_COLUMNS`).

``results.csv`` has one row per run x similarity x re-ranker x relevance mode: the identifying
columns :data:`ID_COLUMNS`, then every metric (empty cell where a metric does not apply).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pcmr.evaluation.columns import ALL_COLUMNS, uncertainty_agreement
from pcmr.report import Column, ColumnSchema, Report, format_table
from pcmr.study.benchmark import BENCHMARK_NOT_LEARNED, BenchmarkResult, benchmark_markdown
from pcmr.study.claims import AGREEMENT_MIN, NO_DATA, NO_SIGNAL, NOT_LEARNED, UNSTABLE, Judgement
from pcmr.study.design import RemovedClaim, StudyDesign
from pcmr.study.stats import VERDICTS, mean_interval

__all__ = ["ID_COLUMNS", "agreement_markdown", "by_paper_markdown", "claims_markdown", "first_similarities", "read_results_csv", "recipe_metric_table",
           "recipes_markdown", "results_csv", "summary_markdown", "times_markdown"]

ID_COLUMNS = ("run", "recipe", "variant", "seed", "similarity", "rerank", "relevance")
GROUP_COLUMNS = ("recipe", "variant", "similarity", "rerank")
#: the study's rows: its identifying columns, then the evaluation's and the analysis columns
STUDY_COLUMNS = ColumnSchema(id_columns=ID_COLUMNS, columns=(*ALL_COLUMNS.columns, Column("seeds", "seeds")),
                             patterns=ALL_COLUMNS.patterns)


#: the columns of claims.md and times.md (titled by their keys)
CLAIM_COLUMNS = ("claim", "paper", "statement", "condition", "a", "b", "expect", "n", "mean a", "mean b", "mean a-b",
                 "CI", "p", "p rev", "verdict", "Holm")
TIME_COLUMNS = ("recipe", "runs", "train s (median)", "train s (range)", "eval s (median)", "total s")


def _cell(value: Any) -> Any:
    """A CSV cell: NaN as a missing value (as every other missing metric)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def results_csv(rows: Sequence[dict[str, Any]]) -> str:
    """CSV text of ``rows`` (full precision; columns: ids, then metrics in order of first appearance),
    written by the one result type, :class:`pcmr.report.Report`."""
    return Report(rows=[{key: _cell(value) for key, value in row.items()} for row in rows],
                  schema=STUDY_COLUMNS).to_csv()


def read_results_csv(text: str) -> list[dict[str, Any]]:
    """Rows of a ``results.csv`` (numbers parsed; empty cells None)."""
    rows = []
    for raw in csv.DictReader(io.StringIO(text)):
        row: dict[str, Any] = {}
        for key, value in raw.items():
            if value == "":
                row[key] = None
            elif key in ID_COLUMNS and key != "seed":
                row[key] = value
            else:
                try:
                    row[key] = int(value) if key == "seed" else float(value)
                except ValueError:
                    row[key] = value
        rows.append(row)
    return rows


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) or math.isinf(value) else float(value)


def _format_interval(values: Sequence[float], level: float) -> str:
    if not values:
        return "-"
    interval = mean_interval(values, level)
    if interval.n < 2:
        return f"{interval.mean:.2f} (n=1)"
    return f"{interval.mean:.2f} ± {interval.half_width:.2f}"


def summary_markdown(rows: Sequence[dict[str, Any]], metrics: Sequence[str], *, title: str, level: float = 0.95,
                     seeds: Sequence[int] = (), missing: Sequence[str] = ()) -> str:
    """Mean ± half-width of the t-interval over seeds of each metric, one table per relevance mode,
    one line per recipe x variant x similarity x re-ranker."""
    pct = f"{100 * level:g} %"
    lines = [f"# {title}: summary", "",
             f"Mean ± half-width of the two-sided {pct} t-interval over seeds (seeds: "
             f"{', '.join(map(str, seeds)) or '-'}); `n=1`: a single seed, no interval. Every metric of every "
             "run is in `results.csv`.", ""]
    if missing:
        lines += [f"Runs not finished (left out): {', '.join(missing)}", ""]
    modes = list(dict.fromkeys(str(r["relevance"]) for r in rows))
    for mode in modes:
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row in rows:
            if str(row["relevance"]) == mode:
                groups.setdefault(tuple(str(row[c]) for c in GROUP_COLUMNS), []).append(row)
        shown = [m for m in metrics if any(_number(r.get(m)) is not None for g in groups.values() for r in g)]
        lines += [f"## Relevance: {mode}", ""]
        table = []
        for key, group in groups.items():
            cells: dict[str, Any] = {**dict(zip(GROUP_COLUMNS, key)), "seeds": len({r["seed"] for r in group})}
            for metric in shown:
                values = [v for v in (_number(r.get(metric)) for r in group) if v is not None]
                cells[metric] = _format_interval(values, level)
            table.append(cells)
        lines += [format_table(table, [*GROUP_COLUMNS, "seeds", *shown], schema=STUDY_COLUMNS), ""]
    if not rows:
        lines += ["(no finished runs)", ""]
    return "\n".join(lines)


def first_similarities(rows: Sequence[dict[str, Any]], headline: Mapping[str, str] | None = None) -> dict[str, str]:
    """recipe -> its headline similarity: ``headline[recipe]`` where given, else the first that
    appears in ``rows`` for that recipe."""
    first: dict[str, str] = {k: v for k, v in (headline or {}).items() if v is not None}
    for row in rows:
        first.setdefault(str(row["recipe"]), str(row["similarity"]))
    return first


def recipe_metric_table(rows: Sequence[dict[str, Any]], metric: str, level: float = 0.95, rerank: str = "nns",
                        headline: Mapping[str, str] | None = None) -> dict[tuple[str, str, str], tuple[float, float, int]]:
    """``(recipe, variant, relevance) -> (mean, half-width, seeds)`` of ``metric`` for each recipe's
    headline similarity (see :func:`first_similarities`) under ``rerank``.

    The half-width is NaN with a single seed; rows without the metric are left out.
    """
    first_similarity = first_similarities(rows, headline)
    values: dict[tuple[str, str, str], list[float]] = {}
    for row in rows:
        recipe = str(row["recipe"])
        value = row.get(metric)
        if (str(row["similarity"]) != first_similarity[recipe] or str(row["rerank"]) != rerank
                or not isinstance(value, (int, float)) or math.isnan(float(value))):
            continue
        values.setdefault((recipe, str(row["variant"]), str(row["relevance"])), []).append(float(value))
    table = {}
    for key, series in values.items():
        interval = mean_interval(series, level)
        table[key] = (interval.mean, interval.half_width, interval.n)
    return table


def recipes_markdown(rows: Sequence[dict[str, Any]], metrics: Sequence[str], *, title: str,
                     level: float = 0.95, rerank: str = "nns", headline: Mapping[str, str] | None = None) -> str:
    """The headline table: one line per recipe x variant with the recipe's headline similarity
    (see :func:`first_similarities`) under ``rerank``, mean ± half-width over seeds of each metric,
    one table per evaluation relevance mode."""
    first = first_similarities(rows, headline)
    tables = {metric: recipe_metric_table(rows, metric, level, rerank, headline) for metric in metrics}
    shown = [m for m in metrics if tables[m]]
    keys = list(dict.fromkeys((str(r["recipe"]), str(r["variant"])) for r in rows))
    lines = [f"# {title}: every recipe", "",
             f"Each recipe's headline similarity (the study's `headline`, else its first evaluated one) under {rerank.upper()}: mean ± half-width of the "
             f"two-sided {100 * level:g} % t-interval over seeds. All similarities and re-rankers are in "
             "`summary.md` and `results.csv`.", ""]
    for mode in dict.fromkeys(str(r["relevance"]) for r in rows):
        table: list[dict[str, Any]] = []
        for recipe, variant in keys:
            cells = [tables[m].get((recipe, variant, mode)) for m in shown]
            if all(c is None for c in cells):
                continue
            seeds = max(c[2] for c in cells if c is not None)
            text = [None if c is None else (f"{c[0]:.2f}" if math.isnan(c[1]) else f"{c[0]:.2f} ± {c[1]:.2f}")
                    for c in cells]
            table.append({"recipe": recipe, "variant": variant, "similarity": first[recipe], "seeds": seeds,
                          **dict(zip(shown, text))})
        columns = ["recipe", "variant", "similarity", "seeds", *shown]
        lines += [f"## Relevance: {mode}", "", format_table(table, columns, schema=STUDY_COLUMNS), ""]
    if not rows:
        lines += ["(no finished runs)", ""]
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:+.2f}"


def _split_line(split: Mapping[str, Any]) -> str:
    """The test split the claims read, in one line (``pcmr.study.backend.split_counts``)."""
    return (f"- Test split ({split['split']}): {split['images']} images, {split['captions']} captions, "
            f"{split['distinct_texts']} distinct caption texts; {split['captions_relevant_to_every_image']} captions "
            f"relevant to every image, {split['images_relevant_to_every_caption']} images relevant to every "
            f"caption; digest {split['digest']}.")


def _design_lines(design: StudyDesign | None, split: Mapping[str, Any] | None = None) -> list[str]:
    """The pre-registered design of ``claims.md``: the skill gate, the null, the drift step, the primary
    family and the claims removed (with why)."""
    if design is None or design == StudyDesign():
        return []
    lines = ["## Design (fixed in the study file before the runs)", ""]
    if design.gate is not None:
        lines.append(f"- Skill gate: every model a claim reads reaches skill (R-P - QB) / (100 - QB) >= "
                     f"{design.gate.min_skill:g} on the mean over seeds, in each direction the claim reads, "
                     f"under the claim's own training relevance, evaluation relevance and cell; otherwise "
                     f"`{NOT_LEARNED}` (column `gate`).")
    if design.null is not None:
        shared = "; ".join(f"{k} reads the null of {v}" for k, v in (design.null.same_as or {}).items())
        lines.append(f"- Null: {design.null.inits} untrained initialisations per distinct head (`null.md`"
                     f"{'; ' + shared if shared else ''}); a claim against the null compares the trained seeds' "
                     "mean with the null's (Welch) and gives each seed's percentile in it (column `null pct`).")
    if design.drift is not None:
        lines.append(f"- Drift: {', '.join(design.drift.recipes)}-{design.drift.variant}, seeds "
                     f"{', '.join(map(str, design.drift.seeds))}, trained again with {design.drift.threads} "
                     "threads (`drift.md`); a `holds` or `reversed` whose effect is smaller than the drift of its "
                     "own contrast a - b (largest change over the seeds run twice; column `drift`) reads `equal`; "
                     "not measured where the drift runs do not hold both sides.")
    if design.power is not None:
        lines.append(f"- Seeds: each claim's from the pilot sd of its per-seed differences and its minimum effect "
                     f"(else margin) at power {design.power.power:g}, one-sided level (1 - level) / 2 (divided by "
                     f"the primary family's size for a primary claim), at most {design.power.max_seeds} seeds "
                     "(the study file's header gives the computation).")
    if design.primary is not None:
        lines.append(f"- Primary family ({len(design.primary)} claims; Holm's correction over them alone): "
                     f"{', '.join(design.primary)}. Every other claim is secondary, uncorrected.")
    if design.distinct_test_split:
        lines.append("- The test split holds each caption text once and no item relevant to the whole other "
                     "side (checked before training).")
    if split:
        lines.append(_split_line(split))
    lines.append("")
    if design.removed:
        lines += ["Claims removed because the data cannot test them:", ""]
        lines += [f"- {entry.id}: {entry.reason}" for entry in design.removed] + [""]
    return lines


def _p_text(p: float) -> str:
    return "-" if math.isnan(p) else (f"{p:.3f}" if p >= 0.001 else "<0.001")


def cell_text(cell: Judgement) -> str:
    """One cell of a swept claim: ``variant: verdict mean [low, high], gate`` (the gate's failures, or
    ``gate passed``)."""
    interval = cell.interval
    ci = "" if math.isnan(interval.half_width) else f" [{_fmt(interval.low)}, {_fmt(interval.high)}]"
    gate = ("gate: " + ", ".join(f.describe() for f in cell.gate_failures)) if cell.gate_failures else \
        ("gate passed" if cell.gate else "")
    return f"{cell.condition.get('variant', '?')}: {cell.verdict} {_fmt(interval.mean)}{ci}" + (f", {gate}" if gate else "")


def _percentiles(values: Sequence[float]) -> str:
    return ", ".join("-" if math.isnan(v) else f"{v:.0f}" for v in values)


def claims_markdown(judgements: Sequence[Judgement], *, title: str, level: float = 0.95,
                    errors: dict[str, str] | None = None, benchmark: BenchmarkResult | None = None,
                    design: StudyDesign | None = None, split: Mapping[str, Any] | None = None) -> str:
    """The claims table: one line per claim and condition with the mean difference, its paired
    t-interval and the verdict; first the benchmark check (``pcmr.study.benchmark``) where the study has one."""
    pct = f"{100 * level:g} %"
    kinds = (*VERDICTS, UNSTABLE, NOT_LEARNED, NO_SIGNAL, NO_DATA, BENCHMARK_NOT_LEARNED)
    counts = {v: sum(j.verdict == v for j in judgements) for v in kinds}
    holm_counts = {v: sum(j.holm == v for j in judgements) for v in kinds}
    lines = [f"# {title}: claims", "",
             f"Each claim compares a metric between conditions a and b on paired seeds: the mean of "
             f"a - b and its two-sided {pct} paired t-interval [low, high]. Verdict (margin m, 0 unless "
             "given): a > b expected -> `holds` when low > -m, `reversed` when high < -m; a < b expected -> "
             "`holds` when high < m, `reversed` when low > m; a ~ b (equivalence) -> `holds` when the "
             "interval lies inside (-m, m), `reversed` when it lies entirely outside [-m, m]; "
             "otherwise `inconclusive` (always with fewer than two seeds). A claim with a minimum effect e "
             "reads `equal` when its interval lies inside (-e, e), else `holds` when the interval excludes "
             "zero on the expected side (e sets the seeds, by power, not the verdict's bound). "
             f"`{UNSTABLE}`: a claim judged in several cells (learning rates, "
             f"budgets) whose cells disagree; `{NO_SIGNAL}`: a claim about an uncertainty head that learned "
             f"nothing (its per-item ranks agree across seeds less than rho {AGREEMENT_MIN:g}, or, in results "
             f"without that column, its per-run gate failed); `{NOT_LEARNED}`: a model the claim reads ranks no "
             "better than the skill gate asks in a direction the claim reads (column `gate`); "
             f"`{NO_DATA}`: no seed was measured on both sides. The gate reads each trained model's own "
             "(nns) ranking, never a re-ranker's; `re-ranked skill` gives what a re-ranker made of it, and "
             "`matching` in how many rows a matching (RGM) was used at all (its selected lambda finite). "
             "`drift`: the largest change of the claim's own a - b over the seeds run again under another "
             "thread count; a `holds` or `reversed` smaller than it reads `equal`. "
             "`p`: one-sided p-value of the hypothesis the claim states (superiority over zero, "
             "non-inferiority at the margin m, equivalence by two one-sided tests at m; the largest over a "
             "claim's cells); `p rev`: of its reversal. `Holm`: the verdict after Holm's correction at "
             f"{(1 - level) / 2:g} (one-sided) over the claims' own p-values (the reversal's for a `reversed`); "
             "a `holds` or `reversed` it does not reject reads `inconclusive`. `cells`: each cell's verdict, "
             "interval and gate. `relevance=any`: values identical under "
             f"every relevance mode, judged once. Where some verdict is `{NO_SIGNAL}`, the column "
             "`without the gate` gives the verdict its interval alone would give. See docs/study.md.", "",
             *_design_lines(design, split),
             *(benchmark_markdown(benchmark) if benchmark is not None else []),
             "Totals: " + ", ".join(f"{v} {n}" for v, n in counts.items() if n or v in VERDICTS),
             "",
             "After Holm: " + ", ".join(f"{v} {n}" for v, n in holm_counts.items() if n or v in VERDICTS), ""]
    table: list[dict[str, Any]] = []
    for j in judgements:
        claim = j.claim
        a = j.a.describe(claim.metric)
        b = (f"null of untrained {j.a.recipe}" if claim.null else
             "0" if j.b is None else j.b.describe(claim.metric))
        expect = {"greater": ">", "less": "<", "equal": "~"}[claim.expect]
        if claim.margin:
            expect += f" (m={claim.margin:g})"
        condition = ", ".join(f"{k}={v}" for k, v in j.condition.items()) or "-"
        interval = j.interval
        ci = "-" if math.isnan(interval.half_width) else f"[{_fmt(interval.low)}, {_fmt(interval.high)}]"
        if claim.min_effect:
            expect += f" (e={claim.min_effect:g})"
        p = _p_text(j.p_value)
        cells = "; ".join(cell_text(c) for c in j.cells)
        table.append({"claim": claim.id, "paper": claim.paper, "statement": claim.statement, "condition": condition,
                      "a": a, "b": b, "expect": expect, "n": interval.n, "mean a": _fmt(j.mean_a),
                      "mean b": _fmt(j.mean_b), "mean a-b": _fmt(interval.mean), "CI": ci, "p": p,
                      "verdict": j.verdict, "Holm": j.holm or j.verdict, "cells": cells, "without the gate": j.ungated,
                      "family": j.family, "gate": j.gate, "null pct": "; ".join(f"{c.condition.get('variant', '?')}: {_percentiles(c.null_percentiles)}"
                                    for c in j.cells if c.null_percentiles) if j.cells
                      else _percentiles(j.null_percentiles),
                      "null n": j.null_size or "", "drift": "not measured" if math.isnan(j.drift) else f"{j.drift:.3f}",
                      "p rev": _p_text(j.p_reversed), "re-ranked skill": j.reranked, "matching": j.matching})
    gated = any(j.verdict in (NO_SIGNAL, NOT_LEARNED) for j in judgements)
    swept = any(j.cells for j in judgements)
    extra = tuple(name for name, shown in (("family", any(j.family for j in judgements)),
                                           ("gate", any(j.gate for j in judgements)),
                                           ("null pct", any(j.null_percentiles for j in judgements)),
                                           ("null n", any(j.null_size for j in judgements)),
                                           ("drift", design is not None and design.drift is not None
                                            or any(not math.isnan(j.drift) for j in judgements)),
                                           ("re-ranked skill", any(j.reranked for j in judgements)),
                                           ("matching", any(j.matching for j in judgements))) if shown)
    lines += [format_table(table, CLAIM_COLUMNS + (("cells",) if swept else ()) + extra
                           + (("without the gate",) if gated else ())), ""]
    if errors:
        lines += ["Claims not judged:", ""] + [f"- {claim_id}: {reason}" for claim_id, reason in errors.items()] + [""]
    return "\n".join(lines)


def paper_name(paper: str) -> str:
    """The paper a claim's ``paper`` field names, without the table or figure it cites: the text before
    its first `` (`` or ``,`` (``"HAL/RGM (mitigating visual semantic hubs), Tab. 3"`` -> ``"HAL/RGM"``)."""
    name = paper.split(" (", 1)[0].split(",", 1)[0].strip()
    return name or "-"


BY_PAPER_COLUMNS = ("paper", "judged", "decided", "inconclusive", "other", "not judged", "verdicts", "not judged, why",
                    "not learned")
#: the verdicts that decide a claim (after Holm's correction for a primary claim)
DECIDED = ("holds", "reversed", "equal")


def _short_cell(cell: Judgement) -> str:
    """``variant: verdict mean`` of one cell, with ``gate failed`` where a model failed the gate in it."""
    failed = ", gate failed" if cell.gate_failures else ""
    return f"{cell.condition.get('variant', '?')} {cell.verdict} {_fmt(cell.interval.mean)}{failed}"


def _stopped_by_gate(group: Sequence[Judgement]) -> list[str]:
    """Each model and direction that failed the skill gate once, with the claims it left ``not learned``."""
    failed: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for j in group:
        if j.verdict != NOT_LEARNED:
            continue
        for failure in j.gate_failures:
            entry = failed.setdefault((failure.model, failure.direction), (failure.describe(), []))
            if j.claim.id not in entry[1]:
                entry[1].append(j.claim.id)
    return [f"{text}: {', '.join(ids)}" for text, ids in failed.values()]


def by_paper_markdown(judgements: Sequence[Judgement], *, title: str,
                      removed: Sequence[RemovedClaim] = ()) -> str:
    """One row per paper (in the order of its first claim, then the papers with removed claims alone):
    how many of its claims were judged, how many of those were decided (``holds``, ``reversed`` or
    ``equal``, after Holm's correction for a primary claim), how many read ``inconclusive`` and how many
    anything else (``unstable``, ``not learned``, ``no signal``, ``no data``); how many were not judged
    (removed from the study file, each with its reason); its claims grouped by verdict (each with the
    verdict after Holm's correction where that differs) and, for the claims that read ``not learned``,
    each model and direction that failed the skill gate once, with its skill and the claims it stopped
    (``Judgement.gate_failures``). Cells break lines with ``<br>``."""
    papers: dict[str, list[Judgement]] = {}
    for judgement in judgements:
        papers.setdefault(paper_name(judgement.claim.paper), []).append(judgement)
    not_judged: dict[str, list[RemovedClaim]] = {}
    for entry in removed:
        not_judged.setdefault(paper_name(entry.paper), []).append(entry)
    order = (*VERDICTS, UNSTABLE, NO_SIGNAL, NOT_LEARNED, NO_DATA)
    table = []
    for paper in dict.fromkeys([*papers, *not_judged]):
        group = papers.get(paper, [])
        by_verdict: dict[str, list[str]] = {}
        for j in group:
            holm = j.holm or j.verdict
            cells = f" (cells: {'; '.join(_short_cell(c) for c in j.cells)})" if j.cells else ""
            by_verdict.setdefault(j.verdict, []).append(j.claim.id + (f" (Holm: {holm})" if holm != j.verdict else "")
                                                        + cells)
        kinds = sorted(by_verdict, key=lambda v: order.index(v) if v in order else len(order))
        verdicts = [f"**{kind}** ({len(by_verdict[kind])}): {', '.join(by_verdict[kind])}" for kind in kinds]
        final = [j.holm or j.verdict for j in group]
        decided = sum(v in DECIDED for v in final)
        inconclusive = sum(v == "inconclusive" for v in final)
        out = not_judged.get(paper, [])
        table.append({"paper": paper, "judged": len(group), "decided": decided, "inconclusive": inconclusive,
                      "other": len(group) - decided - inconclusive, "not judged": len(out),
                      "verdicts": "<br>".join(verdicts) or "-",
                      "not judged, why": "<br>".join(f"{e.id}: {e.reason}" for e in out) or "-",
                      "not learned": "<br>".join(_stopped_by_gate(group)) or "-"})
    lines = [f"# {title}: claims by paper", "",
             "For each paper: its claims judged, how many were decided (`holds`, `reversed` or `equal`, after "
             "Holm's correction for a primary claim), how many read `inconclusive`, how many anything else "
             "(`unstable`, `not learned`, `no signal`, `no data`), and how many the study file removed before "
             "any run, each with its reason (`not judged, why`). `verdicts` groups the judged claims by verdict "
             "(`claims.md` gives every number); a claim judged in cells lists each cell's verdict and mean "
             "difference, and whether a model failed the gate in it. `not learned` lists each "
             "model (recipe/variant/similarity/re-ranker/relevance) and direction that failed the skill gate, "
             "its skill over the query-blind ranking, and the claims it left `not learned`.", ""]
    return "\n".join([*lines, format_table(table, BY_PAPER_COLUMNS), ""])


AGREEMENT_COLUMNS = ("recipe", "variant", "head", "agreement", "untrained", "gate")


def agreement_markdown(agreement: Mapping[tuple[str, str], Mapping[str, float]], *, title: str) -> str:
    """How well each uncertainty head's per-item ranks agree across seeds (mean pairwise Spearman rho),
    trained and untrained, and whether the claims about that head are judged (agreement of at least
    the gate's minimum)."""
    lines = [f"# {title}: agreement of uncertainty across seeds", "",
             "For each recipe and variant, each head's per-item uncertainty on the test split is ranked in "
             "every seed; `agreement` is the mean Spearman rho over every pair of seeds, `untrained` the same "
             "for the untrained models of those seeds. Claims about what a head's uncertainty means are "
             f"judged only where its agreement reaches {AGREEMENT_MIN:g} (`gate`); elsewhere they read "
             f"`{NO_SIGNAL}`. The rule is the same for every recipe, sampled or closed-form.", ""]
    table: list[dict[str, Any]] = []
    for (recipe, variant), columns in agreement.items():
        for side in ("image", "caption"):
            value = columns.get(uncertainty_agreement(side))
            if value is None:
                continue
            untrained = columns.get(uncertainty_agreement(side, untrained=True))
            table.append({"recipe": recipe, "variant": variant, "head": side, "agreement": f"{value:.2f}",
                          "untrained": "-" if untrained is None else f"{untrained:.2f}",
                          "gate": "judged" if value >= AGREEMENT_MIN else NO_SIGNAL})
    if not table:
        lines += ["(no head with per-item uncertainty in two or more seeds)", ""]
        return "\n".join(lines)
    lines += [format_table(table, AGREEMENT_COLUMNS), ""]
    return "\n".join(lines)


def _times_row(label: str, times: Sequence[tuple[float, float]]) -> dict[str, Any]:
    train_times = [t for t, _ in times]
    eval_times = [e for _, e in times]
    return {"recipe": label, "runs": len(times), "train s (median)": round(statistics.median(train_times)),
            "train s (range)": f"{min(train_times):.0f}-{max(train_times):.0f}",
            "eval s (median)": round(statistics.median(eval_times)), "total s": round(sum(train_times) + sum(eval_times))}


def _timed(markers: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    by_recipe: dict[str, list[tuple[float, float]]] = {}
    for marker in markers:
        train, evaluate = _number(marker.get("train_seconds")), _number(marker.get("eval_seconds"))
        if train is not None and evaluate is not None:  # a record without its times is left out
            by_recipe.setdefault(str(marker.get("recipe")), []).append((train, evaluate))
    return by_recipe


def times_markdown(markers: Sequence[Mapping[str, Any]], *, title: str,
                   drift: Sequence[Mapping[str, Any]] = (), workers: int = 2) -> str:
    """The time table: per recipe, the number of finished runs, the median and range of their
    training seconds, the median evaluation seconds and the total; the drift runs in rows of their own;
    then the sum over every run, over the drift runs, and the wall time that makes with ``workers`` runs
    at a time and the drift runs one at a time.

    ``markers`` (and ``drift``) are the finished runs' records (``runs/<name>/study.json``: ``recipe``,
    ``train_seconds``, ``eval_seconds``, ``provenance.threads``). The times are each run's own, measured
    in its process; process start-up and the null's evaluation are not in them."""
    by_recipe = _timed(markers)
    lines = [f"# {title}: time per run", "",
             "Seconds measured by each run (training, then evaluation), summed per recipe; the drift runs "
             "(the same runs again at another thread count) in rows of their own. Process start-up and the "
             "evaluation of untrained models for a null are not included.", ""]
    table = [_times_row(recipe, by_recipe[recipe]) for recipe in sorted(by_recipe)]
    drift_by_recipe = _timed(drift)
    threads = sorted({str((m.get("provenance") or {}).get("threads", "?")) for m in drift})
    table += [_times_row(f"drift: {recipe} ({', '.join(threads)} threads)", drift_by_recipe[recipe])
              for recipe in sorted(drift_by_recipe)]
    if not table:
        table.append({"recipe": "(no finished runs)", "runs": 0, "train s (median)": None, "train s (range)": None,
                      "eval s (median)": None, "total s": 0})
    lines.append(format_table(table, TIME_COLUMNS))
    runs = sum(len(v) for v in by_recipe.values())
    total = math.fsum(t + e for times in by_recipe.values() for t, e in times)
    lines += ["", f"All {runs} runs: {total:.0f} s ({total / 3600:.2f} h) of run time."]
    if drift_by_recipe:
        drift_runs = sum(len(v) for v in drift_by_recipe.values())
        drift_total = math.fsum(t + e for times in drift_by_recipe.values() for t, e in times)
        wall = total / workers + drift_total
        lines += [f"Drift runs: {drift_runs} runs, {drift_total:.0f} s ({drift_total / 3600:.2f} h).",
                  f"Wall time with `--workers {workers}` (the runs {workers} at a time, the drift runs one at a "
                  f"time): about {wall:.0f} s ({wall / 3600:.2f} h)."]
    else:
        wall = total / workers
        lines += [f"Wall time with `--workers {workers}`: about {wall:.0f} s ({wall / 3600:.2f} h)."]
    lines.append("")
    return "\n".join(lines)
