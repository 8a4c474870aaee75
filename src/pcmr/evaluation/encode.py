"""Run a model over a retrieval split, over raw caption texts, or over image files.

Every function puts the model in eval mode under ``torch.no_grad()`` (and restores its previous
mode), moves the batches to ``device`` (default: the device of the model's parameters) and returns
Gaussians in the row order of the split (``image_index`` / ``caption_index`` of the batches).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from pcmr.data.batching import ENCODE_BATCH_SIZE, caption_loader, image_loader
from pcmr.data.images import FileImages
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import Vocabulary
from pcmr.gaussian import Gaussian
from pcmr.models.model import RetrievalModel
from pcmr.progress import progress_enabled

__all__ = ["encode_split", "encode_images", "encode_captions", "encode_texts", "encode_image_files",
           "model_device", "split_image_metadata", "caption_batch"]


def model_device(model: nn.Module, device: torch.device | str | None = None) -> torch.device:
    """``device`` if given, else the device of the model's first parameter (CPU for none)."""
    if device is not None:
        return torch.device(device)
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode and no grad inside the block; the model's previous mode is restored after."""
    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in batch.items()}


def _progress(iterable: Iterable[Any], enabled: bool | None, desc: str) -> Iterable[Any]:
    """``iterable`` wrapped in a bar when ``enabled`` (``None``: only on a terminal, see :mod:`pcmr.progress`)."""
    if not progress_enabled(enabled):
        return iterable
    return tqdm(iterable, desc=desc, leave=False, file=sys.stderr)


def _collect(pieces: list[tuple[Tensor, Gaussian]], total: int, what: str) -> Gaussian:
    """Place encoded batches at their split indices; every index must be covered once."""
    if not pieces:
        raise ValueError(f"the {what} loader yielded no batch; the split has no {what}")
    index = torch.cat([p[0].to("cpu").long() for p in pieces])
    gaussian = Gaussian.cat([p[1] for p in pieces])
    if index.numel() != total or not torch.equal(torch.sort(index).values, torch.arange(total)):
        raise ValueError(f"the {what} loader must yield every {what} of the split exactly once "
                         f"(got {index.numel()} indices for {total} {what})")
    order = torch.argsort(index).to(gaussian.device)
    return gaussian[order]


def _encode(model: Any, loader: Iterable[dict[str, Any]], method: str, index_key: str, total: int,
            device: torch.device, progress: bool, what: str) -> Gaussian:
    pieces = []
    with eval_mode(model):
        for batch in _progress(loader, progress, f"encoding {what}"):
            g = getattr(model, method)(_to_device(batch, device))
            pieces.append((batch[index_key], g.detach()))
    return _collect(pieces, total, what)


def encode_images(model: RetrievalModel, split: RetrievalSplit, *, batch_size: int = ENCODE_BATCH_SIZE, device: torch.device | str | None = None,
                  progress: bool = False) -> Gaussian:
    """All images of ``split`` as ``Gaussian [N_img, D]`` on ``device``."""
    dev = model_device(model, device)
    return _encode(model, image_loader(split, batch_size), "encode_images", "image_index", split.num_images,
                   dev, progress, "images")


def encode_captions(model: RetrievalModel, split: RetrievalSplit, vocab: Vocabulary, *, batch_size: int = ENCODE_BATCH_SIZE,
                    device: torch.device | str | None = None, progress: bool = False) -> Gaussian:
    """All captions of ``split`` as ``Gaussian [N_cap, D]`` on ``device``."""
    dev = model_device(model, device)
    return _encode(model, caption_loader(split, vocab, batch_size), "encode_captions", "caption_index",
                   split.num_captions, dev, progress, "captions")


