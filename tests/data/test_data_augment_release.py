"""Cutout and word dropping as the PCME release applies them (PCME §4.1; the release's caption
transform and random erasing): statistics over many draws, edge cases, and the training batches."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pcmr.data import Vocabulary, drop_words, load_dataset, random_erase, train_loader
from pcmr.data.batching import PairDataset
from pcmr.data.text import END_ID, START_ID, UNK_ID

SMALL = dict(num_train=37, num_val=11, num_test=5, num_test_unseen=5, num_binary_selection=3, image_size=24)
#: the PCME release's settings: Cutout with probability 0.2 over 2-33 % of the image, aspect in [0.3, 1/0.3]
RELEASE_ERASE = dict(prob=0.2, min_area=0.02, max_area=1 / 3, min_aspect=0.3)


@pytest.fixture(scope="module")
def shapes_train(tmp_path_factory):
    return load_dataset("shapes", "train", **SMALL, cache_dir=str(tmp_path_factory.mktemp("shapes")))


# ----------------------------------------------------------------------------- word dropping
@pytest.mark.parametrize("length", [1, 2, 5, 9, 10, 11, 19, 20, 37, 60])
def test_unk_then_delete_removes_floor_prob_times_length_words(length):
    """floor(0.1 L) words are deleted, every remaining word is the original or <unk>, order kept."""
    rng = np.random.default_rng(length)
    words = list(range(10, 10 + length))
    for _ in range(50):
        out = drop_words([START_ID, *words, END_ID], 0.1, rng, "unk_then_delete")
        assert out[0] == START_ID and out[-1] == END_ID
        kept = out[1:-1]
        assert len(kept) == length - math.floor(0.1 * length)
        originals = [w for w in kept if w != UNK_ID]
        assert originals == sorted(originals) and set(originals) <= set(words)


def test_unk_then_delete_marginals_match_the_release_rule():
    """Each word survives unchanged with probability (1 - p)(1 - floor(pL)/L): replaced independently
    with probability p, deleted at positions drawn uniformly; <unk> makes up about p of the output."""
    rng = np.random.default_rng(0)
    length, prob, draws = 20, 0.1, 4000
    words = list(range(10, 10 + length))
    survived = np.zeros(length)
    unk = total = 0
    for _ in range(draws):
        kept = drop_words([START_ID, *words, END_ID], prob, rng, "unk_then_delete")[1:-1]
        unk += kept.count(UNK_ID)
        total += len(kept)
        for w in kept:
            if w != UNK_ID:
                survived[w - 10] += 1
    expected = (1 - prob) * (1 - math.floor(prob * length) / length)  # 0.81
    assert np.abs(survived / draws - expected).max() < 0.035  # every position alike: uniform deletion
    assert unk / total == pytest.approx(prob, abs=0.01)


def test_unk_then_delete_edges():
    rng = np.random.default_rng(1)
    ids = [START_ID, 10, 11, 12, 13, END_ID]
    assert drop_words(ids, 0.0, rng, "unk_then_delete") == ids
    assert drop_words([START_ID, END_ID], 0.5, rng, "unk_then_delete") == [START_ID, END_ID]
    assert drop_words(ids, 1.0, rng, "unk_then_delete") == [START_ID, UNK_ID, END_ID]  # one word stays
    single = drop_words([START_ID, 10, END_ID], 0.5, rng, "unk_then_delete")
    assert len(single) == 3 and single[1] in (10, UNK_ID)  # floor(0.5 * 1) = 0 deletions
    with pytest.raises(ValueError, match="word dropout rule 'mask'"):
        drop_words(ids, 0.1, rng, "mask")


def test_delete_rule_never_writes_unk():
    rng = np.random.default_rng(2)
    outs = [drop_words([START_ID, *range(10, 40), END_ID], 0.3, rng) for _ in range(50)]
    assert all(UNK_ID not in out for out in outs)
    assert np.mean([len(out) - 2 for out in outs]) == pytest.approx(21, abs=1.5)


# ----------------------------------------------------------------------------- cutout
def _erased_boxes(draws: int, seed: int, size: tuple[int, int] = (100, 100), **options) -> list[tuple[int, int]]:
    """(height, width) of the erased rectangle of each draw; (0, 0) when nothing was erased."""
    rng = np.random.default_rng(seed)
    image = torch.ones(3, *size)
    boxes = []
    for _ in range(draws):
        out = random_erase(image, rng, **options)
        zero = out[0] == 0
        assert torch.equal(out[1] == 0, zero) and torch.equal(out[2] == 0, zero)  # every channel
        rows, cols = zero.any(1).nonzero().flatten(), zero.any(0).nonzero().flatten()
        h, w = (int(rows[-1] - rows[0] + 1), int(cols[-1] - cols[0] + 1)) if len(rows) else (0, 0)
        assert int(zero.sum()) == h * w  # one axis-aligned rectangle
        boxes.append((h, w))
    assert torch.equal(image, torch.ones(3, *size))  # the input is not modified
    return boxes


def test_random_erase_matches_the_release_statistics():
    """Probability 0.2; area uniform in 2-33 % (the few draws that do not fit are redrawn); aspect
    ratio log-uniform in [0.3, 1/0.3], so most rectangles are not squares."""
    boxes = _erased_boxes(4000, seed=3, **RELEASE_ERASE)
    erased = [(h, w) for h, w in boxes if h]
    assert len(erased) / len(boxes) == pytest.approx(0.2, abs=0.025)
    areas = np.array([h * w for h, w in erased]) / 100**2
    assert areas.min() >= 0.018 and areas.max() <= 0.345  # 2 % and 33 %, up to the rounding of h and w
    assert areas.mean() == pytest.approx((0.02 + 1 / 3) / 2, abs=0.012)
    assert np.mean(areas < 0.1) == pytest.approx((0.1 - 0.02) / (1 / 3 - 0.02), abs=0.04)
    log_aspect = np.log([h / w for h, w in erased])
    assert np.abs(log_aspect).max() <= math.log(1 / 0.3) + 0.1
    assert np.mean(np.abs(log_aspect) > math.log(1.25)) > 0.5


def test_random_erase_edges_and_features():
    rng = np.random.default_rng(4)
    image = torch.ones(3, 20, 30)
    assert all(h > 0 for h, _ in _erased_boxes(50, seed=5, size=(20, 30), prob=1.0, min_area=0.1, max_area=0.2))
    assert torch.equal(random_erase(image, rng, prob=0.0, min_area=0.1, max_area=0.2), image)
    regions = [int((random_erase(torch.ones(50, 4), rng, prob=1.0, min_area=0.02, max_area=1 / 3).sum(1) == 0).sum())
               for _ in range(200)]
    assert min(regions) >= 1 and max(regions) <= 17 and len(set(regions)) > 5
    for bad, match in ((dict(prob=1.5), "prob"), (dict(min_area=0.5, max_area=0.2), "must not exceed"),
                       (dict(min_aspect=2.0), "min_aspect")):
        options = {**RELEASE_ERASE, **bad}
        with pytest.raises(ValueError, match=match):
            random_erase(image, rng, **options)


# ----------------------------------------------------------------------------- the training batches
def test_release_augmentation_reaches_the_training_batches(shapes_train):
    """With the PCME release's options, <unk> makes up about 10 % of the training words (the
    vocabulary, built from the training captions, has no other unknown word), floor(0.1 L) words
    are gone from each caption, and about one image in five is erased."""
    vocab = Vocabulary.from_split(shapes_train)
    assert vocab.words[UNK_ID] == "<unk>"
    options = dict(erase_prob=0.2, erase_ratio=[0.02, 1 / 3], erase_aspect=0.3, word_dropout=0.1,
                   word_dropout_rule="unk_then_delete")
    unk = words = erased = images = 0
    for seed in range(8):
        for batch in train_loader(shapes_train, vocab, batch_size=37, sampler="one_per_image", seed=seed, **options):
            for row, index in enumerate(batch["caption_index"].tolist()):
                length = int(batch["caption_lengths"][row])
                ids = batch["captions"][row, :length].tolist()
                clean = len(vocab.encode(shapes_train.caption_texts[index])) - 2
                assert length - 2 == clean - math.floor(0.1 * clean)
                unk += ids.count(UNK_ID)
                words += length - 2
            for row, index in enumerate(batch["image_index"].tolist()):
                erased += int(not torch.equal(batch["images"][row], shapes_train.images.load(index)))
                images += 1
    assert words > 1500 and unk / words == pytest.approx(0.1, abs=0.025)
    assert erased / images == pytest.approx(0.2, abs=0.1)


def test_loader_options_are_checked(shapes_train):
    vocab = Vocabulary.from_split(shapes_train)
    for options, match in (
        (dict(erase_ratio=[0.3, 0.1]), r"erase_ratio=\[0.3, 0.1\] must be a number in \[0, 1\] or a range"),
        (dict(erase_ratio="big"), "erase_ratio='big'"),
        (dict(erase_ratio=0.2, erase_aspect=0.3), "erase_aspect applies only to an erase_ratio range"),
        (dict(erase_ratio=[0.02, 0.3], erase_aspect=3.0), r"erase_aspect=3.0 must be a number in \(0, 1\]"),
        (dict(erase_prob=2.0), "erase_prob=2.0"),
        (dict(word_dropout_rule="swap"), "word_dropout_rule='swap' is not one of"),
    ):
        with pytest.raises(ValueError, match=match):
            PairDataset(shapes_train, vocab, **options)


def test_fixed_cutout_with_a_probability(shapes_train):
    """A single erase_ratio keeps today's square of exactly that fraction; erase_prob < 1 skips some."""
    dataset = PairDataset(shapes_train, Vocabulary.from_split(shapes_train), erase_ratio=0.25, erase_prob=0.5)
    clean = shapes_train.images.load(int(shapes_train.caption_image[0]))
    changed = [not torch.equal(dataset[(0, seed)]["image"], clean) for seed in range(200)]
    assert np.mean(changed) == pytest.approx(0.5, abs=0.12)



def test_erase_ratio_zero_switches_the_release_cutout_off(shapes_train):
    """Overriding a PCME recipe's range with erase_ratio=0 (e.g. on precomputed features) erases nothing."""
    dataset = PairDataset(shapes_train, Vocabulary.from_split(shapes_train), erase_ratio=0.0, erase_prob=0.2,
                          erase_aspect=0.3)
    clean = shapes_train.images.load(int(shapes_train.caption_image[0]))
    assert all(torch.equal(dataset[(0, seed)]["image"], clean) for seed in range(50))
