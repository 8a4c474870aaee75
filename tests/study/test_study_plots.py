"""The per-recipe table behind ``recipes.md`` / ``recipes.png`` against a direct computation, and
the study's figures written as PNG for full, single-seed and empty inputs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats as sps

from pcmr.study.claims import judge_claims, parse_claims
from pcmr.study.plots import plot_claims, plot_recipes
from pcmr.study.report import recipe_metric_table, recipes_markdown

PNG = b"\x89PNG\r\n\x1a\n"


def _rows(seeds: int = 3) -> list[dict]:
    rows = []
    for recipe, base in (("pcme", 200.0), ("vsepp_sum", 150.0)):
        first = "match_prob" if recipe == "pcme" else "cosine"
        for variant, shift in (("exact", 0.0), ("source", -20.0)):
            for seed in range(seeds):
                for similarity in (first, "avg_l2"):
                    for rerank in ("nns", "is"):
                        for relevance, rel_shift in (("exact", 0.0), ("source", -50.0)):
                            rows.append({"run": f"{recipe}-{variant}-s{seed}", "recipe": recipe, "variant": variant,
                                         "seed": seed, "similarity": similarity, "rerank": rerank,
                                         "relevance": relevance,
                                         "rsum": base + shift + rel_shift + 3.7 * seed * seed
                                         + (5.0 if similarity == "avg_l2" else 0.0) + (1.0 if rerank == "is" else 0.0),
                                         "i2t_R@1": None})
    return rows


def test_recipe_metric_table_matches_a_direct_t_interval() -> None:
    table = recipe_metric_table(_rows(), "rsum", level=0.9)
    assert set(table) == {(r, v, m) for r in ("pcme", "vsepp_sum") for v in ("exact", "source")
                          for m in ("exact", "source")}
    values = [150.0 - 20.0 - 50.0 + 3.7 * s * s for s in range(3)]  # vsepp_sum, source, source, cosine, nns
    mean, half, n = table[("vsepp_sum", "source", "source")]
    sem = sps.sem(values)
    assert n == 3 and mean == pytest.approx(sum(values) / 3, rel=1e-12)
    assert half == pytest.approx(sps.t.ppf(0.95, 2) * sem, rel=1e-9)


def test_recipe_metric_table_skips_missing_metric_and_single_seed_has_no_interval() -> None:
    assert recipe_metric_table(_rows(), "i2t_R@1") == {}
    mean, half, n = recipe_metric_table(_rows(seeds=1), "rsum")[("pcme", "exact", "exact")]
    assert n == 1 and mean == 200.0 and math.isnan(half)


@pytest.mark.parametrize("seeds", [1, 3])
def test_figures_are_written_as_png(tmp_path: Path, seeds: int) -> None:
    rows = _rows(seeds)
    claims = parse_claims([
        {"id": "pcme-vs-vsepp", "paper": "P", "statement": "s", "metric": "rsum", "expect": "greater",
         "a": {"recipe": "pcme", "rerank": "nns", "similarity": "match_prob"},
         "b": {"recipe": "vsepp_sum", "similarity": "cosine"}},
        {"id": "absent", "paper": "P", "statement": "s", "metric": "rsum", "expect": "greater",
         "a": {"recipe": "pcme", "rerank": "csls", "similarity": "match_prob", "variant": "exact",
               "relevance": "exact"}},
    ])
    judgements, errors = judge_claims(claims, rows, 0.95)
    assert len(judgements) >= 4
    for path in (plot_claims(judgements, tmp_path / "claims.png"),
                 plot_recipes(rows, tmp_path / "recipes.png", variants=("exact", "source"))):
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 1000


def test_figures_of_an_empty_study(tmp_path: Path) -> None:
    assert plot_claims([], tmp_path / "c.png").read_bytes()[:8] == PNG
    assert plot_recipes([], tmp_path / "r.png").read_bytes()[:8] == PNG


def test_recipes_markdown_one_line_per_recipe_and_variant() -> None:
    text = recipes_markdown(_rows(), ["rsum", "i2t_R@1"], title="t")
    assert "## Relevance: exact" in text and "## Relevance: source" in text
    assert "i2t_R@1" not in text  # no value anywhere: the column is left out
    mean, half, _ = recipe_metric_table(_rows(), "rsum")[("pcme", "source", "exact")]
    assert f"| pcme | source | match_prob | 3 | {mean:.2f} ± {half:.2f} |" in text
    assert text.count("| vsepp_sum | exact | cosine | 3 |") == 2
    assert "(no finished runs)" in recipes_markdown([], ["rsum"], title="t")


def test_headline_similarity_replaces_the_first_evaluated_one() -> None:
    rows = _rows()
    plain = recipe_metric_table(rows, "rsum")
    chosen = recipe_metric_table(rows, "rsum", headline={"pcme": "avg_l2"})
    assert chosen[("pcme", "exact", "exact")][0] == pytest.approx(plain[("pcme", "exact", "exact")][0] + 5.0)
    assert chosen[("vsepp_sum", "exact", "exact")] == plain[("vsepp_sum", "exact", "exact")]
    assert "| pcme | exact | avg_l2 | 3 |" in recipes_markdown(rows, ["rsum"], title="t", headline={"pcme": "avg_l2"})


def test_recipe_rows_keep_one_order_whatever_order_the_rows_came_in() -> None:
    """Recipes without the first variant tie on it: the next variant, then the name, decide (a set's order,
    which changes with the hash seed, never does)."""
    from pcmr.study.plots import recipe_order

    table = {("mu_only", "exact", "exact"): (158.0, 1.0, 5), ("mu_only", "source", "exact"): (210.0, 1.0, 5),
             ("pcme", "source", "exact"): (87.0, 1.0, 5), ("small", "source", "exact"): (219.0, 1.0, 5),
             ("pvse", "source", "exact"): (112.0, 1.0, 5), ("zeta", "exact", "exact"): (float("nan"), 1.0, 5),
             ("alpha", "exact", "exact"): (float("nan"), 1.0, 5)}
    expected = ["alpha", "zeta", "pcme", "pvse", "small", "mu_only"]  # bottom row first
    for shuffled in (table, dict(reversed(list(table.items())))):
        assert recipe_order(shuffled, ("exact", "source"), "exact") == expected
    assert recipe_order(table, (), "exact") == sorted(expected)
