"""One's own images: an image folder with a captions CSV / JSONL (and the imagefolder metadata files), the
seeded split by image, the split column, the ``all`` split, and one clear error per bad input."""

from __future__ import annotations

import csv
import json
import random
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from tests._own_data import make_folder, samples

from pcmr.data import DataError, FileImages, MissingDataError, load_dataset
from pcmr.data.owndata import assign_splits
from pcmr.data.registry import detect_format, gallery_split
from pcmr.encode.inputs import split_image_metadata


def _splits(root, **options):
    return {name: load_dataset(root, name, **options) for name in ("train", "val", "test", "all")}


def test_folder_is_detected_and_split_80_10_10_by_image(tmp_path):
    root = make_folder(tmp_path / "photos", count=20, extra_images=2)
    assert detect_format(root) == "folder" and gallery_split(str(root)) == "all"
    parts = _splits(root, image_size=16)
    held = {name: set(parts[name].image_ids) for name in ("train", "val", "test")}
    assert [len(held[n]) for n in ("train", "val", "test")] == [16, 2, 2]
    assert held["train"].isdisjoint(held["val"]) and held["train"].isdisjoint(held["test"]) \
        and held["val"].isdisjoint(held["test"])
    named = {name for name, _, _ in samples(20)}
    assert held["train"] | held["val"] | held["test"] == named
    # every caption of an image goes with it: two per image, each written for its own image
    written = {name: captions for name, _, captions in samples(20)}
    for name in ("train", "val", "test"):
        split = parts[name]
        assert split.num_captions == 2 * split.num_images
        for c, text in enumerate(split.caption_texts):
            assert text in written[split.image_ids[split.caption_image[c]]]
        assert split.info["splits"] == "seeded" and split.info["split_seed"] == 0
    everything = parts["all"]  # every image of the folder, the uncaptioned ones last
    assert everything.num_images == 22 and everything.num_captions == 40
    assert everything.image_ids[-2:] == ["uncaptioned0.jpg", "uncaptioned1.jpg"]
    assert everything.image_to_captions[-1] == []
    assert parts["train"].is_training and not parts["test"].is_training


