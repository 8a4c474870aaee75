"""Validation curves of a study (``curves.md``, ``curves.png``) against values worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

from pcmr.study.curves import curves_markdown, plot_validation_curves, read_curve


def _run(tmp_path: Path, name: str, values: list[float]) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    history = [{"epoch": epoch, "train": {"loss": 1.0}, "val": {"r_precision": value, "rsum": 3 * value}}
               for epoch, value in enumerate(values, start=1)]
    history.append({"epoch": len(values) + 1, "train": {"loss": 1.0}, "val": None})  # a skipped validation
    (run_dir / "run.json").write_text(json.dumps({"history": history}))
    return run_dir


def test_plateau_table_from_two_seeds(tmp_path: Path) -> None:
    rising = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0]
    flat = [10.0, 30.0, 40.0, 44.0, 45.0, 45.5, 45.8, 45.9]
    curves = {
        ("slow", "exact"): [read_curve(_run(tmp_path, "slow-s0", rising)), read_curve(_run(tmp_path, "slow-s1", rising))],
        ("fast", "exact"): [read_curve(_run(tmp_path, "fast-s0", flat)),
                            read_curve(_run(tmp_path, "fast-s1", [v + 1.0 for v in flat[:7]] + [45.0]))],
    }
    assert read_curve(tmp_path / "slow-s0") == list(enumerate(rising, start=1))
    assert read_curve(tmp_path / "missing") == []
    table = curves_markdown(curves, title="t")
    # slow: mean 40 at epoch 4 (1/2 of 8), 60 at epoch 6 (3/4), 80 at the end; best epoch 8; gain 20
    assert "| slow | exact | 2 | 8 | 40.00 | 60.00 | 80.00 | 8.00 | 20.00 | no |" in table
    # fast: means 44.5 (epoch 4), 46.0 (epoch 6), 45.45 (epoch 8); best epochs 8 and 7 -> 7.5; gain -0.55
    assert "| fast | exact | 2 | 8 | 44.50 | 46.00 | 45.50 | 7.50 | -0.50 | yes |" in table
    png = plot_validation_curves(curves, tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_history_says_so(tmp_path: Path) -> None:
    assert "No run has a validation history." in curves_markdown({("a", "b"): [[]]}, title="t")
