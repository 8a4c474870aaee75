"""README.md and docs/study.md state no verdict that the committed claims files do not hold.

Verdicts and directions of the uncertainty and papers studies are quoted only through generated results
blocks (``pcmr.study.doc_blocks``; ``tools/results_docs.py --check`` keeps them equal to the files); the
free prose of their sections names no verdict and no direction; sentences of earlier versions that the
results do not support are gone; the committed results are whole runs of the shipped study files; and no
results block reads the archived files of the papers study's earlier version (run on a preset its models
did not learn, before the protocol and the skill gate)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- results [^>]*?-->.*?<!-- /results -->", re.S)
#: sentences of earlier versions that the committed results do not hold
RETIRED = ("abstaining on sigma helps", "confirms these one-seed findings", "inside 3 hours",
           "depend only on its config and its thread count.", "five seeds, 30 epochs", "beats its mu-only twin on",
           "runs the\nother way", "does rise with the")
VERDICT_WORDS = re.compile(r"\b(holds|reversed|inconclusive|unstable|no signal|helps|beats|confirms|"
                           r"rises|falls|runs against|better than|worse than)\b")


def _prose(path: str, start: str, end: str) -> str:
    text = (ROOT / path).read_text(encoding="utf-8")
    section = text[text.index(start):text.index(end, text.index(start))]
    return BLOCK.sub("", section)


@pytest.mark.parametrize("path", ["README.md", "docs/study.md"])
def test_no_retired_sentence(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    for sentence in RETIRED:
        assert sentence not in text, (path, sentence)


@pytest.mark.parametrize(("path", "start", "end"), [
    ("README.md", "`studies/uncertainty.yaml` asks", "Every judged claim of the uncertainty study"),
    ("docs/study.md", "## The uncertainty study", "## Seeing what the uncertainty learned"),
])
def test_uncertainty_prose_names_no_verdict_outside_generated_blocks(path: str, start: str, end: str) -> None:
    prose = _prose(path, start, end)
    found = sorted({m.group(0) for m in VERDICT_WORDS.finditer(prose)})
    assert found == [], f"{path}: verdict or direction words outside results blocks: {found}"


def _check_committed_results(study: str, folder: Path) -> str:
    """``folder`` holds a whole run of ``study`` under the study file it ran (``folder/study.yaml``, the
    shipped file of that time; the shipped file now fixes the next runs): every run of the file (and no
    other), the null of every recipe a null claim reads with the pre-registered number of initialisations,
    the drift runs, the provenance, the primary family of the file and the test split every claim read.
    Returns claims.md."""
    import csv

    from pcmr.study.spec import load_study

    spec = load_study(folder / "study.yaml")
    assert spec.name == study
    with (folder / "results.csv").open(encoding="utf-8") as handle:
        runs = {row["run"] for row in csv.DictReader(handle)}
    assert runs == {run.name for run in spec.runs()}
    for recipe in {claim.a.recipe for claim in spec.claims if claim.null}:
        assert spec.design.null is not None
        with (folder / "null" / f"{recipe}.csv").open(encoding="utf-8") as handle:
            inits = {row["init"] for row in csv.DictReader(handle)}
        assert len(inits) >= spec.design.null.inits >= 200, recipe
    assert spec.design.drift is not None
    drift = (folder / "drift.md").read_text(encoding="utf-8")
    assert all(f"{spec.design.drift.recipe}-{spec.design.drift.variant}-s{seed}" in drift
               for seed in spec.design.drift.seeds)
    provenance = (folder / "provenance.md").read_text(encoding="utf-8")
    assert "CPU" in provenance
    claims = (folder / "claims.md").read_text(encoding="utf-8")
    assert spec.design.primary is not None
    assert f"Primary family ({len(spec.design.primary)} claims" in claims
    assert all(claim_id in claims for claim_id in spec.design.primary)
    # the split the claims read: each caption text once, its digest that of every run's provenance
    split = next(line for line in claims.splitlines() if line.startswith("- Test split ("))
    captions, distinct = (int(n) for n in re.findall(r"(\d+) captions, (\d+) distinct caption texts", split)[0])
    assert captions == distinct and "0 captions relevant to every image" in split
    assert split.split("digest ")[1].rstrip(".") in provenance
    # by_paper.md: every judged claim of claims.md in one paper's row, and the times of every run
    rows = [line.split(" | ") for line in (folder / "by_paper.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and not line.startswith("| paper")]
    listed = [re.sub(r" \(Holm: [^)]*\)$", "", claim_id) for row in rows for group in row[2].split("<br>")
              for claim_id in group.split("): ", 1)[1].split(", ")]
    assert sorted(listed) == sorted(claim.id for claim in spec.claims)
    assert sum(int(row[1]) for row in rows) == len(spec.claims)
    assert f"All {len(runs)} runs:" in (folder / "times.md").read_text(encoding="utf-8")
    return claims


def test_committed_uncertainty_results_are_those_of_the_shipped_design() -> None:
    _check_committed_results("uncertainty", ROOT / "docs/uncertainty_results")


def test_committed_papers_results_are_those_of_the_shipped_design() -> None:
    """The papers study as shipped, run whole: its totals in the README and docs/study.md are those of
    this claims.md (through generated blocks, kept equal by ``tools/results_docs.py --check``)."""
    claims = _check_committed_results("papers", ROOT / "docs/papers_results")
    totals = next(line for line in claims.splitlines() if line.startswith("Totals:"))
    for path in ("README.md", "docs/study.md"):
        text = (ROOT / path).read_text(encoding="utf-8")
        assert f'<!-- results line="docs/papers_results/claims.md" prefix="Totals:" -->{totals}<!-- /results -->' \
            in text, path


@pytest.mark.parametrize(("path", "start", "end"), [
    ("README.md", "`studies/papers.yaml` judges", "`studies/uncertainty.yaml` asks"),
    ("docs/study.md", "## The papers study", "### The `hard` preset is not learned"),
])
def test_papers_prose_names_no_verdict(path: str, start: str, end: str) -> None:
    prose = _prose(path, start, end)
    found = sorted({m.group(0) for m in VERDICT_WORDS.finditer(prose)})
    assert found == [], f"{path}: verdict or direction words in the papers study's prose: {found}"


def test_no_results_block_reads_the_archived_papers_study() -> None:
    """The archived run of the papers study is not evidence: no document quotes it through a block."""
    archive = ROOT / "docs/archive/papers_study_hard_preset_unprotocolled"
    assert (archive / "README.md").is_file() and not (ROOT / "docs/study_results").exists()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        sources = set(re.findall(r'<!-- results \w+="([^"]+)"', path.read_text(encoding="utf-8")))
        quoted = sorted(s for s in sources if s.startswith(("docs/archive/", "docs/study_results/")))
        assert quoted == [], (path.name, quoted)
