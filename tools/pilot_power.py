"""The seeds each claim of a study needs, from a pilot's committed results (the power computation the
study file's header quotes).

    python tools/pilot_power.py studies/papers.yaml docs/papers_results

For every claim of the study file (and every claim it lists under ``removed`` that is still judged in
the pilot), the pilot sd is the standard deviation behind the claim's interval in the pilot's results
(of the per-seed differences a - b; of the trained seeds against the null's mean for a claim against the
null), the largest over the claim's cells. The seeds needed follow from the one-sided t-test at the
study's power and level (``pcmr.study.power``; a primary claim at the level divided by the primary
family's size) for the claim's minimum effect, else its margin. Prints one Markdown row per claim.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import yaml

from pcmr.study.claims import JudgeOptions, judge_claim, parse_claims
from pcmr.study.design import PowerSpec
from pcmr.study.report import read_results_csv
from pcmr.study.stats import one_sided_alpha, required_seeds


def pilot_rows(study: Path, results: Path) -> list[dict[str, object]]:
    """One entry per claim: id, metric, expect, effect, pilot sd (largest over cells), alpha, seeds."""
    raw = yaml.safe_load(study.read_text(encoding="utf-8"))
    claims = parse_claims([{k: v for k, v in c.items() if k != "power"} for c in raw.get("claims") or []])
    power = PowerSpec(**(raw.get("power") or {}))
    primary = tuple(raw.get("primary") or ())
    level = float(raw.get("level", 0.95))
    rows = read_results_csv((results / "results.csv").read_text(encoding="utf-8"))
    null_rows = []
    for path in sorted((results / "null").glob("*.csv")) if (results / "null").is_dir() else []:
        null_rows += read_results_csv(path.read_text(encoding="utf-8"))
    same_as = ((raw.get("untrained_null") or {}).get("same_as") or {})
    out = []
    for claim in claims:
        judgements = judge_claim(claim, rows, level, JudgeOptions(null_rows=null_rows, null_source=dict(same_as)))
        sds = [c.interval.std for j in judgements for c in (j.cells or (j,)) if not math.isnan(c.interval.std)]
        effect = claim.min_effect if claim.min_effect > 0 else claim.margin
        alpha = one_sided_alpha(level) / (len(primary) if claim.id in primary else 1)
        sd = round(max(sds), 3) if sds else math.nan
        seeds = required_seeds(sd, effect, claim.expect, alpha, power.power, power.max_seeds) if sds else 0
        out.append({"claim": claim.id, "metric": claim.metric, "expect": claim.expect, "effect": effect,
                    "pilot sd": sd, "alpha": alpha, "seeds": seeds if seeds <= power.max_seeds else
                    f"> {power.max_seeds}"})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("results", type=Path, help="the pilot's results folder (results.csv, null/)")
    args = parser.parse_args(argv)
    print("| claim | metric | expect | effect | pilot sd | one-sided alpha | seeds |")
    print("|---|---|---|---:|---:|---:|---:|")
    for row in pilot_rows(args.study, args.results):
        print(f"| {row['claim']} | {row['metric']} | {row['expect']} | {row['effect']:g} | {row['pilot sd']:g} | "
              f"{row['alpha']:.4g} | {row['seeds']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
