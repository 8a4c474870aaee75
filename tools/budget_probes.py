"""Probe the training budget (epochs, image size) at which the uncertainty study's primary models learn
under source training, choose a budget by the rule fixed in ``tools/budget_probes.yaml``, and write
docs/dataset_stats/budget_probes.csv and docs/dataset_stats/budget_probes.md.

    python tools/budget_probes.py --out runs/budget_probes           # run the probes (resumable), then write
    python tools/budget_probes.py --out runs/budget_probes --no-run  # only collect finished probes
    python tools/budget_probes.py --check                            # exit 1 when the .md differs from the .csv

The probes run cheapest budget first, two at a time, one torch thread each (``pcmr study --only``), so
that a stopped probe sweep has the small budgets finished. Each probe is read on its test split under the
exact relation, no re-ranking, with its recipe's headline similarity (PCME: match probability; the twin:
cosine): R-Precision both ways, the query-blind ranking's R-Precision ``QB`` and the skill
``(R-P - QB) / (100 - QB)``; for two seeds of a budget, the mean pairwise Spearman rho of the per-caption
and per-image uncertainties (``<side>_uncertainty_agreement``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "tools" / "budget_probes.yaml"
CSV_OUT = ROOT / "docs" / "dataset_stats" / "budget_probes.csv"
MD_OUT = ROOT / "docs" / "dataset_stats" / "budget_probes.md"
PASS_SKILL = 0.35          # the studies' gate of 0.3 plus 0.05 for the spread of one or two probe seeds
AGREEMENT_MIN = 0.5        # the study gate's threshold for reading an uncertainty statistic
PAPERS_WALL_H = 1.13       # the papers study's wall time with two workers at its committed budget (its times.md)
BUDGET_H = 8.0
FIELDS = ("recipe", "variant", "image_size", "epochs", "seed", "similarity", "qb_i2t", "qb_t2i", "rp_i2t", "rp_t2i",
          "skill_i2t", "skill_t2i", "caption_agreement", "image_agreement", "train_s", "eval_s", "cpu", "threads")


def _budget_order(spec: Any) -> list[int]:
    """Run numbers, cheapest budget first (image size x epochs), then recipe and seed."""
    runs = spec.runs()

    def cost(index: int) -> tuple[int, int]:
        overrides = runs[index].overrides
        size = int(overrides.get("data.options.image_size", 64))
        return (size * size * int(overrides.get("train.epochs", 8)), index)

    return sorted(range(len(runs)), key=cost)


LANES = ("lane0", "lane1")


def _finished_folder(out: Path, run: Any) -> Path | None:
    """The folder in which ``run`` finished (each lane is a study folder of its own), or None."""
    from pcmr.study.runner import read_marker, run_folder

    for lane in LANES:
        if read_marker(run_folder(out / lane, run)) is not None:
            return run_folder(out / lane, run)
    return None


def run_probes(out: Path, workers: int = 2) -> None:
    """The unfinished probes, cheapest first, each in its own ``pcmr study --only`` process; ``workers``
    lanes (at most two) take the next probe as they free up, each into a study folder of its own (a study
    folder takes one writer at a time)."""
    import queue
    import threading

    from pcmr.study import load_study

    spec = load_study(STUDY)
    runs = spec.runs()
    committed = {_key(row) for row in _committed_rows()}
    pending: queue.Queue[int] = queue.Queue()
    for index in _budget_order(spec):
        if _finished_folder(out, runs[index]) is None and _run_key(runs[index]) not in committed:
            pending.put(index)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    failed: list[str] = []

    def lane(folder: Path) -> None:
        while True:
            try:
                index = pending.get_nowait()
            except queue.Empty:
                return
            print(f"probe {runs[index].name}: started in {folder.name}", flush=True)
            code = subprocess.run([sys.executable, "-m", "pcmr", "study", str(STUDY), "--out", str(folder), "--only",
                                   str(index), "--threads", "1"], env=env, check=False).returncode
            print(f"probe {runs[index].name}: exit {code}", flush=True)
            if code:
                failed.append(runs[index].name)

    threads = [threading.Thread(target=lane, args=(out / name,)) for name in LANES[:max(1, min(workers, 2))]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise SystemExit(f"{len(failed)} probe(s) failed ({', '.join(failed)}); rerun to resume")


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return (str(row["recipe"]), str(row["variant"]), str(row["seed"]))


def _run_key(run: Any) -> tuple[str, str, str]:
    return (run.label, run.variant, str(run.seed))


def _committed_rows() -> list[dict[str, str]]:
    """The probes of the committed CSV: a probe recorded there is not run again (its run folder need not
    survive), and its row is kept when the table is rewritten."""
    if not CSV_OUT.is_file():
        return []
    return list(csv.DictReader(io.StringIO(CSV_OUT.read_text(encoding="utf-8"))))


def merged(found: list[dict[str, Any]], committed: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The committed rows, each replaced by the probe of the same (recipe, variant, seed) found in a run
    folder, then the probes found that the CSV does not hold yet, in the study file's run order."""
    fresh = {_key(row): row for row in found}
    rows = [fresh.pop(_key(row), row) for row in committed]
    return rows + list(fresh.values())


