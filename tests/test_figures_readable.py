"""Every figure pcmr writes, read as a reader would (tests/_figure_check.py): no two text elements
overlap, no text leaves the canvas, every axis has at least three labelled ticks.

The figures are caught on their way to ``save_figure`` (the PNGs are still written) from a tiny
``pcmr evaluate`` (every evaluation figure; ``pcmr demo`` writes the same ones through the same
evaluation), a 2-D evaluation (the ellipse figure), a tiny study's ``collect`` (claims, recipes,
curves) and the search-scaling benchmark's figure."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import pcmr.report.plots as report_plots
import pcmr.study.curves as study_curves
import pcmr.study.plots as study_plots
from _figure_check import assert_readable, layout_problems
from pcmr.cli import main
from pcmr.evaluation import evaluate_embeddings
from pcmr.gaussian import Gaussian
from pcmr.study import parse_study
from pcmr.study.runner import MARKER, MARKER_FORMAT, collect, run_folder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def caught(monkeypatch) -> dict[str, Any]:
    """``{file name: Figure}`` of every figure saved while the test runs."""
    figures: dict[str, Any] = {}
    for module in (report_plots, study_plots, study_curves):
        original = module.save_figure

        def keep(figure, path, original=original):
            figures[Path(path).name] = figure
            return original(figure, path)

        monkeypatch.setattr(module, "save_figure", keep)
    return figures


def test_every_evaluation_figure_is_readable(tiny_run_factory, tiny_shapes, tmp_path: Path, caught) -> None:
    run = tiny_run_factory(tmp_path / "run", shapes=tiny_shapes, similarity_options={"match_prob": {"a": 3.0, "b": 1.0}})
    assert main(["evaluate", str(run), "--similarity", "match_prob,cosine", "--rerank", "nns,is",
                 "--out", str(tmp_path / "eval")]) == 0
    generator = torch.Generator().manual_seed(0)  # a 2-D model: the ellipse figure of PCME Fig. 5
    images = Gaussian(torch.randn(14, 2, generator=generator), torch.randn(14, 2, generator=generator) - 2)
    captions = Gaussian(torch.cat([images.mean.repeat_interleave(2, 0), torch.zeros(4, 2)]), torch.full((32, 2), -1.5))
    relevance = torch.zeros(14, 32, dtype=torch.bool)
    relevance[torch.arange(14).repeat_interleave(2), torch.arange(28)] = True
    relevance[:, 28:] = True  # four generic captions, at one point
    report = evaluate_embeddings(images, captions, relevance, similarities=["cosine"], rerankers=["nns"])
    report_plots.save_figures({"embeddings_2d": report.figures["embeddings_2d"]}, tmp_path / "two_d")
    assert set(caught) == {f"{name}.png" for name in report_plots.FIGURES}
    for name, figure in caught.items():
        assert_readable(figure, name)


def _study_rows() -> list[dict[str, Any]]:
    rows = []
    for seed in range(3):
        for recipe, shift in (("mu", 0.0), ("pcme", 2.0 + seed), ("pcme_small_init", -1.0 + 0.5 * seed)):
            for variant in ("exact", "source"):
                for relevance in ("exact", "source"):
                    rows.append({"run": f"{recipe}-{variant}-s{seed}", "recipe": recipe, "variant": variant,
                                 "seed": seed, "similarity": "cosine", "rerank": "nns", "relevance": relevance,
                                 "t2i_r_precision": 62.0 + seed + shift - (30.0 if relevance == "source" else 0.0),
                                 "i2t_r_precision": 93.0 + shift, "i2t_query_blind_r_precision": 80.0,
                                 "rsum": 400.0 + 10 * shift + seed, "t2i_aurc": 40.0 - shift + seed,
                                 "caption_uncertainty_relevant_rho": 0.1 * shift,
                                 "caption_uncertainty_relevant_rho_untrained": 0.02 * seed})
    return rows


STUDY = {
    "name": "figures", "seeds": [0, 1, 2],
    "variants": {"exact": {"data.train_relevance": "exact"}, "source": {"data.train_relevance": "source"}},
    "relevance": ["exact", "source"],
    "recipes": {"mu": {"recipe": "pcme_mu_only"}, "pcme": {"recipe": "pcme"}, "pcme_small_init": {"recipe": "pcme"}},
    "benchmark": {"recipe": "mu", "variant": "exact", "relevance": "exact"},
    "claims": [
        {"id": "pcme-vs-mu-rp-t2i", "paper": "P", "statement": "s", "metric": "t2i_r_precision",
         "a": {"recipe": "pcme", "relevance": "exact"}, "b": {"recipe": "mu"}, "expect": "greater", "min_effect": 1.0},
        {"id": "pcme_small_init-vs-mu-rp-t2i", "paper": "P", "statement": "s", "metric": "t2i_r_precision",
         "a": {"recipe": "pcme_small_init", "relevance": "exact"}, "b": {"recipe": "mu"}, "expect": "greater",
         "min_effect": 1.0},
        {"id": "pcme-rsum-like-mu", "paper": "P", "statement": "s", "metric": "rsum",
         "a": {"recipe": "pcme"}, "b": {"recipe": "mu"}, "expect": "equal", "margin": 5.0},
        {"id": "pcme-over-mu-rsum", "paper": "P", "statement": "s", "metric": "rsum",
         "a": {"recipe": "pcme", "relevance": "exact"}, "b": {"recipe": "mu"}, "expect": "greater"},
        {"id": "pcme-abstention-t2i", "paper": "P", "statement": "s", "metric": "t2i_aurc",
         "a": {"recipe": "pcme", "relevance": "exact"}, "b": {"recipe": "mu"}, "expect": "less", "min_effect": 1.0},
        {"id": "pcme-caption-uncertainty-vs-relevant-images", "paper": "P", "statement": "s",
         "metric": "caption_uncertainty_relevant_rho", "a": {"recipe": "pcme", "relevance": "exact"},
         "b": {"metric": "caption_uncertainty_relevant_rho_untrained"}, "expect": "greater", "min_effect": 0.1},
    ],
}


def _write_study(out: Path) -> Any:
    """A study's finished run folders (markers and validation histories), as ``pcmr study`` leaves them."""
    spec = parse_study(STUDY)
    rows = _study_rows()
    for run in spec.runs():
        folder = run_folder(out, run)
        folder.mkdir(parents=True)
        marker = {"format": MARKER_FORMAT, "index": run.index, "run": run.name, "recipe": run.label,
                  "variant": run.variant, "seed": run.seed, "train_seconds": 1.0, "eval_seconds": 1.0,
                  "rows": [r for r in rows if r["run"] == run.name]}
        (folder / MARKER).write_text(json.dumps(marker))
        history = [{"epoch": e, "val": {"r_precision": 10.0 + 3 * e + run.seed}} for e in range(1, 9)]
        (folder / "run.json").write_text(json.dumps({"history": history}))
    return spec


