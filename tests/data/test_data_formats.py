"""Real-format loaders on fixture files written here, including malformed ones and every error path."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from pcmr.data import (
    DataError,
    MissingDataError,
    Vocabulary,
    image_loader,
    list_datasets,
    load_dataset,
    train_loader,
)
from pcmr.data.coco_labels import coco_labels_from_instances


def write_image(path, value=100):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((12, 10, 3), value, dtype=np.uint8)).save(path)


def karpathy_record(imgid, split, sentences, filepath="val2014"):
    return {"filepath": filepath, "filename": f"COCO_{imgid}.jpg", "imgid": imgid, "split": split,
            "cocoid": 1000 + imgid,
            "sentences": [{"raw": raw, "tokens": raw.lower().split(), "imgid": imgid, "sentid": 10 * imgid + j}
                          for j, raw in enumerate(sentences)]}


@pytest.fixture
def coco_root(tmp_path):
    records = [karpathy_record(0, "train", ["A dog runs.", "A brown dog"], "train2014"),
               karpathy_record(1, "restval", ["Two cats sleep"]),
               karpathy_record(2, "test", ["A zebra grazes", "Zebra on grass"]),
               karpathy_record(3, "test", ["A red bus"]),
               karpathy_record(4, "val", ["A kite"])]
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"images": records, "dataset": "coco"}))
    for record in records:
        write_image(tmp_path / "images" / record["filepath"] / record["filename"], 10 * record["imgid"])
    return tmp_path


def test_karpathy_splits_ids_and_images(coco_root):
    train = load_dataset("coco", "train", root=str(coco_root), image_size=16)
    assert train.split == "train+restval" and train.is_training
    assert train.caption_texts == ["A dog runs.", "A brown dog", "Two cats sleep"]
    assert train.image_ids == [1000, 1001] and train.caption_ids == [0, 1, 10]
    assert train.caption_image.tolist() == [0, 0, 1]
    assert train.image_to_captions == [[0, 1], [2]]
    batch = next(iter(image_loader(train, batch_size=4)))
    assert batch["images"].shape == (2, 3, 16, 16)
    test = load_dataset(coco_root, "test")  # detected from the folder
    assert test.name == "coco" and test.num_images == 2 and test.num_captions == 3
    vocab = Vocabulary.from_split(train)
    assert "dog" in vocab and "zebra" not in vocab and "kite" not in vocab  # val/test words excluded
    only_train = load_dataset("coco", "train", root=str(coco_root), include_restval=False)
    assert only_train.num_images == 1



def test_coco_splits_say_which_protocols_apply(coco_root):
    """The evaluator reads these properties, never the dataset's name: CxC / ECCV Caption exist for
    COCO, and the 5000 COCO test images are also evaluated in 1K folds."""
    from pcmr.data.karpathy import COCO_5K_TEST_IMAGES, coco_protocol_info

    test = load_dataset("coco", "test", root=str(coco_root))
    assert test.info["extra_positive_sets"] == ["cxc", "eccv"] and test.info["coco_5k_test"] is False
    assert coco_protocol_info("coco", COCO_5K_TEST_IMAGES)["coco_5k_test"] is True
    assert coco_protocol_info("flickr30k", COCO_5K_TEST_IMAGES) == {"extra_positive_sets": [], "coco_5k_test": False}


def test_karpathy_maps_coco_caption_annotation_ids_and_labels(coco_root, tmp_path):
    captions = {"annotations": [{"id": 555, "image_id": 1002, "caption": "a zebra grazes "},
                                {"id": 556, "image_id": 1002, "caption": "Zebra on grass."},
                                {"id": 777, "image_id": 1003, "caption": "A red bus"}]}
    (tmp_path / "captions_val2014.json").write_text(json.dumps(captions))
    instances = {"images": [{"id": 1002}, {"id": 1003}],
                 "annotations": [{"image_id": 1002, "category_id": 24}, {"image_id": 1002, "category_id": 1}],
                 "categories": [{"id": 1, "name": "person"}, {"id": 24, "name": "zebra"}, {"id": 6, "name": "bus"}]}
    (tmp_path / "instances_val2014.json").write_text(json.dumps(instances))
    test = load_dataset("coco", "test", root=str(coco_root), coco_captions=str(tmp_path / "captions_val2014.json"),
                        instances=str(tmp_path / "instances_val2014.json"))
    assert test.caption_ids == [555, 556, 777] and test.info["caption_id_kind"] == "coco_annotation"
    assert test.label_names == ["person", "bus", "zebra"]
    assert test.image_labels.tolist() == [[True, False, True], [False, False, False]]  # 1003: no labels
    assert torch.equal(test.caption_labels, test.image_labels[torch.tensor([0, 0, 1])])


def test_coco_labels_errors(tmp_path):
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({"images": [{"id": 1}], "annotations": [{"image_id": 1}], "categories": []}))
    with pytest.raises(DataError, match=r"instances.json, annotations\[0\]: missing key 'category_id'"):
        coco_labels_from_instances(path, [1])
    path.write_text(json.dumps({"images": [{"id": 1}], "annotations": [], "categories": []}))
    with pytest.raises(DataError, match="image id 2 is in none of the instances files"):
        coco_labels_from_instances(path, [1, 2])
    labels, names, skipped = coco_labels_from_instances(path, [1, 2], on_error="skip")
    assert labels.shape == (2, 0) and names == [] and "image id 2" in str(skipped[0])
    path.write_text(json.dumps({"images": []}))
    with pytest.raises(DataError, match="top level: missing key 'annotations'"):
        coco_labels_from_instances(path, [])


def test_karpathy_error_paths(coco_root):
    json_path = coco_root / "dataset_coco.json"
    data = json.loads(json_path.read_text())
    with pytest.raises(DataError, match="unknown split 'dev'.*expected one of: train, restval, val, test"):
        load_dataset("coco", "dev", root=str(coco_root))
    with pytest.raises(MissingDataError, match="dataset_flickr30k.json"):
        load_dataset("flickr30k", "test", root=str(coco_root))
    json_path.write_text(json.dumps(data)[:-40])
    with pytest.raises(DataError, match=r"dataset_coco.json, line 1 column \d+: truncated JSON"):
        load_dataset("coco", "test", root=str(coco_root))
    json_path.write_bytes(b'{"images": [{"split": "test", "filename": "caf\xe9.jpg"}]}')
    with pytest.raises(DataError, match="dataset_coco.json, line 1: not valid UTF-8"):
        load_dataset("coco", "test", root=str(coco_root))
    json_path.write_text('{"images": [}')
    with pytest.raises(DataError, match="malformed JSON"):
        load_dataset("coco", "test", root=str(coco_root))
    broken = json.loads(json.dumps(data))
    del broken["images"][2]["filename"]
    json_path.write_text(json.dumps(broken))
    with pytest.raises(DataError, match=r"images\[2\]: missing key 'filename'"):
        load_dataset("coco", "test", root=str(coco_root))
    json_path.write_text(json.dumps(data))
    (coco_root / "images" / "val2014" / "COCO_3.jpg").unlink()
    with pytest.raises(DataError, match=r"COCO_3.jpg, images\[3\]: image file not found"):
        load_dataset("coco", "test", root=str(coco_root))
    with pytest.warns(UserWarning, match=r"(?s)skipped 1 item.*images\[3\]: image file not found"):
        skipping = load_dataset("coco", "test", root=str(coco_root), on_error="skip")
    assert skipping.num_images == 1 and len(skipping.skipped) == 1


def test_karpathy_empty_caption_and_bad_image(coco_root):
    json_path = coco_root / "dataset_coco.json"
    data = json.loads(json_path.read_text())
    data["images"][2]["sentences"][1]["raw"] = "  ...  "
    json_path.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"images\[2\].sentences\[1\].raw: empty caption"):
        load_dataset("coco", "test", root=str(coco_root))
    with pytest.warns(UserWarning, match="empty caption"):
        split = load_dataset("coco", "test", root=str(coco_root), on_error="skip")
    assert split.caption_texts == ["A zebra grazes", "A red bus"] and split.skipped[0].reason == "empty caption"
    (coco_root / "images" / "val2014" / "COCO_2.jpg").write_bytes(b"not an image at all")
    with pytest.raises(DataError, match=r"COCO_2.jpg, dataset_coco.json images\[2\] \(image id 1002\): image failed"):
        next(iter(image_loader(split, batch_size=2)))


def write_precomputed(root, prefix, features, captions):
    root.mkdir(parents=True, exist_ok=True)
    if features.ndim == 3:
        np.savez(root / f"{prefix}_ims.npz", features=features)
    else:
        np.save(root / f"{prefix}_ims.npy", features)
    (root / f"{prefix}_caps.txt").write_text("\n".join(captions) + "\n", encoding="utf-8")


def test_precomputed_five_per_image_regions_and_dev(tmp_path):
    root = tmp_path / "precomp"
    feats = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)
    write_precomputed(root, "train", feats, [f"caption {i}" for i in range(15)])
    write_precomputed(root, "dev", np.ones((2, 5), np.float16), ["a", "b"])
    (root / "train_ids.txt").write_text("\n".join(str(100 + i // 5) for i in range(15)) + "\n")
    train = load_dataset(root, "train")
    assert train.caption_image.tolist() == [i // 5 for i in range(15)] and train.image_ids == [100, 101, 102]
    assert train.images.kind == "features"
    batch = next(iter(train_loader(train, Vocabulary.from_split(train), batch_size=4, augment=False)))
    assert batch["images"].shape[1:] == (2, 4) and batch["images"].dtype == torch.float32
    val = load_dataset("precomputed", "val", root=str(root))
    assert val.caption_image.tolist() == [0, 1] and image_loader(val, 2).dataset[0][1].shape == (5,)


def test_precomputed_error_paths(tmp_path):
    root = tmp_path / "precomp"
    write_precomputed(root, "test", np.zeros((2, 3), np.float32), ["a", "b", "c"])
    with pytest.raises(DataError, match=r"test_caps.txt: caption/feature count mismatch: 3 captions.*2 feature rows"):
        load_dataset(root, "test")
    with pytest.raises(DataError, match=r"unknown split 'train'; expected one of: test \(the splits present"):
        load_dataset(root, "train")
    write_precomputed(root, "test", np.zeros((2, 3), np.float32), ["a", "   "])
    with pytest.raises(DataError, match="test_caps.txt, line 2: empty caption"):
        load_dataset(root, "test")
    with pytest.warns(UserWarning, match="line 2: empty caption"):
        assert load_dataset(root, "test", on_error="skip").caption_texts == ["a"]
    (root / "test_caps.txt").write_bytes(b"fine\n\xff\xfe broken\n")
    with pytest.raises(DataError, match="test_caps.txt, line 2: line is not valid UTF-8"):
        load_dataset(root, "test")
    (root / "test_caps.txt").write_text("a\nb\n")
    (root / "test_ims.npy").unlink()
    with pytest.raises(MissingDataError, match="test_ims.npy: feature file not found"):
        load_dataset(root, "test")
    (root / "test_ims.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(DataError, match="test_ims.npy: cannot read features"):
        load_dataset(root, "test")


@pytest.fixture
def cub_root(tmp_path):
    root = tmp_path / "cub"
    cub = root / "CUB_200_2011"
    classes = ["001.Albatross", "002.Auklet", "003.Blackbird"]
    (cub).mkdir(parents=True)
    (cub / "classes.txt").write_text("".join(f"{i + 1} {c}\n" for i, c in enumerate(classes)))
    images, labels = [], []
    for n in range(6):
        cls = n % 3
        relative = f"{classes[cls]}/bird_{n}.jpg"
        images.append(f"{n + 1} {relative}")
        labels.append(f"{n + 1} {cls + 1}")
        write_image(cub / "images" / relative, 20 * n)
        text = root / "text_c10" / classes[cls] / f"bird_{n}.txt"
        text.parent.mkdir(parents=True, exist_ok=True)
        text.write_text("".join(f"this {classes[cls][4:].lower()} bird number {n} line {j}\n" for j in range(10)))
    (cub / "images.txt").write_text("\n".join(images) + "\n")
    (cub / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (root / "trainvalclasses.txt").write_text("001.Albatross\n002.Auklet\n")
    (root / "testclasses.txt").write_text("003.Blackbird\n")
    return root


def test_cub_class_level_relevance(cub_root):
    train = load_dataset("cub", "train", root=str(cub_root), image_size=8)
    assert train.num_images == 4 and train.num_captions == 40 and train.image_ids == [1, 2, 4, 5]
    rel = train.relevance_matrix()
    image_class = torch.tensor([0, 1, 0, 1])
    caption_class = image_class[torch.from_numpy(train.caption_image)]
    assert torch.equal(rel, image_class[:, None] == caption_class[None, :])
    test = load_dataset(cub_root, "test")  # detected from the folder
    assert test.num_images == 2 and test.relevance.num_pairs == 2 * 20
    assert "blackbird" not in Vocabulary.from_split(train)
    vocab = Vocabulary.from_split(train)
    batch = next(iter(train_loader(train, vocab, batch_size=8, seed=3)))
    expected = rel[batch["image_index"]][:, batch["caption_index"]]
    assert torch.equal(batch["relevance"], expected)


def test_cub_error_paths(cub_root):
    with pytest.raises(MissingDataError, match="valclasses.txt: class split file not found"):
        load_dataset("cub", "val", root=str(cub_root))
    (cub_root / "testclasses.txt").write_text("004.Nope\n")
    with pytest.raises(DataError, match="testclasses.txt, line 1: class '004.Nope' is not in classes.txt"):
        load_dataset("cub", "test", root=str(cub_root))
    (cub_root / "text_c10" / "001.Albatross" / "bird_0.txt").unlink()
    with pytest.raises(DataError, match="bird_0.txt, images.txt id 1: caption file not found"):
        load_dataset("cub", "train", root=str(cub_root))
    with pytest.warns(UserWarning, match="image id 1: caption file not found"):
        assert load_dataset("cub", "train", root=str(cub_root), on_error="skip").num_images == 3


def test_registry(tmp_path):
    assert {"shapes", "coco", "flickr30k", "karpathy", "precomputed", "cub"} <= set(list_datasets())
    with pytest.raises(DataError, match="unknown dataset 'mnist'.*shapes"):
        load_dataset("mnist", "train")
    with pytest.raises(MissingDataError, match="no such file or folder"):
        load_dataset(str(tmp_path / "nowhere"), "train")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="unrecognised dataset folder"):
        load_dataset(str(tmp_path / "empty"), "train")
    with pytest.raises(DataError, match="on_error='ignore'"):
        load_dataset("coco", "train", root=str(tmp_path), on_error="ignore")
