"""The claims machinery against the untrained null: minimum effects, p-values with Holm's correction,
each judgement once, claims judged over sweep cells, and the agreement of uncertainty across seeds."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats

from pcmr.study import StudyError
from pcmr.study.analysis import caption_wildcard_counts, mean_pairwise_spearman, stratified_spearman
from pcmr.study.backend import read_item_uncertainty
from pcmr.study.claims import (
    AGREEMENT_MIN,
    ANY_RELEVANCE,
    NO_SIGNAL,
    UNSTABLE,
    judge_claim,
    judge_claims,
    parse_claims,
)
from pcmr.study.report import agreement_markdown, claims_markdown
from pcmr.study.runner import seed_agreement
from pcmr.study.stats import holm_rejections, mean_interval, paired_p_value, verdict


def _holm_reference(p_values: list[float], alpha: float) -> list[bool]:
    """Holm through adjusted p-values: ``p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``, rejected
    where ``p~ <= alpha`` (an independent form of the step-down rule)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return [a <= alpha for a in adjusted]


@pytest.mark.parametrize("seed", range(20))
def test_holm_matches_the_adjusted_p_value_form(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 12))
    p_values = [float(v) for v in rng.uniform(0, 0.2, m) ** rng.uniform(0.5, 3)]
    assert holm_rejections(p_values, 0.05) == _holm_reference(p_values, 0.05)


def test_holm_counts_an_undefined_p_value_and_never_rejects_it() -> None:
    assert holm_rejections([0.02, math.nan], 0.05) == [True, False]  # 0.02 <= 0.05 / 2
    assert holm_rejections([0.03, math.nan], 0.05) == [False, False]  # 0.03 > 0.05 / 2: m counts the NaN
    with pytest.raises(ValueError, match="alpha"):
        holm_rejections([0.1], 1.5)


@pytest.mark.parametrize("values", [[0.3, 1.2, -0.4, 2.2, 0.9], [5.0, 5.5, 4.75], [-1e-3, -2e-3, -4e-3, 1e-4]])
def test_paired_p_value_matches_scipy(values: list[float]) -> None:
    expected = scipy.stats.ttest_1samp(values, 0.0).pvalue
    assert paired_p_value(mean_interval(values)) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_paired_p_value_edge_cases() -> None:
    assert math.isnan(paired_p_value(mean_interval([1.0])))
    assert paired_p_value(mean_interval([0.0, 0.0, 0.0])) == 1.0
    assert paired_p_value(mean_interval([2.0, 2.0])) == 0.0


@pytest.mark.parametrize("values, expect, effect, expected", [
    ([2.0, 2.2, 1.9, 2.1], "greater", 1.0, "holds"),       # clear of zero and past the effect
    ([0.05, 0.07, 0.06, 0.08], "greater", 1.0, "equal"),    # clear of zero, far below the effect
    ([0.5, 1.5, 0.2, 1.9], "greater", 1.0, "inconclusive"),  # mean 1.03 but the interval reaches past e
    ([-2.0, -2.2, -1.9, -2.1], "greater", 1.0, "reversed"),
    ([-2.0, -2.2, -1.9, -2.1], "less", 1.0, "holds"),
    ([-0.3, 0.2, 0.1, -0.1], "greater", 0.5, "equal"),
    ([0.3, 0.35, 0.32], "greater", 0.0, "holds"),            # without an effect: the old rule
])
def test_verdict_with_a_minimum_effect(values: list[float], expect: str, effect: float, expected: str) -> None:
    assert verdict(mean_interval(values), expect, 0.0, effect) == expected


def _row(seed: int, recipe: str, relevance: str, variant: str = "base", **metrics: Any) -> dict[str, Any]:
    return {"run": f"{recipe}-{variant}-s{seed}", "recipe": recipe, "variant": variant, "seed": seed,
            "similarity": "match_prob", "rerank": "nns", "relevance": relevance, **metrics}


NULL_CLAIM = {"id": "rho-vs-null", "paper": "PCME", "statement": "caption uncertainty follows multiplicity",
              "metric": "caption_uncertainty_relevant_rho",
              "a": {"recipe": "pcme"}, "b": {"metric": "caption_uncertainty_relevant_rho_untrained"},
              "expect": "greater", "min_effect": 0.1}


