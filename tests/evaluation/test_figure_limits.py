"""Every figure kind drawn on tiny data: the axes hold all the data, stay within the metric's possible
range (R@1 in 0-100, rsum in 0-600), and legends sit outside the marks they explain.

The figures are caught on their way to ``save_figure`` (the PNG is still written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import pcmr.report.plots as report_plots
import pcmr.study.plots as study_plots
from _figure_check import assert_readable
from pcmr.evaluation.figures import (
    corruption_series,
    decile_series,
    embeddings_2d_series,
    k_occurrence_histogram,
)
from pcmr.gaussian import Gaussian
from pcmr.hub import load
from pcmr.study.claims import judge_claims, parse_claims
from pcmr.train.loading import run_config
from pcmr.train.run import load_run_split

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def caught(monkeypatch) -> list[Any]:
    figures: list[Any] = []
    for module in (report_plots, study_plots):
        original = module.save_figure

        def keep(figure, path, original=original):
            figures.append(figure)
            return original(figure, path)

        monkeypatch.setattr(module, "save_figure", keep)
    return figures


def _data_points(ax) -> np.ndarray:
    points = [np.column_stack(line.get_data()).astype(float) for line in ax.get_lines() if len(line.get_xdata())]
    points += [np.asarray(c.get_offsets(), dtype=float) for c in ax.collections if len(c.get_offsets())]
    return np.concatenate(points) if points else np.zeros((0, 2))


def _assert_holds(ax, points: np.ndarray) -> None:
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    assert np.all(points[:, 0] >= x0 - 1e-9) and np.all(points[:, 0] <= x1 + 1e-9), (ax.get_xlim(), points[:, 0])
    assert np.all(points[:, 1] >= y0 - 1e-9) and np.all(points[:, 1] <= y1 + 1e-9), (ax.get_ylim(), points[:, 1])


def _legend_clear_of_marks(figure) -> None:
    """No data point of any axes is drawn inside a legend's box."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    for ax in figure.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        for other in figure.axes:
            display = other.transData.transform(_data_points(other)) if len(_data_points(other)) else []
            inside = [p for p in display if box.x0 <= p[0] <= box.x1 and box.y0 <= p[1] <= box.y1]
            assert not inside, f"legend of '{ax.get_title()}' covers {len(inside)} mark(s)"


