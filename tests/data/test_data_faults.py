"""Bad loader input gets one clear error naming the file and field: each case written out by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pcmr.data import DataError, MissingDataError, load_dataset, precomputed
from pcmr.data.coco_labels import coco_labels_from_instances
from pcmr.data.cub import load_cub
from pcmr.data.karpathy import load_karpathy
from pcmr.data.precomputed import load_precomputed


def test_missing_data_error_is_a_file_not_found_error():
    assert issubclass(MissingDataError, FileNotFoundError) and issubclass(MissingDataError, DataError)


@pytest.mark.parametrize("dataset", ["coco", "flickr30k", "karpathy", "precomputed", "cub"])
def test_unknown_setting_lists_the_accepted_ones(tmp_path, dataset):
    with pytest.raises(DataError, match=r"unknown \w+ setting key 'image_sise'( \(did you mean 'image_size'\?\))?; accepted keys: .*on_error"):
        load_dataset(dataset, "train", root=str(tmp_path), image_sise=32)


@pytest.mark.parametrize(("dataset", "setting", "value", "expected"), [
    ("coco", "image_size", "large", "expects an integer"),
    ("cub", "check_images", 1, "expects true or false"),
    ("precomputed", "captions_per_image", 2.5, "expects int or null"),
    ("flickr30k", "instances", 7, "expects str or PathLike"),
    ("flickr30k", "instances", "a.json", None),  # accepted: a path
])
def test_setting_of_the_wrong_type(tmp_path, dataset, setting, value, expected):
    """The loader's signature is the schema of its settings, read by the one configuration engine."""
    if expected is None:  # a well-typed setting passes the check (the loader then looks for the files)
        from pcmr.data.errors import check_settings
        from pcmr.data.karpathy import load_karpathy

        check_settings(load_karpathy, {setting: value, "image_size": 32}, dataset=dataset)
        return
    with pytest.raises(DataError, match=f"{dataset} setting key '{setting}' {expected}"):
        load_dataset(dataset, "train", root=str(tmp_path), **{setting: value})


def karpathy_json(path, records, dataset="coco"):
    path.write_text(json.dumps({"dataset": dataset, "images": records}))
    return path


def record(n, split="test", **extra):
    out = {"filename": f"im{n}.jpg", "imgid": n, "split": split, "sentences": [{"raw": f"a photo number {n}"}]}
    out.update(extra)
    return out


def test_karpathy_missing_image_is_missing_data_error(tmp_path):
    karpathy_json(tmp_path / "dataset_coco.json", [record(0, cocoid=5)])
    (tmp_path / "images").mkdir()
    with pytest.raises(MissingDataError, match=r"im0.jpg, images\[0\]: image file not found"):
        load_karpathy(tmp_path, "test")


def test_karpathy_coco_record_without_cocoid_is_refused(tmp_path):
    path = karpathy_json(tmp_path / "d.json", [record(0, cocoid=5), record(1)])
    with pytest.raises(DataError, match=r"d.json, images\[1\]: missing key 'cocoid'"):
        load_karpathy(json_path=path, split="test", check_images=False)
    path = karpathy_json(tmp_path / "d.json", [record(0), record(1)])  # the JSON says it is COCO
    with pytest.raises(DataError, match=r"images\[0\]: missing key 'cocoid'"):
        load_karpathy(json_path=path, split="test", check_images=False)


def test_karpathy_without_coco_ids_refuses_coco_matching(tmp_path):
    path = karpathy_json(tmp_path / "d.json", [record(0), record(1)], dataset="flickr30k")
    split = load_karpathy(json_path=path, split="test", check_images=False)
    assert split.image_ids == [0, 1] and split.info["image_id_kind"] == "karpathy_imgid"
    instances = tmp_path / "instances.json"
    instances.write_text(json.dumps({"images": [{"id": 0}], "annotations": [], "categories": []}))
    with pytest.raises(DataError, match="match captions and labels by COCO image id.*no record.*'cocoid'"):
        load_karpathy(json_path=path, split="test", check_images=False, instances=instances)


def test_karpathy_repeated_image_id(tmp_path):
    path = karpathy_json(tmp_path / "d.json", [record(0, cocoid=5), record(1, cocoid=5)])
    with pytest.raises(DataError, match=r"images\[1\]: image id 5 repeats images\[0\]"):
        load_karpathy(json_path=path, split="test", check_images=False)


