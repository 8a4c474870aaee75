"""``tools/device_agreement.py`` (the agreement step of ``tools/gpu_check.sh``) on the CPU: float32
against the float64 reference for every score, the metrics and re-rankers of one process, and a
score that drifts is reported as a failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests._tools import load_script

import pcmr.similarity

SIZES = ["--images", "31", "--captions", "73", "--dim", "12"]


def test_every_check_agrees_on_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tool = load_script("tools/device_agreement.py")
    assert tool.main(["--device", "cpu", *SIZES, "--json", str(tmp_path / "rows.json")]) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    names = {(r["check"], r["name"]) for r in rows}
    assert {("score", name) for name in pcmr.similarity.list_similarities()} <= names
    assert {("rerank", name) for name in ("nns", "is", "csls", "gm", "rgm", "csls+rgm")} <= names
    assert any(r["check"] == "metrics" for r in rows) and all(r["ok"] for r in rows)
    assert max(r["rel_error"] for r in rows if r["check"] == "score") < 1e-5  # float32 rounding, not drift
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"device agreement on cpu: {len(rows)} of {len(rows)} checks agree"


def test_a_drifting_score_fails(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    tool = load_script("tools/device_agreement.py")
    original = pcmr.similarity.pairwise

    def drifting(name: str, images, captions, **options):
        scores = original(name, images, captions, **options)
        return scores * 1.001 if name == "kl" and scores.dtype == torch.float32 else scores

    monkeypatch.setattr(pcmr.similarity, "pairwise", drifting)
    assert tool.main(["--device", "cpu", *SIZES]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].split()[1:3] == ["score", "kl"]


@pytest.mark.cuda
def test_every_check_agrees_on_cuda() -> None:
    tool = load_script("tools/device_agreement.py")
    rows = tool.run_checks("cuda")
    assert [tool.format_row(r) for r in rows if not r["ok"]] == []
