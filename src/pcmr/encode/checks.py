"""Checks of what evaluation loads: finite weights and embeddings, a vocabulary that fits its model.

Each raises one ``ValueError`` naming the file (or the source of the embeddings), the tensor
or row at fault and what was expected, instead of letting NaN scores or an out-of-range
token id surface later as wrong numbers or an unrelated error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor

from pcmr.data import Vocabulary
from pcmr.data.split import RetrievalSplit
from pcmr.gaussian import Gaussian, NonFiniteEmbeddingError
from pcmr.models.model import RetrievalModel

__all__ = ["check_finite_tensors", "check_finite_embeddings", "check_model_vocabulary", "naming_source",
           "coco_id_problem"]


def _bad_rows(tensor: Tensor) -> list[int]:
    """Indices of the rows (first dimension) holding NaN or inf; [] when all are finite."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return []
    finite = torch.isfinite(tensor.detach().reshape(tensor.shape[0], -1) if tensor.dim() else tensor.reshape(1, 1))
    return torch.nonzero(~finite.all(dim=1)).flatten().tolist()


def check_finite_tensors(tensors: Mapping[str, Tensor], source: str | os.PathLike) -> None:
    """Raise ``ValueError`` naming ``source`` and the first tensor (and rows) holding NaN or inf."""
    for name, tensor in tensors.items():
        rows = _bad_rows(tensor)
        if rows:
            shown = f"rows {rows[:5]}{' ...' if len(rows) > 5 else ''} of " if tensor.dim() > 1 else ""
            raise ValueError(f"{os.fspath(source)}: {shown}tensor {name!r} {tuple(tensor.shape)} holds NaN or inf; "
                             f"expected finite values (a diverged or corrupted model or embeddings file)")


def check_finite_embeddings(images: Gaussian, captions: Gaussian, source: str) -> None:
    """Raise ``ValueError`` when a ``Gaussian`` of ``images`` / ``captions`` has a NaN or inf mean or
    log-variance, naming ``source`` (e.g. the model and split that produced them) and the rows."""
    tensors = {}
    for side, gaussian in (("image", images), ("caption", captions)):
        tensors[f"{side}_mean"] = gaussian.mean
        if gaussian.logvar is not None:
            tensors[f"{side}_logvar"] = gaussian.logvar
    check_finite_tensors(tensors, source)


def check_model_vocabulary(model: RetrievalModel, vocab: Vocabulary, model_dir: str | os.PathLike, vocab_path: str | os.PathLike) -> None:
    """Raise ``ValueError`` when ``vocab`` (read from ``vocab_path``) is not the vocabulary the model in
    ``model_dir`` was trained with: its size differs from the model's ``vocab_size`` (word-embedding
    text encoders), or it differs from the ``vocabulary.json`` saved with the model."""
    config = getattr(model, "config", None)
    uses_vocabulary = config is not None and bool(getattr(config.text_encoder, "reads_word_ids", False))
    if uses_vocabulary and config is not None and config.vocab_size != len(vocab):
        raise ValueError(f"{os.fspath(vocab_path)} holds {len(vocab)} words but the model in {os.fspath(model_dir)} "
                         f"embeds {config.vocab_size} token ids; expected the vocabulary of the run that trained "
                         f"this model")
    saved = Path(model_dir) / "vocabulary.json"
    if saved.is_file() and Path(vocab_path).resolve() != saved.resolve():

        if Vocabulary.load(saved) != vocab:
            raise ValueError(f"{os.fspath(vocab_path)} differs from {saved}, the vocabulary saved with the model; "
                             f"expected the vocabulary of the run that trained this model")


@contextmanager
def naming_source(source: str) -> Iterator[None]:
    """Prefix ``source`` to the non-finite-value error of a ``Gaussian`` built inside the block (e.g. by a
    model whose outputs went NaN while encoding a split)."""
    try:
        yield
    except NonFiniteEmbeddingError as err:
        raise NonFiniteEmbeddingError(f"{source}: {err}") from None


def coco_id_problem(split: RetrievalSplit) -> str | None:
    """Why the ids of ``split`` cannot be matched to the COCO-id positive sets (CxC, ECCV Caption), or None.

    Those sets name images by COCO image id and captions by COCO caption annotation id; a split whose
    loader says its ids are of another kind (``info["image_id_kind"]`` / ``info["caption_id_kind"]``,
    e.g. Karpathy ``sentid`` or feature-file line numbers) would be matched to the wrong items.
    """
    info = getattr(split, "info", None) or {}
    image_kind, caption_kind = info.get("image_id_kind"), info.get("caption_id_kind")
    if image_kind is not None and image_kind != "coco":
        return (f"the images of {split!r} have {image_kind} ids, not COCO image ids; CxC / ECCV Caption "
                f"positives are matched by COCO id")
    if caption_kind is not None and caption_kind != "coco_annotation":
        return (f"the captions of {split!r} have {caption_kind} ids, not COCO caption annotation ids; load the "
                f"split with coco_captions=[captions_train2014.json, captions_val2014.json] to match CxC / ECCV "
                f"Caption positives")
    return None
