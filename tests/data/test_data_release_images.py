"""The PCME release's image handling in the training loader: random resized crops with flips
(COCO), resize + center crop (evaluation, CUB), one pair per class on labelled data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from pcmr.data import Vocabulary, load_dataset, train_loader
from pcmr.data.errors import DataError
from pcmr.data.images import FeatureImages, FileImages, center_crop, resize_shorter_side
from pcmr.data.split import RetrievalSplit
from pcmr.train.feature_cache import loader_augments

SMALL = dict(num_train=30, num_val=5, num_test=5, num_test_unseen=5, num_binary_selection=3, image_size=24)


@pytest.fixture(scope="module")
def shapes_train(tmp_path_factory):
    return load_dataset("shapes", "train", **SMALL, cache_dir=str(tmp_path_factory.mktemp("shapes")))


def first_batch(split, **options):
    vocab = Vocabulary.from_split(split)
    return next(iter(train_loader(split, vocab, 8, seed=5, **options)))


def test_random_resized_crop_in_the_loader_is_seeded_and_changes_images(shapes_train):
    plain = first_batch(shapes_train)
    cropped = first_batch(shapes_train, image_augment="random_resized_crop")
    again = first_batch(shapes_train, image_augment="random_resized_crop")
    assert cropped["images"].shape == plain["images"].shape == (len(plain["images"]), 3, 24, 24)
    assert torch.equal(cropped["image_index"], plain["image_index"])  # same batches, other pixels
    assert torch.equal(cropped["images"], again["images"])
    assert not torch.equal(cropped["images"], plain["images"])
    assert torch.equal(first_batch(shapes_train, image_augment="random_resized_crop", augment=False)["images"],
                       plain["images"])


def test_one_per_class_on_shapes_labels(shapes_train):
    batch = first_batch(shapes_train, sampler="one_per_class")
    rows = shapes_train.caption_labels[batch["caption_index"]]
    assert len({tuple(row.tolist()) for row in rows}) == len(rows) == 8  # distinct label sets


def test_bad_image_options_are_clear_errors(shapes_train, tmp_path):
    with pytest.raises(ValueError, match="image_augment='flip' is not one of"):
        first_batch(shapes_train, image_augment="flip")
    features = RetrievalSplit(name="toy", split="train", images=FeatureImages(np.zeros((3, 4), dtype=np.float32)),
                              caption_texts=["a b", "c d", "e f"], caption_image=np.arange(3))
    with pytest.raises(ValueError, match="needs pixel images"):
        first_batch(features, image_augment="random_resized_crop")
    with pytest.raises(DataError, match="image_resize"):
        FileImages(["x.png"], 16, image_resize="crop")
    with pytest.raises(DataError, match="resize_size"):
        FileImages(["x.png"], 16, image_resize="center_crop", resize_size=8)


def test_center_crop_keeps_the_middle_of_the_resized_image(tmp_path):
    """A 40 x 20 image whose columns are numbered: the shorter side goes to 12 (24 x 12), the central
    12 x 12 square keeps columns 6-17 of the 24; a square file is not resized before the crop."""
    pixels = np.zeros((20, 40, 3), dtype=np.uint8)
    pixels[:, :, 0] = np.arange(40, dtype=np.uint8)[None, :] * 6
    image = Image.fromarray(pixels, mode="RGB")
    resized = resize_shorter_side(image, 12)
    assert resized.size == (24, 12)
    cropped = center_crop(resized, 12)
    assert np.array_equal(np.asarray(cropped), np.asarray(resized)[:, 6:18])
    square = Image.fromarray(pixels[:, :20], mode="RGB")
    assert resize_shorter_side(square, 20) is square
    path = tmp_path / "image.png"
    image.save(path)
    assert FileImages([str(path)], 12, image_resize="center_crop", resize_size=12).load(0).shape == (3, 12, 12)
    assert FileImages([str(path)], 12).load(0).shape == (3, 12, 12)


def test_random_resized_crop_counts_as_image_augmentation():
    assert loader_augments({"image_augment": "random_resized_crop"}) == (True, False)
    assert loader_augments({"image_augment": "none"}) == (False, False)


def test_one_per_class_shards_make_up_the_one_process_batch(shapes_train):
    from pcmr.data.batching import PairBatchSampler

    whole = list(PairBatchSampler(shapes_train, 8, mode="one_per_class", seed=2))
    shards = [list(PairBatchSampler(shapes_train, 8, mode="one_per_class", seed=2, num_replicas=2, rank=r))
              for r in range(2)]
    for b, batch in enumerate(whole):
        joined = [key[:2] for key in shards[0][b] + shards[1][b]]
        assert joined == batch
