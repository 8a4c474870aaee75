"""Datasets, samplers and collate functions producing the batch dicts of ``docs/datasets.md``.

Training items are (source image, caption) pairs addressed by caption index. The
batch sampler yields ``(caption_index, item_seed)`` tuples; every augmentation draw of an
item is a function of its seed (:mod:`pcmr.data.draws`), so batches are the same whatever
the number of workers, processes or the device that augments them. :class:`PairDataset`
builds a whole batch at once (uint8 images, Cutout boxes and word dropout as array
operations, :mod:`pcmr.data.batch_augment`); :func:`finish_batch` normalises and erases its
images on the training device. Repeated images are merged and ``"relevance"`` comes from
the split's *true* relation: a caption may be relevant to several images of the batch
(many-to-many data, class-level CUB relevance), not only to its source image.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from pcmr.data.augment import WORD_DROPOUT_RULES
from pcmr.data.batch_augment import (
    RANDOM_ERASE_SLOTS,
    SQUARE_ERASE_SLOTS,
    drop_words_batch,
    feature_erase_mask,
    finish_images,
    random_erase_boxes,
    square_erase_boxes,
    word_slots,
)
from pcmr.data.draws import CROP, CUTOUT, WORDS, StreamDraws, uniforms, view_stream
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import PAD_ID, Vocabulary
from pcmr.relevance import Relevance

__all__ = ["pad_captions", "PairDataset", "PairBatchSampler", "TrainCollate", "FinishBatch", "finish_batch", "ImageDataset", "CaptionDataset",
           "collate_images", "collate_captions", "SAMPLERS", "IMAGE_AUGMENTS", "caption_classes", "train_loader", "image_loader", "caption_loader", "ENCODE_BATCH_SIZE",
           "TRAIN_BATCH_SIZE"]

SAMPLERS = ("captions", "one_per_image", "one_per_class")
#: training-time image transforms of :class:`PairDataset` (``image_augment``)
IMAGE_AUGMENTS = ("none", "random_resized_crop")

#: items per batch when encoding images or captions (evaluation, validation, figures, search indexes)
ENCODE_BATCH_SIZE = 256
#: (image, caption) pairs per training batch when nothing else is said (``data.batch_size``; the papers'
#: recipes state 128)
TRAIN_BATCH_SIZE = 64


def pad_captions(sequences: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token-id lists with ``<pad>`` = 0: LongTensor ``[B, L]`` and lengths ``[B]``."""
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)  # [B]
    if (lengths < 1).any():
        raise ValueError("every caption needs at least one token")
    padded = torch.full((len(sequences), int(lengths.max()) if len(sequences) else 1), PAD_ID, dtype=torch.long)
    for row, seq in enumerate(sequences):
        padded[row, : len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
    return padded, lengths


class PairDataset(Dataset):
    """``dataset[(caption_index, item_seed)]`` -> one (source image, caption) training item.

    A third key element ``holds_image`` (several processes, see :class:`PairBatchSampler`) is False
    when an earlier process of the same global batch holds the item's image; the collate then
    leaves the image out of this process's batch. The augmentation draws do not depend on it.

    No augmentation unless asked: ``erase_ratio`` (Cutout) and ``word_dropout`` default to 0; each
    recipe states its paper's values. Cutout: ``erase_ratio`` a number erases a square of exactly that
    fraction; a pair ``[min, max]`` erases a rectangle of a fraction drawn uniformly in it, with aspect
    ratio log-uniform in ``[erase_aspect, 1 / erase_aspect]`` (default 0.3), as the PCME release does
    (:func:`pcmr.data.augment.random_erase`); either form applies to an item with probability
    ``erase_prob``, and ``erase_ratio=0`` switches Cutout off whatever the other two options.
    ``word_dropout_rule``: ``"delete"`` or ``"unk_then_delete"`` (the PCME release's,
    :func:`pcmr.data.augment.drop_words`). ``image_augment``: ``"none"`` or ``"random_resized_crop"``
    (before Cutout, pixel images only: the PCME release's COCO training transform, a random resized
    crop and a random horizontal flip; :meth:`pcmr.data.images.ImageSource.load_random_resized_crop`)."""

    def __init__(self, split: RetrievalSplit, vocab: Vocabulary, *, augment: bool = True,
                 erase_ratio: float | Sequence[float] = 0.0, erase_prob: float = 1.0,
                 erase_aspect: float | None = None, word_dropout: float = 0.0, word_dropout_rule: str = "delete",
                 num_views: int = 0, image_augment: str = "none") -> None:
        if not isinstance(vocab, Vocabulary):
            raise TypeError(f"vocab must be a pcmr.data.Vocabulary, got {type(vocab).__name__}")
        if num_views < 0:
            raise ValueError(f"num_views={num_views} must be >= 0")
        if image_augment not in IMAGE_AUGMENTS:
            raise ValueError(f"image_augment={image_augment!r} is not one of {IMAGE_AUGMENTS}")
        if image_augment != "none" and split.images.kind != "pixels":
            raise ValueError(f"image_augment={image_augment!r} needs pixel images; split {split.name}/{split.split} "
                             "holds precomputed features (use image_augment: none)")
        self.image_augment = image_augment
        self.erase_range = _erase_range(erase_ratio, erase_aspect)
        for name, value in (("erase_prob", erase_prob), ("word_dropout", word_dropout)):
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value!r} must be a number in [0, 1]")
        if word_dropout_rule not in WORD_DROPOUT_RULES:
            raise ValueError(f"word_dropout_rule={word_dropout_rule!r} is not one of {WORD_DROPOUT_RULES}")
        self.split, self.vocab = split, vocab
        self.augment, self.erase_ratio, self.word_dropout, self.num_views = augment, erase_ratio, word_dropout, num_views
        self.erase_fixed = float(erase_ratio) if self.erase_range is None else 0.0  # type: ignore[arg-type]
        self.erase_prob, self.erase_aspect = float(erase_prob), 0.3 if erase_aspect is None else float(erase_aspect)
        self.word_dropout_rule = word_dropout_rule
        encoded = [vocab.encode(text) for text in split.caption_texts]
        # captions as one flat int64 array (CSR): token_ids[token_starts[c]: + token_lengths[c]]
        self.token_lengths = np.fromiter((len(ids) for ids in encoded), dtype=np.int64, count=len(encoded))
        self.token_starts = np.concatenate([[0], np.cumsum(self.token_lengths)[:-1]]).astype(np.int64)
        self.token_ids = np.fromiter((t for ids in encoded for t in ids), dtype=np.int64,
                                     count=int(self.token_lengths.sum()))
        self.caption_image = np.asarray(split.caption_image, dtype=np.int64)
        self.erase_ratio_active = (self.erase_range is not None and self.erase_range[1] > 0) or self.erase_fixed > 0

    def __len__(self) -> int:
        return self.split.num_captions

    # ---------------------------------------------------------------- whole batches
    def __getitems__(self, keys: Sequence[tuple[int, int] | tuple[int, int, bool]]) -> dict[str, Any]:
        """The raw training batch of ``keys`` (what ``DataLoader`` asks of a batch sampler's batch):
        see :meth:`raw_batch`."""
        return self.raw_batch(keys)

    def raw_batch(self, keys: Sequence[tuple[int, int] | tuple[int, int, bool]]) -> dict[str, Any]:
        """The training batch of ``keys`` with pixel images still uint8 ``[B_img, H, W, 3]`` and their Cutout
        boxes in ``"image_erase"`` ``[B_img, 4]`` (``"image_view_erase"`` ``[B_img, K, 4]`` for views):
        :func:`finish_batch` normalises and erases them, on the CPU or the training device. Captions,
        relevance and features are final. Repeated images are kept once (their first item); an item
        whose image another process holds contributes its caption only."""
        caption_index = np.fromiter((k[0] for k in keys), dtype=np.int64, count=len(keys))
        seeds = np.fromiter((k[1] for k in keys), dtype=np.int64, count=len(keys))
        holds = np.fromiter((bool(k[2]) if len(k) > 2 else True for k in keys), dtype=bool, count=len(keys))
        image_of = self.caption_image[caption_index]
        rows = _first_rows(image_of, holds)  # one row per distinct held image, in order of first appearance
        image_index = image_of[rows]
        image_seeds = seeds[rows]
        ids, lengths = self._caption_ids(caption_index)
        if self.augment:
            ids, lengths = self._drop_words(ids, lengths, seeds, None)
        texts = self.split.caption_texts
        batch: dict[str, Any] = {
            "captions": torch.from_numpy(ids),  # [B_cap, L]
            "caption_lengths": torch.from_numpy(lengths),  # [B_cap]
            "caption_texts": [texts[c] for c in caption_index.tolist()],
            "relevance": torch.from_numpy(self.split.relevance.submatrix(image_index, caption_index)),
            "image_index": torch.from_numpy(image_index),
            "caption_index": torch.from_numpy(caption_index),
        }
        batch["images"], erase = self._images(image_index, image_seeds, None, augment=self.augment)
        if erase is not None:
            batch["image_erase"] = erase
        if self.num_views:
            clean = None
            if self.image_augment == "none":
                clean = self.split.images.load_batch(image_index)
            views = [self._images(image_index, image_seeds, v, augment=True, clean=clean)
                     for v in range(self.num_views)]
            batch["image_views"] = torch.stack([images for images, _ in views], dim=1)  # [B_img, K, ...]
            if views[0][1] is not None:
                batch["image_view_erase"] = torch.stack([boxes for _, boxes in views if boxes is not None],
                                                        dim=1)  # [B_img, K, 4]
            base, base_lengths = self._caption_ids(caption_index)
            dropped = [self._drop_words(base, base_lengths, seeds, v) for v in range(self.num_views)]
            width = max(d[0].shape[1] for d in dropped)
            padded = [np.pad(d[0], ((0, 0), (0, width - d[0].shape[1]))) for d in dropped]
            batch["caption_views"] = torch.from_numpy(np.stack(padded, axis=1))  # [B_cap, K, L]
            batch["caption_view_lengths"] = torch.from_numpy(np.stack([d[1] for d in dropped], axis=1))  # [B_cap, K]
        return batch

    def _caption_ids(self, caption_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of the captions padded with ``<pad>`` = 0: int64 ``[B, L]`` and lengths ``[B]``."""
        lengths = self.token_lengths[caption_index]
        width = int(lengths.max()) if len(lengths) else 1
        columns = np.arange(width)[None, :]
        inside = columns < lengths[:, None]
        ids = self.token_ids[self.token_starts[caption_index][:, None] + np.minimum(columns, lengths[:, None] - 1)]
        return np.where(inside, ids, PAD_ID), lengths

    def _drop_words(self, ids: np.ndarray, lengths: np.ndarray, seeds: np.ndarray,
                    view: int | None) -> tuple[np.ndarray, np.ndarray]:
        if self.word_dropout == 0.0:
            return ids, lengths
        draws = uniforms(seeds, view_stream(WORDS, view), word_slots(lengths))
        return drop_words_batch(ids, lengths, draws, self.word_dropout, self.word_dropout_rule)

    def _images(self, image_index: np.ndarray, seeds: np.ndarray, view: int | None, *, augment: bool,
                clean: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Images (uint8 pixels or float features) and, for pixels, their Cutout boxes (None: features)."""
        source = self.split.images
        if augment and self.image_augment == "random_resized_crop":
            stream = view_stream(CROP, view)
            crops = [source.load_random_resized_crop_pixels(int(i), StreamDraws(int(s), stream))
                     for i, s in zip(image_index.tolist(), seeds.tolist())]
            images = np.stack(crops) if crops else source.load_batch(image_index)
        else:
            images = clean if clean is not None else source.load_batch(image_index)
        cutout = augment and self.erase_ratio_active
        stream = view_stream(CUTOUT, view)
        if source.kind != "pixels":
            features = torch.from_numpy(np.array(images, dtype=np.float32))
            if cutout and len(image_index):
                count = features.shape[1]
                fraction = self.erase_range if self.erase_range is not None else self.erase_fixed
                mask = feature_erase_mask(uniforms(seeds, stream, 2 + count), count, prob=self.erase_prob,
                                          fraction=fraction)
                mask_t = torch.from_numpy(mask)
                features[mask_t.view(*mask_t.shape, *([1] * (features.ndim - 2))).expand_as(features)] = 0.0
            return features, None
        height, width = images.shape[1], images.shape[2]
        if not cutout:
            boxes = np.zeros((len(image_index), 4), dtype=np.int64)
        elif self.erase_range is not None:
            boxes = random_erase_boxes(uniforms(seeds, stream, RANDOM_ERASE_SLOTS), height, width,
                                       prob=self.erase_prob, min_area=self.erase_range[0],
                                       max_area=self.erase_range[1], min_aspect=self.erase_aspect)
        else:
            boxes = square_erase_boxes(uniforms(seeds, stream, SQUARE_ERASE_SLOTS), height, width,
                                       ratio=self.erase_fixed, prob=self.erase_prob)
        return torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(boxes)

    # ---------------------------------------------------------------- one item
    def __getitem__(self, key: tuple[int, int] | tuple[int, int, bool]) -> dict[str, Any]:
        """One training item, finished (normalised, erased) on the CPU: ``"image"`` ``[3, H, W]`` (or
        features), ``"caption"`` (token ids), indices and text; ``"image_views"`` / ``"caption_views"``
        with ``num_views``. The same draws as the item has in any batch."""
        batch = finish_batch(self.raw_batch([(key[0], key[1], True)]))
        caption_index = int(key[0])
        length = int(batch["caption_lengths"][0])
        item: dict[str, Any] = {"image_index": int(batch["image_index"][0]), "caption_index": caption_index,
                                "caption_text": self.split.caption_texts[caption_index],
                                "holds_image": bool(key[2]) if len(key) > 2 else True,
                                "image": batch["images"][0], "caption": batch["captions"][0, :length].tolist()}
        if self.num_views:
            item["image_views"] = batch["image_views"][0]
            item["caption_views"] = [batch["caption_views"][0, v, : int(batch["caption_view_lengths"][0, v])].tolist()
                                     for v in range(self.num_views)]
        return item


def _first_rows(image_of: np.ndarray, holds: np.ndarray) -> np.ndarray:
    """Positions of the first held item of each distinct image, in order of appearance."""
    held = np.flatnonzero(holds)
    _, first = np.unique(image_of[held], return_index=True)
    return np.sort(held[first])


def finish_batch(batch: dict[str, Any], device: torch.device | str | None = None, *,
                 non_blocking: bool = False) -> dict[str, Any]:
    """A raw training batch (:meth:`PairDataset.raw_batch`) moved to ``device`` (default: where it is) with
    its uint8 images normalised and Cutout applied there (:func:`pcmr.data.batch_augment.finish_images`):
    the training batch dict of ``docs/datasets.md``. A finished batch is only moved."""
    out = {k: (v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) and device is not None else v)
           for k, v in batch.items()}
    for images, boxes in (("images", "image_erase"), ("image_views", "image_view_erase")):
        if boxes in out:
            out[images] = finish_images(out[images], out.pop(boxes))
    return out


