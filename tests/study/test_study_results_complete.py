"""Every committed study results folder (``docs/**/results.csv`` beside the ``study.yaml`` it ran under)
holds every run of that study file and no other: the runs named in ``results.csv`` are exactly the
file's runs, so no table or verdict quotes a study that stopped part-way or mixes in runs of another
design."""

from __future__ import annotations

from pathlib import Path

import pytest

from pcmr.study import load_study
from pcmr.study.report import read_results_csv

ROOT = Path(__file__).resolve().parents[2]
#: results folders committed with the study file they ran under
FOLDERS = sorted(path.parent.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("study.yaml")
                 if (path.parent / "results.csv").is_file())


def test_the_studies_results_are_among_the_checked_folders() -> None:
    assert {"docs/uncertainty_results", "docs/papers_results", "docs/dataset_stats/uncertainty_pilot",
            "docs/dataset_stats/papers_pilot"} <= set(FOLDERS)


@pytest.mark.parametrize("folder", FOLDERS)
def test_results_hold_every_run_of_their_study_file_and_no_other(folder: str) -> None:
    spec = load_study(ROOT / folder / "study.yaml")
    rows = read_results_csv((ROOT / folder / "results.csv").read_text(encoding="utf-8"))
    found = {str(row["run"]) for row in rows}
    expected = {run.name for run in spec.runs()}
    assert found == expected, (f"{folder}: missing {sorted(expected - found)[:5]}, "
                               f"not of its study file {sorted(found - expected)[:5]}")