def test_karpathy_repeated_sentid(tmp_path):
    two = [{"raw": "a cat", "sentid": 4}, {"raw": "a dog", "sentid": 4}]
    path = karpathy_json(tmp_path / "d.json", [record(0, cocoid=5, sentences=two)])
    with pytest.raises(DataError, match=r"d.json, images\[\*\].sentences\[\*\].sentid: sentid 4 is used by more"):
        load_karpathy(json_path=path, split="test", check_images=False)


def test_karpathy_empty_split(tmp_path):
    path = karpathy_json(tmp_path / "d.json", [record(0, cocoid=5, sentences=[{"raw": " "}]), record(1, "val",
                                                                                                   cocoid=6)])
    with pytest.raises(DataError, match=r"d.json, split: split 'test' is empty \(0 images, 0 captions; 2 item"), \
            pytest.warns(UserWarning):
        load_karpathy(json_path=path, split="test", check_images=False, on_error="skip")


def write_precomputed(root, features, lines, split="test"):
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / f"{split}_ims.npy", features)
    (root / f"{split}_caps.txt").write_text("".join(f"{line}\n" for line in lines))
    return root


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_precomputed_non_finite_features(tmp_path, monkeypatch, bad):
    features = np.zeros((3, 4), np.float32)
    features[1, 2] = bad
    root = write_precomputed(tmp_path / "p", features, ["a", "b", "c"])
    with pytest.raises(DataError, match=r"test_ims.npy, row 1: image features hold NaN or inf \(rows \[1\]\)"):
        load_precomputed(root, "test")
    lazy = load_precomputed(root, "test", check_finite=False)  # checked row by row when loaded instead
    assert lazy.images.load(0).shape == (4,)
    with pytest.raises(DataError, match="test_ims.npy, row 1: image features hold NaN or inf"):
        lazy.images.load(1)
    monkeypatch.setattr(precomputed, "EAGER_CHECK_BYTES", features.nbytes - 1)  # "large": row by row too
    lazy = load_precomputed(root, "test")
    assert lazy.images.load(0).shape == (4,)
    with pytest.raises(DataError, match="test_ims.npy, row 1: image features hold NaN or inf"):
        lazy.images.load(1)


def test_precomputed_float64_overflowing_float32_is_refused(tmp_path):
    root = write_precomputed(tmp_path / "p", np.full((1, 2), 1e300), ["a"])
    with pytest.raises(DataError, match="NaN or inf"):
        load_precomputed(root, "test")


def test_precomputed_empty_split(tmp_path):
    root = write_precomputed(tmp_path / "p", np.zeros((0, 4), np.float32), [])
    with pytest.raises(DataError, match=r"test_caps.txt, split: split 'test' is empty \(0 images, 0 captions\)"):
        load_precomputed(root, "test")


def test_precomputed_missing_split_file_is_missing_data_error(tmp_path):
    root = write_precomputed(tmp_path / "p", np.zeros((1, 4), np.float32), ["a"])
    with pytest.raises(MissingDataError, match=r"unknown split 'train'; expected one of: test \(the splits present"):
        load_precomputed(root, "train")


def test_precomputed_ids_per_caption_must_agree(tmp_path):
    root = write_precomputed(tmp_path / "p", np.zeros((2, 4), np.float32), list("abcdefghij"))
    (root / "test_ids.txt").write_text("7\n7\n7\n7\n7\n8\n8\n9\n8\n8\n")
    with pytest.raises(DataError, match=r"test_ids.txt, lines 6-10: the 5 caption lines of image row 1"):
        load_precomputed(root, "test")
    (root / "test_ids.txt").write_text("7\n7\n")
    with pytest.raises(DataError, match="image id 7 repeats row 0"):
        load_precomputed(root, "test")
    (root / "test_ids.txt").write_text("7\n--8\n")
    assert load_precomputed(root, "test").image_ids == [7, "--8"]


