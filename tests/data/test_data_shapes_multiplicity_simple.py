"""The "multiplicity_simple" shapes preset: the learnable benchmark of the uncertainty study.

Caption length stays fixed (no length confound), the number of relevant images per caption still spans
specific to generic captions, images differ in how many captions fit them, and every setting is the one
the preset names (1-2 objects, one description per caption, clean renders)."""

from __future__ import annotations

import numpy as np
import pytest

from pcmr.data import load_dataset
from pcmr.data.shapes.config import SHAPES_PRESETS, ShapesConfig
from pcmr.metrics.correlation import multiplicity_confounds, spearman

SMALL = dict(num_train=300, num_val=17, num_test=13, num_test_unseen=11, num_binary_selection=7, image_size=32)


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    return load_dataset("shapes", "train", preset="multiplicity_simple", captions_per_image=5, seed=3,
                        cache_dir=str(tmp_path_factory.mktemp("cache")), **SMALL)


def test_preset_settings():
    config = ShapesConfig(preset="multiplicity_simple")
    assert config.objects_range == (1, 2)
    assert (config.descriptions_per_caption, config.caption_style, config.pixel_noise) == (1, "slots", 0.0)
    assert config.min_attributes == 0 and config.count_caption_rate == 0.0
    assert set(SHAPES_PRESETS["multiplicity_simple"]) == set(SHAPES_PRESETS["multiplicity"])


def test_no_length_confound(train):
    assert {len(t.split()) for t in train.caption_texts} == {7}  # one seven-word description
    stats = multiplicity_confounds(train)
    assert np.isnan(stats["rho_length_caption"])  # every caption has the same length
    assert stats["caption_words_min"] == stats["caption_words_max"] == 7


def test_caption_multiplicity_spans_specific_to_generic(train):
    multiplicity = np.array([len(x) for x in train.caption_to_images])
    assert multiplicity.min() == 1  # captions naming every slot fit (about) one image
    assert multiplicity.max() == len(train.image_to_captions)  # "a anysize anycolour shape ..." fits every image
    assert np.percentile(multiplicity, 90) > 20 * np.percentile(multiplicity, 10)
    wildcards = np.array([sum(w.startswith("any") or w == "shape" for w in t.split()) for t in train.caption_texts])
    assert spearman(wildcards, multiplicity) > 0.8  # the wildcards decide multiplicity


def test_images_differ_in_how_many_captions_fit(train):
    objects = np.asarray(train.info["scenes"].num_objects)
    assert set(objects.tolist()) == {1, 2}
    fitting = np.array([len(x) for x in train.image_to_captions])
    assert fitting.max() > 1.25 * fitting.min()  # generic captions fit every image; specific ones do not
    assert fitting[objects == 2].mean() > fitting[objects == 1].mean()  # two objects fit more captions


def test_clean_renders(train, tmp_path):
    """No pixel noise: an image holds a handful of colours (background, objects and their edges), where
    the same scenes with noise hold hundreds."""
    noisy = load_dataset("shapes", "train", preset="multiplicity_simple", captions_per_image=5, seed=3,
                         cache_dir=str(tmp_path), pixel_noise=24.0, **SMALL)
    clean_pixels, noisy_pixels = train.images.pixels[:8], noisy.images.pixels[:8]
    colours = [len(np.unique(image.reshape(-1, 3), axis=0)) for image in clean_pixels]
    noisy_colours = [len(np.unique(image.reshape(-1, 3), axis=0)) for image in noisy_pixels]
    assert max(colours) * 4 < min(noisy_colours)
