"""The benchmark check: claims are judged only when the deterministic baseline learned the data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pcmr.study import load_study, parse_study
from pcmr.study.backend import resolve_config
from pcmr.study.benchmark import BENCHMARK_NOT_LEARNED, BenchmarkCheck, check_benchmark
from pcmr.study.runner import MARKER, MARKER_FORMAT, collect, run_folder
from pcmr.study.spec import StudyError, find_study


def _rows(t2i: list[float], i2t: list[float], query_blind: float = 80.0) -> list[dict]:
    """Result rows of a baseline ``mu`` and a method ``pcme`` (``pcme`` better by 2 in every seed)."""
    rows = []
    for seed, (t2i_value, i2t_value) in enumerate(zip(t2i, i2t)):
        for recipe, shift in (("mu", 0.0), ("pcme", 2.0)):
            for variant in ("exact", "source"):
                for relevance in ("exact", "source"):
                    rows.append({"run": f"{recipe}-{variant}-s{seed}", "recipe": recipe, "variant": variant,
                                 "seed": seed, "similarity": "cosine", "rerank": "nns", "relevance": relevance,
                                 "t2i_r_precision": t2i_value + shift - (30.0 if relevance == "source" else 0.0),
                                 "i2t_r_precision": i2t_value + shift,
                                 "i2t_query_blind_r_precision": query_blind + seed * 0.5})
    return rows


CHECK = BenchmarkCheck(recipe="mu", variant="exact", relevance="exact")


def test_passing_baseline() -> None:
    result = check_benchmark(CHECK, _rows([61.0, 63.0], [91.0, 92.0]))
    assert result.passed and result.reason == ""
    assert result.seeds == (0, 1)
    assert result.t2i_r_precision == pytest.approx(62.0)
    assert result.i2t_query_blind == pytest.approx(80.25)
    assert result.i2t_skill == pytest.approx((91.5 - 80.25) / (100 - 80.25))


@pytest.mark.parametrize(("t2i", "i2t", "reason"), [
    ([55.0, 60.0], [95.0, 95.0], "t2i R-Precision 57.5 < 60"),  # one seed above 60, the mean below
    ([70.0, 70.0], [85.0, 86.0], "i2t skill 0.27 < 0.5"),  # far above chance, but near the query-blind list
])
def test_failing_baseline(t2i: list[float], i2t: list[float], reason: str) -> None:
    result = check_benchmark(CHECK, _rows(t2i, i2t))
    assert not result.passed and result.reason == reason


def test_missing_rows_or_column_fail() -> None:
    assert "no result rows" in check_benchmark(BenchmarkCheck(recipe="other"), _rows([70.0], [95.0])).reason
    rows = [{k: v for k, v in r.items() if k != "i2t_query_blind_r_precision"} for r in _rows([70.0], [95.0])]
    assert "i2t_query_blind_r_precision" in check_benchmark(CHECK, rows).reason
    ambiguous = check_benchmark(BenchmarkCheck(recipe="mu", relevance="exact"), _rows([70.0], [95.0]))
    assert not ambiguous.passed and "several values of variant (exact, source)" in ambiguous.reason


STUDY = {
    "name": "bench", "seeds": [0, 1, 2],
    "variants": {"exact": {"data.train_relevance": "exact"}, "source": {"data.train_relevance": "source"}},
    "relevance": ["exact", "source"],
    "recipes": {"mu": {"recipe": "pcme_mu_only"}, "pcme": {"recipe": "pcme"}},
    "benchmark": {"recipe": "mu", "variant": "exact", "relevance": "exact"},
    "claims": [{"id": "pcme-vs-mu", "paper": "P", "statement": "pcme beats mu", "metric": "t2i_r_precision",
                "a": {"recipe": "pcme", "relevance": "exact"}, "b": {"recipe": "mu"}, "expect": "greater"}],
}


def _write_markers(out: Path, spec, rows: list[dict]) -> None:
    for run in spec.runs():
        mine = [r for r in rows if r["run"] == run.name]
        folder = run_folder(out, run)
        folder.mkdir(parents=True)
        marker = {"format": MARKER_FORMAT, "index": run.index, "run": run.name, "recipe": run.label,
                  "variant": run.variant, "seed": run.seed, "train_seconds": 1.0, "eval_seconds": 1.0, "rows": mine}
        (folder / MARKER).write_text(json.dumps(marker))


@pytest.mark.parametrize(("t2i", "verdicts"), [
    ([50.0, 52.0, 51.0], {BENCHMARK_NOT_LEARNED}),  # the baseline did not learn: no verdict
    ([65.0, 66.0, 64.0], {"holds"}),  # it did: pcme's +2 in every seed holds
])
def test_claims_report(tmp_path: Path, t2i: list[float], verdicts: set[str]) -> None:
    spec = parse_study(STUDY)
    _write_markers(tmp_path, spec, _rows(t2i, [92.0, 93.0, 94.0]))
    collect(spec, tmp_path)
    claims = (tmp_path / "claims.md").read_text()
    assert "## Benchmark check" in claims
    table = [line for line in claims.splitlines() if line.startswith("| pcme-vs-mu")]
    assert len(table) == 2  # one line per training variant
    assert {line.split("|")[-2].strip() for line in table} == verdicts
    if BENCHMARK_NOT_LEARNED in verdicts:
        assert "**Benchmark not learned** (t2i R-Precision 51.0 < 60)" in claims
        assert f"{BENCHMARK_NOT_LEARNED} 2" in claims  # the totals count them
    else:
        assert "Passed: the claims below are judged." in claims and BENCHMARK_NOT_LEARNED not in claims


@pytest.mark.parametrize(("benchmark", "message"), [
    ({"recipe": "nope"}, "benchmark.recipe: recipe 'nope' is not in the study's recipes"),
    ({"recipe": "mu", "variant": "other"}, "benchmark.variant"),
    ({"recipe": "mu", "relevance": "source", "min_t2i": 3}, "min_t2i"),
    ({"recipe": "mu", "min_t2i_r_precision": 160}, "percentage in \\[0, 100\\]"),
])
def test_bad_benchmark_section_names_the_field(benchmark: dict, message: str) -> None:
    with pytest.raises(StudyError, match=message):
        parse_study({**STUDY, "benchmark": benchmark})


def test_uncertainty_study_checks_the_benchmark_and_judges_exact_relevance_only() -> None:
    """The shipped uncertainty study: the thresholds on the mu-only baseline trained on the exact relation,
    source pairs as the main training, exact relevance only (source relevance leaves every model at chance)."""
    spec = load_study(find_study("uncertainty"))
    assert spec.benchmark == BenchmarkCheck(recipe="pcme_mu_only_exact", variant="exact_long", similarity="cosine",
                                            rerank="nns", relevance="exact", min_t2i_r_precision=60.0,
                                            min_i2t_skill=0.5, blocking=False)
    assert spec.overrides["data.options.preset"] == "multiplicity_distinct"
    assert spec.default_variants == ("source", "source_lr3") and spec.relevance == ("exact",)
    assert next(e for e in spec.recipes if e.label == "pcme_mu_only_exact").variants == ("exact_long",)
    baseline = next(r for r in spec.runs() if r.label == "pcme_mu_only_exact" and r.variant == "exact_long")
    assert baseline.recipe == "pcme_mu_only"
    config = resolve_config(baseline.recipe, baseline.overrides)
    assert config.data.train_relevance == "exact" and "cosine" in config.eval.similarities
    assert config.train.epochs == max(resolve_config(r.recipe, r.overrides).train.epochs for r in spec.runs()[::3])
    assert all(claim.a.relevance in (None, "exact") for claim in spec.claims)


def test_a_non_blocking_check_is_reported_and_withholds_no_verdict() -> None:
    from pcmr.study.benchmark import apply_benchmark, benchmark_markdown
    from pcmr.study.claims import judge_claims, parse_claims

    check = BenchmarkCheck(recipe="mu", variant="exact", relevance="exact", blocking=False)
    rows = _rows([40.0, 41.0], [85.0, 86.0])
    result = check_benchmark(check, rows)
    assert not result.passed
    claims = parse_claims([{"id": "c", "paper": "p", "statement": "s", "metric": "t2i_r_precision",
                            "a": {"recipe": "pcme", "variant": "exact", "relevance": "exact"},
                            "b": {"recipe": "mu"}, "expect": "greater"}])
    judgements, _ = judge_claims(claims, rows)
    assert [j.verdict for j in apply_benchmark(judgements, result)] == [j.verdict for j in judgements]
    text = "\n".join(benchmark_markdown(result))
    assert "Data learnable" in text and "reported only" in text and BENCHMARK_NOT_LEARNED not in text
