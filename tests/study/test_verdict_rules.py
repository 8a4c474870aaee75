"""The verdict rules on synthetic cases: the drift of a claim's own contrast, each claim's own test in its
verdict and in Holm's step, every cell's verdict and gate reported, the gate on the trained model's own
ranking, a matching that was never used, and seeds sized for power."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from pcmr.study import load_study
from pcmr.study.claims import NOT_LEARNED, JudgeOptions, judge_claim, judge_claims, parse_claims
from pcmr.study.forest import forest_rows
from pcmr.study.power import claim_alpha
from pcmr.study.report import by_paper_markdown, claims_markdown
from pcmr.study.stats import claim_p_values, paired_interval, required_seeds
from pcmr.study.steps import drift_by_metric

ROOT = Path(__file__).resolve().parents[2]


def _row(recipe: str, variant: str, seed: int, rerank: str, **values: Any) -> dict[str, Any]:
    return {"run": f"{recipe}-{variant}-s{seed}", "recipe": recipe, "variant": variant, "seed": seed,
            "similarity": "cosine", "rerank": rerank, "relevance": "exact",
            "i2t_query_blind_r_precision": 1.0, "t2i_query_blind_r_precision": 1.0, **values}


def _skill_rp(skill: float) -> float:
    """The R-Precision of ``skill`` over a query-blind R-Precision of 1."""
    return 1.0 + skill * 99.0


def _claim(**fields: Any) -> Any:
    base = {"id": "c", "paper": "P", "statement": "s", "metric": "rsum", "expect": "greater",
            "a": {"recipe": "m", "similarity": "cosine", "rerank": "is"}, "b": {"rerank": "nns"}}
    return parse_claims([{**base, **fields}])[0]


def test_a_contrast_stable_across_machines_whose_level_drifts_holds() -> None:
    """Both re-rankings of one model move together between machines: the level drifts by 14, the
    contrast by at most 0.3, so an effect of +10 is judged against 0.3, not 14."""
    levels = [427.4, 437.9, 424.5, 431.0, 429.2]
    effect = [10.2, 9.8, 10.5, 10.0, 10.4]
    rows, again = [], []
    for seed, (level, gain) in enumerate(zip(levels, effect)):
        good = {"i2t_r_precision": _skill_rp(0.5), "t2i_r_precision": _skill_rp(0.5)}
        rows += [_row("m", "v", seed, "nns", rsum=level, **good), _row("m", "v", seed, "is", rsum=level + gain, **good)]
        if seed < 2:  # seeds 0 and 1 on another machine: the level moves by 14 and 6, the contrast by 0.3
            shift = (14.2, 5.9)[seed]
            again += [_row("m", "v", seed, "nns", rsum=level + shift, **good),
                      _row("m", "v", seed, "is", rsum=level + shift + gain + 0.3, **good)]
    pairs = [([r for r in rows if r["seed"] == seed], [r for r in again if r["seed"] == seed]) for seed in (0, 1)]
    assert drift_by_metric(pairs)["rsum"] == pytest.approx(14.5)  # the level's drift
    [judgement] = judge_claim(_claim(min_effect=5.0), rows, options=JudgeOptions(drift_rows=again, min_skill=0.3))
    assert judgement.drift == pytest.approx(0.3)
    assert [seed for seed, _, _ in judgement.drift_seeds] == [0, 1]
    assert judgement.verdict == "holds"
    # a contrast that itself moves more than the effect reads equal
    moved = [dict(r, rsum=r["rsum"] + (11.0 if r["rerank"] == "is" and r["seed"] == 0 else 0.0)) for r in again]
    [drifted] = judge_claim(_claim(min_effect=5.0), rows, options=JudgeOptions(drift_rows=moved))
    assert drifted.verdict == "equal" and drifted.drift == pytest.approx(11.3)


def test_a_non_inferiority_claim_is_judged_and_corrected_by_its_own_p_value() -> None:
    """a - b about -0.5 with an interval of about [-1.7, +0.7]: the test of a - b = 0 gives p ~ 0.3, the
    claim's own test (a - b >= -5) p ~ 2e-4; Holm must use the latter."""
    diffs = [-0.9, 0.6, -1.8, 0.1, -0.45]
    rows = []
    for seed, d in enumerate(diffs):
        good = {"i2t_r_precision": _skill_rp(0.5), "t2i_r_precision": _skill_rp(0.5)}
        rows += [_row("m", "v", seed, "csls", rsum=440.0 + seed, **good),
                 _row("m", "v", seed, "csls+rgm", rsum=440.0 + seed + d, **good)]
    claim = _claim(a={"recipe": "m", "similarity": "cosine", "rerank": "csls+rgm"}, b={"rerank": "csls"}, margin=5.0)
    zero = sps.ttest_1samp(diffs, 0.0).pvalue
    own = sps.ttest_1samp(diffs, -5.0, alternative="greater").pvalue
    assert zero > 0.2 and own < 1e-3
    other = _claim(id="other", a={"recipe": "m", "similarity": "cosine", "rerank": "csls+rgm"}, b={"rerank": "csls"},
                   margin=0.5)
    judgements, errors = judge_claims([claim, other], rows, options=JudgeOptions(primary=("c", "other")))
    assert not errors
    first = judgements[0]
    assert first.p_value == pytest.approx(own, rel=1e-8)
    assert (first.verdict, first.holm) == ("holds", "holds")  # p ~ 2e-4 <= 0.025 / 2


