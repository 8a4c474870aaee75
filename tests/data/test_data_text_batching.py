"""Tokenizer, vocabulary, augmentation and the batches of the team contract."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pcmr.data import (
    DataError,
    Vocabulary,
    caption_loader,
    drop_words,
    erase_image,
    image_loader,
    load_dataset,
    occlusion_series,
    tokenize,
    train_loader,
    word_erasure_series,
)
from pcmr.data.images import ArrayImages
from pcmr.data.relevance import Relevance
from pcmr.data.split import RetrievalSplit

SMALL = dict(num_train=37, num_val=11, num_test=5, num_test_unseen=5, num_binary_selection=3, image_size=24)


@pytest.fixture
def shapes_train(tmp_path):
    return load_dataset("shapes", "train", **SMALL, cache_dir=str(tmp_path))


def tiny_split(split, texts, caption_image, num_images):
    pixels = np.zeros((num_images, 8, 8, 3), dtype=np.uint8)
    return RetrievalSplit(name="tiny", split=split, images=ArrayImages(pixels), caption_texts=texts,
                          caption_image=np.asarray(caption_image))


def test_tokenize():
    assert tokenize("A red-circle, on THE left!") == ["a", "red", "circle", "on", "the", "left"]
    assert tokenize("the dog's <unk> ball\tcafé") == ["the", "dog's", "<unk>", "ball", "café"]
    assert tokenize("   ") == []
    with pytest.raises(DataError, match="str"):
        tokenize(None)


def test_vocabulary_build_encode_save_load(tmp_path):
    vocab = Vocabulary.build(["a dog", "a cat", "a dog runs"], min_count=2)
    assert vocab.words == ["<pad>", "<unk>", "<start>", "<end>", "a", "dog"]
    assert vocab.encode("A dog flies") == [2, 4, 5, 1, 3]
    assert vocab.encode("dog", add_special=False) == [5]
    assert vocab.decode([2, 4, 1, 3, 0]) == "a <unk>"
    vocab.save(tmp_path / "vocab.json")
    assert Vocabulary.load(tmp_path / "vocab.json") == vocab
    (tmp_path / "bad.json").write_text(json.dumps({"format": "pcmr-vocabulary", "words": ["a", "b"]}))
    with pytest.raises(DataError, match=r"bad.json, key 'words'.*<pad>"):
        Vocabulary.load(tmp_path / "bad.json")
    (tmp_path / "trunc.json").write_text('{"format": "pcmr-voc')
    with pytest.raises(DataError, match="trunc.json: not valid JSON"):
        Vocabulary.load(tmp_path / "trunc.json")
    with pytest.raises(FileNotFoundError, match="missing.json"):
        Vocabulary.load(tmp_path / "missing.json")


def test_vocabulary_from_training_split_only():
    train = tiny_split("train", ["a red bird", "a blue bird"], [0, 1], 2)
    test = tiny_split("test", ["a zebra"], [0], 1)
    vocab = Vocabulary.from_split(train)
    assert "bird" in vocab and "zebra" not in vocab
    assert vocab.encode("a zebra") == [2, vocab.word_to_id["a"], 1, 3]
    with pytest.raises(DataError, match="split 'test'.*training split"):
        Vocabulary.from_split(test)


def test_train_batch_follows_contract_with_true_relevance(shapes_train):
    vocab = Vocabulary.from_split(shapes_train)
    loader = train_loader(shapes_train, vocab, batch_size=23, num_views=3, seed=1)
    batches = list(loader)
    assert len(batches) == len(loader) == (37 * 5) // 23
    off_diagonal = 0
    for batch in batches:
        b_img, b_cap = batch["images"].shape[0], batch["captions"].shape[0]
        assert batch["images"].shape[1:] == (3, 24, 24) and batch["images"].dtype == torch.float32
        assert batch["captions"].dtype == torch.long and b_cap == 23 and b_img <= b_cap
        assert batch["caption_lengths"].min() >= 1
        assert (batch["captions"][torch.arange(b_cap), batch["caption_lengths"] - 1] == 3).all()  # <end>
        assert len(batch["caption_texts"]) == b_cap
        assert batch["image_index"].unique().numel() == b_img  # repeated images merged
        expected = shapes_train.relevance_matrix()[batch["image_index"]][:, batch["caption_index"]]
        assert batch["relevance"].dtype == torch.bool and torch.equal(batch["relevance"], expected)
        source = torch.from_numpy(shapes_train.caption_image)[batch["caption_index"]]
        assert (batch["image_index"][:, None] == source[None, :]).any(0).all()  # each caption's image is in
        off_diagonal += int(batch["relevance"].sum()) - b_cap
        assert batch["image_views"].shape == (b_img, 3, 3, 24, 24)
        assert batch["caption_views"].shape[:2] == (b_cap, 3)
        assert batch["caption_view_lengths"].shape == (b_cap, 3)
    assert off_diagonal > 0  # captions fit other images of the batch too


def test_one_caption_per_image_sampler_and_determinism(shapes_train):
    vocab = Vocabulary.from_split(shapes_train)
    loader = train_loader(shapes_train, vocab, batch_size=10, sampler="one_per_image", seed=7, drop_last=False)
    seen = []
    for batch in loader:
        assert batch["images"].shape[0] == batch["captions"].shape[0]
        assert torch.equal(torch.from_numpy(shapes_train.caption_image)[batch["caption_index"]], batch["image_index"])
        seen += batch["image_index"].tolist()
    assert sorted(seen) == list(range(37))
    next_epoch = torch.cat([batch["image_index"] for batch in loader])
    assert sorted(next_epoch.tolist()) == list(range(37)) and next_epoch.tolist() != seen  # a new permutation
    fresh = train_loader(shapes_train, vocab, batch_size=10, sampler="one_per_image", seed=7, drop_last=False)
    a, b = next(iter(fresh)), next(iter(train_loader(shapes_train, vocab, batch_size=10, sampler="one_per_image",
                                                                   seed=7, drop_last=False)))
    assert torch.equal(a["images"], b["images"]) and torch.equal(a["captions"], b["captions"])
    with pytest.raises(ValueError, match="sampler='pairs'"):
        train_loader(shapes_train, vocab, sampler="pairs")


def test_training_batches_are_not_augmented_unless_asked(shapes_train):
    """Cutout and word dropping are PCME's augmentations, not every paper's: the loader applies
    none by default (a recipe states its paper's), and applies them when given."""
    vocab = Vocabulary.from_split(shapes_train)
    plain = next(iter(train_loader(shapes_train, vocab, batch_size=20, seed=2)))
    clean = torch.stack([shapes_train.images.load(int(i)) for i in plain["image_index"]])
    assert torch.equal(plain["images"], clean)
    for row, c in enumerate(plain["caption_index"].tolist()):
        ids = vocab.encode(shapes_train.caption_texts[c])
        assert plain["captions"][row, : plain["caption_lengths"][row]].tolist() == ids
    augmented = next(iter(train_loader(shapes_train, vocab, batch_size=20, seed=2, erase_ratio=0.2,
                                                    word_dropout=0.3)))
    assert not torch.equal(augmented["images"], clean)
    assert int(augmented["caption_lengths"].sum()) < int(plain["caption_lengths"].sum())


def test_evaluation_loaders_cover_split_in_order(shapes_train):
    vocab = Vocabulary.from_split(shapes_train)
    images = list(image_loader(shapes_train, batch_size=16))
    assert torch.cat([b["images"] for b in images]).shape == (37, 3, 24, 24)
    assert torch.equal(torch.cat([b["image_index"] for b in images]), torch.arange(37))
    captions = list(caption_loader(shapes_train, vocab, batch_size=16))
    assert torch.equal(torch.cat([b["caption_index"] for b in captions]), torch.arange(185))
    assert sum((b["caption_texts"] for b in captions), []) == shapes_train.caption_texts
    assert set(captions[0]) == {"captions", "caption_lengths", "caption_texts", "caption_index"}


def test_erase_image_area_and_features():
    rng = np.random.default_rng(0)
    image = torch.ones(3, 20, 30)
    erased = erase_image(image, 0.2, rng)
    assert int((erased[0] == 0).sum()) == pytest.approx(0.2 * 600, abs=30) and torch.equal(image, torch.ones(3, 20, 30))
    regions = erase_image(torch.ones(10, 4), 0.2, rng)
    assert int((regions.sum(1) == 0).sum()) == 2
    with pytest.raises(ValueError, match="ratio"):
        erase_image(image, 1.5, rng)


def test_drop_words_keeps_special_tokens_and_one_word():
    rng = np.random.default_rng(0)
    ids = [2, 10, 11, 12, 13, 3]
    assert drop_words(ids, 0.0, rng) == ids
    for _ in range(20):
        out = drop_words(ids, 0.99, rng)
        assert out[0] == 2 and out[-1] == 3 and len(out) >= 3
    kept = [len(drop_words([2, *range(10, 1010), 3], 0.1, rng)) - 2 for _ in range(5)]
    assert 850 < np.mean(kept) < 950


def test_corruption_series_are_nested():
    images = torch.ones(3, 3, 16, 16)
    series = occlusion_series(images, [0.0, 0.1, 0.3, 0.5], seed=2)
    erased = series[:, :, 0] == 0  # [R, N, H, W]
    assert erased[0].sum() == 0
    for r in range(1, 4):
        assert (erased[r] | ~erased[r - 1]).all()
        assert erased[r, 0].float().mean() == pytest.approx([0.1, 0.3, 0.5][r - 1], abs=0.08)
    texts = word_erasure_series(["a b c d e f g h i j"], [0.0, 0.2, 0.5], seed=1)
    assert [t[0].split().count("<unk>") for t in texts] == [0, 2, 5]
    small, large = texts[1][0].split(), texts[2][0].split()
    assert all(large[i] == "<unk>" for i, w in enumerate(small) if w == "<unk>")


def test_relevance_storages_agree():
    rng = np.random.default_rng(0)
    dense = rng.random((13, 29)) < 0.3
    pairs = Relevance(13, 29, *np.nonzero(dense))
    bits = Relevance.from_bits(13, 29, np.packbits(dense.T, axis=1))
    for relevance in (pairs, bits):
        assert torch.equal(relevance.matrix(), torch.from_numpy(dense))
        assert relevance.num_pairs == dense.sum()
        rows, cols = rng.integers(0, 13, 7), rng.integers(0, 29, 11)
        np.testing.assert_array_equal(relevance.submatrix(rows, cols), dense[rows][:, cols])
        assert relevance.caption_to_images == [np.flatnonzero(dense[:, c]).tolist() for c in range(29)]
        assert relevance.image_to_captions == [np.flatnonzero(dense[i]).tolist() for i in range(13)]
    classes = Relevance.from_classes(np.array([0, 1, 0]), np.array([1, 0, 0, 2]))
    assert classes.matrix().tolist() == [[False, True, True, False], [True, False, False, False],
                                         [False, True, True, False]]


def test_source_relevance_keeps_only_the_written_pairs(shapes_train):
    """``source``: only the captions written for an image are its positives (COCO practice);
    ``exact``: the dataset's relation; training batches follow the split's relation."""
    source = shapes_train.relevance_by_mode("source").matrix()
    expected = torch.zeros(37, 185, dtype=torch.bool)
    expected[torch.from_numpy(shapes_train.caption_image), torch.arange(185)] = True
    assert torch.equal(source, expected)
    exact = shapes_train.relevance_by_mode("exact").matrix()
    assert torch.equal(exact, shapes_train.relevance_matrix()) and (exact & ~source).any() and not (source & ~exact).any()
    assert shapes_train.with_relevance("exact") is shapes_train
    written = shapes_train.with_relevance("source")
    assert written.images is shapes_train.images and torch.equal(written.relevance_matrix(), source)
    assert torch.equal(shapes_train.relevance_matrix(), exact)  # the original split is unchanged
    vocab = Vocabulary.from_split(shapes_train)
    for batch in train_loader(written, vocab, batch_size=23, seed=1):
        want = source[batch["image_index"]][:, batch["caption_index"]]
        assert torch.equal(batch["relevance"], want) and int(batch["relevance"].sum()) == 23
    with pytest.raises(ValueError, match="relevance mode expects one of 'exact', 'source' .* got 'all'"):
        shapes_train.relevance_by_mode("all")
