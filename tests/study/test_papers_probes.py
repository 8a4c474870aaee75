"""The committed probes that chose the papers study's preset, budget and learning rates:
docs/dataset_stats/papers_probes.md is `tools/papers_probes.py`'s rendering of its committed CSV, every
probe is a run of `tools/papers_probes.yaml`, and the study's chosen cells are the probed ones that pass
the study's skill gate."""

from __future__ import annotations

import csv
import importlib.util
import io
from pathlib import Path

from pcmr.metrics.query_blind import retrieval_skill
from pcmr.study import find_study, load_study

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("papers_probes", ROOT / "tools" / "papers_probes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows() -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((ROOT / "docs/dataset_stats/papers_probes.csv").read_text("utf-8"))))


def test_committed_probe_table_is_the_tools_rendering_of_its_csv(capsys) -> None:
    assert _tool().main(["--check"]) == 0, capsys.readouterr().err


def test_every_probe_is_a_run_of_the_probe_study_and_its_skill_follows_from_its_numbers() -> None:
    names = {run.name for run in load_study(ROOT / "tools" / "papers_probes.yaml").runs()}
    rows = _rows()
    assert len(rows) == len(names)
    for row in rows:
        assert f"{row['recipe']}-{row['variant']}-s{row['seed']}" in names
        for d in ("i2t", "t2i"):
            skill = retrieval_skill(float(row[f"rp_{d}"]), float(row[f"qb_{d}"]))
            assert abs(skill - float(row[f"skill_{d}"])) < 1e-3, (row["recipe"], row["variant"], d)


def test_the_studys_hal_cells_are_probed_and_learned() -> None:
    """The primary claims read hal in the x1 and x3 cells: both rates were probed on the study's preset
    and budget and passed the gate in both directions."""
    study = load_study(find_study("papers"))
    gate = study.design.gate.min_skill
    hal = next(e for e in study.recipes if e.label == "hal")
    rates = [float(hal.overrides["train.lr"]) * study.variants[v].get("train.finetune_lr_factor", 1.0)
             for v in hal.variants]
    probed = {round(float(r["lr"]), 6): r for r in _rows() if r["recipe"] == "hal"
              and r["preset"] == study.overrides["data.options.preset"]
              and int(r["num_train"]) == study.overrides["data.options.num_train"]
              and int(r["epochs"]) == study.overrides["train.epochs"]}
    for rate in rates:
        row = probed[round(rate, 6)]
        assert min(float(row["skill_i2t"]), float(row["skill_t2i"])) >= gate, rate
