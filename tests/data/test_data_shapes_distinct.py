"""The "multiplicity_distinct" preset: evaluation splits hold each caption text once, no caption fits every
image, and the training split keeps every written copy (the source pairs)."""

from __future__ import annotations

import numpy as np
import pytest

from pcmr.data import load_dataset
from pcmr.data.shapes.config import ShapesConfig
from pcmr.data.shapes.dataset import distinct_caption_rows
from pcmr.data.shapes.grammar import SLOT_WILDCARDS

SMALL = dict(num_train=60, num_val=40, num_test=80, num_test_unseen=0, num_binary_selection=0, image_size=32)


def _split(tmp_path, split: str, preset: str = "multiplicity_distinct"):
    return load_dataset("shapes", split, preset=preset, seed=5, cache_dir=str(tmp_path), **SMALL)


def test_test_split_is_deduplicated_and_keeps_the_exact_relation(tmp_path):
    full = _split(tmp_path, "test", "multiplicity_simple")
    test = _split(tmp_path, "test")
    assert len(set(test.caption_texts)) == test.num_captions < 5 * test.num_images
    relevance = test.relevance_matrix()
    assert not bool(relevance.all(dim=0).any())  # no caption relevant to every image
    assert not bool(relevance.all(dim=1).any())  # no image relevant to every caption
    for words in (t.split() for t in test.caption_texts):  # at least one named slot
        assert sum(w in SLOT_WILDCARDS for w in words) <= 4
    # every kept caption is the first written copy, and its relevance row is that of the undeduplicated split
    assert full.num_captions == 5 * full.num_images
    assert len(set(full.caption_texts)) < full.num_captions  # the plain preset repeats texts


def test_specific_preset_names_every_slot_and_keeps_one_copy_of_each_text(tmp_path):
    """The papers study's preset: one full five-slot description per caption, no wildcard, each test text once."""
    config = ShapesConfig(preset="specific")
    assert (config.min_attributes, config.descriptions_per_caption, config.objects_range) == (5, 1, (1, 2))
    test = _split(tmp_path, "test", "specific")
    assert len(set(test.caption_texts)) == test.num_captions
    for words in (t.split() for t in test.caption_texts):
        assert len(words) == 7 and not any(w in SLOT_WILDCARDS for w in words)
    relevance = test.relevance_matrix()  # [N_img, N_cap]
    assert bool(relevance.any(dim=0).all()) and not bool(relevance.all(dim=0).any())
    train = _split(tmp_path, "train", "specific")
    assert train.num_captions == 5 * train.num_images


def test_training_split_keeps_every_written_copy(tmp_path):
    train = _split(tmp_path, "train")
    assert train.num_captions == 5 * train.num_images
    np.testing.assert_array_equal(train.caption_image, np.repeat(np.arange(train.num_images), 5))


def test_distinct_rows_keep_first_copies_and_drop_captions_fitting_every_image():
    rel = np.array([[1, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1]], dtype=bool)  # [N_img=3, N_cap=4]
    bits = np.packbits(rel.T, axis=1)
    texts = ["a", "b", "a", "c"]  # caption 2 repeats caption 0; captions 0 and 3 fit every image
    np.testing.assert_array_equal(distinct_caption_rows(texts, bits, 3), [1])
    np.testing.assert_array_equal(distinct_caption_rows(["a", "b", "b", "d"], bits, 3), [1])
    np.testing.assert_array_equal(distinct_caption_rows(["x", "b", "y", "z"], bits[[1, 1, 2, 0]], 3), [0, 1, 2])


def test_option_is_recorded_only_when_set():
    assert "distinct_captions" not in ShapesConfig(preset="multiplicity_simple").generation_dict()
    config = ShapesConfig(preset="multiplicity_distinct")
    assert config.generation_dict()["distinct_captions"] is True and config.min_attributes == 1
    assert ShapesConfig(preset="multiplicity_simple", distinct_captions=True).distinct_captions


@pytest.mark.parametrize("split", ["val", "test"])
def test_cached_split_reads_back_the_same(tmp_path, split):
    first, again = _split(tmp_path, split), _split(tmp_path, split)
    assert first.caption_texts == again.caption_texts
    np.testing.assert_array_equal(first.caption_image, again.caption_image)


def test_committed_split_stats_are_what_the_data_give(capsys):
    """docs/dataset_stats/test_splits.md (quoted by docs/datasets.md) is `tools/split_stats.py`'s output."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("split_stats", root / "tools" / "split_stats.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, capsys.readouterr().err
    text = (root / "docs" / "dataset_stats" / "test_splits.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| uncertainty |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == cells[4] and cells[5] == cells[6] == "0"  # distinct texts only, nothing fits everything