def _gaussians(n: int, d: int, seed: int) -> tuple[Gaussian, Gaussian, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = Gaussian(torch.randn(n, d, generator=generator), torch.randn(n, d, generator=generator) * 0.3)
    captions = Gaussian(images.mean.repeat_interleave(2, 0) + 0.3 * torch.randn(2 * n, d, generator=generator),
                        torch.randn(2 * n, d, generator=generator) * 0.3)
    relevance = torch.zeros(n, 2 * n, dtype=torch.bool)
    relevance[torch.arange(n).repeat_interleave(2), torch.arange(2 * n)] = True
    return images, captions, relevance


def test_uncertainty_deciles_within_0_100_with_every_line_visible(tmp_path: Path, caught) -> None:
    images, captions, relevance = _gaussians(40, 8, 0)
    scores = images.mean @ captions.mean.T
    same = decile_series(scores, relevance, images, captions, "log_det")
    data = {"measure": "log_det", "series": {"cosine": same, "kl": same, "elk": same}}  # three equal curves
    path = report_plots.plot_uncertainty_deciles(data, tmp_path / "u.png")
    assert path.read_bytes()[:8] == PNG
    figure = caught[-1]
    for ax in figure.axes:
        assert ax.get_ylim() == (0.0, 100.0)
        _assert_holds(ax, _data_points(ax))
        lines = ax.get_lines()
        assert len({(line.get_marker(), line.get_linestyle()) for line in lines}) == len(lines) == 3
        xs = [tuple(line.get_xdata()) for line in lines]
        assert len(set(xs)) == 3  # equal curves are shifted apart
    labels = [t.get_text() for t in figure.axes[1].get_legend().get_texts()]
    assert labels == ["cosine", "kl", "elk"]
    _legend_clear_of_marks(figure)


def _labelled_ticks(axis, limits) -> list[str]:
    """The tick labels of ``axis`` drawn inside ``limits`` (after a draw)."""
    low, high = sorted(limits)
    return [tick.label1.get_text() for tick in axis.get_major_ticks()
            if low <= tick.get_loc() <= high and tick.label1.get_visible() and tick.label1.get_text()]


def test_k_occurrence_tail_is_monotone_with_three_labels_on_a_short_range(tmp_path: Path, caught) -> None:
    """The figure draws, per N_k, the items retrieved at least N_k times (one non-increasing curve, not
    a zigzag); counts spanning less than a decade still get three labelled ticks, not one lone 10^0."""
    short = {"values": [0, 3, 40, 60, 120], "frequency": [4, 1, 2, 1, 5]}
    wide = {"values": [1, 2, 5, 30], "frequency": [20, 8, 2, 1]}
    assert report_plots.occurrence_tail(short["values"], short["frequency"]) == ([3, 40, 60, 120], [9, 8, 6, 5])
    report_plots.plot_k_occurrence({"k": 10, "series": {"cosine/nns": {"i2t": wide, "t2i": short}}},
                                   tmp_path / "k.png")
    figure = caught[-1]
    assert_readable(figure, "k_occurrence.png")
    (line,) = figure.axes[1].get_lines()
    assert list(line.get_xdata()) == [3, 40, 60, 120] and list(line.get_ydata()) == [9, 8, 6, 5]
    assert "(4 never retrieved)" in figure.axes[1].get_legend().get_texts()[0].get_text()
    assert {"1", "2", "5", "10", "20"} <= set(_labelled_ticks(figure.axes[0].xaxis, figure.axes[0].get_xlim()))


def test_k_occurrence_and_ellipses_hold_their_data(tmp_path: Path, caught) -> None:
    images, captions, relevance = _gaussians(30, 2, 1)
    scores = images.mean @ captions.mean.T
    hist = {"i2t": k_occurrence_histogram(scores, 10), "t2i": k_occurrence_histogram(scores.T, 10)}
    report_plots.plot_k_occurrence({"k": 10, "series": {"cosine/nns": hist, "cosine/csls": hist}}, tmp_path / "k.png")
    for ax in caught[-1].axes:
        points = _data_points(ax)
        assert len(points) and ax.get_xscale() == "log"
        _assert_holds(ax, points)
        lines = ax.get_lines()
        assert len({(line.get_marker(), line.get_linestyle()) for line in lines}) == len(lines) == 2
    _legend_clear_of_marks(caught[-1])
    report_plots.plot_embedding_ellipses(embeddings_2d_series(images, captions, relevance), tmp_path / "e.png")
    ax = caught[-1].axes[0]
    _assert_holds(ax, _data_points(ax))
    corruption = {"measure": "log_det", "image": {"ratios": [0.0, 0.4, 0.8], "mean_uncertainty": [-30.0, -29.0, -27.5]},
                  "caption": {"ratios": [0.0, 0.4, 0.8], "mean_uncertainty": [-31.0, -30.5, -29.0]}}
    report_plots.plot_uncertainty_vs_corruption(corruption, tmp_path / "c.png")
    for ax in caught[-1].axes:
        _assert_holds(ax, _data_points(ax))


def _study_rows() -> list[dict]:
    rows = []  # two seeds far apart: the t interval (df = 1) reaches far below 0 and above 600
    for recipe, base in (("pcme", 420.0), ("vsepp_sum", 380.0), ("pvse", 300.0)):
        for variant in ("base", "augmented"):
            for seed, shift in ((0, -60.0), (1, 60.0)):
                for relevance in ("exact", "source"):
                    rows.append({"run": f"{recipe}-{variant}-s{seed}", "recipe": recipe, "variant": variant,
                                 "seed": seed, "similarity": "cosine", "rerank": "nns", "relevance": relevance,
                                 "rsum": base + shift + (10.0 if variant == "augmented" else 0.0)})
    return rows


def test_recipes_axis_stays_in_the_possible_rsum_range_and_legend_is_outside(tmp_path: Path, caught) -> None:
    rows = _study_rows()
    study_plots.plot_recipes(rows, tmp_path / "recipes.png", variants=("base", "augmented"))
    figure = caught[-1]
    for ax in figure.axes:
        low, high = ax.get_xlim()
        assert 0.0 <= low < 240.0 and 540.0 < high <= 600.0, (low, high)
        means = [p for line in ax.get_lines() if line.get_marker() not in ("None", "", None)
                 for p in np.column_stack(line.get_data())]
        _assert_holds(ax, np.asarray(means))
    _legend_clear_of_marks(figure)
    assert study_plots.metric_bounds("rsum") == (0.0, 600.0)
    assert study_plots.metric_bounds("t2i_R@1") == (0.0, 100.0) and study_plots.metric_bounds("hs_sum") is None


def test_claims_labels_are_readable_and_legend_outside(tmp_path: Path, caught) -> None:
    rows = _study_rows()
    claims = parse_claims([
        {"id": "pcme-vs-vsepp", "paper": "P", "statement": "s", "metric": "rsum", "expect": "greater",
         "a": {"recipe": "pcme"}, "b": {"recipe": "vsepp_sum"}},
        {"id": "pvse-vs-vsepp", "paper": "P", "statement": "s", "metric": "rsum", "expect": "greater",
         "a": {"recipe": "pvse"}, "b": {"recipe": "vsepp_sum"}},
    ])
    judgements, _ = judge_claims(claims, rows, 0.95)
    study_plots.plot_claims(judgements, tmp_path / "claims.png")
    figure = caught[-1]
    ax = figure.axes[0]
    assert all(label.get_fontsize() >= 9 for label in ax.get_yticklabels())
    _assert_holds(ax, _data_points(ax))
    _legend_clear_of_marks(figure)


def test_uncertainty_vs_corruption_from_a_model(search_run_factory, tmp_path: Path, caught) -> None:
    trained = load(search_run_factory(tmp_path / "run"))
    split = load_run_split(run_config(trained), "test")
    series = corruption_series(trained.network, split, trained.vocabulary, "log_det", max_items=8)
    assert series is not None and set(series) == {"measure", "image", "caption"}
    report_plots.plot_uncertainty_vs_corruption(series, tmp_path / "c.png")
    for ax, modality in zip(caught[-1].axes, ("image", "caption")):
        points = _data_points(ax)
        assert np.allclose(points[:, 1], series[modality]["mean_uncertainty"])
        _assert_holds(ax, points)


def test_uncertainty_multiplicity_holds_its_data_legend_clear(tmp_path: Path, caught) -> None:
    from pcmr.evaluation.figures import multiplicity_series

    images, captions, relevance = _gaussians(60, 4, 2)
    relevance |= torch.rand(relevance.shape, generator=torch.Generator().manual_seed(3)) < torch.linspace(0, 0.8, 120)
    report_plots.plot_uncertainty_multiplicity(multiplicity_series(images, captions, relevance, "log_det"),
                                              tmp_path / "m.png")
    figure = caught[-1]
    assert len(figure.axes) == 2
    for ax in figure.axes:
        _assert_holds(ax, _data_points(ax))
    _legend_clear_of_marks(figure)


def test_risk_coverage_y_axis_follows_its_curves_legend_clear(tmp_path: Path, caught) -> None:
    from pcmr.evaluation.figures import abstention_series

    images, captions, relevance = _gaussians(60, 4, 4)
    relevance |= torch.rand(relevance.shape, generator=torch.Generator().manual_seed(5)) < 0.05
    scores = images.mean @ captions.mean.T
    series = {"cosine": abstention_series(scores, relevance, images, captions, "log_det")}
    report_plots.plot_risk_coverage({"measure": "log_det", "series": series}, tmp_path / "r.png")
    figure = caught[-1]
    assert len(figure.axes) == 2
    for ax, direction in zip(figure.axes, ("i2t", "t2i")):
        low, high = sorted(ax.get_ylim())
        side = series["cosine"][direction]
        values = side["risk"] + side["margin_risk"] + side["multiplicity_risk"] + [side["random"]]
        assert 0.0 <= low <= min(values) and max(values) <= high <= 1.0
        assert high - low <= 1.2 * max(max(values) - min(values), 0.05)  # not stretched to 0-1
        assert sorted(ax.get_xlim()) == [0.0, 1.0]
        _assert_holds(ax, _data_points(ax))
        assert len(ax.get_lines()) == 4  # uncertainty, margin, multiplicity, no abstention
    _legend_clear_of_marks(figure)
    assert_readable(figure, "risk_coverage.png")


def test_pca_ellipses_hold_every_ellipse(tmp_path: Path, caught) -> None:
    from pcmr.evaluation.figures import pca_ellipse_series

    images, captions, relevance = _gaussians(30, 6, 6)
    relevance[:10, :] |= torch.arange(60) % 3 == 0  # some generic captions
    report_plots.plot_pca_ellipses(pca_ellipse_series(images, captions, relevance), tmp_path / "p.png")
    figure = caught[-1]
    (ax,) = figure.axes
    figure.canvas.draw()
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    for patch in ax.patches:  # every ellipse lies inside the axes
        box = patch.get_extents().transformed(ax.transData.inverted())
        assert x0 - 1e-6 <= box.x0 and box.x1 <= x1 + 1e-6 and y0 - 1e-6 <= box.y0 and box.y1 <= y1 + 1e-6
    outlines = [p for p in ax.patches if p.get_facecolor()[3] == 0.0]
    fills = [p for p in ax.patches if p.get_facecolor()[3] > 0.0]
    assert len(outlines) == len(fills) == 8 + 16  # one fill and one outline per ellipse
    assert min(p.get_zorder() for p in outlines) > max(p.get_zorder() for p in fills)  # no fill hides an outline
    assert_readable(figure, "embeddings_pca.png")
    _legend_clear_of_marks(figure)


def test_ellipses_name_multiplicities_and_count_coinciding_means(tmp_path: Path, caught) -> None:
    data = {"image": {"mean": [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]], "std": [[0.2, 0.2]] * 3},
            "caption": {"mean": [[2.0, 2.0]] * 4 + [[-1.0, 0.0], [0.0, -1.0]], "std": [[0.3, 0.3]] * 6,
                        "multiplicity": [5, 5, 5, 5, 1, 1]}}
    report_plots.plot_embedding_ellipses(data, tmp_path / "e.png")
    figure = caught[-1]
    assert_readable(figure, "embeddings_2d.png")
    (ax,) = figure.axes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["images, n=3", "specific captions (1 relevant image), n=2",
                      "generic captions (5 relevant images), n=4"]
    notes = sorted(t.get_text() for t in ax.texts)
    assert notes == ["2 images at this point", "4 captions at this point"]
    outlines = [p for p in ax.patches if p.get_facecolor()[3] == 0.0]
    assert len(outlines) == 2 + 2 + 1  # equal ellipses at one point are drawn once


