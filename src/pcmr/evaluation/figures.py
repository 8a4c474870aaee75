"""The numeric series behind the evaluation's figures and abstention columns (JSON-ready lists; drawn by
``pcmr.report.plots``, added to the report by the producers of :mod:`pcmr.evaluation.producers`).

- :func:`decile_series`, :func:`occurrence_histogram`, :func:`embeddings_2d_series`,
  :func:`multiplicity_series`, :func:`corruption_series`: R@1 per uncertainty decile, the N_k histogram,
  the 2-D ellipses, uncertainty against multiplicity and uncertainty under occlusion and word erasure.
- :func:`abstention_series`: per direction, the risk-coverage curve of withholding the most uncertain
  queries (:mod:`pcmr.metrics.risk_coverage`), its AURC beside two deterministic references on the same
  scores (the top-1 score margin a point model has, and the oracle of the true multiplicity), and
  ProbVLM's uncertainty-recall agreement (S, R²). The risk of a query is ``1 - R-Precision``. The
  same AURCs within strata of multiplicity (:func:`multiplicity_strata`) tell what an ordering knows
  beyond how many items a query fits.
- :func:`reference_abstention_series`: the two deterministic references alone, for a point model (the
  mu-only baseline a probabilistic model's sigma is compared against).
- :func:`abstention_columns`: the AURC, S and R² of that series as evaluation-table columns.
- :func:`pca_ellipse_series`: Gaussians of any dimension projected onto the two principal axes of
  the means, exactly: a linear map keeps a Gaussian Gaussian, ``mu' = W^T (mu - c)`` and
  ``Sigma' = W^T diag(sigma^2) W`` (a full 2 x 2 covariance: the ellipses may tilt).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pcmr.data import occlusion_series, word_erasure_series
from pcmr.data.batching import ENCODE_BATCH_SIZE, image_loader
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import Vocabulary
from pcmr.encode.inputs import encode_texts, eval_mode, model_device
from pcmr.evaluation import columns as schema
from pcmr.gaussian import Gaussian
from pcmr.metrics.correlation import spearman
from pcmr.metrics.hubness import k_occurrence
from pcmr.metrics.ranking import per_query_metrics
from pcmr.metrics.risk_coverage import risk_coverage, top1_margin, uncertainty_recall_agreement
from pcmr.metrics.uncertainty import recall_by_uncertainty
from pcmr.models.model import RetrievalModel
from pcmr.relevance import I2T, T2I
from pcmr.report.figure_keys import RANDOM_WITHIN, aurc_key

__all__ = ["CORRUPTION_ITEMS", "CORRUPTION_RATIOS", "abstention_columns", "abstention_series", "corruption_series",
           "decile_series", "embeddings_2d_series", "k_occurrence_histogram", "multiplicity_series",
           "occurrence_histogram", "pca_ellipse_series", "reference_abstention_series"]


def _r1_by_decile(scores: Tensor, relevant: Tensor, uncertainty: Tensor) -> list[float]:
    """R@1 (percent) of the queries (rows of ``scores [Q, G]``) in each of 10 uncertainty bins."""

    report = recall_by_uncertainty(scores, relevant, uncertainty, num_bins=10, k=1)
    return [float(report[f"bin {b}"]["R@1"]) for b in range(1, 11)]


def decile_series(scores: Tensor, relevance: Tensor, images: Gaussian, captions: Gaussian,
                  measure: str) -> dict[str, list[float]]:
    """R@1 per uncertainty decile of the queries (PCME Fig. 6) for both directions of
    ``scores [N_img, N_cap]``: ``{"i2t": [10 values], "t2i": [10 values]}``."""
    return {I2T: _r1_by_decile(scores, relevance, images.uncertainty(measure)),
            T2I: _r1_by_decile(scores.T, relevance.T, captions.uncertainty(measure))}


def k_occurrence_histogram(scores: Tensor, k: int) -> dict[str, list[int]]:
    """Histogram of the k-occurrence counts N_k of the gallery (columns of ``scores [Q, G]``):
    ``{"values": [distinct N_k], "frequency": [number of gallery items with that N_k]}``."""

    return occurrence_histogram(k_occurrence(scores, min(k, scores.shape[1])))  # N_k [G]


def occurrence_histogram(counts: Tensor) -> dict[str, list[int]]:
    """``{"values": [distinct N_k], "frequency": [number of gallery items with that N_k]}`` of ``counts [G]``."""
    values, frequency = torch.unique(counts.cpu(), return_counts=True)
    return {"values": [int(v) for v in values], "frequency": [int(f) for f in frequency]}


def embeddings_2d_series(images: Gaussian, captions: Gaussian, relevance: Tensor, *, max_images: int = 12,
                         max_captions: int = 40, caption_texts: list[str] | None = None) -> dict[str, Any]:
    """Means and standard deviations of 2-D embeddings for the PCME Fig. 5 ellipse plot.

    ``images``/``captions``: Gaussians ``[N_img, 2]``/``[N_cap, 2]``; ``relevance``: bool ``[N_img, N_cap]``.
    Picks the first ``max_images`` images and, among the captions, the ``max_captions / 2`` most
    specific (fewest relevant images) and the ``max_captions / 2`` most generic (most relevant images),
    so that the figure shows whether generic captions get the wider Gaussians (PCME §5.1). Each
    caption carries its ``multiplicity`` (number of relevant images).
    """
    if images.dim != 2:
        raise ValueError(f"embedding ellipses need a 2-D model, got D={images.dim}")
    picked_images = list(range(min(max_images, images.num)))
    multiplicity = relevance.sum(0).cpu()  # [N_cap]
    order = torch.argsort(multiplicity, stable=True).tolist()
    half = max(1, max_captions // 2)
    picked_captions = order[:half] + [c for c in order[-half:] if c not in order[:half]]

    def series(g: Gaussian, rows: list[int]) -> dict[str, Any]:
        sub = g[torch.tensor(rows, dtype=torch.long, device=g.device)] if rows else g[0:0]
        std = None if sub.is_point else sub.std.expand(-1, 2).cpu().tolist()
        return {"mean": sub.mean.detach().cpu().tolist(), "std": std}

    out = {"image": series(images, picked_images), "caption": series(captions, picked_captions)}
    out["caption"]["multiplicity"] = [int(multiplicity[c]) for c in picked_captions]
    if caption_texts is not None:
        out["caption"]["text"] = [caption_texts[c] for c in picked_captions]
    return out


def multiplicity_series(images: Gaussian, captions: Gaussian, relevance: Tensor, measure: str, *,
                        max_points: int = 2000, num_bins: int = 8) -> dict[str, Any]:
    """Uncertainty against true multiplicity (number of relevant items), per modality (PCME §5.1).

    ``relevance``: bool ``[N_img, N_cap]``; ``measure``: a :meth:`pcmr.Gaussian.uncertainty` measure.
    Returns ``{"measure", "image": side, "caption": side}`` with ``side = {"multiplicity": [...],
    "uncertainty": [...]`` (at most ``max_points`` items, evenly spaced in index order), ``"rho"``
    (Spearman over all items; NaN when every item has the same multiplicity), ``"bins"``: ``{"multiplicity":
    [...], "uncertainty": [...]}`` the means over ``num_bins`` groups of items of equal size after
    sorting by multiplicity}``.
    """
    out: dict[str, Any] = {"measure": measure}
    for side, gaussian, axis in (("image", images, 1), ("caption", captions, 0)):
        counts = relevance.sum(axis).cpu().double().numpy()
        values = gaussian.uncertainty(measure).detach().cpu().double().numpy()
        order = np.argsort(counts, kind="stable")
        groups = [g for g in np.array_split(order, min(num_bins, len(order))) if len(g)]
        stride = max(1, -(-len(counts) // max_points))
        out[side] = {
            "multiplicity": counts[::stride].tolist(), "uncertainty": values[::stride].tolist(),
            "rho": spearman(counts, values) if len(counts) > 1 else float("nan"),
            "bins": {"multiplicity": [float(counts[g].mean()) for g in groups],
                     "uncertainty": [float(values[g].mean()) for g in groups]},
        }
    return out


CORRUPTION_RATIOS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
#: images / captions of a split re-encoded at each ratio (its first ones)
CORRUPTION_ITEMS = 256


def corruption_series(model: RetrievalModel, split: RetrievalSplit, vocab: Vocabulary, measure: str, *, max_items: int = CORRUPTION_ITEMS,
                      ratios: tuple[float, ...] = CORRUPTION_RATIOS, batch_size: int = ENCODE_BATCH_SIZE, device: torch.device | str | None = None,
                      seed: int = 0) -> dict[str, Any] | None:
    """Mean uncertainty of the model's embeddings against the occlusion ratio of images and the
    word-erasure ratio of captions (PCME Fig. 7), on the first ``max_items`` images / captions of the
    split (``pcmr.data.occlusion_series`` / ``word_erasure_series``, fixed seed). A modality is left
    out when the model gives it point embeddings, or (images) when the split holds precomputed
    features. Returns None when neither modality qualifies."""

    dev = model_device(model, device)
    out: dict[str, Any] = {"measure": measure}
    batch = next(iter(image_loader(split, max_items)))
    pixels = batch["images"]
    with eval_mode(model):
        if pixels.dim() == 4:
            series = occlusion_series(pixels, ratios, seed=seed)  # [R, N, 3, H, W]
            values = []
            for r in range(len(ratios)):
                g = model.encode_images({"images": series[r].to(dev), "image_index": batch["image_index"].to(dev)})
                if g.is_point:
                    break
                values.append(float(g.uncertainty(measure).mean()))
            if values:
                out["image"] = {"ratios": list(ratios), "mean_uncertainty": values}
    texts = split.caption_texts[:max_items]
    values = []
    for erased in word_erasure_series(texts, ratios, seed=seed):
        g = encode_texts(model, vocab, erased, device=dev, batch_size=batch_size)
        if g.is_point:
            break
        values.append(float(g.uncertainty(measure).mean()))
    if values:
        out["caption"] = {"ratios": list(ratios), "mean_uncertainty": values}
    return out if ("image" in out or "caption" in out) else None


# ---------------------------------------------------------------- abstention and the PCA ellipses
#: points of a risk-coverage curve kept for the figure (evenly spaced in coverage)
CURVE_POINTS = 200


def multiplicity_strata(multiplicity: np.ndarray, max_strata: int = 5) -> np.ndarray:
    """A stratum id per query: its multiplicity where there are at most ``max_strata`` distinct values,
    else equal-size quantile groups of it (ties kept together: a group boundary never splits a value)."""
    values = np.unique(multiplicity)
    if values.size <= max_strata:
        return np.searchsorted(values, multiplicity)
    ranks = np.searchsorted(np.sort(multiplicity), multiplicity, side="left")  # first rank of each value
    return np.minimum((ranks * max_strata) // multiplicity.size, max_strata - 1)


def _within_strata(risk: np.ndarray, uncertainty: np.ndarray, strata: np.ndarray) -> float:
    """The size-weighted mean over strata of the AURC inside each stratum (strata of one query left
    out): what an ordering knows beyond the stratum variable; NaN when no stratum is left."""
    total, weight = 0.0, 0
    for value in np.unique(strata):
        mask = strata == value
        if mask.sum() >= 2:
            total += risk_coverage(risk[mask], uncertainty[mask]).aurc * int(mask.sum())
            weight += int(mask.sum())
    return total / weight if weight else math.nan


def _direction(scores: Tensor, relevant: Tensor, uncertainty: Tensor | None) -> dict[str, Any]:
    """One direction: ``scores [Q, G]``, ``relevant`` bool ``[Q, G]``, ``uncertainty [Q]`` (``None`` for a
    point model: only the deterministic references, the top-1 margin and the multiplicity oracle)."""
    per_query = per_query_metrics(scores, relevant, precision=True)
    valid = per_query.valid.cpu()
    risk = (1.0 - per_query.r_precision.double().cpu())[valid]
    margin = -top1_margin(scores).detach().double().cpu()[valid]  # small margin = uncertain
    multiplicity = relevant.sum(1).double().cpu()[valid]  # the oracle: more relevant items = more ambiguous
    by_margin, by_multiplicity = risk_coverage(risk, margin), risk_coverage(risk, multiplicity)
    stride = max(1, -(-len(by_margin.risk) // CURVE_POINTS))
    strata = multiplicity_strata(multiplicity.numpy())
    out: dict[str, Any] = {
        "random": by_margin.random, "oracle": by_margin.oracle,
        aurc_key("margin"): by_margin.aurc, aurc_key("multiplicity"): by_multiplicity.aurc,
        "margin_risk": by_margin.risk[::stride].tolist(), "multiplicity_risk": by_multiplicity.risk[::stride].tolist(),
        aurc_key("margin", within=True): _within_strata(risk.numpy(), margin.numpy(), strata),
        RANDOM_WITHIN: _within_strata(risk.numpy(), np.zeros(len(strata)), strata),
    }
    if uncertainty is None:
        return out
    sigma = uncertainty.detach().double().cpu()[valid]
    curve = risk_coverage(risk, sigma)
    out.update({"coverage": curve.coverage[::stride].tolist(), "risk": curve.risk[::stride].tolist(),
                aurc_key(): curve.aurc, aurc_key(within=True): _within_strata(risk.numpy(), sigma.numpy(), strata)})
    bins = min(10, int(valid.sum()))
    if bins >= 2:
        hits = per_query.hit_probability(1).cpu()[valid]  # expected over the orders of tied scores
        out.update(uncertainty_recall_agreement(hits, sigma, num_bins=bins))
    return out


def reference_abstention_series(scores: Tensor, relevance: Tensor) -> dict[str, dict[str, Any]]:
    """The deterministic references of :func:`abstention_series` for a model without an uncertainty
    (a point model): per direction ``aurc_margin``, ``aurc_multiplicity``, ``aurc_margin_within``,
    ``random_within`` and the curves. What a probabilistic model's sigma is compared against."""
    return {I2T: _direction(scores, relevance, None), T2I: _direction(scores.T, relevance.T, None)}