def test_every_study_figure_is_readable(tmp_path: Path, caught) -> None:
    collect(_write_study(tmp_path), tmp_path)
    assert set(caught) == {"claims.png", "recipes.png", "curves.png"}
    for name, figure in caught.items():
        assert_readable(figure, name)
    claims = caught["claims.png"]
    labels = [t.get_text() for t in claims.axes[0].get_yticklabels()]
    assert labels[0] == "retrieval accuracy" and "abstention (risk-coverage)" in labels  # grouped by family
    assert "pcme-vs-mu-rp-t2i [exact]" in labels  # the shared condition (eval exact) is said once, not per row


def test_claims_rows_are_in_units_of_the_minimum_effect_and_turned_for_less(tmp_path: Path, caught) -> None:
    from pcmr.study.forest import ForestRow, claims_figure

    rows = [ForestRow("a [x]", "retrieval accuracy", 3.0, 2.0, 4.0, 2.0, "greater", "holds", "holds"),
            ForestRow("b", "abstention (risk-coverage)", 3.0, 2.0, 4.0, 2.0, "less", "reversed", "inconclusive"),
            ForestRow("c", "retrieval accuracy", 3.0, 2.0, 4.0, 0.0, "greater", "holds"),
            ForestRow("d", "retrieval accuracy", 0.5, -1.0, 2.0, 5.0, "equal", "holds")]
    assert [row.scaled() for row in rows] == [(1.5, 1.0, 2.0), (-1.5, -2.0, -1.0), (3.0, 2.0, 4.0), (0.1, -0.2, 0.4)]
    figure = claims_figure(rows, "eval exact")
    assert_readable(figure, "claims figure")
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert "reversed → inconclusive (Holm)" in texts and "holds" in texts
    ax = figure.axes[0]
    assert ax.get_xlim()[0] <= -2.0 and ax.get_xlim()[1] >= 4.0
    assert {"−1", "0", "1"} <= {t.get_text() for t in ax.get_xticklabels()}