def _erase_range(erase_ratio: object, erase_aspect: object) -> tuple[float, float] | None:
    """``None`` for a fixed ``erase_ratio`` (a number), ``(min, max)`` for a pair; checks both options."""
    if isinstance(erase_ratio, (int, float)) and not isinstance(erase_ratio, bool):
        if not 0.0 <= erase_ratio <= 1.0:
            raise ValueError(f"erase_ratio={erase_ratio} must lie in [0, 1]")
        if erase_aspect is not None and erase_ratio != 0:
            raise ValueError("erase_aspect applies only to an erase_ratio range [min, max]; a single "
                             f"erase_ratio ({erase_ratio}) erases a square (0 switches Cutout off)")
        return None
    pair = list(erase_ratio) if isinstance(erase_ratio, (list, tuple)) else None
    if (pair is None or len(pair) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  for v in pair)
            or not 0.0 <= pair[0] <= pair[1] <= 1.0):
        raise ValueError(f"erase_ratio={erase_ratio!r} must be a number in [0, 1] or a range [min, max] "
                         "with 0 <= min <= max <= 1")
    if erase_aspect is not None and (not isinstance(erase_aspect, (int, float)) or not 0.0 < erase_aspect <= 1.0):
        raise ValueError(f"erase_aspect={erase_aspect!r} must be a number in (0, 1] (aspect ratios are drawn "
                         "in [erase_aspect, 1 / erase_aspect])")
    return float(pair[0]), float(pair[1])


