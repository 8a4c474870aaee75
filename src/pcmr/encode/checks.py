"""Checks of what encoding gives and reads: finite embeddings (through the one finite check,
:func:`pcmr.finite.check_finite_tensors`, also used on a loaded model's weights) and split ids that
fit the COCO-id positive sets.

Each raises one ``ValueError`` naming the file (or the source of the embeddings), the tensor
or row at fault and what was expected, instead of letting NaN scores or an out-of-range
token id surface later as wrong numbers or an unrelated error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pcmr.data.split import RetrievalSplit
from pcmr.finite import check_finite_tensors
from pcmr.gaussian import Gaussian, NonFiniteEmbeddingError

__all__ = ["check_finite_tensors", "check_finite_embeddings", "naming_source", "coco_id_problem"]


def check_finite_embeddings(images: Gaussian, captions: Gaussian, source: str) -> None:
    """Raise ``ValueError`` when a ``Gaussian`` of ``images`` / ``captions`` has a NaN or inf mean or
    log-variance, naming ``source`` (e.g. the model and split that produced them) and the rows."""
    tensors = {}
    for side, gaussian in (("image", images), ("caption", captions)):
        tensors[f"{side}_mean"] = gaussian.mean
        if gaussian.logvar is not None:
            tensors[f"{side}_logvar"] = gaussian.logvar
    check_finite_tensors(tensors, source)


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
