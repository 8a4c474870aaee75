"""Probe which shapes preset and budget let the papers study's baselines learn, and write
docs/dataset_stats/papers_probes.csv and docs/dataset_stats/papers_probes.md.

    python tools/papers_probes.py --out runs/papers_probes        # run the probes (resumable), then write
    python tools/papers_probes.py --out runs/papers_probes --no-run   # only collect finished probes
    python tools/papers_probes.py --check                          # exit 1 when the .md differs from the .csv

The probes are the study file ``tools/papers_probes.yaml``: one seed of the three cheapest baselines of
the papers' claims (``vsepp_sum``, ``vsepp_max``, ``pcme_mu_only``), each trained on the source pairs
(the papers' protocol), on each candidate preset x budget (its variants). Each probe is read under the
exact relation on its test split, cosine similarity (PVSE: its max-cosine), no re-ranking: R-Precision both ways, the
query-blind ranking's R-Precision ``QB`` (:mod:`pcmr.metrics.query_blind`) and the skill
``(R-P - QB) / (100 - QB)``, against the papers study's gate of 0.3 in each direction. Training seconds
are each run's own (one torch thread, two runs at a time, on whatever else the machine was running).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "tools" / "papers_probes.yaml"
CSV_OUT = ROOT / "docs" / "dataset_stats" / "papers_probes.csv"
MD_OUT = ROOT / "docs" / "dataset_stats" / "papers_probes.md"
GATE = 0.3
FIELDS = ("recipe", "variant", "preset", "num_train", "epochs", "lr", "seed", "test_captions", "distinct_texts",
          "qb_i2t", "qb_t2i", "rp_i2t", "rp_t2i", "skill_i2t", "skill_t2i", "train_s", "eval_s", "cpu", "threads")


def _data_options(overrides: dict[str, Any]) -> dict[str, Any]:
    prefix = "data.options."
    return {key[len(prefix):]: value for key, value in overrides.items() if key.startswith(prefix)}


def _distinct(options: dict[str, Any], cache: str) -> tuple[int, int]:
    """(captions, distinct caption texts) of the test split these data options give."""
    from pcmr.data import load_dataset

    split = load_dataset("shapes", "test", cache_dir=cache, **options)
    return split.num_captions, len(set(split.caption_texts))


def _learning_rate(run: Any) -> float:
    """The run's initial learning rate: its config's ``train.lr`` times ``train.finetune_lr_factor``."""
    from pcmr.study.backend import resolve_config

    train = resolve_config(run.recipe, run.overrides).train
    return float(train.lr) * float(train.finetune_lr_factor)


def collect(out: Path) -> list[dict[str, Any]]:
    """One row per finished probe run under ``out/runs`` (the ``study.json`` markers)."""
    from pcmr.metrics.query_blind import retrieval_skill
    from pcmr.study import load_study

    spec = load_study(STUDY)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as cache:
        for run in spec.runs():
            marker_path = out / "runs" / run.name / "study.json"
            if not marker_path.is_file():
                continue
            marker = json.loads(marker_path.read_text(encoding="utf-8"))
            candidates = [r for r in marker["rows"] if r["relevance"] == "exact" and r["rerank"] == "nns"]
            row = next((r for r in candidates if r["similarity"] == "cosine"), candidates[0])
            options = _data_options(run.overrides)
            captions, distinct = _distinct(options, cache)
            qb = {d: float(row[f"{d}_query_blind_r_precision"]) for d in ("i2t", "t2i")}
            rp = {d: float(row[f"{d}_r_precision"]) for d in ("i2t", "t2i")}
            provenance = marker.get("provenance", {})
            rows.append({"recipe": run.label, "variant": run.variant, "preset": options.get("preset", ""),
                         "num_train": options.get("num_train", ""), "epochs": run.overrides.get("train.epochs", ""),
                         "lr": f"{_learning_rate(run):g}",
                         "seed": run.seed, "test_captions": captions, "distinct_texts": distinct,
                         **{f"qb_{d}": f"{qb[d]:.2f}" for d in qb}, **{f"rp_{d}": f"{rp[d]:.2f}" for d in rp},
                         **{f"skill_{d}": f"{retrieval_skill(rp[d], qb[d]):.3f}" for d in rp},
                         "train_s": f"{marker['train_seconds']:.0f}", "eval_s": f"{marker['eval_seconds']:.0f}",
                         "cpu": provenance.get("cpu", ""), "threads": provenance.get("threads", "")})
    return rows


def to_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def markdown(rows: list[dict[str, str]]) -> str:
    """The probe table: one line per preset x budget, each baseline's R-P and skill both ways."""
    from pcmr.report import format_table

    cells: dict[str, dict[str, Any]] = {}
    for row in rows:
        cell = cells.setdefault(row["variant"], {
            "variant": row["variant"], "preset": row["preset"], "train images": row["num_train"],
            "epochs": row["epochs"], "test captions": row["test_captions"], "distinct texts": row["distinct_texts"],
            "QB i2t": row["qb_i2t"], "QB t2i": row["qb_t2i"]})
        gate = "yes" if min(float(row["skill_i2t"]), float(row["skill_t2i"])) >= GATE else "no"
        cell[row["recipe"]] = (f"lr {row['lr']}: {float(row['rp_i2t']):.1f} / {float(row['rp_t2i']):.1f}; "
                               f"{float(row['skill_i2t']):.2f} / {float(row['skill_t2i']):.2f} "
                               f"({gate}); {row['train_s']} s")
    recipes = list(dict.fromkeys(row["recipe"] for row in rows))
    columns = ["variant", "preset", "train images", "epochs", "test captions", "distinct texts", "QB i2t",
               "QB t2i", *recipes]
    cpus = sorted({row["cpu"] for row in rows if row["cpu"]})
    return "\n".join([
        "# Probes: which preset the papers study's baselines learn", "",
        "Generated by `python tools/papers_probes.py` from [papers_probes.csv](papers_probes.csv) (the study file "
        "`tools/papers_probes.yaml`, one seed). Every baseline trains on the source pairs (the papers' protocol: "
        "the caption written for an image is its only positive), 48 px images, batch 128, its own optimiser, "
        "learning rate and schedule, and is read on the test split under the exact relation (cosine, no "
        "re-ranking). `specific`: 1-2 objects per scene, each caption one full five-slot description of one "
        "object; `natural3`: the `standard` preset with 1-2 objects, one natural description per caption naming "
        "at least 3 of 4 attributes, no counting captions; both test splits hold each caption text once. "
        "`QB`: the query-blind ranking's R-Precision. Each baseline's cell: its initial learning rate (the suffix "
        "`_lr3` / `_lr9` multiplies the recipe's own); R-Precision i2t / t2i (PVSE: max-cosine); skill "
        "(R-P - QB) / (100 - QB) i2t / t2i (whether both reach the papers study's gate of 0.3); training "
        "seconds, one thread, two probes at a time on a 2-core machine shared with other work, so the "
        "seconds are upper bounds rather than the machine's speed.", "",
        format_table(list(cells.values()), columns), "",
        f"CPU: {', '.join(cpus) or '-'}.", ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "papers_probes", help="the probes' study folder")
    parser.add_argument("--no-run", action="store_true", help="only collect the finished probes")
    parser.add_argument("--check", action="store_true", help="exit 1 when the .md differs from the committed .csv")
    args = parser.parse_args(argv)
    if args.check:
        rows = list(csv.DictReader(io.StringIO(CSV_OUT.read_text(encoding="utf-8"))))
        same = MD_OUT.is_file() and MD_OUT.read_text(encoding="utf-8") == markdown(rows)
        if not same:
            print(f"{MD_OUT.relative_to(ROOT)} differs from {CSV_OUT.name}; run python tools/papers_probes.py --no-run",
                  file=sys.stderr)
        return 0 if same else 1
    if not args.no_run:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, "-m", "pcmr", "study", str(STUDY), "--out", str(args.out),
                        "--workers", "2", "--threads", "1"], check=True, env=env)
    rows = collect(args.out)
    CSV_OUT.parent.mkdir(parents=True, exist_ok=True)
    CSV_OUT.write_text(to_csv(rows), encoding="utf-8")
    MD_OUT.write_text(markdown(list(csv.DictReader(io.StringIO(to_csv(rows))))), encoding="utf-8")
    print(f"wrote {CSV_OUT.relative_to(ROOT)} and {MD_OUT.relative_to(ROOT)} ({len(rows)} probes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
