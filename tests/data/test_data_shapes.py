"""The built-in shapes benchmark: exact relevance vs a brute-force reading of the caption text."""

from __future__ import annotations

import itertools
import json
import warnings

import numpy as np
import pytest
import torch

from pcmr.data import DataError, load_dataset
from pcmr.data.shapes import ShapesConfig, generate_shapes_split

SHAPE_WORDS = {"circle": "circle", "square": "square", "triangle": "triangle", "diamond": "diamond",
               "cross": "cross", "circles": "circle", "squares": "square", "triangles": "triangle",
               "diamonds": "diamond", "crosses": "cross"}
COLOUR_WORDS = {"red", "green", "blue", "yellow", "purple", "cyan"}
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4}
SMALL = dict(num_train=40, num_val=17, num_test=13, num_test_unseen=11, num_binary_selection=7, image_size=30)


def small(tmp_path, **extra):
    return dict(SMALL, cache_dir=str(tmp_path / "cache"), **extra)


# --- an independent reading of the caption text -------------------------------------------------
def parse_position(words):
    """Split trailing position words off a phrase -> (rest, {"column": c, "row": r})."""
    text = " ".join(words)
    table = {"on the left": {"column": 0}, "on the right": {"column": 2}, "at the top": {"row": 0},
             "at the bottom": {"row": 2}, "in the centre": {"column": 1, "row": 1}}
    for vertical, row in (("top", 0), ("bottom", 2)):
        for horizontal, column in (("left", 0), ("right", 2)):
            table[f"in the {vertical} {horizontal} corner"] = {"column": column, "row": row}
    for suffix, constraint in table.items():
        if text.endswith(" " + suffix):
            return text[: -len(suffix) - 1].split(), constraint
    return words, {}


def parse_phrase(words):
    words, constraint = parse_position(words)
    assert words[0] in ("a", "something"), words
    for word in words[1:]:
        if word in ("small", "large"):
            constraint["size"] = word
        elif word in COLOUR_WORDS:
            constraint["colour"] = word
        elif word in SHAPE_WORDS:
            constraint["shape"] = SHAPE_WORDS[word]
        else:
            assert word in ("shape", "shapes"), word
    return constraint


def satisfies(obj, constraint):
    return all(obj[key] == value for key, value in constraint.items())


def brute_force_relevant(text, scene):
    words = text.split()
    if words[0] in NUMBERS:
        constraint = parse_phrase(["a", *words[1:]])
        return sum(satisfies(o, constraint) for o in scene) == NUMBERS[words[0]]
    phrases = [parse_phrase(p.split()) for p in text.replace(" and ", ", ").split(", ")]
    return any(all(satisfies(o, c) for o, c in zip(chosen, phrases))
               for chosen in itertools.permutations(scene, len(phrases)))


@pytest.mark.parametrize("preset", ["standard", "hard"])
@pytest.mark.parametrize("split", ["train", "test_unseen", "binary_selection"])
def test_relevance_equals_brute_force_reading_of_captions(tmp_path, split, preset):
    data = load_dataset("shapes", split, **small(tmp_path, captions_per_image=3, seed=5, preset=preset))
    scenes = data.info["scenes"].to_json()
    if split == "binary_selection":  # crops and unions keep only shape/colour meaning
        scenes = [[{**o, "column": -9, "row": -9, "size": "n/a"} for o in s] for s in scenes]
    expected = torch.tensor([[brute_force_relevant(t, s) for t in data.caption_texts] for s in scenes])
    assert torch.equal(data.relevance_matrix(), expected)
    assert data.relevance_matrix()[torch.from_numpy(data.caption_image), torch.arange(data.num_captions)].all()
    # many-to-many: some captions fit several images, and the sparse lists agree with the matrix
    assert max(len(x) for x in data.caption_to_images) > 1
    dense = data.relevance_matrix()
    assert [torch.nonzero(row).flatten().tolist() for row in dense] == data.image_to_captions
    assert [torch.nonzero(col).flatten().tolist() for col in dense.T] == data.caption_to_images


def test_generic_captions_match_more_images_than_conjoined_ones(tmp_path):
    data = load_dataset("shapes", "train", **small(tmp_path, num_train=200))
    sizes = np.array([len(x) for x in data.caption_to_images])
    conjoined = np.array([" and " in t for t in data.caption_texts])
    assert sizes[conjoined].mean() < sizes[~conjoined].mean()
    counts = {len(s) for s in data.info["scenes"].to_json()}
    assert counts <= {1, 2, 3, 4} and len(counts) == 4


