"""Claims judged from result rows: field inheritance, expansion over variants / relevance modes,
the comparison with zero, ambiguity and missing data."""

from __future__ import annotations

import pytest
from scipy import stats as sps

from pcmr.study.claims import NO_DATA, judge_claim, parse_claims


def _rows() -> list[dict]:
    rows = []
    values = {("pcme", "true"): [10.0, 12.0, 11.0], ("mu", "true"): [9.0, 10.8, 9.9],
              ("pcme", "source"): [8.0, 7.0, 9.0], ("mu", "source"): [8.5, 7.5, 9.0]}
    for (recipe, variant), per_seed in values.items():
        for seed, value in enumerate(per_seed):
            for relevance, shift in (("exact", 0.0), ("source", -5.0)):
                for similarity, rerank in (("match_prob", "nns"), ("match_prob", "is"), ("cosine", "nns")):
                    rows.append({"run": f"{recipe}-{variant}-s{seed}", "recipe": recipe, "variant": variant,
                                 "seed": seed, "similarity": similarity, "rerank": rerank, "relevance": relevance,
                                 "rsum": value + shift + (1.0 if rerank == "is" else 0.0),
                                 "slope": 1.0 + 0.1 * seed, "note": None})
    return rows


def _claim(**fields) -> object:
    base = {"id": "c", "paper": "P", "statement": "s", "metric": "rsum", "expect": "greater",
            "a": {"recipe": "pcme", "similarity": "match_prob", "rerank": "nns"}, "b": {"recipe": "mu"}}
    base.update(fields)
    return parse_claims([base])[0]