def test_split_does_not_depend_on_row_order_and_follows_the_seed(tmp_path):
    root = make_folder(tmp_path / "a", count=30)
    shuffled = tmp_path / "b"
    shutil.copytree(root, shuffled)
    with open(root / "captions.csv", encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    random.Random(4).shuffle(rows)
    with open(shuffled / "captions.csv", "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([header, *rows])
    for name in ("train", "val", "test"):
        assert set(load_dataset(root, name).image_ids) == set(load_dataset(shuffled, name).image_ids)
    assert set(load_dataset(root, "test").image_ids) != set(load_dataset(root, "test", seed=1).image_ids)
    other = load_dataset(root, "val", seed=1, split_fractions=[0.5, 0.25, 0.25])
    assert other.num_images == 8  # round(0.25 * 30)


def test_assign_splits_matches_a_plain_reading_of_its_rule():
    keys = [f"k{i}" for i in range(17)] + ["k3"]  # a repeated key counts once
    got = assign_splits(keys, seed=5, fractions=(0.7, 0.2, 0.1))
    ordered = sorted(set(keys))
    order = np.random.default_rng(5).permutation(len(ordered))
    expected = {}
    for rank, position in enumerate(order):
        expected[ordered[position]] = "val" if rank < 3 else ("test" if rank < 5 else "train")  # round(3.4), round(1.7)
    assert got == expected
    with pytest.raises(DataError, match="cannot be split"):
        assign_splits(["a", "b"], seed=0, fractions=(0.8, 0.1, 0.1))
    with pytest.raises(DataError, match="split_fractions"):
        assign_splits(keys, seed=0, fractions=(0.5, 0.1, 0.1))


def test_split_column_and_jsonl_with_caption_lists(tmp_path):
    root = make_folder(tmp_path / "given", count=10, split_column=True)
    test = load_dataset(root, "test")
    assert sorted(test.image_ids) == ["photo02.png", "photo07.png"] and test.info["splits"] == "given"
    jsonl = tmp_path / "lists"
    jsonl.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(jsonl / "a.png")
    Image.fromarray(np.ones((8, 8, 3), np.uint8)).save(jsonl / "b.png")
    (jsonl / "metadata.jsonl").write_text('{"file_name": "a.png", "text": ["one", "two"], "split": "train"}\n'
                                          '{"file_name": "b.png", "text": "three", "split": "validation"}\n')
    assert detect_format(jsonl) == "folder"
    val = load_dataset(jsonl, "val")
    assert val.image_ids == ["b.png"] and val.caption_texts == ["three"]
    train = load_dataset(jsonl / "metadata.jsonl", "train")  # the captions file itself
    assert train.caption_texts == ["one", "two"] and list(train.caption_image) == [0, 0]


def test_images_are_read_like_any_image_file(tmp_path):
    root = make_folder(tmp_path / "photos", count=10)
    split = load_dataset(root, "all", image_size=12, image_resize="center_crop", resize_size=14)
    reference = FileImages([str(root / i) for i in split.image_ids], 12, image_resize="center_crop", resize_size=14)
    for i in range(split.num_images):
        assert np.array_equal(split.images.load_pixels(i), reference.load_pixels(i))
    metadata = split_image_metadata(split)
    assert metadata[0]["file"] == split.image_ids[0] == "trip/photo00.png"
    assert metadata[0]["captions"] == samples(1)[0][2] and metadata[0]["path"].endswith("photo00.png")


def _write(root, text, name="captions.csv"):
    root.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(root / "a.png")
    (root / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return root


@pytest.mark.parametrize(("text", "name", "error", "message"), [
    ("picture,words\na.png,hi\n", "captions.csv", DataError, r"captions.csv, line 1: no image column .*expected a column named one of \['image', 'file_name'"),
    ("image,words\na.png,hi\n", "captions.csv", DataError, r"line 1: no caption column"),
    ("image,caption\na.png,hi,extra\n", "captions.csv", DataError, r"line 2: 3 fields, the header has 2"),
    ("image,caption\nmissing.png,a cat\n", "captions.csv", MissingDataError, r"missing.png, captions.csv, line 2: image file not found"),
    ("image,caption\na.png,  ...\n", "captions.csv", DataError, r"line 2, caption: empty caption"),
    ("image,caption,split\na.png,a cat,holdout\n", "captions.csv", DataError, r"line 2, split: split 'holdout'; expected train, val"),
    ("image,caption,split\na.png,a cat,train\na.png,a dog,test\n", "captions.csv", DataError, r"line 3: image 'a.png' is in split 'test' here"),
    (b"image,caption\na.png,caf\xe9\n", "captions.csv", DataError, r"line 2: not valid UTF-8"),
    ('{"image": "a.png", "caption": "x"}\n{"image": "a.png"\n', "captions.jsonl", DataError, r"line 2 column \d+: malformed JSON"),
    ('["a.png", "x"]\n', "captions.jsonl", DataError, r"line 1: is a list; expected a JSON object"),
    ('{"image": "a.png", "caption": 3}\n', "captions.jsonl", DataError, r"line 1, caption: caption is a int"),
])
def test_bad_captions_files_raise_one_clear_error(tmp_path, text, name, error, message):
    root = _write(tmp_path / "bad", text, name)
    with pytest.raises(error, match=message):
        load_dataset(root, "all")


def test_unrecognised_folder_lists_what_was_looked_for(tmp_path):
    folder = tmp_path / "myphotos"
    folder.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / "a.png")
    with pytest.raises(DataError) as caught:
        load_dataset(folder, "train")
    for name in ("captions.csv", "captions.jsonl", "metadata.csv", "metadata.jsonl", "*.tar", "dataset_dict.json",
                 "dataset_*.json"):
        assert name in str(caught.value)
    with pytest.raises(MissingDataError, match="no captions file found"):
        load_dataset("folder", "train", root=str(folder))


def test_small_mixed_and_skipped_data(tmp_path):
    root = make_folder(tmp_path / "two", count=2)
    with pytest.raises(DataError, match=r"2 captioned image\(s\) cannot be split .* or a 'split' column"):
        load_dataset(root, "train")
    assert load_dataset(root, "all").num_images == 2  # a gallery needs no split
    given = _write(tmp_path / "given", "image,caption,split\na.png,x,train\na.png,y,train\n")
    with pytest.raises(DataError, match=r"no image is in split 'val'; expected one of the splits present: \['train'\]"):
        load_dataset(given, "val")
    mixed = _write(tmp_path / "mixed", "image,caption,split\na.png,x,train\n")
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(mixed / "b.png")
    (mixed / "captions.csv").write_text("image,caption,split\na.png,x,train\nb.png,y,\n")
    with pytest.raises(DataError, match="line 3: some images name their split and this one does not"):
        load_dataset(mixed, "train")
    skip = _write(tmp_path / "skip", "image,caption\na.png,a cat\ngone.png,a dog\na.png,   \n")
    with pytest.warns(UserWarning, match="skipped 2 item"):
        split = load_dataset(skip, "all", on_error="skip")
    assert split.caption_texts == ["a cat"] and len(split.skipped) == 2
    with pytest.raises(DataError, match="split_seed"):
        load_dataset(skip, "all", split_seed=3)


def test_imagefolder_split_subfolders(tmp_path):
    """The ``imagefolder`` layout with a metadata file in each split folder: ``train/metadata.csv``,
    ``validation/metadata.jsonl``; names are relative to each file, ids to the top folder."""
    root = tmp_path / "hf_imagefolder"
    for sub, count in (("train", 4), ("validation", 2)):
        (root / sub).mkdir(parents=True)
        for n in range(count):
            Image.fromarray(np.full((8, 8, 3), 10 * n, np.uint8)).save(root / sub / f"{n}.png")
    (root / "train" / "metadata.csv").write_text("file_name,text\n0.png,a\n1.png,b\n2.png,c\n3.png,d\n3.png,e\n")
    (root / "validation" / "metadata.jsonl").write_text('{"file_name": "0.png", "text": "f"}\n'
                                                        '{"file_name": "1.png", "text": "g", "split": "test"}\n')
    assert detect_format(root) == "folder"
    with pytest.raises(DataError, match=r"metadata.jsonl, line 2, split: split 'test' in the 'val' folder"):
        load_dataset(root, "train")
    (root / "validation" / "metadata.jsonl").write_text('{"file_name": "0.png", "text": "f"}\n'
                                                        '{"file_name": "1.png", "text": "g"}\n')
    train, val = load_dataset(root, "train"), load_dataset(root, "val")
    assert train.image_ids == ["train/0.png", "train/1.png", "train/2.png", "train/3.png"]
    assert train.caption_texts == ["a", "b", "c", "d", "e"] and val.image_ids == ["validation/0.png", "validation/1.png"]
    assert val.info["splits"] == "given"
    assert np.array_equal(val.images.load_pixels(1), FileImages([str(root / "validation" / "1.png")]).load_pixels(0))
    with pytest.raises(DataError, match="no image is in split 'test'"):
        load_dataset(root, "test")


_FILES = ["a.png", "b.png", "sub/c.png"]


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.sampled_from(_FILES + ["gone.png"]),
                               st.text(alphabet=st.sampled_from(list("ab ,\"'\n\t.é")), max_size=8)),
                     min_size=1, max_size=8),
       jsonl=st.booleans())
