"""The study's outputs: ``results.csv``, ``summary.md`` and ``claims.md``.

``results.csv`` has one row per run x similarity x re-ranker x relevance mode: the identifying
columns :data:`ID_COLUMNS`, then every metric (empty cell where a metric does not apply).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from pcmr.study.claims import NO_DATA, Judgement
from pcmr.study.stats import VERDICTS, mean_interval

__all__ = ["ID_COLUMNS", "claims_markdown", "read_results_csv", "results_csv", "summary_markdown"]

ID_COLUMNS = ("run", "recipe", "variant", "seed", "similarity", "rerank", "relevance")
GROUP_COLUMNS = ("recipe", "variant", "similarity", "rerank")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def results_csv(rows: Sequence[dict[str, Any]]) -> str:
    """CSV text of ``rows`` (full precision; columns: ids, then metrics in order of first appearance)."""
    columns = list(ID_COLUMNS)
    for row in rows:
        columns += [k for k in row if k not in columns]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return buffer.getvalue()


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
        header = ["recipe", "variant", "similarity", "re-ranker", "seeds", *shown]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * 5 + "---:|" * len(shown)]
        for key, group in groups.items():
            cells = [*key, str(len({r["seed"] for r in group}))]
            for metric in shown:
                values = [v for v in (_number(r.get(metric)) for r in group) if v is not None]
                cells.append(_format_interval(values, level))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if not rows:
        lines += ["(no finished runs)", ""]
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:+.2f}"


def claims_markdown(judgements: Sequence[Judgement], *, title: str, level: float = 0.95,
                    errors: dict[str, str] | None = None) -> str:
    """The claims table: one line per claim and condition with the mean difference, its paired
    t-interval and the verdict."""
    pct = f"{100 * level:g} %"
    counts = {v: sum(j.verdict == v for j in judgements) for v in (*VERDICTS, NO_DATA)}
    lines = [f"# {title}: claims", "",
             f"Each claim compares a metric between conditions a and b on paired seeds: the mean of "
             f"a - b and its two-sided {pct} paired t-interval [low, high]. Verdict (margin m, 0 unless "
             "given): a > b expected -> `holds` when low > -m, `reversed` when high < -m; a < b expected -> "
             "`holds` when high < m, `reversed` when low > m; a ~ b (equivalence) -> `holds` when the "
             "interval lies inside (-m, m), `reversed` when it lies entirely outside [-m, m]; "
             f"otherwise `inconclusive` (always with fewer than two seeds); `{NO_DATA}`: no seed was "
             "measured on both sides. See docs/study.md.", "",
             "Totals: " + ", ".join(f"{v} {n}" for v, n in counts.items()), "",
             "| claim | paper | statement | condition | a | b | expect | n | mean a-b | CI | verdict |",
             "|---|---|---|---|---|---|---|---:|---:|---|---|"]
    for j in judgements:
        claim = j.claim
        a = j.a.describe(claim.metric)
        b = "0" if j.b is None else j.b.describe(claim.metric)
        expect = {"greater": ">", "less": "<", "equal": "~"}[claim.expect]
        if claim.margin:
            expect += f" (m={claim.margin:g})"
        condition = ", ".join(f"{k}={v}" for k, v in j.condition.items()) or "-"
        interval = j.interval
        ci = "-" if math.isnan(interval.half_width) else f"[{_fmt(interval.low)}, {_fmt(interval.high)}]"
        lines.append(f"| {claim.id} | {claim.paper} | {claim.statement} | {condition} | {a} | {b} | {expect} | "
                     f"{interval.n} | {_fmt(interval.mean)} | {ci} | {j.verdict} |")
    lines.append("")
    if errors:
        lines += ["Claims not judged:", ""] + [f"- {claim_id}: {reason}" for claim_id, reason in errors.items()] + [""]
    return "\n".join(lines)
