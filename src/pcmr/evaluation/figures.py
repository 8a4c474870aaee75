"""The numeric series behind the evaluation figures (JSON-ready lists; drawn by ``plots``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from pcmr.data import occlusion_series, word_erasure_series
from pcmr.data.batching import ENCODE_BATCH_SIZE, image_loader
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import Vocabulary
from pcmr.encode.inputs import encode_texts, eval_mode, model_device
from pcmr.gaussian import Gaussian
from pcmr.metrics.correlation import spearman
from pcmr.metrics.hubness import k_occurrence
from pcmr.metrics.uncertainty import recall_by_uncertainty
from pcmr.models.model import RetrievalModel
from pcmr.relevance import I2T, T2I

__all__ = ["decile_series", "k_occurrence_histogram", "embeddings_2d_series", "corruption_series",
           "multiplicity_series"]


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