def encode_split(model: RetrievalModel, split: RetrievalSplit, vocab: Vocabulary, *, batch_size: int = ENCODE_BATCH_SIZE,
                 device: torch.device | str | None = None, progress: bool = False) -> tuple[Gaussian, Gaussian]:
    """Encode every image and caption of a retrieval split (model in eval mode, no grad).

    Returns ``(images: Gaussian [N_img, D], captions: Gaussian [N_cap, D])`` in the split's order, on
    ``device`` (default: the model's device).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    images = encode_images(model, split, batch_size=batch_size, device=device, progress=progress)
    captions = encode_captions(model, split, vocab, batch_size=batch_size, device=device, progress=progress)
    return images, captions


def caption_batch(vocab: Vocabulary, texts: Sequence[str]) -> dict[str, Any]:
    """An evaluation caption batch (``captions [B, L]`` padded with 0, ``caption_lengths [B]``,
    ``caption_texts``, ``caption_index``) built like the dataset's caption loader: ``<start>`` words
    ``<end>``."""
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a list of strings")
    if not texts:
        raise ValueError("texts must hold at least one caption")
    ids = [vocab.encode(t) for t in texts]
    length = max(len(i) for i in ids)
    tokens = torch.zeros(len(ids), length, dtype=torch.long)  # [B, L], <pad> = 0
    for row, seq in enumerate(ids):
        tokens[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return {"captions": tokens, "caption_lengths": torch.tensor([len(s) for s in ids], dtype=torch.long),
            "caption_texts": list(texts), "caption_index": torch.arange(len(ids))}


def encode_texts(model: RetrievalModel, vocab: Vocabulary, texts: Sequence[str], *, device: torch.device | str | None = None,
                 batch_size: int = ENCODE_BATCH_SIZE) -> Gaussian:
    """Encode raw caption texts with ``model`` -> ``Gaussian [len(texts), D]`` on ``device``."""
    dev = model_device(model, device)
    pieces = []
    with eval_mode(model):
        for start in range(0, len(texts), batch_size):
            batch = caption_batch(vocab, list(texts[start:start + batch_size]))
            pieces.append(model.encode_captions(_to_device(batch, dev)).detach())
    if not pieces:
        raise ValueError("texts must hold at least one caption")
    return Gaussian.cat(pieces)


def encode_image_files(model: RetrievalModel, paths: Sequence[str | os.PathLike[str]], *, image_size: int | None,
                       device: torch.device | str | None = None) -> Gaussian:
    """Decode image files with Pillow, preprocess them like the dataset (RGB, resized to
    ``image_size`` x ``image_size``, ImageNet normalisation; ``pcmr.data.images.FileImages``) and
    encode them -> ``Gaussian [len(paths), D]``.

    ``image_size`` is the side of the images the model was trained on; None means the model reads
    precomputed features, which image files cannot provide (ValueError).
    """

    if image_size is None:
        raise ValueError("this model reads precomputed image features, not pixels; image-file queries need a "
                         "model trained on pixel images")
    paths = [os.fspath(p) for p in paths]
    source = FileImages(paths, image_size=int(image_size), keys=["query image"] * len(paths))
    pixels = torch.stack([source.load(i) for i in range(len(paths))])  # [Q, 3, H, W]
    dev = model_device(model, device)
    with eval_mode(model):
        batch = {"images": pixels.to(dev), "image_index": torch.arange(len(paths), device=dev)}
        return model.encode_images(batch).detach()


def split_image_metadata(split: RetrievalSplit) -> list[dict[str, Any]] | None:
    """JSON-storable per-image metadata of a split: ``path`` (image files), ``labels`` (names of the
    image's class labels, e.g. shapes' "red circle" or COCO categories); None when it has neither."""
    paths = getattr(getattr(split, "images", None), "paths", None)
    labels = getattr(split, "image_labels", None)
    names = getattr(split, "label_names", None)
    if paths is None and (labels is None or names is None):
        return None
    out: list[dict[str, Any]] = [{} for _ in range(split.num_images)]
    if paths is not None:
        for entry, path in zip(out, paths):
            entry["path"] = os.fspath(path)
    if labels is not None and names is not None:
        for entry, row in zip(out, labels.tolist()):
            entry["labels"] = [name for name, on in zip(names, row) if on]
    return out


def image_input_size(split: RetrievalSplit) -> int | None:
    """Side of the split's pixel images (None when the split holds precomputed features)."""
    batch = next(iter(image_loader(split, 1)))
    images = batch["images"]
    if images.dim() == 4:
        return int(images.shape[-1])
    return None