@pytest.mark.parametrize("expect,margin", [("greater", 0.0), ("greater", 2.0), ("less", 0.0), ("less", 1.5),
                                           ("equal", 2.0)])
def test_claim_p_values_match_scipy(expect: str, margin: float) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(1.0, 1.0, 6), rng.normal(0.0, 1.0, 6)
    interval = paired_interval(list(a), list(b))
    diff = a - b
    p, p_reversed = claim_p_values(interval, expect, margin)
    if expect == "greater":
        want = sps.ttest_1samp(diff, -margin, alternative="greater").pvalue
        rev = sps.ttest_1samp(diff, -margin, alternative="less").pvalue
    elif expect == "less":
        want = sps.ttest_1samp(diff, margin, alternative="less").pvalue
        rev = sps.ttest_1samp(diff, margin, alternative="greater").pvalue
    else:
        want = max(sps.ttest_1samp(diff, -margin, alternative="greater").pvalue,
                   sps.ttest_1samp(diff, margin, alternative="less").pvalue)
        rev = min(sps.ttest_1samp(diff, -margin, alternative="less").pvalue,
                  sps.ttest_1samp(diff, margin, alternative="greater").pvalue)
    assert (p, p_reversed) == (pytest.approx(want, rel=1e-8), pytest.approx(rev, rel=1e-8))


def _cells_rows() -> list[dict[str, Any]]:
    """pcme and its twin in two cells: in ``short`` pcme fails the gate (i2t skill 0.1); in ``long`` both
    pass and pcme is 12.7 below the twin."""
    rows = []
    for cell, skill, gap in (("short", 0.1, 0.3), ("long", 0.45, -12.7)):
        for seed in range(5):
            jitter = 0.4 * (seed - 2)
            for recipe, value, own in (("pcme", 60.0 + gap + jitter, skill), ("twin", 60.0, 0.5)):
                rows.append(_row(recipe, cell, seed, "nns", t2i_r_precision=value,
                                 i2t_r_precision=_skill_rp(own), t2i_query_blind_r_precision=1.0))
    return rows


