"""What an evaluation's risk-coverage curve belongs to: the model's weights and the gallery it was
measured on.

``pcmr search --max-risk R --risk-curve EVAL_DIR`` turns the curve into the share of queries to answer,
and a query's uncertainty is placed among the stored items of the index. Both only mean the same
thing for the same model (the uncertainty's scale) and the same gallery (the percentiles), so the
evaluation stores :func:`gallery_fingerprint` beside the curve (``figures.risk_coverage.fingerprint``
of ``results.json``) and the search compares it with its index's (:func:`fingerprint_mismatches`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["FINGERPRINT_FIELDS", "fingerprint_mismatches", "gallery_fingerprint", "model_sha256"]

#: the fields compared, in the order a mismatch names them
FINGERPRINT_FIELDS = ("model_sha256", "dataset", "split", "num_images", "num_captions")


def model_sha256(network: torch.nn.Module) -> str:
    """SHA-256 of a network's weights: every entry of its ``state_dict`` (sorted by name) as name,
    dtype, shape and raw bytes. Equal for the same weights wherever they are loaded (a run's model, the
    copy inside a gallery index, another device)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(network.state_dict().items()):
        value = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{value.dtype}|{tuple(value.shape)}|".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def gallery_fingerprint(network: torch.nn.Module, dataset: str | None, split: str | None, num_images: int,
                        num_captions: int) -> dict[str, Any]:
    """The fields of :data:`FINGERPRINT_FIELDS` for a model and the gallery (dataset, split and sizes)."""
    return {"model_sha256": model_sha256(network), "dataset": dataset, "split": split,
            "num_images": int(num_images), "num_captions": int(num_captions)}


def fingerprint_mismatches(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``"field: stored X, here Y"`` for each field of :data:`FINGERPRINT_FIELDS` that differs (empty: they
    match). A model hash is shortened to 12 characters."""
    out = []
    for field in FINGERPRINT_FIELDS:
        a, b = stored.get(field), current.get(field)
        if a != b:
            if field == "model_sha256":
                a, b = (str(v)[:12] if v is not None else v for v in (a, b))
                field = "model weights (SHA-256)"
            out.append(f"{field}: {a} there, {b} here")
    return out