def abstention_series(scores: Tensor, relevance: Tensor, images: Gaussian, captions: Gaussian,
                      measure: str) -> dict[str, dict[str, Any]]:
    """``{"i2t": side, "t2i": side}`` for ``scores [N_img, N_cap]`` and ``relevance`` bool ``[N_img, N_cap]``;
    queries are ranked by ``Gaussian.uncertainty(measure)``. Each side: ``coverage``, ``risk`` (the curve),
    ``aurc``, ``random``, ``oracle``, ``aurc_margin``, ``aurc_multiplicity``, ``margin_risk``,
    ``multiplicity_risk``, ``S``, ``R2`` (see the module docstring; risks in [0, 1])."""
    return {I2T: _direction(scores, relevance, images.uncertainty(measure)),
            T2I: _direction(scores.T, relevance.T, captions.uncertainty(measure))}


def abstention_columns(series: dict[str, dict[str, Any]]) -> dict[str, float]:
    """``{d}_aurc``, ``{d}_aurc_margin``, ``{d}_aurc_multiplicity``, and within multiplicity strata
    ``{d}_aurc_within``, ``{d}_aurc_margin_within``, ``{d}_random_within`` (percent: 100 x AURC, lower is
    better); no abstention ``{d}_aurc_random`` (the mean risk) and the excess of the uncertainty's and the
    margin's AURC over it, ``{d}_excess_aurc``, ``{d}_excess_aurc_margin``; and ``{d}_uncertainty_S``, ``{d}_uncertainty_R2`` for each direction ``d``."""
    out: dict[str, float] = {}
    for direction, side in series.items():
        columns = {schema.aurc(direction): aurc_key(), schema.aurc(direction, "margin"): aurc_key("margin"),
                   schema.aurc(direction, "multiplicity"): aurc_key("multiplicity"),
                   schema.aurc(direction, within=True): aurc_key(within=True),
                   schema.aurc(direction, "margin", within=True): aurc_key("margin", within=True),
                   schema.random_aurc_within(direction): RANDOM_WITHIN}
        for column, key in columns.items():
            if key in side:  # a point model has the references only
                out[column] = 100.0 * float(side[key])
        if "random" in side:  # no abstention: the mean risk, and each ordering's AURC above it
            out[schema.aurc(direction, "random")] = 100.0 * float(side["random"])
            for ranked_by, key in ((None, aurc_key()), ("margin", aurc_key("margin"))):
                if key in side:
                    out[schema.excess_aurc(direction, ranked_by)] = 100.0 * (float(side[key]) - float(side["random"]))
        for key in ("S", "R2"):
            if key in side:
                out[schema.uncertainty_fit(direction, key)] = float(side[key])
    return out


