"""The "multiplicity" shapes preset: multiplicity varies at fixed caption length and object count."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from pcmr.data import DataError, load_dataset
from pcmr.metrics.correlation import multiplicity_confounds, spearman

SMALL = dict(num_train=120, num_val=17, num_test=13, num_test_unseen=11, num_binary_selection=7, image_size=30)
SLOT_VALUES = {
    1: {"small": "small", "large": "large", "anysize": None},
    2: {c: c for c in ("red", "green", "blue", "yellow", "purple", "cyan")} | {"anycolour": None},
    3: {s: s for s in ("circle", "square", "triangle", "diamond", "cross")} | {"shape": None},
    5: {"left": 0, "centre": 1, "right": 2, "anycolumn": None},
    6: {"top": 0, "middle": 1, "bottom": 2, "anyrow": None},
}
SLOT_KEYS = {1: "size", 2: "colour", 3: "shape", 5: "column", 6: "row"}


def read_slots(phrase: str) -> dict:
    """Constraint of one slots description, read word by word: 'a large anycolour circle at left anyrow'."""
    words = phrase.split()
    assert len(words) == 7 and words[0] == "a" and words[4] == "at", phrase
    constraint = {}
    for position, key in SLOT_KEYS.items():
        value = SLOT_VALUES[position][words[position]]
        if value is not None:
            constraint[key] = value
    return constraint


def brute_force(text: str, scene: list[dict]) -> bool:
    phrases = [read_slots(p) for p in text.split(" and ")]
    return any(all(all(o[k] == v for k, v in c.items()) for o, c in zip(chosen, phrases))
               for chosen in itertools.permutations(scene, len(phrases)))


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    return load_dataset("shapes", "train", preset="multiplicity", captions_per_image=3, seed=4,
                        cache_dir=str(tmp_path_factory.mktemp("cache")), **SMALL)


def test_relevance_equals_brute_force_reading_of_slot_captions(train):
    scenes = train.info["scenes"].to_json()
    expected = torch.tensor([[brute_force(t, s) for t in train.caption_texts] for s in scenes])
    assert torch.equal(train.relevance_matrix(), expected)


def test_every_caption_has_fifteen_words_and_every_scene_three_objects(train):
    assert {len(t.split()) for t in train.caption_texts} == {15}
    assert set(train.info["scenes"].num_objects.tolist()) == {3}


def test_multiplicity_varies_widely_at_fixed_length(train):
    multiplicity = np.array([len(x) for x in train.caption_to_images])
    assert multiplicity.min() == 1 and multiplicity.max() > 30  # specific and generic captions
    wildcards = np.array([sum(w.startswith("any") or w == "shape" for w in t.split()) for t in train.caption_texts])
    assert spearman(wildcards, multiplicity) > 0.5  # the wildcards, not the length, decide multiplicity
    stats = multiplicity_confounds(train)
    assert np.isnan(stats["rho_length_caption"]) and np.isnan(stats["rho_objects_image"])
    assert stats["caption_words_min"] == stats["caption_words_max"] == 15


def test_hard_preset_confound_is_reported(tmp_path):
    hard = load_dataset("shapes", "train", preset="hard", cache_dir=str(tmp_path), **SMALL)
    stats = multiplicity_confounds(hard)
    assert stats["rho_length_caption"] < -0.5  # longer captions fit fewer images
    assert stats["rho_objects_image"] > 0.2  # busier scenes fit more captions


@pytest.mark.parametrize("n", [2, 7, 31])
def test_spearman_matches_scipy_with_ties(n):
    rng = np.random.default_rng(n)
    x, y = rng.integers(0, 4, n), rng.normal(size=n) + rng.integers(0, 3, n)
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("caption_style", "prose", "natural or slots"), ("descriptions_per_caption", 0, "1..3"),
    ("min_attributes", 6, "0..5"), ("min_objects", 1, "at least descriptions_per_caption"),
    ("count_caption_rate", 0.2, "0 with slots"),
])
def test_bad_multiplicity_settings_name_the_field(key, value, expected):
    with pytest.raises(DataError, match=f"{key}.*{expected}"):
        load_dataset("shapes", "train", cache=False, preset="multiplicity", **{key: value})


@pytest.mark.parametrize(("preset", "digest"), [("standard", "06aa5a608786ef2a"), ("hard", "ea983858f4db5f01")])
def test_natural_presets_keep_their_captions(preset, digest):
    """The new settings leave the existing presets' captions exactly as the generator wrote them before."""
    data = load_dataset("shapes", "train", cache=False, seed=0, preset=preset, **SMALL)
    assert hashlib.sha256("\n".join(data.caption_texts).encode()).hexdigest()[:16] == digest


def _confounds_tool():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "shapes_confounds.py"
    spec = importlib.util.spec_from_file_location("shapes_confounds", path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_pmrp_of_reference_rankings_on_shapes(train):
    """The docs' "PMRP on shapes" table: the true-relevance oracle scores far below the label oracle's
    100 (labels do not follow what a slot caption fits), yet above a random ranking."""
    from pcmr.metrics.pmrp import pmrp

    tool = _confounds_tool()
    values = tool.reference_pmrp(train, torch.Generator().manual_seed(0))
    oracle, random = values["true-relevance oracle"], values["random"]
    for direction in ("i2t", "t2i"):
        assert random[direction]["pmrp"] < oracle[direction]["pmrp"] < 60.0
    image_labels, caption_labels = train.image_labels.float(), train.caption_labels.float()
    hamming = image_labels.sum(1)[:, None] + caption_labels.sum(1)[None] - 2 * image_labels @ caption_labels.T
    by_labels = pmrp(-hamming, train.image_labels, train.caption_labels, zetas=(0,))
    assert by_labels["i2t"]["pmrp"] == 100.0 and by_labels["t2i"]["pmrp"] == 100.0


def test_query_blind_r_precision_on_the_multiplicity_preset(train):
    """The docs' query-blind table: one caption list for every image, generic captions first, reaches a
    high image->text R-Precision on this preset; text->image has nothing to go on (three objects per
    image), so it stays near random. Checked against a per-query loop."""
    values = _confounds_tool().query_blind_r_precision(train, torch.Generator().manual_seed(0))
    blind, random = values["query-blind (by multiplicity)"], values["random"]
    relevant = train.relevance_matrix().bool()
    counts = relevant.sum(0)  # relevant images per caption
    precisions = []
    for row in relevant:  # every image query: the R captions with the largest counts (ties: any order)
        r = int(row.sum())
        threshold = counts.sort(descending=True).values[r - 1]
        above, tied = row[counts > threshold], row[counts == threshold]
        ties_taken = r - int((counts > threshold).sum())
        precisions.append((float(above.sum()) + ties_taken * float(tied.float().mean())) / r)
    expected = 100.0 * sum(precisions) / len(precisions)  # the tie-broken value, in expectation
    assert abs(blind["i2t"] - expected) < 2.0
    assert blind["i2t"] > 3 * random["i2t"] and abs(blind["t2i"] - random["t2i"]) < 5.0