def test_judged_once_per_variant_and_relevance_with_b_inheriting_from_a() -> None:
    judgements = judge_claim(_claim(), _rows())
    conditions = [j.condition for j in judgements]
    assert conditions == [{"variant": v, "relevance": r} for v in ("source", "true") for r in ("exact", "source")]
    true_exact = judgements[2]
    assert true_exact.b.similarity == "match_prob" and true_exact.b.rerank == "nns"
    a, b = [10.0, 12.0, 11.0], [9.0, 10.8, 9.9]
    ci = sps.ttest_rel(a, b).confidence_interval(0.95)
    assert true_exact.seeds == (0, 1, 2)
    assert true_exact.interval.mean == pytest.approx(sum(x - y for x, y in zip(a, b)) / 3)
    assert (true_exact.interval.low, true_exact.interval.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert true_exact.verdict == "holds"
    # source variant: differences -0.5, -0.5, 0: mean -1/3, interval about [-1.05, 0.38] straddles zero
    assert judgements[0].verdict == "inconclusive"


def test_pinned_fields_are_not_expanded_and_zero_is_the_default_b() -> None:
    claim = _claim(metric="slope", a={"recipe": "pcme", "similarity": "cosine", "rerank": "nns",
                                      "variant": "true", "relevance": "exact"}, b=None)
    (judgement,) = judge_claim(claim, _rows())
    assert judgement.b is None and judgement.condition == {}
    assert judgement.interval.mean == pytest.approx(1.1)
    assert judgement.verdict == "holds"


def test_a_metric_against_another_metric_of_the_same_rows() -> None:
    claim = _claim(metric="rsum", b={"metric": "slope"}, a={"recipe": "pcme", "similarity": "match_prob",
                                                           "rerank": "nns", "variant": "true", "relevance": "exact"})
    (judgement,) = judge_claim(claim, _rows())
    assert judgement.interval.mean == pytest.approx((10 + 12 + 11) / 3 - 1.1)


def test_ambiguous_selector_and_missing_data() -> None:
    with pytest.raises(ValueError, match="pin more fields"):
        judge_claim(_claim(a={"recipe": "pcme"}), _rows())  # rerank nns and is give different rsum
    empty = judge_claim(_claim(metric="note"), _rows())
    assert {j.verdict for j in empty} == {NO_DATA}
    assert all(j.interval.n == 0 for j in empty)


def test_equivalence_claim() -> None:
    claim = _claim(expect="equal", margin=5.0, a={"recipe": "pcme", "similarity": "match_prob", "rerank": "nns",
                                                 "variant": "source", "relevance": "exact"})
    (judgement,) = judge_claim(claim, _rows())
    assert judgement.verdict == "holds"


@pytest.mark.parametrize(("change", "message"), [
    ({"expect": "bigger"}, "expect"),
    ({"expect": "equal"}, "margin > 0"),
    ({"margin": -1}, "margin"),
    ({"a": {"recipe": "pcme", "model": "x"}}, "unknown study file key 'claims\\[0\\].a.model'; accepted keys"),
    ({"a": "pcme"}, "study file key 'claims\\[0\\].a' expects Selector or null, got 'pcme'"),
    ({"a": {"recipe": 3}}, "study file key 'claims\\[0\\].a.recipe' expects str or null, got 3"),
    ({"a": None}, "claims\\[0\\].a: expected a mapping"),
    ({"metric": ""}, "metric"),
    ({"margin": "wide"}, "study file key 'claims\\[0\\].margin' expects a number"),
    ({"colour": 1}, "unknown study file key 'claims\\[0\\].colour'; accepted keys"),
])
def test_bad_claims_are_rejected(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _claim(**change)


def test_duplicate_ids_are_rejected() -> None:
    claim = {"id": "c", "paper": "P", "statement": "s", "metric": "rsum", "expect": "greater",
             "a": {"recipe": "pcme"}}
    with pytest.raises(ValueError, match="duplicate"):
        parse_claims([claim, dict(claim)])


def test_no_common_condition_is_no_data_and_judge_claims_collects_errors() -> None:
    from pcmr.study.claims import judge_claims

    claim = _claim(b={"recipe": "absent"})
    (judgement,) = judge_claim(claim, _rows())
    assert judgement.verdict == NO_DATA and judgement.seeds == ()
    bad = _claim(id="ambiguous", a={"recipe": "pcme"})
    judgements, errors = judge_claims([claim, bad], _rows())
    assert [j.claim.id for j in judgements] == ["c"] and "pin more fields" in errors["ambiguous"]


def test_a_claim_on_an_untrained_head_is_no_signal() -> None:
    """The trained-signal gate: a claim reading the caption head is "no signal" when any seed of its
    side a recorded ``caption_uncertainty_signal`` 0; a claim that reads no head, or rows without the
    column, are judged as before."""
    from pcmr.study.claims import NO_SIGNAL

    rows = _rows()
    gated = _claim(metric="slope", a={"recipe": "pcme", "variant": "true", "relevance": "exact",
                                      "similarity": "match_prob", "rerank": "nns"}, b=None, signal="caption")
    assert judge_claim(gated, rows)[0].verdict == "holds"  # no signal column: not gated
    for row in rows:
        row["caption_uncertainty_signal"] = 0.0 if row["seed"] == 1 else 1.0
        row["image_uncertainty_signal"] = 1.0
    judgement = judge_claim(gated, rows)[0]
    assert judgement.verdict == NO_SIGNAL and judgement.seeds == (0, 1, 2)
    assert judgement.ungated == "holds"  # the interval's own verdict, kept beside the gate's
    from pcmr.study.report import claims_markdown

    table = claims_markdown([judgement], title="t")
    assert "| without the gate |" in table and "| no signal | holds |" in table
    assert "without the gate |" not in claims_markdown(judge_claim(image := _claim(
        metric="slope", a=gated.a.__dict__, b=None, signal="image"), rows), title="t").split("Totals")[1]
    assert judge_claim(image, rows)[0].verdict == "holds" and judge_claim(image, rows)[0].ungated == ""
    assert judge_claim(_claim(metric="slope", a=gated.a.__dict__, b=None), rows)[0].verdict == "holds"
    for row in rows:
        row["caption_uncertainty_signal"] = 1.0
    assert judge_claim(gated, rows)[0].verdict == "holds"
    with pytest.raises(ValueError, match="signal: expected one of image, caption, both"):
        _claim(signal="text")