def _headline_row(marker: dict[str, Any], similarity: str) -> dict[str, Any]:
    rows = [r for r in marker["rows"] if r["relevance"] == "exact" and r["rerank"] == "nns"]
    return next((r for r in rows if r["similarity"] == similarity), rows[0])


def collect(out: Path) -> list[dict[str, Any]]:
    """One row per finished probe, with its budget's seed agreement (when two seeds finished)."""
    from pcmr.metrics.query_blind import retrieval_skill
    from pcmr.study import backend, load_study
    from pcmr.study.runner import read_marker, seed_agreement

    spec = load_study(STUDY)
    headline = {entry.label: entry.headline or "cosine" for entry in spec.recipes}
    folders = {run.name: _finished_folder(out, run) for run in spec.runs()}
    finished = [(run, folders[run.name]) for run in spec.runs() if folders[run.name] is not None]
    groups: dict[tuple[str, str], list[Path]] = {}
    for run, folder in finished:
        groups.setdefault((run.label, run.variant), []).append(folder)
    agreement = seed_agreement({key: [backend.read_item_uncertainty(folder) for folder in found]
                                for key, found in groups.items()})
    rows: list[dict[str, Any]] = []
    for run, folder in finished:
        marker = read_marker(folder)
        row = _headline_row(marker, headline[run.label])
        qb = {d: float(row[f"{d}_query_blind_r_precision"]) for d in ("i2t", "t2i")}
        rp = {d: float(row[f"{d}_r_precision"]) for d in ("i2t", "t2i")}
        agree = agreement.get((run.label, run.variant), {})
        provenance = marker.get("provenance", {})
        rows.append({"recipe": run.label.removesuffix("_px64"), "variant": run.variant,
                     "image_size": run.overrides.get("data.options.image_size", ""),
                     "epochs": run.overrides.get("train.epochs", ""), "seed": run.seed, "similarity": row["similarity"],
                     **{f"qb_{d}": f"{qb[d]:.2f}" for d in qb}, **{f"rp_{d}": f"{rp[d]:.2f}" for d in rp},
                     **{f"skill_{d}": f"{retrieval_skill(rp[d], qb[d]):.3f}" for d in rp},
                     "caption_agreement": _fmt(agree.get("caption_uncertainty_agreement")),
                     "image_agreement": _fmt(agree.get("image_uncertainty_agreement")),
                     "train_s": f"{marker['train_seconds']:.0f}", "eval_s": f"{marker['eval_seconds']:.0f}",
                     "cpu": provenance.get("cpu", ""), "threads": provenance.get("threads", "")})
    return rows


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def to_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def budgets(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """One line per budget: each recipe's mean skill both ways over its seeds, the caption heads' seed
    agreement, the median training seconds, and whether the budget passes the rule."""
    by_budget: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_budget.setdefault(row["variant"], []).append(row)
    lines = []
    for variant, members in by_budget.items():
        line: dict[str, Any] = {"budget": variant, "image size": members[0]["image_size"],
                                "epochs": members[0]["epochs"]}
        failures = []
        for recipe in dict.fromkeys(r["recipe"] for r in members):
            mine = [r for r in members if r["recipe"] == recipe]
            skill = {d: statistics.fmean(float(r[f"skill_{d}"]) for r in mine) for d in ("i2t", "t2i")}
            line[recipe] = f"{skill['i2t']:.3f} / {skill['t2i']:.3f} ({len(mine)} seed{'s' if len(mine) > 1 else ''})"
            failures += [f"{recipe} {d} {skill[d]:.3f}" for d in skill if skill[d] < PASS_SKILL]
            if recipe == "pcme_small_init":
                agree = mine[0]["caption_agreement"]
                line["caption heads rho"] = agree or "-"
                if agree and float(agree) < AGREEMENT_MIN:
                    failures.append(f"caption heads rho {float(agree):.3f}")
        line["train s (median)"] = f"{statistics.median(float(r['train_s']) for r in members):.0f}"
        line["passes"] = "yes" if not failures else "no: " + ", ".join(failures)
        lines.append(line)
    return lines


def choice(lines: list[dict[str, Any]], missing: int = 0) -> str:
    """The rule of the study file, applied: the passing budget with the fewest median training seconds;
    no choice while ``missing`` probes have not finished (a larger budget may still pass)."""
    if missing:
        return (f"{missing} probe(s) have not finished: no budget is chosen until every probe of the study file "
                "has run (`python tools/budget_probes.py --out runs/budget_probes` resumes them).")
    passing = [line for line in lines if line["passes"] == "yes"]
    if not passing:
        return "No probed budget passes the rule: none is chosen."
    from pcmr.study import find_study, load_study

    best = min(passing, key=lambda line: float(line["train s (median)"]))
    per_run = float(best["train s (median)"])
    runs = len(load_study(find_study("uncertainty")).runs())  # the shipped study file's run count
    wall_h = runs * per_run / 2 / 3600 + PAPERS_WALL_H
    fits = "within" if wall_h <= BUDGET_H else "over"
    return (f"Chosen: `{best['budget']}` ({best['image size']} px, {best['epochs']} epochs), the passing budget "
            f"with the fewest training seconds per run ({per_run:.0f} s median). Cost check: {runs} "
            f"uncertainty runs x {per_run:.0f} s / 2 workers + the papers study's {PAPERS_WALL_H} h = "
            f"{wall_h:.1f} h of wall time, {fits} the {BUDGET_H:.0f} h limit.")


def markdown(rows: list[dict[str, str]]) -> str:
    from pcmr.report import format_table
    from pcmr.study import load_study

    missing = len(load_study(STUDY).runs()) - len(rows)

    lines = budgets(rows)
    recipes = list(dict.fromkeys(r["recipe"] for r in rows))
    columns = ["budget", "image size", "epochs", *recipes, "caption heads rho", "train s (median)", "passes"]
    cpus = sorted({row["cpu"] for row in rows if row["cpu"]})
    return "\n".join([
        "# Probes: the budget at which the uncertainty study's primary models learn", "",
        "Generated by `python tools/budget_probes.py` from [budget_probes.csv](budget_probes.csv) (the study file "
        "`tools/budget_probes.yaml`, probe seeds 900-901, which no study uses). Each model trains on the source "
        "pairs of the `multiplicity_distinct` preset (3,000 training images, batch 128, learning rate 3e-4) and "
        "is read on its test split under the exact relation with its headline similarity (PCME: match "
        "probability; the twin: cosine), no re-ranking. Each recipe's cell: mean skill (R-P - QB) / (100 - QB) "
        "i2t / t2i over its seeds. A budget named `_min2` or `_min3` writes captions whose every description names "
        "at least 2 or 3 of its object's 5 slots (the preset's own minimum is 1). `caption heads rho`: mean pairwise Spearman rho of pcme_small_init's "
        "per-caption uncertainty across the two seeds. Training seconds: one torch thread, two probes at a "
        f"time on a 2-core machine shared with other work. A budget passes when every recipe reaches skill "
        f">= {PASS_SKILL} both ways and the caption heads agree at rho >= {AGREEMENT_MIN} (the rule in the "
        "study file, written before the probes ran).", "",
        format_table(lines, columns), "",
        choice(lines, missing), "",
        f"CPU: {', '.join(cpus) or '-'}.", ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "budget_probes", help="the probes' study folder")
    parser.add_argument("--no-run", action="store_true", help="only collect the finished probes")
    parser.add_argument("--workers", type=int, default=2, help="probes at a time (default 2)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the .md differs from the committed .csv")
    args = parser.parse_args(argv)
    if args.check:
        rows = list(csv.DictReader(io.StringIO(CSV_OUT.read_text(encoding="utf-8"))))
        same = MD_OUT.is_file() and MD_OUT.read_text(encoding="utf-8") == markdown(rows)
        if not same:
            print(f"{MD_OUT.relative_to(ROOT)} differs from {CSV_OUT.name}; run python tools/budget_probes.py --no-run",
                  file=sys.stderr)
        return 0 if same else 1
    if not args.no_run:
        run_probes(args.out, args.workers)
    rows = merged(collect(args.out), _committed_rows())
    CSV_OUT.parent.mkdir(parents=True, exist_ok=True)
    CSV_OUT.write_text(to_csv(rows), encoding="utf-8")
    MD_OUT.write_text(markdown(list(csv.DictReader(io.StringIO(to_csv(rows))))), encoding="utf-8")
    print(json.dumps({"probes": len(rows), "wrote": [str(CSV_OUT.relative_to(ROOT)), str(MD_OUT.relative_to(ROOT))]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