def write_cub(root, images, labels, classes=("1 001.A", "2 002.B")):
    cub = root / "CUB_200_2011"
    cub.mkdir(parents=True, exist_ok=True)
    (cub / "classes.txt").write_text("\n".join(classes) + "\n")
    (cub / "images.txt").write_text("\n".join(images) + "\n")
    (cub / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (root / "trainvalclasses.txt").write_text("001.A\n002.B\n")
    for line in images:
        relative = line.split()[1]
        text = root / "text_c10" / relative.replace(".jpg", ".txt")
        text.parent.mkdir(parents=True, exist_ok=True)
        text.write_text("a small bird\n")
    return root


@pytest.mark.parametrize(("images", "labels", "classes", "message"), [
    (["1 001.A/x.jpg"], ["1 2"], ("1 001.A", "2 002.B"), r"image id 1 has class 2 but lies in folder '001.A'"),
    (["1 001.A/x.jpg", "1 002.B/y.jpg"], ["1 1"], ("1 001.A", "2 002.B"), r"images.txt, line 2: id 1 repeats line 1"),
    (["x 001.A/x.jpg"], ["1 1"], ("1 001.A", "2 002.B"), r"images.txt, line 1: id 'x' is not a non-negative"),
    (["1 001.A/x.jpg"], ["1 9"], ("1 001.A", "2 002.B"), r"line 1: class id '9' is not in classes.txt"),
    (["1 001.A/x.jpg"], ["1 1"], ("1 001.A", "2 001.A"), r"classes.txt, classes: a class folder is listed under two"),
])
def test_cub_inconsistent_files(tmp_path, images, labels, classes, message):
    root = write_cub(tmp_path / "cub", images, labels, classes)
    with pytest.raises(DataError, match=message):
        load_cub(root, "train", check_images=False)


def test_cub_labels_follow_class_ids_not_line_order(tmp_path):
    root = write_cub(tmp_path / "cub", ["1 001.A/x.jpg", "2 002.B/y.jpg"], ["1 10", "2 3"],
                     classes=("10 001.A", "3 002.B"))
    split = load_cub(root, "train", check_images=False)
    assert split.label_names == ["002.B", "001.A"]  # columns in class-id order: 3, 10
    assert split.image_labels.tolist() == [[False, True], [True, False]]


def test_cub_missing_image_is_missing_data_error(tmp_path):
    root = write_cub(tmp_path / "cub", ["1 001.A/x.jpg"], ["1 1"])
    with pytest.raises(MissingDataError, match=r"x.jpg, images.txt id 1: image file not found"):
        load_cub(root, "train")


def instances_file(path, images, annotations):
    path.write_text(json.dumps({"images": [{"id": i} for i in images],
                                "annotations": [{"image_id": i, "category_id": c} for i, c in annotations],
                                "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]}))
    return path


def test_instances_annotation_of_an_unlisted_image(tmp_path):
    path = instances_file(tmp_path / "instances.json", [1, 2], [(1, 1), (3, 2)])
    with pytest.raises(DataError, match=r"instances.json, annotations\[1\].image_id: image_id 3 is not listed"):
        coco_labels_from_instances(path, [1, 2])
    labels, names, skipped = coco_labels_from_instances(path, [1, 2], on_error="skip")
    assert labels.tolist() == [[True, False], [False, False]] and names == ["cat", "dog"]
    assert len(skipped) == 1 and "annotations[1]" in str(skipped[0]) and "image_id 3" in str(skipped[0])


def test_instances_repeated_split_image_ids(tmp_path):
    path = instances_file(tmp_path / "instances.json", [1, 2], [(1, 1)])
    with pytest.raises(DataError, match="repeated image id"):
        coco_labels_from_instances(path, [1, 1])


@pytest.mark.parametrize(("setting", "value", "expected"), [
    ("unseen_combinations", 5, "a list"), ("unseen_combinations", [3], "a string"), ("cache", "no", "true or false"),
    ("seed", True, "an integer"), ("min_objects", 1.5, "int or null"), ("cache_dir", 3, "str or null"),
    ("pixel_noise", "loud", "float or null"),
])
def test_shapes_setting_of_the_wrong_type(tmp_path, setting, value, expected):
    """The one configuration engine (build_dataclass) checks the types of the shapes settings."""
    with pytest.raises(DataError, match=f"shapes config: shapes config key '{setting}(\\[0\\])?' expects {expected}"):
        load_dataset("shapes", "train", **{"cache_dir": str(tmp_path), setting: value})