def test_a_reversed_cell_is_reported_beside_a_cell_that_is_not_learned() -> None:
    claim = _claim(id="pcme-vs-twin", metric="t2i_r_precision", a={"recipe": "pcme", "rerank": "nns"},
                   b={"recipe": "twin"}, min_effect=1.0, reads=["i2t", "t2i"], cells=["short", "long"])
    judgements, _ = judge_claims([claim], _cells_rows(), options=JudgeOptions(min_skill=0.3))
    [judgement] = judgements
    assert judgement.verdict == NOT_LEARNED  # the overall rule: a model failed the gate in some cell
    short, long = judgement.cells
    assert short.verdict == NOT_LEARNED and long.verdict == "reversed" and not long.gate_failures
    table = claims_markdown(judgements, title="t")
    assert "long: reversed -12.70 [" in table and "gate passed" in table
    assert "short: not learned" in table and "gate: pcme/short/nns/exact i2t skill 0.100 < 0.3" in table
    assert "long reversed -12.70" in by_paper_markdown(judgements, title="t")
    rows, _ = forest_rows(judgements)
    assert [(r.label.strip(), r.verdict) for r in rows[1:]] == \
        [("pcme-vs-twin · short (gate failed)", NOT_LEARNED), ("pcme-vs-twin · long", "reversed")]


def test_a_reranker_that_lowers_skill_below_the_gate_is_judged_on_a_model_that_passes() -> None:
    rows = []
    for seed in range(5):
        rows.append(_row("m", "v", seed, "nns", rsum=430.0 + seed, i2t_r_precision=_skill_rp(0.5),
                         t2i_r_precision=_skill_rp(0.355)))
        rows.append(_row("m", "v", seed, "is", rsum=416.0 + seed + 0.5 * (seed % 2), i2t_r_precision=_skill_rp(0.45),
                         t2i_r_precision=_skill_rp(0.291)))
    [judgement] = judge_claim(_claim(min_effect=5.0), rows, options=JudgeOptions(min_skill=0.3))
    assert judgement.verdict == "reversed"  # IS lowers rsum: judged, not excused as "not learned"
    assert judgement.gate == "m/v/cosine/nns/exact i2t skill 0.500; m/v/cosine/nns/exact t2i skill 0.355"
    assert judgement.reranked == "is i2t 0.450, t2i 0.291"
    # a model whose own ranking fails the gate is still not learned
    weak = [dict(r, t2i_r_precision=_skill_rp(0.2)) if r["rerank"] == "nns" else r for r in rows]
    [stopped] = judge_claim(_claim(min_effect=5.0), weak, options=JudgeOptions(min_skill=0.3))
    assert stopped.verdict == NOT_LEARNED


def test_a_matching_whose_lambda_is_infinite_says_it_was_not_used() -> None:
    rows = []
    lambdas = [(math.inf, math.inf), (2.5, math.inf), (math.inf, 3.0), (math.inf, math.inf), (1.0, math.inf)]
    for seed, (i2t, t2i) in enumerate(lambdas):
        good = {"i2t_r_precision": _skill_rp(0.5), "t2i_r_precision": _skill_rp(0.5)}
        rows.append(_row("m", "v", seed, "nns", rsum=400.0, **good))
        rows.append(_row("m", "v", seed, "csls", rsum=410.0 + seed, **good))
        rows.append(_row("m", "v", seed, "csls+rgm", rsum=410.0 + seed + (0.0 if i2t == t2i == math.inf else 0.5),
                         i2t_lambda=i2t, t2i_lambda=t2i))
    claim = _claim(a={"recipe": "m", "similarity": "cosine", "rerank": "csls+rgm"}, b={"rerank": "csls"}, margin=5.0)
    [judgement] = judge_claim(claim, rows, options=JudgeOptions(min_skill=0.3))
    assert judgement.matching_counts == (("i2t", 2, 5), ("t2i", 1, 5))
    assert judgement.matching == "csls+rgm used in i2t 2 of 5, t2i 1 of 5 rows (lambda finite)"
    assert "matching" in claims_markdown([judgement], title="t").split("\n| claim |")[1].split("\n")[0]


@pytest.mark.parametrize("sd,effect,expect,alpha", [(1.0, 1.0, "greater", 0.025), (3.2, 5.0, "greater", 0.025 / 6),
                                                    (1.0, 1.0, "equal", 0.025), (0.5, 2.0, "less", 0.025),
                                                    (4.0, 1.0, "equal", 0.025)])
