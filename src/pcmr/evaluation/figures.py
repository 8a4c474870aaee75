"""The numeric series behind the evaluation figures (JSON-ready lists; drawn by ``plots``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian

__all__ = ["decile_series", "k_occurrence_histogram", "embeddings_2d_series", "corruption_series"]


def _r1_by_decile(scores: Tensor, relevant: Tensor, uncertainty: Tensor) -> list[float]:
    """R@1 (percent) of the queries (rows of ``scores [Q, G]``) in each of 10 uncertainty bins."""
    from pcmr.metrics import uncertainty_decile_recall

    return [float(v) for v in uncertainty_decile_recall(scores, relevant, uncertainty, k=1, num_bins=10)]


def decile_series(scores: Tensor, relevance: Tensor, images: Gaussian, captions: Gaussian,
                  measure: str) -> dict[str, list[float]]:
    """R@1 per uncertainty decile of the queries (PCME Fig. 6) for both directions of
    ``scores [N_img, N_cap]``: ``{"i2t": [10 values], "t2i": [10 values]}``."""
    return {"i2t": _r1_by_decile(scores, relevance, images.uncertainty(measure)),
            "t2i": _r1_by_decile(scores.T, relevance.T, captions.uncertainty(measure))}


def k_occurrence_histogram(scores: Tensor, k: int) -> dict[str, list[int]]:
    """Histogram of the k-occurrence counts N_k of the gallery (columns of ``scores [Q, G]``):
    ``{"values": [distinct N_k], "frequency": [number of gallery items with that N_k]}``."""
    from pcmr.metrics import k_occurrence

    counts = k_occurrence(scores, min(k, scores.shape[1]))  # [G]
    values, frequency = torch.unique(counts.cpu(), return_counts=True)
    return {"values": [int(v) for v in values], "frequency": [int(f) for f in frequency]}


def embeddings_2d_series(images: Gaussian, captions: Gaussian, relevance: Tensor, *, max_images: int = 12,
                         caption_texts: list[str] | None = None) -> dict[str, Any]:
    """Means and standard deviations of a few images and their relevant captions (2-D models only),
    for the PCME Fig. 5 ellipse plot."""
    if images.dim != 2:
        raise ValueError(f"embedding ellipses need a 2-D model, got D={images.dim}")
    picked_images = list(range(min(max_images, images.num)))
    picked_captions: list[int] = []
    for i in picked_images:
        for c in relevance[i].nonzero().flatten().tolist()[:2]:
            if c not in picked_captions:
                picked_captions.append(c)

    def series(g: Gaussian, rows: list[int]) -> dict[str, Any]:
        sub = g[torch.tensor(rows, dtype=torch.long, device=g.device)] if rows else g[0:0]
        std = None if sub.is_point else sub.std.expand(-1, 2).cpu().tolist()
        return {"mean": sub.mean.detach().cpu().tolist(), "std": std}

    out = {"image": series(images, picked_images), "caption": series(captions, picked_captions)}
    if caption_texts is not None:
        out["caption"]["text"] = [caption_texts[c] for c in picked_captions]
    return out


def corruption_series(model: Any, split: Any, vocab: Any, measure: str, *, batch_size: int = 256,
                      device: Any = None) -> dict[str, Any] | None:
    """Mean uncertainty of the model's embeddings against the occlusion ratio of images and the
    word-erasure ratio of captions (PCME Fig. 7), when the split offers those series; else None."""
    from pcmr.evaluation.encode import encode_texts, model_device

    provider = getattr(split, "corruption_series", None)
    if provider is None:
        return None
    dev = model_device(model, device)
    out: dict[str, Any] = {"measure": measure}
    images_by_ratio, texts_by_ratio = provider()
    if images_by_ratio:
        ratios, values = [], []
        with torch.no_grad():
            was_training = model.training
            model.eval()
            for ratio, pixels in sorted(images_by_ratio.items()):
                g = model.encode_images({"images": pixels.to(dev)})
                if g.is_point:
                    break
                ratios.append(float(ratio))
                values.append(float(g.uncertainty(measure).mean()))
            model.train(was_training)
        if ratios:
            out["image"] = {"ratios": ratios, "mean_uncertainty": values}
    if texts_by_ratio:
        ratios, values = [], []
        for ratio, texts in sorted(texts_by_ratio.items()):
            g = encode_texts(model, vocab, texts, device=dev, batch_size=batch_size)
            if g.is_point:
                break
            ratios.append(float(ratio))
            values.append(float(g.uncertainty(measure).mean()))
        if ratios:
            out["caption"] = {"ratios": ratios, "mean_uncertainty": values}
    return out if ("image" in out or "caption" in out) else None