def caption_classes(split: RetrievalSplit) -> np.ndarray:
    """The class of each caption, int ``[N_cap]``: its source image's label row (``split.image_labels``), one
    class per distinct row (CUB: the bird species; shapes: the set of (colour, shape) in the scene).

    Raises:
        ValueError: the split has no labels, or an image has an empty label row.
    """
    labels = split.image_labels
    if labels is None:
        raise ValueError(f"sampler 'one_per_class' needs class labels; split {split.name}/{split.split} has none "
                         "(split.image_labels is None)")
    rows = labels.numpy()
    empty = int((~rows.any(axis=1)).sum())
    if empty:
        raise ValueError(f"sampler 'one_per_class': {empty} images of split {split.name}/{split.split} have no label "
                         "(an all-False row of split.image_labels); every image needs a class")
    _, image_class = np.unique(rows, axis=0, return_inverse=True)
    return np.asarray(image_class, dtype=np.int64).reshape(-1)[split.caption_image]


class PairBatchSampler(Sampler):
    """Batches of ``(caption_index, item_seed)``; a new permutation each epoch, from ``seed``.

    ``mode="captions"``: all captions, shuffled. ``mode="one_per_image"``: all images
    that have captions, shuffled, each with one random caption of its own.
    ``mode="one_per_class"``: the PCME release's ``CUBSampler``: batch ``b`` holds the ``b``-th caption
    of a permutation of all captions (its "anchor") and one caption drawn uniformly from each of
    ``batch_size - 1`` other classes (:func:`caption_classes`; all other classes when ``batch_size``
    is the number of classes, as the release's CUB batches of 150 or 100; else a uniform choice of
    them), in random order: no two pairs of a batch share a class. An epoch has
    ``N_cap // batch_size`` batches (the release's ``len``; its generator goes on for two more
    before its end check, which raises ``RuntimeError`` under Python >= 3.7).

    Several processes (``num_replicas > 1``): ``batch_size`` is the global batch. Every
    process draws the same global batches (from ``[seed, epoch]``) and yields its own
    contiguous shard of each, ``batch_size / num_replicas`` items (``rank``-th slice), so
    the shards are disjoint and together are exactly the one-process batch. Each key then
    carries a third element, ``holds_image``: true for the first item of the global batch with
    that image only, so an image repeated in several shards is encoded by one process (the one
    of its first occurrence) and the processes' images together are the one-process images,
    in the same order.
    """

    def __init__(self, split: RetrievalSplit, batch_size: int, *, mode: str = "captions", shuffle: bool = True,
                 drop_last: bool = True, seed: int = 0, num_replicas: int = 1, rank: int = 0) -> None:
        if mode not in SAMPLERS:
            raise ValueError(f"sampler={mode!r} is not one of {SAMPLERS}")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} must lie in [0, num_replicas={num_replicas})")
        if batch_size % num_replicas:
            raise ValueError(f"batch_size={batch_size} (the global batch) must be divisible by the number of "
                             f"processes ({num_replicas})")
        if not drop_last and num_replicas > 1:
            raise ValueError("drop_last=False is not supported with several processes (the last batch "
                             "could not be split evenly)")
        self.mode, self.batch_size, self.shuffle, self.drop_last, self.seed = mode, batch_size, shuffle, drop_last, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.num_captions = split.num_captions
        self.caption_image = np.asarray(split.caption_image, dtype=np.int64)
        self.source_captions = [np.asarray(c, dtype=np.int64) for c in split.source_captions if len(c)]
        if mode == "one_per_class":
            self.caption_class = caption_classes(split)
            order = np.argsort(self.caption_class, kind="stable")  # captions grouped by class
            sizes = np.bincount(self.caption_class)
            if batch_size > len(sizes):
                raise ValueError(f"batch_size={batch_size} exceeds the {len(sizes)} classes of split "
                                 f"{split.name}/{split.split}: sampler one_per_class puts one pair per class in a "
                                 f"batch (the PCME release's CUB batch is the number of classes)")
            self.class_members, self.class_sizes = order, sizes
            self.class_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.epoch = 0

    def _class_batches(self, rng: np.random.Generator) -> list[np.ndarray]:
        """One epoch of ``one_per_class`` batches (caption indices)."""
        count = len(self.class_sizes)
        batches = []
        for anchor in rng.permutation(self.num_captions)[: len(self)]:
            others = np.delete(np.arange(count), self.caption_class[anchor])
            if self.batch_size < count:
                others = rng.choice(others, size=self.batch_size - 1, replace=False)
            picks = self.class_members[self.class_starts[others] + rng.integers(0, self.class_sizes[others])]
            batches.append(rng.permutation(np.concatenate([[anchor], picks])))
        return batches

    def _epoch_items(self, rng: np.random.Generator) -> np.ndarray:
        if self.mode == "captions":
            return rng.permutation(self.num_captions) if self.shuffle else np.arange(self.num_captions)
        order = rng.permutation(len(self.source_captions)) if self.shuffle else np.arange(len(self.source_captions))
        return np.array([self.source_captions[i][rng.integers(len(self.source_captions[i]))] for i in order],
                        dtype=np.int64)

    def __len__(self) -> int:
        if self.mode == "one_per_class":
            return self.num_captions // self.batch_size
        count = self.num_captions if self.mode == "captions" else len(self.source_captions)
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)

    def __iter__(self) -> Iterator[list[tuple[int, int]] | list[tuple[int, int, bool]]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        if self.mode == "one_per_class":
            items = np.concatenate(self._class_batches(rng)) if len(self) else np.zeros(0, dtype=np.int64)
        else:
            items = self._epoch_items(rng)
        seeds = rng.integers(0, 2**63 - 1, size=len(items))
        shard = self.batch_size // self.num_replicas
        for start in range(0, len(self), 1):
            chunk = slice(start * self.batch_size, (start + 1) * self.batch_size)
            batch = [(int(c), int(s)) for c, s in zip(items[chunk], seeds[chunk])]
            if self.num_replicas == 1:
                yield batch
                continue
            seen: set[int] = set()
            keys = []
            for caption, item_seed in batch:  # the first item of the global batch with an image holds it
                image = int(self.caption_image[caption])
                keys.append((caption, item_seed, image not in seen))
                seen.add(image)
            yield keys[self.rank * shard : (self.rank + 1) * shard]


class TrainCollate:
    """Stack training items into the training batch; ``"relevance"`` from the split's true relation.

    Images repeated in the batch are kept once (their first item); an item whose image another
    process holds (``holds_image`` false) contributes its caption only.
    """

    def __init__(self, relevance: Relevance) -> None:
        self.relevance = relevance

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        first: dict[int, int] = {}
        for position, item in enumerate(items):
            if item.get("holds_image", True):
                first.setdefault(item["image_index"], position)
        image_rows = list(first.values())  # one row per distinct image, in order of first appearance
        image_index = torch.tensor([items[p]["image_index"] for p in image_rows], dtype=torch.long)  # [B_img]
        caption_index = torch.tensor([item["caption_index"] for item in items], dtype=torch.long)  # [B_cap]
        captions, lengths = pad_captions([item["caption"] for item in items])  # [B_cap, L], [B_cap]
        relevance = self.relevance.submatrix(image_index.numpy(), caption_index.numpy())  # [B_img, B_cap]
        batch = {
            "images": _stack_rows(items, "image", image_rows),  # [B_img, 3, H, W] | [B_img, (R,) F]
            "captions": captions,
            "caption_lengths": lengths,
            "caption_texts": [item["caption_text"] for item in items],
            "relevance": torch.from_numpy(relevance),
            "image_index": image_index,
            "caption_index": caption_index,
        }
        if "image_views" in items[0]:
            batch["image_views"] = _stack_rows(items, "image_views", image_rows)  # [B_img, K, ...]
            num_views = len(items[0]["caption_views"])
            flat, flat_lengths = pad_captions([ids for item in items for ids in item["caption_views"]])
            batch["caption_views"] = flat.view(len(items), num_views, -1)  # [B_cap, K, L]
            batch["caption_view_lengths"] = flat_lengths.view(len(items), num_views)  # [B_cap, K]
        return batch


class FinishBatch:
    """The training loader's ``collate_fn``: the dataset builds each whole batch (``PairDataset.__getitems__``);
    ``finish=True`` normalises and erases its images here (:func:`finish_batch`, on the CPU, in the
    worker), ``finish=False`` leaves that to the training step (on the training device)."""

    def __init__(self, finish: bool = True) -> None:
        self.finish = finish

    def __call__(self, batch: Any) -> dict[str, Any]:
        return finish_batch(batch) if self.finish else batch


def _stack_rows(items: list[dict[str, Any]], key: str, rows: list[int]) -> torch.Tensor:
    """``items[p][key]`` stacked over ``rows`` (an empty ``[0, ...]`` tensor of the right shape when
    another process holds every image of this shard)."""
    if rows:
        return torch.stack([items[p][key] for p in rows])
    return torch.stack([items[0][key]])[:0]


class ImageDataset(Dataset):
    """Images of a split in order (evaluation)."""

    def __init__(self, split: RetrievalSplit) -> None:
        self.split = split

    def __len__(self) -> int:
        return self.split.num_images

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor]:
        return index, self.split.images.load(index)


