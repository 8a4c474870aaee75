"""The design a study fixes before its runs: the skill gate per claim, the null of many untrained models,
the drift rule, the primary family, removed claims, and the refusal of a test split with repeated captions."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import scipy.stats

from pcmr.study import StudyError, parse_study
from pcmr.study.claims import NOT_LEARNED, JudgeOptions, judge_claim, judge_claims, parse_claims
from pcmr.study.design import RemovedClaim
from pcmr.study.report import by_paper_markdown, paper_name
from pcmr.study.spec import StudyRun, find_study, load_study
from pcmr.study.stats import null_percentile, welch_interval
from pcmr.study.steps import check_test_split, drift_by_metric

CELLS = ("source", "lr3")


def _rows(skill: dict[tuple[str, str, str], float], metric: dict[str, list[float]], seeds: int = 5) -> list[dict]:
    """Rows of recipes ``pcme`` and ``mu`` in two cells: R-Precision giving ``skill[(recipe, cell, direction)]``
    over a query-blind R-Precision of 40 (i2t) and 20 (t2i), and ``metric[recipe]`` per seed."""
    rows = []
    for recipe in ("pcme", "mu"):
        for cell in CELLS:
            for seed in range(seeds):
                row: dict[str, Any] = {"run": f"{recipe}-{cell}-s{seed}", "recipe": recipe, "variant": cell,
                                       "seed": seed, "similarity": "cosine", "rerank": "nns", "relevance": "exact",
                                       "i2t_query_blind_r_precision": 40.0, "t2i_query_blind_r_precision": 20.0,
                                       "score": metric[recipe][seed]}
                for direction, qb in (("i2t", 40.0), ("t2i", 20.0)):
                    row[f"{direction}_r_precision"] = qb + skill[(recipe, cell, direction)] * (100.0 - qb)
                rows.append(row)
    return rows


def _claim(**extra: Any):
    raw = {"id": "c", "paper": "p", "statement": "s", "metric": "score",
           "a": {"recipe": "pcme"} if "cells" in extra else {"recipe": "pcme", "variant": "source"},
           "b": {"recipe": "mu"}, "expect": "greater", "min_effect": 1.0, **extra}
    return parse_claims([raw])[0]


GOOD = dict.fromkeys(((r, c, d) for r in ("pcme", "mu") for c in CELLS for d in ("i2t", "t2i")), 0.5)
AHEAD = {"pcme": [5.0, 5.2, 4.9, 5.1, 5.3], "mu": [1.0, 1.1, 0.9, 1.0, 1.2]}


def test_gate_passes_when_every_model_learned_in_every_direction_it_reads() -> None:
    [judgement] = judge_claim(_claim(reads=["i2t", "t2i"]), _rows(GOOD, AHEAD), options=JudgeOptions(min_skill=0.3))
    assert judgement.verdict == "holds"
    assert "pcme/source/exact i2t skill 0.500" in judgement.gate and "mu/source/exact t2i skill 0.500" in judgement.gate


def test_gate_refuses_a_claim_whose_model_fails_in_one_direction() -> None:
    skill = {**GOOD, ("mu", "source", "i2t"): -1.5}  # the twin ranks captions worse than the query-blind list
    [judgement] = judge_claim(_claim(reads=["i2t", "t2i"]), _rows(skill, AHEAD), options=JudgeOptions(min_skill=0.3))
    assert judgement.verdict == NOT_LEARNED and judgement.ungated == "holds"
    assert judgement.gate == "mu/source/exact i2t skill -1.500 < 0.3"  # names the model and the direction
    # a claim that reads only the other direction is judged
    [t2i] = judge_claim(_claim(reads=["t2i"]), _rows(skill, AHEAD), options=JudgeOptions(min_skill=0.3))
    assert t2i.verdict == "holds"
    # a metric named by its direction reads that direction alone
    assert _claim(metric="t2i_r_precision").directions() == ("t2i",) and _claim().directions() == ("i2t", "t2i")


def test_gate_refuses_a_swept_claim_whose_model_fails_in_one_cell() -> None:
    skill = {**GOOD, ("pcme", "lr3", "t2i"): 0.1}
    [judgement] = judge_claim(_claim(cells=list(CELLS)), _rows(skill, AHEAD), options=JudgeOptions(min_skill=0.3))
    assert judgement.verdict == NOT_LEARNED
    assert judgement.gate == "lr3: pcme/lr3/exact t2i skill 0.100 < 0.3"
    assert [c.verdict for c in judgement.cells] == ["holds", NOT_LEARNED]


def test_a_matching_without_nns_rows_is_gated_on_the_ranking_it_is_built_from() -> None:
    """RGM assigns rather than ranks, so its rows carry no R-Precision: where the model's own (nns) ranking
    was not evaluated, the gate reads the ranking the matching is stacked on (``csls`` for ``csls+rgm``)."""
    rows = []
    for row in _rows(GOOD, AHEAD):
        if row["recipe"] != "pcme":
            continue
        rows.append({**row, "rerank": "csls"})
        rgm = {**row, "rerank": "csls+rgm", "score": row["score"] + 0.1}
        rgm.pop("i2t_r_precision"), rgm.pop("t2i_r_precision")
        rows.append(rgm)
    claim = _claim(a={"recipe": "pcme", "variant": "source", "rerank": "csls+rgm"},
                   b={"rerank": "csls"}, expect="greater", min_effect=0.05)
    [judgement] = judge_claim(claim, rows, options=JudgeOptions(min_skill=0.3))
    assert judgement.verdict == "holds", judgement.gate
    assert "pcme/source/csls/exact i2t skill 0.500 (no nns rows)" in judgement.gate
    assert judgement.reranked == "csls+rgm: a matching, no ranking of its own; csls i2t 0.500, t2i 0.500"
    weak = [{**r, "t2i_r_precision": 22.0} if r["rerank"] == "csls" else r for r in rows]
    [judgement] = judge_claim(claim, weak, options=JudgeOptions(min_skill=0.3))
    assert judgement.verdict == NOT_LEARNED
    assert judgement.gate_failures[0].describe() == "pcme/source/csls/exact t2i skill 0.025 (no nns rows) < 0.3"


def test_not_learned_is_never_rejected_by_holm_and_secondary_claims_are_uncorrected() -> None:
    skill = {**GOOD, ("mu", "source", "i2t"): -1.0}
    claims = parse_claims([
        {"id": "first", "paper": "p", "statement": "s", "metric": "score", "a": {"recipe": "pcme", "variant": "source"},
         "b": {"recipe": "mu"}, "expect": "greater", "min_effect": 1.0},
        {"id": "second", "paper": "p", "statement": "s", "metric": "score", "a": {"recipe": "pcme", "variant": "lr3"},
         "b": {"recipe": "mu"}, "expect": "greater", "min_effect": 1.0},
    ])
    judgements, _ = judge_claims(claims, _rows(skill, AHEAD), options=JudgeOptions(min_skill=0.3, primary=("first",)))
    first, second = judgements
    assert (first.verdict, first.holm, first.family) == (NOT_LEARNED, NOT_LEARNED, "primary")
    assert (second.verdict, second.holm, second.family) == ("holds", "holds", "secondary")


def _null_rows(values: np.ndarray) -> list[dict]:
    return [{"recipe": "pcme", "init": i, "relevance": "exact", "score": float(v)} for i, v in enumerate(values)]


def _null_claim():
    return parse_claims([{"id": "n", "paper": "p", "statement": "s", "metric": "score", "a": {"recipe": "pcme"},
                          "vs_null": True, "expect": "greater", "min_effect": 0.1}])[0]


def _trained(values: list[float]) -> list[dict]:
    return [{"run": f"pcme-source-s{s}", "recipe": "pcme", "variant": "source", "seed": s, "similarity": "cosine",
             "rerank": "nns", "relevance": "exact", "score": v} for s, v in enumerate(values)]


@pytest.mark.parametrize("seed", range(5))
def test_null_claim_reads_a_statistic_drawn_from_the_null_as_no_effect(seed: int) -> None:
    """Five seeds drawn from the null itself (untrained-like caption rho: mean 0, sd 0.42)."""
    rng = np.random.default_rng(seed)
    null = rng.normal(0.0, 0.42, 200)
    trained = [float(v) for v in rng.normal(0.0, 0.42, 5)]
    [judgement] = judge_claim(_null_claim(), _trained(trained), options=JudgeOptions(null_rows=_null_rows(null)))
    assert judgement.verdict in ("equal", "inconclusive")
    assert judgement.null_size == 200 and len(judgement.null_percentiles) == 5
    assert judgement.mean_b == pytest.approx(float(null.mean()))


@pytest.mark.parametrize("seed", range(5))
def test_null_claim_holds_when_every_seed_lies_beyond_the_nulls_99th_percentile(seed: int) -> None:
    rng = np.random.default_rng(seed)
    null = rng.normal(0.0, 0.42, 200)
    p99 = float(np.percentile(null, 99))
    trained = [p99 + float(v) for v in rng.uniform(0.01, 0.2, 5)]
    [judgement] = judge_claim(_null_claim(), _trained(trained), options=JudgeOptions(null_rows=_null_rows(null)))
    assert judgement.verdict == "holds"
    assert all(p >= 99.0 for p in judgement.null_percentiles)
    # the same values, below the null, reverse the claim
    [low] = judge_claim(_null_claim(), _trained([-v for v in trained]), options=JudgeOptions(null_rows=_null_rows(null)))
    assert low.verdict == "reversed"


def test_null_claim_without_a_null_sample_has_no_data() -> None:
    [judgement] = judge_claim(_null_claim(), _trained([0.5, 0.6]), options=JudgeOptions())
    assert judgement.verdict == "no data"


@pytest.mark.parametrize("sizes", [(5, 200), (3, 17), (8, 8)])
def test_welch_interval_matches_scipy(sizes: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(sizes))
    a, b = rng.normal(0.4, 0.1, sizes[0]), rng.normal(0.0, 0.4, sizes[1])
    interval, p = welch_interval(list(a), list(b), 0.95)
    reference = scipy.stats.ttest_ind(a, b, equal_var=False)
    assert p == pytest.approx(reference.pvalue, rel=1e-8)
    low, high = reference.confidence_interval(0.95)
    assert (interval.low, interval.high) == (pytest.approx(low, rel=1e-8), pytest.approx(high, rel=1e-8))
    assert interval.mean == pytest.approx(a.mean() - b.mean())


def test_welch_interval_edge_cases() -> None:
    interval, p = welch_interval([1.0], [0.0, 1.0])
    assert math.isnan(p) and math.isnan(interval.half_width)
    assert welch_interval([1.0, 1.0], [0.0, 0.0])[1] == 0.0


def test_null_percentile_counts_ties_half() -> None:
    assert null_percentile(0.5, [0.0, 0.5, 1.0, 2.0]) == pytest.approx(37.5)
    assert null_percentile(3.0, [0.0, 1.0]) == 100.0 and null_percentile(-1.0, [0.0, 1.0]) == 0.0
    assert math.isnan(null_percentile(0.0, []))


def test_an_effect_smaller_than_the_drift_of_its_contrast_reads_equal_never_holds() -> None:
    ahead = {"pcme": [1.50, 1.52, 1.49, 1.51, 1.53], "mu": [0.0, 0.01, 0.0, 0.01, 0.02]}  # +1.50, tight
    claim = _claim()
    [plain] = judge_claim(claim, _rows(GOOD, ahead))
    assert plain.verdict == "holds" and math.isnan(plain.drift)  # no drift rows: not measured
    # seeds 0 and 1 again: pcme moved by +2, mu by 0 -> the contrast moved by 2 in seed 0
    again = {"pcme": [3.50, 1.52, 1.49, 1.51, 1.53], "mu": ahead["mu"]}
    drift_rows = [r for r in _rows(GOOD, again) if r["seed"] in (0, 1)]
    [drifted] = judge_claim(claim, _rows(GOOD, ahead), options=JudgeOptions(drift_rows=drift_rows))
    assert drifted.verdict == "equal" and drifted.drift == pytest.approx(2.0)
    assert [s for s, _, _ in drifted.drift_seeds] == [0, 1]
    small = [r for r in _rows(GOOD, {"pcme": [1.9, 1.6, 0, 0, 0], "mu": ahead["mu"]}) if r["seed"] in (0, 1)]
    [kept] = judge_claim(claim, _rows(GOOD, ahead), options=JudgeOptions(drift_rows=small))
    assert kept.verdict == "holds" and kept.drift == pytest.approx(0.4)


def test_drift_by_metric_is_the_largest_difference_over_matching_rows() -> None:
    first = [{"similarity": "cosine", "rerank": "nns", "relevance": "exact", "a": 1.0, "b": 2.0, "seed": 0}]
    second = [{"similarity": "cosine", "rerank": "nns", "relevance": "exact", "a": 1.25, "b": 2.0, "seed": 0},
              {"similarity": "kl", "rerank": "nns", "relevance": "exact", "a": 9.0}]
    again = [{"similarity": "cosine", "rerank": "nns", "relevance": "exact", "a": 0.5, "b": 2.125}]
    assert drift_by_metric([(first, second), (first, again)]) == {"a": 0.5, "b": 0.125}


STUDY = {"seeds": [0, 1, 2], "recipes": {"pcme": {}, "mu": {"recipe": "pcme_mu_only"}},
         "claims": [{"id": "c1", "paper": "p", "statement": "s", "metric": "score", "a": {"recipe": "pcme"},
                     "vs_null": True, "expect": "greater"},
                    {"id": "c2", "paper": "p", "statement": "s", "metric": "score", "a": {"recipe": "pcme"},
                     "b": {"recipe": "mu"}, "expect": "greater"}],
         "untrained_null": {"inits": 200}}


def test_design_sections_parse() -> None:
    spec = parse_study({**STUDY, "gate": {"min_skill": 0.3}, "primary": ["c2"],
                        "drift": {"recipe": "mu", "variant": "base", "seeds": [0, 2], "threads": 2},
                        "removed": [{"id": "pmrp", "reason": "the oracle scores near random"}],
                        "distinct_test_split": True})
    design = spec.design
    assert design.gate.min_skill == 0.3 and design.null.inits == 200 and design.primary == ("c2",)
    assert (design.drift.recipe, design.drift.seeds, design.drift.threads) == ("mu", (0, 2), 2)
    assert design.removed[0].id == "pmrp" and design.distinct_test_split


@pytest.mark.parametrize(("extra", "message"), [
    ({"primary": [f"c{i}" for i in range(11)]}, "at most 10"),
    ({"primary": ["c1", "nope"]}, "nope not among the claims"),
    ({"removed": [{"id": "c1", "reason": "r"}]}, "still among the claims"),
    ({"removed": [{"id": "x"}]}, "the reason"),
    ({"drift": {"recipe": "mu", "variant": "base", "seeds": [7]}}, "drift.seeds"),
    ({"drift": {"recipe": "nope", "variant": "base", "seeds": [0]}}, "drift.recipe"),
    ({"untrained_null": None}, "untrained_null"),
    ({"untrained_null": {"inits": 1}}, "at least 2"),
    ({"untrained_null": {"inits": 5, "first_seed": 0}}, "include the study's seeds"),
    ({"gate": {"min_skill": 2}}, "gate.min_skill"),
    ({"distinct_test_split": "yes"}, "distinct_test_split"),
])
def test_bad_design_section_names_the_field(extra: dict, message: str) -> None:
    with pytest.raises(StudyError, match=message):
        parse_study({**STUDY, **extra})


def test_a_claim_against_the_null_has_no_side_b() -> None:
    with pytest.raises(ValueError, match="vs_null"):
        parse_claims([{"id": "c", "paper": "p", "statement": "s", "metric": "m", "a": {"recipe": "x"},
                       "b": {"recipe": "y"}, "vs_null": True, "expect": "greater"}])


TINY_DATA = {"data.options.image_size": 16, "data.options.num_train": 8, "data.options.num_val": 8,
             "data.options.num_test": 40, "data.options.num_test_unseen": 0, "data.options.num_binary_selection": 0}


@pytest.mark.parametrize(("preset", "refused"), [("multiplicity_simple", True), ("multiplicity_distinct", False)])
def test_a_test_split_with_repeated_captions_is_refused(tmp_path, monkeypatch, preset: str, refused: bool) -> None:
    monkeypatch.setenv("PCMR_CACHE", str(tmp_path))
    spec = parse_study({**STUDY, "distinct_test_split": True, "set": {"data.options.preset": preset, **TINY_DATA}})
    run: StudyRun = spec.runs()[0]
    if refused:
        with pytest.raises(StudyError, match="repeat a text written before.*relevant to every image"):
            check_test_split(spec, run)
    else:
        assert len(check_test_split(spec, run)) == 16  # the split's digest
    # without the requirement the split is accepted and only its digest is read
    plain = parse_study({**STUDY, "set": {"data.options.preset": preset, **TINY_DATA}})
    assert check_test_split(plain, plain.runs()[0]) == check_test_split(plain, plain.runs()[0])


def test_claims_by_paper_name_each_verdict_and_the_model_that_did_not_learn() -> None:
    """``by_paper.md``: one row per paper, every claim's verdict, and for a claim that reads ``not learned``
    the model and direction that failed the gate."""
    skill = {**GOOD, ("mu", "source", "i2t"): -1.5}
    claims = [
        _claim(id="hal-a", paper="HAL/RGM (hubs), Tab. 3", reads=["t2i"]),
        _claim(id="hal-b", paper="HAL/RGM (hubs), Fig. 3", reads=["i2t"]),
        _claim(id="hal-c", paper="HAL/RGM (hubs), Fig. 4", reads=["i2t"]),
        _claim(id="pvse-a", paper="ProbVSE (Pishdad et al.), Tab. 5", reads=["t2i"], expect="less"),
    ]
    judgements, _ = judge_claims(claims, _rows(skill, AHEAD), options=JudgeOptions(min_skill=0.3))
    removed = (RemovedClaim(id="hal-d", reason="needs 40 seeds", paper="HAL/RGM (hubs)"),
               RemovedClaim(id="calib-a", reason="does not learn here", paper="CalibPE (calibrated), Tab. 1"))
    text = by_paper_markdown(judgements, title="papers", removed=removed)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| paper")]
    assert [row.split(" | ")[0] for row in rows] == ["| HAL/RGM", "| ProbVSE", "| CalibPE"]
    hal, probvse, calib = rows
    # judged, decided, inconclusive, other, not judged
    assert hal.startswith("| HAL/RGM | 3 | 1 | 0 | 2 | 1 | ")
    assert "**holds** (1): hal-a<br>" in hal and f"**{NOT_LEARNED}** (2): hal-b, hal-c |" in hal
    assert "| hal-d: needs 40 seeds |" in hal
    # the model and direction that failed, once, with every claim it stopped
    assert hal.endswith("| mu/source/exact i2t skill -1.500 < 0.3: hal-b, hal-c |")
    assert probvse.startswith("| ProbVSE | 1 | 1 | 0 | 0 | 0 | ")
    assert "**reversed** (1): pvse-a" in probvse and probvse.endswith("| - | - |")
    # a paper whose every claim was removed still has its row, with the reasons
    assert calib == "| CalibPE | 0 | 0 | 0 | 0 | 1 | - | calib-a: does not learn here | - |"
    assert paper_name("PCME (Chun et al., CVPR 2021), Tab. 2") == "PCME" and paper_name("") == "-"


def test_shipped_study_files_name_the_paper_of_every_removed_claim() -> None:
    """``by_paper.md`` lists a removed claim under its paper, so each shipped study file names one."""
    for name in ("papers", "uncertainty"):
        spec = load_study(find_study(name))
        assert spec.design.removed
        for entry in spec.design.removed:
            assert paper_name(entry.paper) != "-", (name, entry.id)


def test_drift_runs_never_oversubscribe_the_cores() -> None:
    from pcmr.study.runner import drift_parallelism

    assert drift_parallelism(workers=2, threads=2, cores=2) == 1  # two 2-thread runs on 2 cores: one at a time
    assert drift_parallelism(workers=2, threads=2, cores=4) == 2
    assert drift_parallelism(workers=3, threads=2, cores=16) == 3  # never more than --workers
    assert drift_parallelism(workers=1, threads=8, cores=2) == 1  # at least one