def test_required_seeds_follow_the_t_iteration(sd: float, effect: float, expect: str, alpha: float) -> None:
    n = required_seeds(sd, effect, expect, alpha, 0.8)
    q = 0.9 if expect == "equal" else 0.8

    def enough(k: int) -> bool:
        return k >= ((sps.t.ppf(1 - alpha, k - 1) + sps.t.ppf(q, k - 1)) * sd / effect) ** 2

    assert enough(n) and (n == 2 or not enough(n - 1))
    # the exact power of the one-sided test (non-central t) at those seeds is close to the target
    if expect != "equal":
        power = 1 - sps.nct.cdf(sps.t.ppf(1 - alpha, n - 1), n - 1, effect / sd * math.sqrt(n))
        assert power >= 0.75


@pytest.mark.parametrize("name", ["uncertainty", "papers"])
def test_the_study_files_state_seed_counts_that_follow_from_their_sds(name: str) -> None:
    spec = load_study(ROOT / "studies" / f"{name}.yaml")  # refuses a file whose counts do not follow
    assert spec.design.power is not None and all(s not in range(5) for s in spec.seeds)
    for claim in spec.claims:
        effect = claim.min_effect or claim.margin
        alpha = claim_alpha(claim, spec.level, spec.design.primary)
        q = (1 + spec.design.power.power) / 2 if claim.expect == "equal" else spec.design.power.power
        n = claim.seeds_needed
        assert n >= ((sps.t.ppf(1 - alpha, n - 1) + sps.t.ppf(q, n - 1)) * claim.pilot_sd / effect) ** 2
        assert n == 2 or n - 1 < ((sps.t.ppf(1 - alpha, n - 2) + sps.t.ppf(q, n - 2)) * claim.pilot_sd / effect) ** 2


def test_one_null_per_distinct_head_is_drawn_and_shared() -> None:
    from pcmr.study.steps import null_recipes

    spec = load_study(ROOT / "studies" / "uncertainty.yaml")
    assert spec.design.null is not None and spec.design.null.source("pcme_small_init") == "pcme"
    assert null_recipes(spec) == ["pcme"]  # the claims read pcme_small_init's statistics against pcme's null
    claim = parse_claims([{"id": "n", "paper": "P", "statement": "s", "metric": "rho", "expect": "greater",
                           "a": {"recipe": "small"}, "vs_null": True}])[0]
    rows = [_row("small", "v", seed, "nns", rho=0.5 + 0.01 * seed) for seed in range(3)]
    null = [{"recipe": "big", "init": i, "rho": 0.01 * (i % 5)} for i in range(20)]
    [judgement] = judge_claim(claim, rows, options=JudgeOptions(null_rows=null, null_source={"small": "big"}))
    assert judgement.null_size == 20 and judgement.verdict == "holds"


def test_the_exploratory_rejudgement_names_itself_and_keeps_the_committed_verdicts() -> None:
    from pcmr.study.rejudge import committed_verdicts, rejudge_markdown

    folder = ROOT / "docs" / "papers_results"
    text = rejudge_markdown(folder, ROOT / "studies" / "papers.yaml", "docs/papers_results")
    assert text.startswith("Exploratory, not a verdict:")
    committed = committed_verdicts((folder / "claims.md").read_text(encoding="utf-8"))
    row = next(line for line in text.splitlines() if line.startswith("| hal-csls-rgm-over-csls |"))
    assert f"| {committed['hal-csls-rgm-over-csls']['verdict']} |" in row  # the committed verdict, unchanged
    assert "lambda finite" in row  # how many rows used RGM at all
    study = (ROOT / "docs" / "study.md").read_text(encoding="utf-8")
    assert study.count('results rejudge="docs/papers_results"') == 1  # shown once, labelled exploratory
    assert "exploratory, not verdicts" in study