class CaptionDataset(Dataset):
    """Captions of a split in order (evaluation)."""

    def __init__(self, split: RetrievalSplit, vocab: Vocabulary) -> None:
        if not isinstance(vocab, Vocabulary):
            raise TypeError(f"vocab must be a pcmr.data.Vocabulary, got {type(vocab).__name__}")
        self.split, self.vocab = split, vocab

    def __len__(self) -> int:
        return self.split.num_captions

    def __getitem__(self, index: int) -> tuple[int, list[int], str]:
        text = self.split.caption_texts[index]
        return index, self.vocab.encode(text), text


def collate_images(items: list[tuple[int, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """``{"images": [B, ...], "image_index": [B]}``."""
    return {"images": torch.stack([image for _, image in items]),
            "image_index": torch.tensor([index for index, _ in items], dtype=torch.long)}


def collate_captions(items: list[tuple[int, list[int], str]]) -> dict[str, Any]:
    """``{"captions": [B, L], "caption_lengths": [B], "caption_texts": list[str], "caption_index": [B]}``."""
    captions, lengths = pad_captions([ids for _, ids, _ in items])
    return {"captions": captions, "caption_lengths": lengths, "caption_texts": [text for _, _, text in items],
            "caption_index": torch.tensor([index for index, _, _ in items], dtype=torch.long)}


def train_loader(
    split: RetrievalSplit,
    vocab: Vocabulary,
    batch_size: int = TRAIN_BATCH_SIZE,
    *,
    sampler: str = "captions",
    augment: bool = True,
    erase_ratio: float | Sequence[float] = 0.0,
    erase_prob: float = 1.0,
    erase_aspect: float | None = None,
    word_dropout: float = 0.0,
    word_dropout_rule: str = "delete",
    num_views: int = 0,
    image_augment: str = "none",
    drop_last: bool = True,
    seed: int = 0,
    num_workers: int = 0,
    num_replicas: int = 1,
    rank: int = 0,
    finish: bool = True,
    pin_memory: bool = False,
    prefetch_factor: int | None = None,
) -> DataLoader:
    """Shuffled training batches (the training batch dict of ``docs/datasets.md``, with the true in-batch ``"relevance"``).

    ``sampler="captions"``: every caption once per epoch with its source image
    (repeated images are merged, so ``B_img <= B_cap``); ``"one_per_image"``: every
    image once per epoch with one random caption of its own (``B_img == B_cap``);
    ``"one_per_class"``: one pair per class in a batch, as the PCME release's CUB batches
    (labelled data; see ``PairBatchSampler``). ``image_augment="random_resized_crop"``: the PCME
    release's COCO training crop and flip (``PairDataset``).
    ``augment`` applies cutout (``erase_ratio``, ``erase_prob``, ``erase_aspect``) and word dropout
    (``word_dropout``, ``word_dropout_rule``), both off by default: a recipe states its paper's
    augmentation (the options are those of ``PairDataset``; PCME release: ``erase_prob=0.2``,
    ``erase_ratio=[0.02, 1/3]``, ``erase_aspect=0.3``, ``word_dropout=0.1``,
    ``word_dropout_rule="unk_then_delete"``). On precomputed features "cutout" zeroes that fraction
    of the regions / feature dimensions;
    ``num_views = K > 0`` adds ``image_views [B_img, K, ...]``, ``caption_views
    [B_cap, K, L]`` and ``caption_view_lengths [B_cap, K]`` (independently augmented).
    ``num_replicas`` / ``rank``: this process's shard of each global batch of ``batch_size``
    (see ``PairBatchSampler``); ``"relevance"`` then covers the shard only.

    Each batch is built at once (``PairDataset.raw_batch``): pixel images are gathered as uint8, the
    augmentation draws of every item are a function of its seed alone (:mod:`pcmr.data.draws`), and
    captions, Cutout boxes and word dropout are computed as array operations. ``finish=False`` returns
    the images still uint8 with their Cutout boxes (``"image_erase"``), for :func:`finish_batch` to
    normalise and erase on the training device. ``pin_memory`` / ``prefetch_factor``: as
    ``torch.utils.data.DataLoader``'s (``prefetch_factor`` with workers only).
    """
    dataset = PairDataset(split, vocab, augment=augment, erase_ratio=erase_ratio, erase_prob=erase_prob,
                          erase_aspect=erase_aspect, word_dropout=word_dropout,
                          word_dropout_rule=word_dropout_rule, num_views=num_views, image_augment=image_augment)
    batches = PairBatchSampler(split, batch_size, mode=sampler, shuffle=True, drop_last=drop_last, seed=seed,
                               num_replicas=num_replicas, rank=rank)
    return DataLoader(dataset, batch_sampler=batches, collate_fn=FinishBatch(finish), num_workers=num_workers,
                      pin_memory=pin_memory, prefetch_factor=prefetch_factor if num_workers > 0 else None)


def image_loader(split: RetrievalSplit, batch_size: int = ENCODE_BATCH_SIZE, *, num_workers: int = 0) -> DataLoader:
    """Images in split order: batches ``{"images", "image_index"}``."""
    return DataLoader(ImageDataset(split), batch_size=batch_size, shuffle=False,
                      collate_fn=collate_images, num_workers=num_workers)


def caption_loader(split: RetrievalSplit, vocab: Vocabulary, batch_size: int = ENCODE_BATCH_SIZE, *,
                   num_workers: int = 0) -> DataLoader:
    """Captions in split order: batches ``{"captions", "caption_lengths", "caption_texts", "caption_index"}``."""
    return DataLoader(CaptionDataset(split, vocab), batch_size=batch_size, shuffle=False,
                      collate_fn=collate_captions, num_workers=num_workers)