def test_risk_coverage_names_coinciding_curves_and_the_multiplicity_order(tmp_path: Path, caught) -> None:
    """Similarities that give every query the same risk draw one curve, labelled with all their names;
    the true-multiplicity reference says in which order it answers."""
    from pcmr.evaluation.figures import abstention_series

    images, captions, relevance = _gaussians(60, 4, 4)
    relevance |= torch.rand(relevance.shape, generator=torch.Generator().manual_seed(5)) < 0.05
    scores = images.mean @ captions.mean.T
    same = abstention_series(scores, relevance, images, captions, "log_det")
    other = abstention_series(-scores, relevance, images, captions, "log_det")
    series = {"cosine": same, "kl": same, "js": same, "l2": other}
    assert [names for names, _ in report_plots.coinciding_curves(series, "t2i")] == [["cosine", "kl", "js"], ["l2"]]
    report_plots.plot_risk_coverage({"measure": "log_det", "series": series}, tmp_path / "r.png")
    figure = caught[-1]
    for ax in figure.axes:
        labels = ax.get_legend_handles_labels()[1]
        assert labels[0].startswith("cosine, kl, js uncertainty (identical curves, AURC ")
        assert any(label.startswith("true multiplicity, fewest relevant first") for label in labels)
        assert len(ax.get_lines()) == 5  # two uncertainty curves, margin, multiplicity, no abstention
    _legend_clear_of_marks(figure)
    assert_readable(figure, "risk_coverage.png")
