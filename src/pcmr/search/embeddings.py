"""Saved gallery embeddings: a safetensors file read in row shards.

The file holds ``image_mean [N_img, D]`` and/or ``caption_mean [N_cap, D]`` with optional
``image_logvar`` / ``caption_logvar`` (``[N, D]`` or ``[N, 1]``), the layout of an index's own
``embeddings.safetensors``. Its string metadata may carry JSON lists ``image_ids``,
``caption_ids``, ``caption_texts`` and ``image_metadata``; without them ids are running integers
from ``first_id`` and caption texts are empty.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from pcmr.gaussian import Gaussian
from pcmr.search.ann import ProgressCounter

__all__ = ["SavedEmbeddings", "read_embeddings"]


@dataclass
class SavedEmbeddings:
    """What :func:`read_embeddings` returns; ``None`` for a modality the file does not hold."""

    images: Gaussian | None
    captions: Gaussian | None
    image_ids: list[Any]
    caption_ids: list[Any]
    caption_texts: list[str]
    image_metadata: list[dict[str, Any]] | None


def _read_tensor(handle: Any, name: str, shard_rows: int, progress: Any) -> torch.Tensor:
    view = handle.get_slice(name)
    shape = view.get_shape()
    if len(shape) != 2:
        raise ValueError(f"tensor {name!r} must be 2-D [N, D], got shape {shape}")
    first = view[0:0]
    out = torch.empty(shape, dtype=first.dtype)
    for start in range(0, shape[0], shard_rows):
        stop = min(start + shard_rows, shape[0])
        out[start:stop] = view[start:stop]
        if progress is not None:
            progress(stop - start)
    return out


def _json_list(metadata: dict[str, str], key: str, length: int, path: str) -> list[Any] | None:
    if key not in metadata:
        return None
    try:
        values = json.loads(metadata[key])
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: metadata {key!r} must be a JSON list ({err})") from None
    if not isinstance(values, list) or len(values) != length:
        raise ValueError(f"{path}: metadata {key!r} must be a JSON list of {length} entries")
    return values


def read_embeddings(path: str | os.PathLike[str], *, shard_rows: int = 65_536, first_image_id: int = 0,
                    first_caption_id: int = 0, progress: bool | None = False) -> SavedEmbeddings:
    """Read a saved-embeddings file (module docstring) ``shard_rows`` rows at a time, with a progress
    bar when ``progress``. Raises FileNotFoundError / ValueError naming the file and the field."""


    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"embeddings file not found: {path}")
    try:
        with safe_open(path, framework="pt") as handle:
            names = set(handle.keys())
            metadata = handle.metadata() or {}
            rows = sum(handle.get_slice(n).get_shape()[0] for n in names if n.endswith("_mean"))
            bar = ProgressCounter(progress, rows, "reading embeddings")
            tensors = {n: _read_tensor(handle, n, shard_rows, bar if n.endswith("_mean") else None)
                       for n in sorted(names)}
            bar.close()
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{path} cannot be read as safetensors ({err})") from None
    unknown = sorted(names - {"image_mean", "image_logvar", "caption_mean", "caption_logvar"})
    if unknown or not {"image_mean", "caption_mean"} & names:
        raise ValueError(f"{path}: expected tensors image_mean / caption_mean (+ optional *_logvar), got "
                         f"{sorted(names)}")
    out: dict[str, Gaussian | None] = {}
    for modality in ("image", "caption"):
        mean = tensors.get(f"{modality}_mean")
        if mean is None:
            out[modality] = None
            continue
        logvar = None if f"{modality}_logvar" not in tensors else tensors[f"{modality}_logvar"].float()
        try:
            out[modality] = Gaussian(mean.float(), logvar)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
        if not torch.isfinite(mean).all() or (logvar is not None and not torch.isfinite(logvar).all()):
            raise ValueError(f"{path}: {modality} embeddings contain NaN or inf")
    n_img = out["image"].num if out["image"] is not None else 0
    n_cap = out["caption"].num if out["caption"] is not None else 0
    image_ids = _json_list(metadata, "image_ids", n_img, path)
    caption_ids = _json_list(metadata, "caption_ids", n_cap, path)
    texts = _json_list(metadata, "caption_texts", n_cap, path)
    image_metadata = _json_list(metadata, "image_metadata", n_img, path)
    return SavedEmbeddings(
        out["image"], out["caption"],
        image_ids if image_ids is not None else list(range(first_image_id, first_image_id + n_img)),
        caption_ids if caption_ids is not None else list(range(first_caption_id, first_caption_id + n_cap)),
        [str(t) for t in texts] if texts is not None else [""] * n_cap, image_metadata)