def test_a_claim_against_the_untrained_null_shows_both_means() -> None:
    claim = parse_claims([NULL_CLAIM])[0]
    rows = [_row(s, "pcme", "exact", caption_uncertainty_relevant_rho=0.6 + 0.01 * s,
                 caption_uncertainty_relevant_rho_untrained=0.2 - 0.02 * s) for s in range(4)]
    (judgement,) = judge_claim(claim, rows)
    assert judgement.verdict == "holds"
    assert judgement.mean_a == pytest.approx(0.615) and judgement.mean_b == pytest.approx(0.17)
    # a correlation the initialisation alone gives: trained = untrained + a little -> equal, never holds
    rows = [_row(s, "pcme", "exact", caption_uncertainty_relevant_rho=0.5 + 0.01 * s,
                 caption_uncertainty_relevant_rho_untrained=0.48 + 0.01 * s + 0.001 * (s % 2)) for s in range(4)]
    assert judge_claim(claim, rows)[0].verdict == "equal"
    text = claims_markdown(judge_claims([claim], rows)[0], title="t")
    assert "| mean a | mean b |" in text and "(e=0.1)" in text


def test_a_relevance_free_metric_is_judged_once() -> None:
    claim = parse_claims([{**NULL_CLAIM, "metric": "t2i_pmrp_mean", "b": {"recipe": "mu"}, "min_effect": 0.0}])[0]
    rows = [_row(s, r, mode, t2i_pmrp_mean=v + s) for s in range(3) for mode in ("exact", "source")
            for r, v in (("pcme", 10.0), ("mu", 8.0))]
    (judgement,) = judge_claim(claim, rows)
    assert judgement.condition["relevance"] == ANY_RELEVANCE and judgement.verdict == "holds"
    # a metric that reads the relevance: judged under each mode
    rows = [{**r, "t2i_pmrp_mean": r["t2i_pmrp_mean"] + (r["relevance"] == "source")} for r in rows
            if r["recipe"] == "pcme"] + [r for r in rows if r["recipe"] == "mu"]
    assert sorted(j.condition["relevance"] for j in judge_claim(claim, rows)) == ["exact", "source"]


def test_a_swept_claim_holds_only_when_every_cell_agrees() -> None:
    claim = parse_claims([{**NULL_CLAIM, "cells": ["lr1", "lr3", "long"], "a": {"recipe": "pcme", "relevance": "exact"}}])[0]

    def rows(effects: dict[str, float]) -> list[dict[str, Any]]:
        return [_row(s, "pcme", "exact", cell, caption_uncertainty_relevant_rho=e + 0.01 * s,
                     caption_uncertainty_relevant_rho_untrained=0.0) for cell, e in effects.items() for s in range(3)]

    (held,) = judge_claim(claim, rows({"lr1": 0.5, "lr3": 0.6, "long": 0.4}))
    assert held.verdict == "holds" and [c.verdict for c in held.cells] == ["holds"] * 3
    assert held.p_value == max(c.p_value for c in held.cells)
    (unstable,) = judge_claim(claim, rows({"lr1": 0.5, "lr3": -0.5, "long": 0.4}))
    assert unstable.verdict == UNSTABLE
    text = claims_markdown([unstable], title="t")
    assert "lr3: reversed" in text and "| cells |" in text
    with pytest.raises(ValueError, match="cells"):
        parse_claims([{**NULL_CLAIM, "cells": ["lr1"], "a": {"recipe": "pcme", "variant": "lr1"}}])


def test_holm_column_over_the_whole_table() -> None:
    claims = parse_claims([{**NULL_CLAIM, "id": f"c{i}", "min_effect": 0.0} for i in range(6)])
    # one seed set where a difference is barely significant alone: Holm over six claims drops it
    values = [0.1, 0.03, 0.12, 0.02, 0.2]
    rows = [_row(s, "pcme", "exact", caption_uncertainty_relevant_rho=v, caption_uncertainty_relevant_rho_untrained=0.0)
            for s, v in enumerate(values)]
    judgements, _ = judge_claims(claims, rows)
    p = judgements[0].p_value
    assert 0.05 / 6 < p < 0.05
    assert all(j.verdict == "holds" and j.holm == "inconclusive" for j in judgements)
    assert "After Holm: holds 0" in claims_markdown(judgements, title="t")


