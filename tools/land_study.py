"""Land a finished study's results in the documentation: the previous results folder moves to
``docs/archive/`` with a README saying what it was, and the new one takes its place.

    python tools/land_study.py uncertainty runs/uncertainty --why "64 px, 8 and 16 epochs: no source-trained model passed the gate"
    python tools/results_docs.py     # then regenerate the quoted numbers, and edit the prose that names the old design

Refuses (exit 1, nothing moved) unless ``OUT`` holds the study's report and its ``results.csv`` holds every
run of the shipped study file and no other. Copies the report files (``results.csv``, every ``*.md`` and
``*.png``, ``null/*.csv``) and the shipped study file as ``study.yaml`` into ``docs/<name>_results/``; the
previous folder goes to ``docs/archive/<name>_results_<its first run's seeds and runs>/`` with a README
built from its own ``study.yaml`` (its design's description, run count and seeds) and ``--why``.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
from pathlib import Path

from pcmr.study import find_study, load_study

ROOT = Path(__file__).resolve().parents[1]
#: the report files a results folder keeps (besides study.yaml)
REPORT_GLOBS = ("results.csv", "*.md", "*.png", "null/*.csv")


def _runs(results: Path) -> set[str]:
    with results.open(encoding="utf-8", newline="") as handle:
        return {row["run"] for row in csv.DictReader(handle)}


def check_complete(name: str, out: Path) -> list[str]:
    """What keeps ``out`` from landing as the results of the shipped study ``name`` (empty: nothing)."""
    spec = load_study(find_study(name))
    if not (out / "results.csv").is_file() or not (out / "claims.md").is_file():
        return [f"{out}: no results.csv and claims.md (has the study finished its report?)"]
    found, expected = _runs(out / "results.csv"), {run.name for run in spec.runs()}
    problems = []
    if expected - found:
        problems.append(f"{out}: {len(expected - found)} runs of studies/{name}.yaml missing, e.g. "
                        f"{sorted(expected - found)[:3]}")
    if found - expected:
        problems.append(f"{out}: {len(found - expected)} runs not of studies/{name}.yaml, e.g. {sorted(found - expected)[:3]}")
    return problems


def archive_readme(folder: Path, why: str) -> str:
    """The README of an archived results folder, from the study file it ran under."""
    spec = load_study(folder / "study.yaml")
    runs = _runs(folder / "results.csv")
    seeds = sorted({run.seed for run in spec.runs()})
    return "\n".join([
        f"# Archive: an earlier run of the {spec.name} study", "",
        "Not the current evidence: these files are what an earlier version of the study file wrote; the "
        f"current results are in [docs/{spec.name}_results](../../{spec.name}_results/claims.md). No page of the "
        "documentation quotes them.", "",
        f"- Design (its `study.yaml`, kept here): {spec.description}",
        f"- {len(runs)} runs, seeds {', '.join(map(str, seeds))}.",
        f"- Why it was replaced: {why}", ""])


def land(name: str, out: Path, why: str, root: Path = ROOT) -> Path:
    """Archive ``docs/<name>_results`` and copy ``out``'s report there; returns the archive folder."""
    problems = check_complete(name, out)
    if problems:
        raise ValueError("; ".join(problems))
    current = root / "docs" / f"{name}_results"
    archive = root / "docs" / "archive"
    if current.is_dir():
        old = load_study(current / "study.yaml")
        seeds = sorted({run.seed for run in old.runs()})
        target = archive / f"{name}_results_seeds_{seeds[0]}_{seeds[-1]}_{len(_runs(current / 'results.csv'))}_runs"
        if target.exists():
            raise ValueError(f"{target} exists already: archive by hand")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(current), str(target))
        (target / "README.md").write_text(archive_readme(target, why), encoding="utf-8")
    else:
        target = archive
    current.mkdir(parents=True)
    for pattern in REPORT_GLOBS:
        for path in sorted(out.glob(pattern)):
            destination = current / path.relative_to(out)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
    shutil.copy2(find_study(name), current / "study.yaml")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", help="a shipped study's name (uncertainty, papers)")
    parser.add_argument("out", type=Path, help="the study's output folder, finished")
    parser.add_argument("--why", required=True, help="why the previous results are replaced (for the archive README)")
    args = parser.parse_args(argv)
    try:
        archived = land(args.study, args.out, args.why)
    except ValueError as exc:
        print(f"land_study: {exc}", file=sys.stderr)
        return 1
    print(f"landed {args.out} in docs/{args.study}_results; the previous results are in {archived.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
