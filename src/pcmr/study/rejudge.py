"""The committed runs of a study re-judged under the study file's current rules: **exploratory**.

A study's verdicts are decided by rules fixed before its runs. When the rules change after results were
seen, re-judging those results under the new rules may show what the new rules do, but it is not a
verdict: the rules were chosen knowing the outcome. :func:`rejudge_markdown` writes the comparison
(the committed verdict of each claim beside the one the current study file's claims and rules give on
the same rows) for ``docs/study.md``, where a results block (``rejudge=``) keeps it current.

What it reads: ``results.csv``, ``claims.md`` (the committed verdicts), ``null/*.csv`` and ``study.yaml``
(the study file the runs were judged under) of the committed results folder, and the current study file.
The committed drift rows of each run are not in the folder (``drift.md`` holds levels, not contrasts), so
the drift of each claim's contrast is not measured here and the drift rule does not apply.
"""

from __future__ import annotations

import math
from pathlib import Path

from pcmr.report import format_table
from pcmr.study.claims import Judgement, JudgeOptions, judge_claims
from pcmr.study.report import read_results_csv
from pcmr.study.spec import load_study

__all__ = ["committed_verdicts", "rejudge_markdown"]

REJUDGE_COLUMNS = ("claim", "family", "committed", "re-judged", "effect (was)", "p (was)", "cells", "matching")


def committed_verdicts(claims_md: str) -> dict[str, dict[str, str]]:
    """Per claim id, the cells of its first row in a committed ``claims.md`` table."""
    lines = claims_md.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| claim |")), None)
    if start is None:
        return {}
    header = [c.strip() for c in lines[start].strip().strip("|").split("|")]
    out: dict[str, dict[str, str]] = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        row = dict(zip(header, (c.strip() for c in line.strip().strip("|").split("|"))))
        out.setdefault(row["claim"], row)
    return out


def _verdict(verdict: str, holm: str) -> str:
    return verdict if holm in ("", verdict) else f"{verdict} (Holm: {holm})"


def _p(p: float) -> str:
    return "-" if math.isnan(p) else (f"{p:.3f}" if p >= 0.001 else "<0.001")


def _cells(judgement: Judgement) -> str:
    return "<br>".join(f"{c.condition.get('variant', '?')}: {c.verdict} {c.interval.mean:+.2f}"
                       + (" (gate failed)" if c.gate_failures else "") for c in judgement.cells) or "-"


def rejudge_markdown(results: Path, study_file: Path, label: str = "") -> str:
    """The exploratory table: every claim of ``study_file`` judged on the committed rows of ``results``
    under ``study_file``'s rules, beside its committed verdict; then the committed claims the current file
    removed (with their committed verdict). ``label``: how the text names the results folder."""
    spec = load_study(study_file)
    ran = load_study(results / "study.yaml")
    rows = read_results_csv((results / "results.csv").read_text(encoding="utf-8"))
    null_rows = []
    if (results / "null").is_dir():
        for path in sorted((results / "null").glob("*.csv")):
            null_rows += read_results_csv(path.read_text(encoding="utf-8"))
    design = spec.design
    options = JudgeOptions(min_skill=design.gate.min_skill if design.gate is not None else None,
                           null_rows=null_rows, primary=design.primary,
                           null_source=dict(design.null.same_as or {}) if design.null is not None else {})
    judgements, errors = judge_claims(spec.claims, rows, spec.level, options)
    committed = committed_verdicts((results / "claims.md").read_text(encoding="utf-8"))
    before = {claim.id: claim for claim in ran.claims}
    table = []
    for j in judgements:
        old = committed.get(j.claim.id, {})
        was = before.get(j.claim.id)
        effect = j.claim.min_effect or j.claim.margin
        old_effect = (was.min_effect or was.margin) if was is not None else math.nan
        table.append({"claim": j.claim.id, "family": j.family or "-",
                      "committed": _verdict(old.get("verdict", "-"), old.get("Holm", "")),
                      "re-judged": _verdict(j.verdict, j.holm),
                      "effect (was)": f"{effect:g} ({old_effect:g})",
                      "p (was)": f"{_p(j.p_value)} ({old.get('p', '-')})", "cells": _cells(j),
                      "matching": j.matching.replace("; ", "<br>") or "-"})
    counts: dict[str, int] = {}
    for j in judgements:
        counts[j.verdict] = counts.get(j.verdict, 0) + 1
    removed = [f"{claim_id} (committed: {_verdict(row.get('verdict', '-'), row.get('Holm', ''))})"
               for claim_id, row in committed.items() if claim_id not in {c.id for c in spec.claims}]
    lines = [f"Exploratory, not a verdict: {len(judgements)} claims of `{study_file.name}` re-judged on the "
             f"committed rows of `{label or results.as_posix()}` ({len({r['run'] for r in rows})} runs), rules changed "
             "after these results were seen. Re-judged: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))
             + ".", "", format_table(table, REJUDGE_COLUMNS), ""]
    if removed:
        lines += [f"Committed claims the current file removes ({len(removed)}): " + "; ".join(removed) + ".", ""]
    if errors:
        lines += ["Not judged: " + "; ".join(f"{k}: {v}" for k, v in errors.items()) + ".", ""]
    return "\n".join(lines)
