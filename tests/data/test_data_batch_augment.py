"""Batch-wise training batches against a slow per-item definition with the same draws.

The reference below builds every item on its own, in plain Python, from the documented draws
``u(item_seed, stream, slot)`` (:mod:`pcmr.data.draws`): normalise the image, erase its box, drop its
words; then it stacks the batch. The loader (``pcmr.data.train_loader``) must give the same pixels and
token ids, whether its images are finished on the CPU (a look-up table) or by tensor arithmetic (the GPU
path, run here on the CPU).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pcmr.data import Vocabulary, load_dataset, train_loader
from pcmr.data.augment import _square_box
from pcmr.data.batch_augment import _finish_by_arithmetic, drop_words_batch, finish_images, word_slots
from pcmr.data.batching import PairBatchSampler, finish_batch
from pcmr.data.draws import CROP, CUTOUT, WORDS, StreamDraws, uniform, uniforms, view_stream
from pcmr.data.images import IMAGE_MEAN, IMAGE_STD, FeatureImages, normalize_pixels
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import UNK_ID

#: awkward sizes: 23 px images, batches of 13 (repeated images in a batch)
SMALL = dict(num_train=29, num_val=5, num_test=5, num_test_unseen=2, num_binary_selection=2, image_size=23)
RELEASE = dict(erase_prob=0.6, erase_ratio=[0.02, 0.4], erase_aspect=0.3, word_dropout=0.3,
               word_dropout_rule="unk_then_delete")


@pytest.fixture(scope="module")
def shapes_train(tmp_path_factory):
    return load_dataset("shapes", "train", **SMALL, cache_dir=str(tmp_path_factory.mktemp("shapes")))


# ----------------------------------------------------------------------------- the per-item definition
def ref_random_erase(image: torch.Tensor, seed: int, stream: int, prob: float, low: float, high: float,
                     aspect: float) -> torch.Tensor:
    _, height, width = image.shape
    out = image.clone()
    if not uniform(seed, stream, 0) < prob:
        return out
    for attempt in range(10):
        area = (low + (high - low) * uniform(seed, stream, 1 + 4 * attempt)) * height * width
        ratio = math.exp(math.log(aspect) + (-2 * math.log(aspect)) * uniform(seed, stream, 2 + 4 * attempt))
        h, w = int(round(math.sqrt(area * ratio))), int(round(math.sqrt(area / ratio)))
        if h < height and w < width:
            top = int(uniform(seed, stream, 3 + 4 * attempt) * (height - h + 1))
            left = int(uniform(seed, stream, 4 + 4 * attempt) * (width - w + 1))
            out[:, top: top + h, left: left + w] = 0.0
            break
    return out


def ref_square_erase(image: torch.Tensor, seed: int, stream: int, prob: float, ratio: float) -> torch.Tensor:
    out = image.clone()
    if ratio and uniform(seed, stream, 0) < prob:
        top, left, h, w = _square_box(image.shape[1], image.shape[2], ratio,
                                      (uniform(seed, stream, 1), uniform(seed, stream, 2)))
        out[:, top: top + h, left: left + w] = 0.0
    return out


def ref_drop_words(ids: list[int], seed: int, stream: int, prob: float, rule: str) -> list[int]:
    words, n = ids[1:-1], len(ids) - 2
    if prob == 0 or n == 0:
        return list(ids)
    if rule == "unk_then_delete":
        words = [UNK_ID if uniform(seed, stream, 2 * j) < prob else w for j, w in enumerate(words)]
        order = sorted(range(n), key=lambda j: uniform(seed, stream, 2 * j + 1))
        deleted = set(order[: min(int(n * prob), n - 1)])
        kept = [w for j, w in enumerate(words) if j not in deleted]
    else:
        if n <= 1:
            return list(ids)
        keep = [uniform(seed, stream, 2 * j) >= prob for j in range(n)]
        if not any(keep):
            keep[int(uniform(seed, stream, 1) * n)] = True
        kept = [w for w, k in zip(words, keep) if k]
    return [ids[0], *kept, ids[-1]]


def ref_batch(split: RetrievalSplit, vocab: Vocabulary, keys: list[tuple[int, int]], options: dict,
              num_views: int = 0) -> dict:
    """The training batch item by item: the first item of each image gives its (augmented) image."""
    prob, rule = options.get("word_dropout", 0.0), options.get("word_dropout_rule", "delete")
    ratio, crop = options.get("erase_ratio", 0.0), options.get("image_augment", "none") == "random_resized_crop"

    def image(index: int, seed: int, view: int | None) -> torch.Tensor:
        if crop:
            pixels = split.images.load_random_resized_crop_pixels(index, StreamDraws(seed, view_stream(CROP, view)))
            clean = normalize_pixels(pixels)
        else:
            clean = split.images.load(index)
        stream = view_stream(CUTOUT, view)
        if isinstance(ratio, list):
            return ref_random_erase(clean, seed, stream, options["erase_prob"], ratio[0], ratio[1],
                                    options["erase_aspect"])
        return ref_square_erase(clean, seed, stream, options.get("erase_prob", 1.0), ratio)

    images, image_index, views, captions, caption_views = [], [], [], [], []
    for caption, seed in keys:
        ids = vocab.encode(split.caption_texts[caption])
        captions.append(ref_drop_words(ids, seed, WORDS, prob, rule))
        caption_views.append([ref_drop_words(ids, seed, view_stream(WORDS, v), prob, rule) for v in range(num_views)])
        index = int(split.caption_image[caption])
        if index not in image_index:
            image_index.append(index)
            images.append(image(index, seed, None))
            views.append([image(index, seed, v) for v in range(num_views)])
    return {"images": torch.stack(images), "image_index": image_index, "captions": captions,
            "image_views": views, "caption_views": caption_views}


def unpadded(captions: torch.Tensor, lengths: torch.Tensor) -> list[list[int]]:
    assert bool((captions[torch.arange(captions.shape[-1]) >= lengths[..., None]] == 0).all())  # <pad> after
    return [row[: int(n)].tolist() for row, n in zip(captions, lengths)]


def loader_batches(split, vocab, options, epochs=2, **extra):
    for epoch in range(epochs):
        for finish in (True, False):
            loader = train_loader(split, vocab, 13, seed=5, finish=finish, **options, **extra)
            loader.batch_sampler.epoch = epoch
            sampler = PairBatchSampler(split, 13, seed=5)
            sampler.epoch = epoch
            for keys, batch in zip(sampler, loader):
                yield finish, keys, batch


# ----------------------------------------------------------------------------- tests
def test_vectorised_draws_are_the_scalar_definition():
    seeds = np.array([0, 1, 7, 2**62 + 3, 2**63 - 2], dtype=np.int64)
    table = uniforms(seeds, 4, 9)
    assert table.shape == (5, 9) and ((0 <= table) & (table < 1)).all()
    for row, seed in enumerate(seeds.tolist()):
        stream = StreamDraws(seed, 4)
        assert [stream.random() for _ in range(9)] == table[row].tolist()
        assert table[row].tolist() == [uniform(seed, 4, slot) for slot in range(9)]
    assert not np.array_equal(uniforms(seeds, 1, 9), table)  # streams differ
    assert np.array_equal(uniforms(seeds, 4, 30)[:, :9], table)  # a slot does not depend on how many are read


@pytest.mark.parametrize("options", [
    RELEASE,
    dict(erase_prob=0.5, erase_ratio=0.3, word_dropout=0.4, word_dropout_rule="delete"),
    dict(erase_ratio=0.0, word_dropout=0.0),
], ids=["release", "square_delete", "none"])
def test_batches_are_the_per_item_definition(shapes_train, options):
    vocab = Vocabulary.from_split(shapes_train)
    erased = 0
    for finish, keys, batch in loader_batches(shapes_train, vocab, options):
        expected = ref_batch(shapes_train, vocab, keys, options)
        assert batch["image_index"].tolist() == expected["image_index"]
        assert unpadded(batch["captions"], batch["caption_lengths"]) == expected["captions"]
        assert batch["caption_index"].tolist() == [c for c, _ in keys]
        if finish:
            images = batch["images"]
        else:  # uint8 with boxes: the GPU's arithmetic path gives the same bits as the CPU's table
            assert batch["images"].dtype == torch.uint8
            images = _finish_by_arithmetic(batch["images"], batch["image_erase"])
            assert torch.equal(images, finish_batch(batch)["images"])
        assert torch.equal(images, expected["images"])
        erased += int((images == 0).flatten(1).any(1).sum())
    assert (erased > 0) == (options["erase_ratio"] != 0.0)


def test_views_and_random_resized_crops_are_the_per_item_definition(shapes_train):
    vocab = Vocabulary.from_split(shapes_train)
    options = {**RELEASE, "image_augment": "random_resized_crop"}
    for _finish, keys, batch in loader_batches(shapes_train, vocab, options, epochs=1, num_views=2):
        expected = ref_batch(shapes_train, vocab, keys, options, num_views=2)
        batch = finish_batch(batch)
        assert torch.equal(batch["images"], expected["images"])
        assert torch.equal(batch["image_views"], torch.stack([torch.stack(v) for v in expected["image_views"]]))
        for row, views in enumerate(expected["caption_views"]):
            assert unpadded(batch["caption_views"][row], batch["caption_view_lengths"][row]) == views


def test_an_item_alone_has_the_draws_it_has_in_a_batch(shapes_train):
    vocab = Vocabulary.from_split(shapes_train)
    loader = train_loader(shapes_train, vocab, 13, seed=2, **RELEASE)
    keys, batch = next(iter(PairBatchSampler(shapes_train, 13, seed=2))), next(iter(loader))
    first_rows: dict[int, int] = {}
    for row, key in enumerate(keys):
        item = loader.dataset[key]
        assert item["caption"] == batch["captions"][row, : int(batch["caption_lengths"][row])].tolist()
        if item["image_index"] not in first_rows:  # the first item of its image gives the batch's image
            first_rows[item["image_index"]] = len(first_rows)
            assert torch.equal(item["image"], batch["images"][first_rows[item["image_index"]]])


def test_feature_cutout_is_the_per_item_definition():
    """Precomputed features: the ``n`` rows with the smallest draws of slots 2... are zeroed."""
    features = np.random.default_rng(0).normal(size=(9, 5, 7)).astype(np.float32) + 3.0
    texts = [f"a red circle number {i}" for i in range(18)]
    split = RetrievalSplit(name="features", split="train", images=FeatureImages(features), caption_texts=texts,
                           caption_image=np.repeat(np.arange(9), 2))
    vocab = Vocabulary.from_split(split)
    for ratio in ([0.1, 0.9], 0.4):
        loader = train_loader(split, vocab, 6, seed=1, erase_ratio=ratio, erase_prob=0.7)
        for keys, batch in zip(PairBatchSampler(split, 6, seed=1), loader):
            firsts = {}
            for caption, seed in keys:
                firsts.setdefault(int(split.caption_image[caption]), seed)
            for row, (index, seed) in enumerate(firsts.items()):
                expected = torch.from_numpy(features[index].copy())
                if uniform(seed, CUTOUT, 0) < 0.7:
                    fraction = (ratio[0] + (ratio[1] - ratio[0]) * uniform(seed, CUTOUT, 1)
                                if isinstance(ratio, list) else ratio)
                    order = sorted(range(5), key=lambda r: uniform(seed, CUTOUT, 2 + r))
                    expected[order[: int(round(fraction * 5))]] = 0.0
                assert torch.equal(batch["images"][row], expected)


def test_finish_images_normalises_as_the_per_image_function():
    pixels = torch.randint(0, 256, (4, 2, 5, 6, 3), dtype=torch.uint8)
    out = finish_images(pixels)
    assert out.shape == (4, 2, 3, 5, 6) and out.dtype == torch.float32
    for a in range(4):
        for b in range(2):
            assert torch.equal(out[a, b], normalize_pixels(pixels[a, b].numpy()))
    assert torch.equal(out, _finish_by_arithmetic(pixels, None))


@pytest.mark.parametrize("rule", ["delete", "unk_then_delete"])
@pytest.mark.parametrize("prob", [0.1, 0.5, 0.95])
def test_word_dropout_of_short_and_long_captions_is_the_per_item_definition(rule, prob):
    """Captions of 0, 1, 2, ... 30 words (the "delete" rule's rescue of one word happens at p = 0.95)."""
    rng = np.random.default_rng(3)
    captions = [[2, *rng.integers(4, 50, size=n).tolist(), 3] for n in [0, 1, 2, 3, 5, 8, 13, 30] * 6]
    seeds = rng.integers(0, 2**63 - 1, size=len(captions))
    lengths = np.array([len(c) for c in captions])
    padded = np.zeros((len(captions), lengths.max()), dtype=np.int64)
    for row, ids in enumerate(captions):
        padded[row, : len(ids)] = ids
    ids, new_lengths = drop_words_batch(padded, lengths, uniforms(seeds, WORDS, word_slots(lengths)), prob, rule)
    got = unpadded(torch.from_numpy(ids), torch.from_numpy(new_lengths))
    assert got == [ref_drop_words(c, int(s), WORDS, prob, rule) for c, s in zip(captions, seeds.tolist())]


def _channels_first_by_table(images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """The earlier finishing: a per-channel look-up table of the 256 levels written channels-first,
    then each box zeroed."""
    levels = torch.arange(256, dtype=torch.float32).div_(255.0).view(1, 256)
    table = (levels - torch.tensor(IMAGE_MEAN).view(3, 1)) / torch.tensor(IMAGE_STD).view(3, 1)  # [3, 256]
    out = torch.stack([table[channel][images[..., channel].long()] for channel in range(3)], dim=-3)
    for index in np.ndindex(*boxes.shape[:-1]):
        top, left, h, w = boxes[index].tolist()
        out[index][:, top: top + h, left: left + w] = 0.0
    return out


@pytest.mark.parametrize("shape", [(6, 7, 5, 3), (2, 3, 4, 9, 3), (0, 4, 4, 3)])
def test_finished_batch_is_channels_last_and_equals_the_channels_first_one(shape):
    """The finished batch has the values of the earlier channels-first one, bit for bit, boxes erased by
    slices (CPU) or by a mask (other devices), in channels-last memory (a 4-d batch: torch.channels_last,
    which the CNN then reads without a copy)."""
    gen = torch.Generator().manual_seed(len(shape))
    pixels = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
    height, width = shape[-3], shape[-2]
    boxes = torch.stack([torch.randint(0, height, shape[:-3], generator=gen),
                         torch.randint(0, width, shape[:-3], generator=gen),
                         torch.randint(0, 3, shape[:-3], generator=gen),
                         torch.randint(0, 4, shape[:-3], generator=gen)], dim=-1)
    want = _channels_first_by_table(pixels, boxes)
    for got in (finish_images(pixels, boxes), _finish_by_arithmetic(pixels, boxes)):
        assert got.shape == want.shape and torch.equal(got, want)
        assert got.movedim(-3, -1).is_contiguous()
        if len(shape) == 4:
            assert got.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(finish_images(pixels), _channels_first_by_table(pixels, torch.zeros_like(boxes)))
