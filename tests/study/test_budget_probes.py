"""The budget probes of the uncertainty study: docs/dataset_stats/budget_probes.md is
`tools/budget_probes.py`'s rendering of its committed CSV, every probe is a run of
`tools/budget_probes.yaml`, each skill follows from its numbers, and the choice rule written in the study
file (every recipe at skill >= 0.35 both ways, caption heads at rho >= 0.5, cheapest passing budget, no
choice while probes are missing) is what the tool applies."""

from __future__ import annotations

import csv
import importlib.util
import io
from pathlib import Path

from pcmr.metrics.query_blind import retrieval_skill
from pcmr.study import load_study

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("budget_probes", ROOT / "tools" / "budget_probes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows() -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((ROOT / "docs/dataset_stats/budget_probes.csv").read_text("utf-8"))))


def test_committed_probe_table_is_the_tools_rendering_of_its_csv(capsys) -> None:
    assert _tool().main(["--check"]) == 0, capsys.readouterr().err


def test_every_probe_is_a_run_of_the_probe_study_and_its_skill_follows_from_its_numbers() -> None:
    runs = {(run.label.removesuffix("_px64"), run.variant, run.seed) for run in
            load_study(ROOT / "tools" / "budget_probes.yaml").runs()}
    rows = _rows()
    assert rows
    for row in rows:
        assert (row["recipe"], row["variant"], int(row["seed"])) in runs
        assert int(row["seed"]) >= 900  # probe seeds: none of the studies' own
        for d in ("i2t", "t2i"):
            skill = retrieval_skill(float(row[f"rp_{d}"]), float(row[f"qb_{d}"]))
            assert abs(skill - float(row[f"skill_{d}"])) < 1e-3, (row["recipe"], row["variant"], d)


def _probe(recipe: str, variant: str, seed: int, i2t: float, t2i: float, seconds: float,
           agreement: str = "") -> dict[str, str]:
    # QB 0: the skill is R-P / 100
    return {"recipe": recipe, "variant": variant, "image_size": "32", "epochs": variant.split("_e")[-1],
            "seed": str(seed), "similarity": "cosine", "qb_i2t": "0", "qb_t2i": "0", "rp_i2t": str(100 * i2t),
            "rp_t2i": str(100 * t2i), "skill_i2t": str(i2t), "skill_t2i": str(t2i),
            "caption_agreement": agreement, "image_agreement": "", "train_s": str(seconds), "eval_s": "1",
            "cpu": "x", "threads": "1"}


def test_the_rule_chooses_the_cheapest_budget_where_every_recipe_learns_and_the_heads_agree() -> None:
    tool = _tool()
    rows = [
        # e16: the twin learns, pcme_small_init does not (i2t)
        _probe("pcme_small_init", "px32_e16", 900, 0.30, 0.50, 100, "0.7"),
        _probe("pcme_small_init", "px32_e16", 901, 0.32, 0.50, 100, "0.7"),
        _probe("pcme_mu_only", "px32_e16", 900, 0.40, 0.50, 90),
        # e32: both learn, but the caption heads disagree across seeds
        _probe("pcme_small_init", "px32_e32", 900, 0.40, 0.50, 200, "0.3"),
        _probe("pcme_mu_only", "px32_e32", 900, 0.40, 0.50, 180),
        # e64: everything passes
        _probe("pcme_small_init", "px32_e64", 900, 0.45, 0.55, 400, "0.8"),
        _probe("pcme_mu_only", "px32_e64", 900, 0.41, 0.52, 380),
    ]
    lines = {line["budget"]: line for line in tool.budgets(rows)}
    assert lines["px32_e16"]["passes"].startswith("no: pcme_small_init i2t 0.310")
    assert lines["px32_e32"]["passes"] == "no: caption heads rho 0.300"
    assert lines["px32_e64"]["passes"] == "yes"
    assert "`px32_e64`" in tool.choice(list(lines.values()))
    assert "no budget is chosen" in tool.choice(list(lines.values()), missing=2)
    assert tool.choice([lines["px32_e16"]]).startswith("No probed budget passes")


def test_a_probe_recorded_in_the_csv_is_kept_and_one_found_again_replaces_it() -> None:
    tool = _tool()
    committed = [_probe("pcme_small_init", "px32_e16", 900, 0.2, 0.5, 100),
                 _probe("pcme_mu_only", "px32_e16", 900, 0.2, 0.5, 90)]
    again = _probe("pcme_mu_only", "px32_e16", 900, 0.3, 0.5, 80)
    new = _probe("pcme_mu_only", "px32_e16_min2", 900, 0.4, 0.6, 85)
    rows = tool.merged([new, again], committed)
    assert rows == [committed[0], again, new]
    assert tool.merged([], committed) == committed
