"""`pcmr study` runs a study with every design section end to end: a deduplicated test split, runs
whose run.json and study.json record their provenance, a drift run under a second thread count, the
null of untrained models, and claims.md with the skill gate, the null percentiles and the family."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path

import pytest
import yaml

import pcmr
from pcmr.cli import main

STUDY = {
    "name": "design_smoke", "seeds": [0, 1], "distinct_test_split": True,
    "set": {"train.epochs": 1, "train.max_steps_per_epoch": 2, "data.batch_size": 16, "data.eval_batch_size": 64,
            "data.options.preset": "multiplicity_distinct", "data.options.image_size": 16,
            "data.options.num_train": 24, "data.options.num_val": 8, "data.options.num_test": 16,
            "data.options.num_test_unseen": 0, "data.options.num_binary_selection": 0,
            "model.embed_dim": 8, "model.text_encoder.hidden_dim": 8, "data.train_relevance": "source"},
    "relevance": ["exact"], "analysis": {"binary_selection": False, "max_items": 8},
    "gate": {"min_skill": 0.3}, "untrained_null": {"inits": 3},
    "drift": {"recipe": "pcme", "variant": "base", "seeds": [0], "threads": 2},
    "primary": ["rho"],
    "removed": [{"id": "pmrp", "reason": "PMRP reads the source image's labels"}],
    "recipes": {"pcme": {"similarities": ["match_prob"], "rerankers": ["nns"]}},
    "claims": [{"id": "rho", "paper": "PCME", "statement": "caption uncertainty follows multiplicity",
                "metric": "caption_uncertainty_relevant_rho", "a": {"recipe": "pcme", "similarity": "match_prob",
                                                                    "rerank": "nns"},
                "vs_null": True, "expect": "greater", "min_effect": 0.1, "reads": ["t2i"]},
               {"id": "abstain", "paper": "PCME", "statement": "sigma withholds failures before the margin",
                "metric": "t2i_excess_aurc", "a": {"recipe": "pcme", "similarity": "match_prob", "rerank": "nns"},
                "b": {"metric": "t2i_excess_aurc_margin"}, "expect": "less", "min_effect": 1.0}],
}


@pytest.fixture()
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PCMR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = str(Path(pcmr.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))


def test_design_study_end_to_end_through_the_command(tmp_path: Path, environment: None) -> None:
    study = tmp_path / "design.yaml"
    study.write_text(yaml.safe_dump(STUDY), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["study", str(study), "--out", str(out), "--workers", "2", "--threads", "1"]) == 0
    # provenance in both records of every run, the same data digest everywhere
    digests = set()
    for name in ("pcme-base-s0", "pcme-base-s1"):
        marker = json.loads((out / "runs" / name / "study.json").read_text())
        summary = json.loads((out / "runs" / name / "run.json").read_text())
        assert marker["provenance"] == summary["provenance"]
        assert marker["provenance"]["threads"] == 1 and marker["provenance"]["torch"] == pcmr_torch_version()
        digests.add(marker["provenance"]["data"])
    drift_marker = json.loads((out / "drift" / "runs" / "pcme-base-s0" / "study.json").read_text())
    assert drift_marker["provenance"]["threads"] == 2
    digests.add(drift_marker["provenance"]["data"])
    assert len(digests) == 1
    # the null: 3 initialisations with the statistics under the trained columns' names
    null = list(csv.DictReader(io.StringIO((out / "null" / "pcme.csv").read_text())))
    assert sorted(int(r["init"]) for r in null) == [100000, 100001, 100002]
    assert all(r["caption_uncertainty_relevant_rho"] != "" for r in null)
    claims = (out / "claims.md").read_text()
    assert "Skill gate" in claims and "Primary family (1 claims" in claims and "- pmrp: PMRP reads" in claims
    assert "null of untrained pcme" in claims and "t2i skill" in claims
    # the split the claims read, with its counts and the digest every run recorded
    split_line = next(line for line in claims.splitlines() if line.startswith("- Test split ("))
    assert "distinct caption texts; 0 captions relevant to every image, 0 images relevant to every caption" \
        in split_line and split_line.endswith(f"digest {next(iter(digests))}.")
    images, captions, distinct = (int(n) for n in re.findall(r"(\d+) (?:images|captions|distinct caption texts)[,;]",
                                                           split_line)[:3])
    assert captions == distinct and images > 0
    for name in ("null.md", "drift.md", "provenance.md"):
        assert (out / name).is_file()
    drift_text = (out / "drift.md").read_text()
    assert "| caption_uncertainty_relevant_rho |" in drift_text
    # the drift of each claim's own contrast, per seed run twice (study / drift)
    assert "## Drift of each claim's contrast" in drift_text and "| abstain | " in drift_text
    assert re.search(r"\| abstain \| [+-]\d+\.\d{3} \| \d+\.\d{3} \| s0: [+-]\d+\.\d{3} / [+-]\d+\.\d{3} \|", drift_text)
    results = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    assert all(r["t2i_excess_aurc"] != "" and r["t2i_excess_aurc_margin"] != "" for r in results)


def pcmr_torch_version() -> str:
    import torch

    return torch.__version__
