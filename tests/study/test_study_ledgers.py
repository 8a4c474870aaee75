"""The committed study ledgers (``docs/study_ledgers/<study>/``, written by ``pcmr study --ledger``) hold
finished runs of their study file and nothing else: each run folder is a run of the file (name, recipe,
variant and seed), carries its marker and only the ledger's files (no weights), and its marker's
overrides are the file's for that run, so a ledger restored into a fresh study folder resumes that
study and no other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pcmr.study import find_study, load_study
from pcmr.study.ledger import LEDGER_FILES, MARKER
from pcmr.study.steps import DRIFT_DIR, drift_runs

ROOT = Path(__file__).resolve().parents[2]
LEDGERS = ROOT / "docs" / "study_ledgers"
#: each committed ledger and the study file it keeps
STUDY_FILES = {"uncertainty": find_study("uncertainty"), "papers": find_study("papers"),
               "uncertainty_pilot": ROOT / "tools" / "uncertainty_pilot.yaml",
               "papers_pilot": ROOT / "tools" / "papers_pilot.yaml"}


def _ledgers() -> list[str]:
    return sorted(p.name for p in LEDGERS.iterdir() if p.is_dir()) if LEDGERS.is_dir() else []


def test_every_committed_ledger_keeps_a_known_study_file() -> None:
    assert set(_ledgers()) <= set(STUDY_FILES), _ledgers()


@pytest.mark.parametrize("name", _ledgers())
def test_a_ledger_holds_finished_runs_of_its_study_file_and_no_other(name: str) -> None:
    spec = load_study(STUDY_FILES[name])
    groups = {"runs": {run.name: run for run in spec.runs()},
              f"{DRIFT_DIR}/runs": {run.name: run for run in drift_runs(spec)}}
    found = 0
    for group, runs in groups.items():
        folder = LEDGERS / name / group
        for run_dir in sorted(folder.iterdir()) if folder.is_dir() else []:
            assert run_dir.name in runs, f"{run_dir}: not a run of {STUDY_FILES[name].name}"
            files = {path.name for path in run_dir.iterdir()}
            assert MARKER in files and files <= set(LEDGER_FILES), (run_dir, files)
            marker = json.loads((run_dir / MARKER).read_text(encoding="utf-8"))
            run = runs[run_dir.name]
            assert (marker["recipe"], marker["variant"], marker["seed"]) == (run.label, run.variant, run.seed)
            assert marker["overrides"] == json.loads(json.dumps(run.overrides)), run_dir
            found += 1
    assert found, f"{LEDGERS / name}: an empty ledger"
    for path in (LEDGERS / name / "null").glob("*.csv"):
        assert spec.design.null is not None and path.stem in {spec.design.null.source(r.label) for r in spec.recipes}