def test_the_gate_reads_agreement_across_seeds() -> None:
    claim = parse_claims([{**NULL_CLAIM, "signal": "caption"}])[0]
    base = [_row(s, "pcme", "exact", caption_uncertainty_relevant_rho=0.6 + 0.01 * s,
                 caption_uncertainty_relevant_rho_untrained=0.0, caption_uncertainty_signal=0.0) for s in range(3)]
    low = [{**r, "caption_uncertainty_agreement": AGREEMENT_MIN - 0.1} for r in base]
    high = [{**r, "caption_uncertainty_agreement": AGREEMENT_MIN + 0.1} for r in base]
    assert judge_claim(claim, low)[0].verdict == NO_SIGNAL
    assert judge_claim(claim, high)[0].verdict == "holds"  # the per-run floor gate no longer applies
    assert judge_claim(claim, base)[0].verdict == NO_SIGNAL  # older results: the per-run gate


def test_mean_pairwise_spearman_matches_scipy() -> None:
    rng = np.random.default_rng(3)
    series = [rng.normal(size=37) for _ in range(4)]
    expected = np.mean([scipy.stats.spearmanr(a, b).statistic for a, b in itertools.combinations(series, 2)])
    assert mean_pairwise_spearman(series) == pytest.approx(expected, rel=1e-12)
    assert math.isnan(mean_pairwise_spearman(series[:1]))
    with pytest.raises(ValueError, match="same items"):
        mean_pairwise_spearman([series[0], series[1][:5]])


def test_stratified_spearman_is_the_size_weighted_mean_within_strata() -> None:
    rng = np.random.default_rng(4)
    strata = rng.integers(0, 5, size=61)
    strata[:2] = 9  # a stratum of two items: left out
    y = strata * 3.0 + rng.integers(0, 4, size=61)
    x = y + rng.normal(size=61)
    total, weight = 0.0, 0
    for value in set(strata.tolist()) - {9}:
        mask = strata == value
        total += scipy.stats.spearmanr(x[mask], y[mask]).statistic * mask.sum()
        weight += mask.sum()
    assert stratified_spearman(x, y, strata) == pytest.approx(total / weight, rel=1e-12)
    # a correlation carried only by the strata variable vanishes within strata
    noise = rng.normal(size=61)
    assert abs(stratified_spearman(strata + 0.01 * noise, noise * 0 + rng.normal(size=61), strata)) < 0.5


def test_caption_wildcard_counts_match_the_wildcard_words() -> None:
    from pcmr.data import load_dataset
    from pcmr.data.shapes.grammar import SLOT_WILDCARDS

    split = load_dataset("shapes", "test", preset="multiplicity", num_train=20, num_val=5, num_test=15,
                         num_test_unseen=0, num_binary_selection=0, cache=False)
    expected = [sum(word in SLOT_WILDCARDS for word in text.split()) for text in split.caption_texts]
    assert caption_wildcard_counts(split).tolist() == expected
    assert caption_wildcard_counts(object()) is None


def test_seed_agreement_and_its_table(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    shared = rng.normal(size=50)
    runs = [{"caption": list(shared + 0.1 * rng.normal(size=50)), "caption_untrained": list(rng.normal(size=50))}
            for _ in range(3)]
    agreement = seed_agreement({("pcme", "base"): runs, ("vsepp", "base"): [{}, {}]})
    columns = agreement[("pcme", "base")]
    assert columns["caption_uncertainty_agreement"] > 0.9 and abs(columns["caption_uncertainty_agreement_untrained"]) < 0.3
    assert ("vsepp", "base") not in agreement
    text = agreement_markdown(agreement, title="t")
    assert "| pcme | base | caption |" in text and "judged" in text


def test_item_uncertainty_file_errors_name_the_file(tmp_path: Path) -> None:
    assert read_item_uncertainty(tmp_path) == {}
    (tmp_path / "item_uncertainty.json").write_text("{not json")
    with pytest.raises(StudyError, match="item_uncertainty.json"):
        read_item_uncertainty(tmp_path)
    (tmp_path / "item_uncertainty.json").write_text(json.dumps({"caption": 3}))
    with pytest.raises(StudyError, match="list of numbers"):
        read_item_uncertainty(tmp_path)