def test_generated_captions_files_load_exactly_or_raise_one_error(tmp_path_factory, rows, jsonl):
    """A captions file of generated rows (commas, quotes, newlines, blank captions, a missing image): the
    loader either raises one DataError or returns exactly the rows, grouped by image in order of first
    appearance, each caption stripped."""
    root = tmp_path_factory.mktemp("generated")
    for name in _FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(root / name)
    if jsonl:
        (root / "captions.jsonl").write_text("".join(json.dumps({"image": i, "caption": c}) + "\n" for i, c in rows))
    else:
        with open(root / "captions.csv", "w", encoding="utf-8", newline="") as handle:
            csv.writer(handle).writerows([("image", "caption"), *rows])
    try:
        split = load_dataset(root, "all")
    except DataError as err:
        bad = [(i, c) for i, c in rows if i == "gone.png" or not any(ch.isalpha() for ch in c)]
        assert bad, str(err)
        assert isinstance(err, MissingDataError) == ("image file not found" in str(err))
        return
    expected: dict[str, list[str]] = {}
    for image, caption in rows:
        expected.setdefault(image, []).append(caption.strip())
    named = list(expected)
    assert split.image_ids[:len(named)] == named
    assert sorted(split.image_ids[len(named):]) == sorted(set(_FILES) - set(named))  # the uncaptioned, last
    assert [[split.caption_texts[c] for c in caps] for caps in split.source_captions[:len(named)]] == \
        [expected[name] for name in named]
    assert split.caption_ids == list(range(len(rows)))


@pytest.mark.parametrize("name", ["../outside.png", "/ABS/outside.png", "inner/../../outside.png", "link.png"])
def test_an_image_outside_the_folder_is_never_read(tmp_path, name):
    """A captions row naming a file outside the data folder (absolute, through '..', or a link leading out)
    is refused naming the row, though the file exists; with on_error="skip" it is skipped, not read."""
    root = make_folder(tmp_path / "photos", 20)
    outside = tmp_path / "outside.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(outside)
    (root / "link.png").symlink_to(outside)
    name = name.replace("/ABS", str(tmp_path))
    with (root / "captions.csv").open("a", encoding="utf-8") as handle:
        handle.write(f"{name},a picture from elsewhere\n")
    with pytest.raises(DataError, match="lies outside the data folder") as caught:
        load_dataset(root, "all")
    assert "captions.csv" in str(caught.value)
    kept = load_dataset(root, "all", on_error="skip")
    assert all(outside.name not in path and "link" not in path for path in kept.images.paths)
