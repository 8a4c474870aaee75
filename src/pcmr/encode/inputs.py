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
from typing import Any, Union

import numpy as np
import torch
from PIL import Image
from torch import Tensor, nn
from tqdm import tqdm

from pcmr.data.batching import ENCODE_BATCH_SIZE, caption_loader, image_loader
from pcmr.data.images import FileImages, center_crop, normalize_pixels, pil_to_pixels, resize_shorter_side
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import Vocabulary
from pcmr.gaussian import Gaussian
from pcmr.models.model import RetrievalModel
from pcmr.progress import progress_enabled

__all__ = ["encode_split", "encode_split_chunks", "encode_images", "encode_captions", "encode_texts", "encode_image_files",
           "image_input_transform", "encode_image_inputs", "ImageInput",
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


def _encoded_batches(model: Any, loader: Iterable[dict[str, Any]], method: str, index_key: str,
                     device: torch.device, progress: bool | None, what: str) -> Iterator[tuple[Tensor, Gaussian]]:
    """``(split indices [B], Gaussian [B, D])`` of each batch of ``loader``, one batch at a time."""
    with eval_mode(model):
        for batch in _progress(loader, progress, f"encoding {what}"):
            g = getattr(model, method)(_to_device(batch, device))
            yield batch[index_key], g.detach()


def _encode(model: Any, loader: Iterable[dict[str, Any]], method: str, index_key: str, total: int,
            device: torch.device, progress: bool | None, what: str) -> Gaussian:
    pieces = list(_encoded_batches(model, loader, method, index_key, device, progress, what))
    return _collect(pieces, total, what)


def encode_split_chunks(model: nn.Module, split: RetrievalSplit, vocab: Vocabulary, modality: str, *,
                        batch_size: int = ENCODE_BATCH_SIZE, device: torch.device | str | None = None,
                        progress: bool | None = False) -> Iterator[Gaussian]:
    """The ``modality`` (``"image"`` or ``"caption"``) items of ``split`` as CPU ``Gaussian [B, D]``
    batches in the split's order, one batch in memory at a time (a gallery written straight to disk,
    :mod:`pcmr.search.store`). The loader must yield the items in order, each once."""
    dev = model_device(model, device)
    if modality == "image":
        loader, method, key, total = image_loader(split, batch_size), "encode_images", "image_index", split.num_images
    elif modality == "caption":
        loader, method, key = caption_loader(split, vocab, batch_size), "encode_captions", "caption_index"
        total = split.num_captions
    else:
        raise ValueError(f"modality must be 'image' or 'caption', got {modality!r}")
    done = 0
    for index, gaussian in _encoded_batches(model, loader, method, key, dev, progress, f"{modality}s"):
        expected = torch.arange(done, done + gaussian.num)
        if not torch.equal(index.to("cpu").long().reshape(-1), expected):
            raise ValueError(f"the {modality} loader must yield the split's {modality}s in order to encode them "
                             f"in chunks (expected indices {done}..{done + gaussian.num - 1})")
        done += gaussian.num
        yield gaussian.to("cpu")
    if done != total:
        raise ValueError(f"the {modality} loader yielded {done} {modality}s, the split holds {total}")


def encode_images(model: nn.Module, split: RetrievalSplit, *, batch_size: int = ENCODE_BATCH_SIZE, device: torch.device | str | None = None,
                  progress: bool | None = False) -> Gaussian:
    """All images of ``split`` as ``Gaussian [N_img, D]`` on ``device``."""
    dev = model_device(model, device)
    return _encode(model, image_loader(split, batch_size), "encode_images", "image_index", split.num_images,
                   dev, progress, "images")


def encode_captions(model: nn.Module, split: RetrievalSplit, vocab: Vocabulary, *, batch_size: int = ENCODE_BATCH_SIZE,
                    device: torch.device | str | None = None, progress: bool | None = False) -> Gaussian:
    """All captions of ``split`` as ``Gaussian [N_cap, D]`` on ``device``."""
    dev = model_device(model, device)
    return _encode(model, caption_loader(split, vocab, batch_size), "encode_captions", "caption_index",
                   split.num_captions, dev, progress, "captions")


def encode_split(model: nn.Module, split: RetrievalSplit, vocab: Vocabulary, *, batch_size: int = ENCODE_BATCH_SIZE,
                 device: torch.device | str | None = None, progress: bool | None = False) -> tuple[Gaussian, Gaussian]:
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


def _batches(total: int, batch_size: int, progress: bool | None, what: str) -> Iterable[int]:
    """Start offsets of the batches; a bar (see :mod:`pcmr.progress`) only when there are several."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    starts = range(0, total, batch_size)
    return _progress(starts, progress if len(starts) > 1 else False, f"encoding {what}")


def encode_texts(model: RetrievalModel, vocab: Vocabulary, texts: Sequence[str], *, device: torch.device | str | None = None,
                 batch_size: int = ENCODE_BATCH_SIZE, progress: bool | None = None) -> Gaussian:
    """Encode raw caption texts with ``model`` -> ``Gaussian [len(texts), D]`` on ``device``.

    ``texts`` are tokenised with ``vocab`` (unknown words -> ``<unk>``) in batches of ``batch_size``;
    ``progress`` draws a bar over the batches (None: only on a terminal and for more than one batch).
    """
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a list of strings")
    if not texts:
        raise ValueError("texts must hold at least one caption")
    dev = model_device(model, device)
    pieces = []
    with eval_mode(model):
        for start in _batches(len(texts), batch_size, progress, "texts"):
            batch = caption_batch(vocab, list(texts[start:start + batch_size]))
            pieces.append(model.encode_captions(_to_device(batch, dev)).detach())
    return Gaussian.cat(pieces)


ImageInput = Union[str, "os.PathLike[str]", Image.Image, Tensor]


def image_input_transform(split: RetrievalSplit) -> dict[str, Any]:
    """How the split turns an image file into model input, beyond its side (:func:`image_input_size`):
    ``{"image_resize": "square" | "center_crop", "resize_size": int | None}`` (``pcmr.data.images.FileImages``;
    ``square`` for images that are not files, e.g. the built-in data's arrays)."""
    images = getattr(split, "images", None)
    if images is not None and getattr(images, "image_resize", None) == "center_crop":
        return {"image_resize": "center_crop", "resize_size": int(images.resize_size)}
    return {"image_resize": "square", "resize_size": None}


def _pil_pixels(image: Image.Image, image_size: int, image_resize: str, resize_size: int | None) -> Tensor:
    """A Pillow image -> ``[3, S, S]`` as ``FileImages`` makes it: a square resize, or Resize + CenterCrop."""
    if image_resize == "square":
        return pil_to_pixels(image, image_size)
    side = int(resize_size) if resize_size is not None else int(round(image_size * 8 / 7))
    cropped = center_crop(resize_shorter_side(image.convert("RGB"), side), image_size)
    return normalize_pixels(np.asarray(cropped, dtype=np.uint8))


def _image_tensor(item: ImageInput, position: int, image_size: int | None, image_resize: str = "square",
                  resize_size: int | None = None) -> Tensor:
    """One input -> the model-ready tensor: a file path or Pillow image -> pixels ``[3, S, S]`` (a square
    resize, or ``center_crop``: the shorter side to ``resize_size``, then the central square); a tensor as is."""
    if isinstance(item, Tensor):
        return item
    if not isinstance(item, (str, os.PathLike, Image.Image)):
        raise TypeError(f"images[{position}] is a {type(item).__name__}; expected a file path, a PIL.Image.Image "
                        "or a tensor ([3, H, W] normalised pixels, or features [F] / [R, F])")
    if image_size is None:
        raise ValueError("this model reads precomputed image features, not pixels; image files and Pillow "
                         "images need a model trained on pixel images (pass feature tensors instead)")
    if isinstance(item, Image.Image):
        return _pil_pixels(item, int(image_size), image_resize, resize_size)
    path = os.fspath(item)
    return FileImages([path], image_size=int(image_size), keys=[f"query image {path}"], image_resize=image_resize,
                      resize_size=resize_size).load(0)


def encode_image_inputs(model: RetrievalModel, images: ImageInput | Sequence[ImageInput], *, image_size: int | None,
                        device: torch.device | str | None = None, batch_size: int = ENCODE_BATCH_SIZE,
                        progress: bool | None = None, image_resize: str = "square",
                        resize_size: int | None = None) -> Gaussian:
    """Encode images given as file paths, Pillow images or tensors -> ``Gaussian [N, D]`` on ``device``.

    Paths and Pillow images are preprocessed like the dataset (RGB, resized to ``image_size`` x
    ``image_size``, ImageNet normalisation; ``pcmr.data.images.FileImages``); tensors are taken as
    model-ready: one batch ``[N, 3, H, W]`` (or features ``[N, F]`` / ``[N, R, F]``), or a list of
    ``[3, H, W]`` items. ``image_size`` is the side the model was trained on (None: the model reads
    precomputed features); ``image_resize`` / ``resize_size`` its test-time transform
    (:func:`image_input_transform`: ``square``, or ``center_crop`` from ``resize_size``). Decoding and encoding go batch by batch (``batch_size``), with a bar as in
    :func:`encode_texts`.
    """
    if isinstance(images, Tensor):
        if images.dim() < 2:
            raise ValueError(f"an image tensor batch must be [N, 3, H, W], [N, F] or [N, R, F], got {tuple(images.shape)}")
        items: Sequence[ImageInput] = list(images.unbind(0))
    elif isinstance(images, (str, os.PathLike, Image.Image)):
        items = [images]
    else:
        items = list(images)
    if not items:
        raise ValueError("images must hold at least one image")
    dev = model_device(model, device)
    pieces = []
    with eval_mode(model):
        for start in _batches(len(items), batch_size, progress, "images"):
            chunk = [_image_tensor(item, start + i, image_size, image_resize, resize_size)
                     for i, item in enumerate(items[start:start + batch_size])]
            shapes = {tuple(t.shape) for t in chunk}
            if len(shapes) > 1:
                raise ValueError(f"image tensors of one call must share one shape, got {sorted(shapes)}")
            pixels = torch.stack(chunk).to(dev, torch.float32)
            batch = {"images": pixels, "image_index": torch.arange(len(chunk), device=dev)}
            pieces.append(model.encode_images(batch).detach())
    return Gaussian.cat(pieces)


def encode_image_files(model: RetrievalModel, paths: Sequence[str | os.PathLike[str]], *, image_size: int | None,
                       device: torch.device | str | None = None, image_resize: str = "square",
                       resize_size: int | None = None) -> Gaussian:
    """Decode image files with Pillow, preprocess them like the dataset (RGB, resized to
    ``image_size`` x ``image_size``, ImageNet normalisation; ``pcmr.data.images.FileImages``) and
    encode them -> ``Gaussian [len(paths), D]`` (:func:`encode_image_inputs` on paths).

    ``image_size`` is the side of the images the model was trained on; None means the model reads
    precomputed features, which image files cannot provide (ValueError).
    """
    if image_size is None:
        raise ValueError("this model reads precomputed image features, not pixels; image-file queries need a "
                         "model trained on pixel images")
    return encode_image_inputs(model, [os.fspath(p) for p in paths], image_size=image_size, device=device,
                               image_resize=image_resize, resize_size=resize_size)


def split_image_metadata(split: RetrievalSplit) -> list[dict[str, Any]] | None:
    """JSON-storable per-image metadata of a split: ``path`` (image files), ``labels`` (names of the
    image's class labels, e.g. shapes' "red circle" or COCO categories), and for one's own images
    (``split.info["describe_images"]``) ``file`` (the image's file name, its id) and ``captions`` (those
    written for it); None when it has none of them."""
    paths = getattr(getattr(split, "images", None), "paths", None)
    labels = getattr(split, "image_labels", None)
    names = getattr(split, "label_names", None)
    describe = bool(getattr(split, "info", {}).get("describe_images"))
    if paths is None and (labels is None or names is None) and not describe:
        return None
    out: list[dict[str, Any]] = [{} for _ in range(split.num_images)]
    if describe:
        for entry, image_id, written in zip(out, split.image_ids, split.source_captions):
            entry["file"] = str(image_id)
            entry["captions"] = [split.caption_texts[c] for c in written]
    if paths is not None:
        for entry, path in zip(out, paths):
            entry["path"] = os.fspath(path)
    if labels is not None and names is not None:
        for entry, row in zip(out, labels.tolist()):
            entry["labels"] = [name for name, on in zip(names, row) if on]
    return out


def image_input_size(split: RetrievalSplit) -> int | None:
    """Side of the split's pixel images (None when the split holds precomputed features).

    The global RNG is left untouched (a DataLoader draws its seed from it), so asking during training
    changes no random stream."""
    with torch.random.fork_rng(devices=[]):
        batch = next(iter(image_loader(split, 1)))
    images = batch["images"]
    if images.dim() == 4:
        return int(images.shape[-1])
    return None