def _projection(images: Gaussian, captions: Gaussian) -> tuple[Tensor, Tensor]:
    """``(center [D], W [D, 2])``: the mean and the two leading principal axes of every mean."""
    means = torch.cat([images.mean, captions.mean]).detach().double().cpu()
    center = means.mean(0)
    _, _, vh = torch.linalg.svd(means - center, full_matrices=False)
    return center, vh[:2].T


def project_gaussians(gaussian: Gaussian, center: Tensor, axes: Tensor) -> tuple[Tensor, Tensor]:
    """``(mean [N, 2], covariance [N, 2, 2])`` of ``gaussian [N, D]`` (diagonal) under ``x -> W^T (x - c)``:
    ``W^T (mu - c)`` and ``W^T diag(sigma^2) W`` (float64)."""
    mean = (gaussian.mean.detach().double().cpu() - center) @ axes
    if gaussian.logvar is None:
        return mean, torch.zeros(gaussian.num, 2, 2, dtype=torch.float64)
    variance = gaussian.logvar.detach().double().cpu().exp().expand(-1, axes.shape[0])  # [N, D]
    covariance = torch.einsum("di,nd,dj->nij", axes, variance, axes)
    return mean, covariance


def pca_ellipse_series(images: Gaussian, captions: Gaussian, relevance: Tensor, *, max_images: int = 8,
                       max_captions: int = 16, caption_texts: list[str] | None = None) -> dict[str, Any]:
    """The most specific and the most generic captions (fewest / most relevant images, ``max_captions / 2``
    each) and the first ``max_images`` images, projected onto the two principal axes of all means
    (:func:`project_gaussians`): ``{"image": side, "caption": side, "explained": [two fractions]}``,
    ``side = {"mean": [[x, y]], "covariance": [[[a, b], [b, c]]]}``, captions with ``multiplicity``
    (and ``text`` where given)."""
    center, axes = _projection(images, captions)
    means = torch.cat([images.mean, captions.mean]).detach().double().cpu() - center
    singular = torch.linalg.svdvals(means)
    explained = (singular[:2] ** 2 / (singular ** 2).sum()).tolist()
    multiplicity = relevance.sum(0).cpu()
    order = torch.argsort(multiplicity, stable=True).tolist()
    half = max(1, max_captions // 2)
    picked = order[:half] + [c for c in order[-half:] if c not in order[:half]]
    picked_images = list(range(min(max_images, images.num)))

    def side(gaussian: Gaussian, rows: list[int]) -> dict[str, Any]:
        mean, covariance = project_gaussians(gaussian[torch.tensor(rows, dtype=torch.long, device=gaussian.device)],
                                             center, axes)
        return {"mean": mean.tolist(), "covariance": covariance.tolist()}

    out = {"image": side(images, picked_images), "caption": side(captions, picked), "explained": explained}
    out["caption"]["multiplicity"] = [int(multiplicity[c]) for c in picked]
    if caption_texts is not None:
        out["caption"]["text"] = [caption_texts[c] for c in picked]
    return out