def test_deterministic_from_seed_and_splits_independent(tmp_path):
    config = ShapesConfig(**SMALL, seed=3, cache=False)
    first, second = generate_shapes_split(config, "val"), generate_shapes_split(config, "val")
    for key in ("pixels", "objects", "caption_preds", "relevance_bits"):
        np.testing.assert_array_equal(first[key], second[key])
    assert first["caption_texts"] == second["caption_texts"]
    other_seed = generate_shapes_split(ShapesConfig(**SMALL, seed=4, cache=False), "val")
    assert not np.array_equal(first["pixels"], other_seed["pixels"])
    test = generate_shapes_split(config, "test")
    assert not np.array_equal(first["objects"][:13], test["objects"])


def test_cache_round_trip_and_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PCMR_CACHE", str(tmp_path / "env_cache"))
    fresh = load_dataset("shapes", "test", **SMALL)
    files = sorted(p.name for p in (tmp_path / "env_cache" / "shapes").rglob("*") if p.is_file())
    assert files == ["test.json", "test.npz"]
    cached = load_dataset("shapes", "test", **SMALL)
    np.testing.assert_array_equal(fresh.images.pixels, cached.images.pixels)
    assert fresh.caption_texts == cached.caption_texts
    assert torch.equal(fresh.relevance_matrix(), cached.relevance_matrix())
    monkeypatch.delenv("PCMR_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    load_dataset("shapes", "val", **SMALL)
    assert (tmp_path / "xdg" / "pcmr" / "shapes").is_dir()
    no_cache = load_dataset("shapes", "val", **dict(SMALL, cache=False, seed=9))
    assert no_cache.num_images == 17


def test_held_out_combinations_only_in_test_unseen(tmp_path):
    held_out = {"yellow circle", "purple square", "cyan triangle", "red diamond", "green cross"}
    for split in ("train", "val", "test"):
        data = load_dataset("shapes", split, **small(tmp_path))
        names = {f"{o['colour']} {o['shape']}" for s in data.info["scenes"].to_json() for o in s}
        assert not names & held_out
    unseen = load_dataset("shapes", "test_unseen", **small(tmp_path))
    assert all({f"{o['colour']} {o['shape']}" for o in s} & held_out for s in unseen.info["scenes"].to_json())


def test_labels_are_shape_colour_multi_hot_and_captions_inherit(tmp_path):
    data = load_dataset("shapes", "val", **small(tmp_path))
    assert data.image_labels.dtype == torch.bool and data.image_labels.shape == (17, 30)
    for i, scene in enumerate(data.info["scenes"].to_json()):
        expected = {f"{o['colour']} {o['shape']}" for o in scene}
        assert {data.label_names[j] for j in torch.nonzero(data.image_labels[i]).flatten()} == expected
    assert torch.equal(data.caption_labels, data.image_labels[torch.from_numpy(data.caption_image)])


def test_binary_selection_roles_and_answers(tmp_path):
    data = load_dataset("shapes", "binary_selection", **small(tmp_path))
    roles = data.info["roles"]
    rel = data.relevance_matrix()
    a, b, c = roles["crop_a"], roles["crop_b"], roles["union"]
    cap_a, cap_ab = roles["caption_a"], roles["caption_ab"]
    assert rel[a, cap_a].all() and rel[c, cap_a].all() and rel[c, cap_ab].all()
    assert not rel[a, cap_ab].any() and not rel[b, cap_ab].any()
    assert all(" and " in data.caption_texts[i] for i in cap_ab)
    assert data.images.pixels.shape == (21, 30, 30, 3)


def test_bad_config_and_split(tmp_path):
    with pytest.raises(DataError, match="unknown split 'dev'.*test_unseen"):
        load_dataset("shapes", "dev", **small(tmp_path))
    with pytest.raises(DataError, match="unknown shapes config key.*num_imgs"):
        load_dataset("shapes", "train", num_imgs=3)
    with pytest.raises(DataError, match="unseen combination 'pink circle'"):
        load_dataset("shapes", "train", unseen_combinations=["pink circle"], cache=False)
    with pytest.raises(DataError, match="image_size"):
        load_dataset("shapes", "train", image_size=0, cache=False)


# --- cache format versioning ------------------------------------------------------------------------
def _entry_paths(tmp_path, split):
    from pcmr.data.shapes.dataset import _cache_paths

    return _cache_paths(ShapesConfig(**small(tmp_path)), split)


def test_cache_key_carries_the_format_version(tmp_path):
    from pcmr.data.cache import CACHE_FORMAT_VERSION, config_key

    config = ShapesConfig(**small(tmp_path)).generation_dict()
    assert config_key(config) == config_key(config, CACHE_FORMAT_VERSION)
    assert config_key(config, CACHE_FORMAT_VERSION + 1) != config_key(config)
    load_dataset("shapes", "val", **small(tmp_path))
    npz_path, json_path = _entry_paths(tmp_path, "val")
    assert npz_path.parent.name == config_key(config) and npz_path.is_file()
    assert json.loads(json_path.read_text())["cache_format"] == CACHE_FORMAT_VERSION


def _write_stale_entry(npz_path, json_path, fresh_split, meta_extra):
    """An entry in the layout of older code: relevance bits packed along the other axis, no format."""
    from pcmr.atomic import atomic_write_json, atomic_write_npz

    arrays = dict(fresh_split)
    texts = arrays.pop("caption_texts")
    arrays["relevance_bits"] = np.zeros((arrays["pixels"].shape[0], (len(texts) + 7) // 8), dtype=np.uint8)
    atomic_write_npz(npz_path, **arrays)
    atomic_write_json(json_path, {"split": "test", "caption_texts": texts, **meta_extra})


@pytest.mark.parametrize("meta_extra", [{}, {"cache_format": 1}, {"cache_format": "current"}])
def test_stale_cache_entry_is_regenerated(tmp_path, meta_extra):
    from pcmr.data.cache import CACHE_FORMAT_VERSION

    if meta_extra.get("cache_format") == "current":  # right version, wrong layout: caught by the check
        meta_extra = {"cache_format": CACHE_FORMAT_VERSION}
    expected = load_dataset("shapes", "test", **dict(SMALL, cache=False))
    npz_path, json_path = _entry_paths(tmp_path, "test")
    _write_stale_entry(npz_path, json_path, generate_shapes_split(ShapesConfig(**SMALL, cache=False), "test"),
                       meta_extra)
    with pytest.warns(UserWarning, match="regenerating it"):
        first = load_dataset("shapes", "test", **small(tmp_path))
    assert torch.equal(first.relevance_matrix(), expected.relevance_matrix())
    np.testing.assert_array_equal(first.images.pixels, expected.images.pixels)
    assert json.loads(json_path.read_text())["cache_format"] == CACHE_FORMAT_VERSION
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewritten entry is read back without a warning
        second = load_dataset("shapes", "test", **small(tmp_path))
    assert torch.equal(second.relevance_matrix(), expected.relevance_matrix())


def test_binary_selection_cache_entry_round_trip(tmp_path):
    fresh = load_dataset("shapes", "binary_selection", **small(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cached = load_dataset("shapes", "binary_selection", **small(tmp_path))
    np.testing.assert_array_equal(fresh.images.pixels, cached.images.pixels)
    assert cached.info["roles"].keys() == fresh.info["roles"].keys()


# --- the "hard" preset ------------------------------------------------------------------------------
def test_hard_preset_makes_captions_specific_scenes_busy_and_images_noisy(tmp_path):
    standard = load_dataset("shapes", "train", **small(tmp_path, num_train=150))
    hard = load_dataset("shapes", "train", **small(tmp_path, num_train=150, preset="hard"))
    assert {len(s) for s in hard.info["scenes"].to_json()} == {3, 4}
    assert not any(t.split()[0] in NUMBERS for t in hard.caption_texts)  # no counting captions
    for text in hard.caption_texts:  # every description names >= 3 of shape, colour, size, position
        for phrase in text.replace(" and ", ", ").split(", "):
            constraint = parse_phrase(phrase.split())
            groups = len({"shape", "colour", "size"} & set(constraint)) + bool({"column", "row"} & set(constraint))
            assert groups >= 3, phrase
    fits = np.array([len(x) for x in hard.caption_to_images]).mean()
    assert fits < np.array([len(x) for x in standard.caption_to_images]).mean() / 2
    # noise: the same scenes rendered without noise differ from the noisy pixels, by about the std
    quiet = generate_shapes_split(ShapesConfig(**{**SMALL, "num_train": 150}, preset="hard", pixel_noise=0,
                                               cache=False), "train")
    noisy = hard.images.pixels
    assert np.array_equal(quiet["objects"], hard.info["scenes"].objects)
    difference = noisy.astype(np.float64) - quiet["pixels"].astype(np.float64)
    assert 15 < difference.std() < 30


def test_preset_settings_are_defaults_an_explicit_value_wins(tmp_path):
    config = ShapesConfig(preset="hard", min_objects=2, cache=False)
    assert (config.min_objects, config.max_objects, config.min_attributes) == (2, 4, 3)
    assert (config.count_caption_rate, config.pixel_noise) == (0.0, 24.0)
    assert ShapesConfig(cache=False).generation_dict()["preset"] == "standard"
    assert config.generation_dict() != ShapesConfig(preset="hard", cache=False).generation_dict()  # cache key


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("preset", "easy", "one of"), ("min_attributes", 5, "an integer in 1..4"), ("min_attributes", True, "int or null"),
    ("count_caption_rate", 1.5, r"\[0, 1\]"), ("pixel_noise", -1, r"\[0, 255\]"), ("pixel_noise", "x", "float or null"),
])
def test_bad_preset_settings_name_the_field(key, value, expected):
    with pytest.raises(DataError, match=f"{key}.*{expected}"):
        load_dataset("shapes", "train", cache=False, **{key: value})