def test_the_checker_finds_overlaps_clipping_and_bare_axes() -> None:
    figure = report_plots.new_figure(3.0, 2.0)
    ax = figure.subplots()
    ax.plot([0, 1], [0, 1])
    ax.set_xticks([0.0, 0.5])
    ax.text(0.2, 0.5, "one text here")
    ax.text(0.22, 0.5, "another text")
    ax.set_xlabel("a label far too long to fit on a figure this narrow, so it leaves the canvas")
    problems = layout_problems(figure)
    assert any("overlaps" in p and "one text here" in p for p in problems)
    assert any("outside" in p and "a label far too long" in p for p in problems)
    assert any(p.startswith("x axis") and "2 labelled tick" in p for p in problems)


def _search_scale_module() -> Any:
    pytest.importorskip("faiss")
    path = ROOT / "benchmarks" / "search_scale.py"
    spec = importlib.util.spec_from_file_location("search_scale_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def test_search_scaling_figure_is_readable() -> None:
    bench = _search_scale_module()
    rows = []
    for size, scale in ((1_000_000, 1.0), (10_000_000, 3.0)):
        rows += [{"stage": "build", "size": size, "seconds": 150.0 * scale, "peak_rss_gib": 1.7 * scale},
                 {"stage": "build", "size": size, "backend": "faiss-ivfpq-sq8", "seconds": 30.0 * scale ** 2,
                  "peak_rss_gib": 1.5 * scale ** 1.5}]
        for backend, rate in (("faiss-ivfpq", 560.0), ("faiss-ivfpq-sq8", 690.0)):
            for candidates, recall in ((100, 0.88), (200, 0.95), (400, 0.99)):
                rows.append({"stage": "serve", "size": size, "backend": backend, "C": candidates,
                             "qps": rate / scale / (candidates / 100), "recall@10": recall, "peak_rss_gib": 0.5 * scale})
    assert_readable(bench.scaling_figure(rows), "search_scaling.png")


SCALING_TABLES = ROOT / "docs" / "benchmark_logs" / "search_scaling_tables.json"


def test_search_scaling_figure_of_the_committed_tables() -> None:
    """docs/figures/search_scaling.png as drawn by ``--plot-from`` the committed numbers: readable, and
    each panel shows the highest peak / the last build / the best rate at recall@10 >= 0.9 per size."""
    bench = _search_scale_module()
    figure = bench.scaling_figure(bench.table_rows(SCALING_TABLES))
    assert_readable(figure, "search_scaling.png")
    memory, build, rate = ([(line.get_label(), list(line.get_ydata())) for line in ax.get_lines()]
                           for ax in figure.axes)
    assert memory == [("build peak", [1.76, 5.54]), ("serve peak", [0.71, 3.44])]
    assert build == [("faiss-ivfpq", [158.0, 553.1]), ("faiss-ivfpq-sq8", [32.6, 366.9])]
    assert rate == [("faiss-ivfpq", [569.3, 204.0]), ("faiss-ivfpq-sq8", [692.0, 301.6])]


def test_search_scaling_tables_file_holds_the_numbers_of_the_docs() -> None:
    """Every row of the committed data file is written in docs/benchmarks.md (its table row, or the
    paragraph it names), and every build and serving row of the section's tables is in the file."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    section = text.split("## Search past one machine's memory")[1].split("\n## ")[0]
    cells = [[c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
             for line in section.splitlines() if line.startswith("| ")]
    paragraph = next(line for line in section.split("\n\n") if line.startswith("At 1M with the same settings"))
    in_paragraph = {float(v) for v in re.findall(r"\d+(?:\.\d+)?", paragraph)}
    serving = {"faiss-ivfpq": "faiss IVF-PQ", "faiss-ivfpq-sq8": "faiss IVF-PQ + SQ8",
               "milvus-lite/IVF_FLAT": "Milvus Lite IVF_FLAT (embedded)"}
    rows = json.loads(SCALING_TABLES.read_text())["rows"]
    matched = 0
    for row in rows:
        if row["source"].startswith("paragraph"):
            for key in ("seconds", "peak_rss_gib", "index_gib", "qps", "recall@10"):
                if row.get(key) is not None:
                    assert row[key] in in_paragraph, (key, row)
            continue
        if row["stage"] == "serve":
            key = [f"{row['size']:,}", serving[row["backend"]], str(row["nprobe"]), str(row["C"])]
            found = [c for c in cells if c[:4] == key]
            assert len(found) == 1, row
            assert [float(v) for v in found[0][4:7]] == [row["qps"], row["recall@10"], row["peak_rss_gib"]], row
        else:
            label = "build " + serving[row["backend"]].removeprefix("faiss ") + " (1 thread)"
            found = [c for c in cells if c[:2] == [label, f"{row['size']:,}"]]
            assert len(found) == 1, row
            assert [float(found[0][2].split()[0]), float(found[0][3])] == [row["seconds"], row["peak_rss_gib"]], row
            assert f"{row['index_gib']:g} " in " ".join(found[0][4:]) + " ", row
        matched += 1
    in_docs = [c for c in cells if c[0] in ("1,000,000", "10,000,000") or c[0].startswith("build IVF-PQ")]
    assert matched == len(in_docs) == 22  # 3 builds, 13 + 6 serving rows


def test_the_checker_fails_the_former_claims_layout() -> None:
    """The layout ``claims.png`` had before the forest plot: long labels with the condition, one symlog
    axis in mixed units with matplotlib's default ticks, a long x label; squeezed into a narrow strip,
    its tick labels overlap and its x label leaves the canvas (as the figure of the uncertainty study did)."""
    figure = report_plots.new_figure(11.0, 3.0)
    ax = figure.subplots()
    labels = [f"pcme_small_init-caption-uncertainty-vs-relevant-images-{i} [eval exact, source+source_lr3+source_long]"
              for i in range(4)]
    for row, (low, high) in enumerate([(-30.0, -16.0), (-1.5, 1.5), (-26.0, 37.0), (18.0, 22.0)]):
        ax.plot([low, high], [row, row], linewidth=2.5)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=10)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("mean of a - b over paired seeds, with its interval (metric units, symmetric log axis)")
    for verdict in ("holds", "reversed", "inconclusive", "unstable", "no signal"):
        ax.plot([], [], "o-", label=verdict)
    ax.legend(fontsize=10, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    figure.tight_layout()
    problems = layout_problems(figure)
    assert any("overlaps" in p and "10^" in p for p in problems), problems
    assert any("outside" in p and "mean of a - b" in p for p in problems), problems
