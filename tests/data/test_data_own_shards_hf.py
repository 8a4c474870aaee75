"""One's own images as webdataset tar shards and as a Hugging Face ``save_to_disk`` folder: the same images,
captions and seeded splits as the image folder they were made from, and one clear error per bad input."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
from tests._own_data import _add, _png, make_folder, make_hf, make_shards, samples

from pcmr.data import DataError, load_dataset
from pcmr.data.registry import detect_format, gallery_split
from pcmr.encode.inputs import image_input_transform, split_image_metadata

SIZE = 14


def _same_as_folder(split, folder_split, key):
    """Same captions per image and the same pixels as the folder's images of the same names."""
    by_name = {name: i for i, name in enumerate(folder_split.image_ids)}
    assert split.num_images == folder_split.num_images and split.num_captions == folder_split.num_captions
    for i, image_id in enumerate(split.image_ids):
        j = by_name[key(image_id)]
        assert [split.caption_texts[c] for c in split.source_captions[i]] == \
            [folder_split.caption_texts[c] for c in folder_split.source_captions[j]]
        assert np.array_equal(split.images.load_pixels(i), folder_split.images.load_pixels(j))


def _shard_key_to_file(image_id: str) -> str:
    key = image_id.split("/", 1)[1]
    return key.replace("trip_", "trip/") + ".png"


@pytest.mark.parametrize("caption_json", [False, True])
def test_shards_read_as_the_folder_they_were_made_from(tmp_path, caption_json):
    folder = make_folder(tmp_path / "photos", count=20)
    shards = make_shards(tmp_path / "shards", count=20, per_shard=8, caption_json=caption_json)
    assert detect_format(shards) == "webdataset" and gallery_split(str(shards)) == "all"
    every = load_dataset(shards, "all", image_size=SIZE, image_resize="center_crop")
    assert every.num_images == 20 and every.image_ids[0] == "shard-000000.tar/trip_photo00"
    _same_as_folder(every, load_dataset(folder, "all", image_size=SIZE, image_resize="center_crop"), _shard_key_to_file)
    assert image_input_transform(every) == {"image_resize": "center_crop", "resize_size": 16}
    sizes = [load_dataset(shards, name).num_images for name in ("train", "val", "test")]
    assert sizes == [16, 2, 2]
    assert split_image_metadata(every)[1] == {"file": "shard-000000.tar/photo01", "captions": samples(2)[1][2]}
    assert load_dataset(shards / "shard-000001.tar", "all").num_images == 8  # one shard


def test_shards_named_by_split_give_the_split(tmp_path):
    make_shards(tmp_path / "s", count=12, per_shard=4)
    for old, new in (("shard-000000", "train-000000"), ("shard-000001", "train-000001"), ("shard-000002", "val-000000")):
        (tmp_path / "s" / f"{old}.tar").rename(tmp_path / "s" / f"{new}.tar")
    val = load_dataset(tmp_path / "s", "val")
    assert val.num_images == 4 and {i.split("/")[0] for i in val.image_ids} == {"val-000000.tar"}
    assert val.info["splits"] == "given"
    with pytest.raises(DataError, match=r"no image is in split 'test'; expected one of the splits present: \['train', 'val'\]"):
        load_dataset(tmp_path / "s", "test")


def _shard(path, members):
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as archive:
        for name, data in members:
            _add(archive, name, data)
    return path.parent


PNG = _png(np.zeros((6, 6, 3), np.uint8))


@pytest.mark.parametrize(("members", "message"), [
    ([("a.png", PNG)], r"a.tar, sample 'a': sample has no caption; expected samples of an image"),
    ([("a.txt", b"a cat")], r"sample 'a': sample has no image"),
    ([("a.png", PNG), ("a.json", b'{"label": 3}')], r"a.json: no caption \(keys: \['label'\]\)"),
    ([("a.png", PNG), ("a.json", b'{"caption": ')], r"a.json: malformed JSON"),
    ([("a.png", PNG), ("a.txt", b"caf\xe9")], r"a.txt: not valid UTF-8"),
    ([("a.png", PNG), ("a.txt", b"  \n")], r"sample 'a', caption: empty caption"),
    ([("a.png", PNG), ("a.json", b'{"caption": "x", "split": "later"}')], r"sample 'a', split: split 'later'"),
])
def test_bad_shards_raise_one_clear_error(tmp_path, members, message):
    root = _shard(tmp_path / "a.tar", members)
    with pytest.raises(DataError, match=message):
        load_dataset("webdataset", "all", root=str(root))


def test_bad_image_bytes_and_compressed_shards(tmp_path):
    root = _shard(tmp_path / "a.tar", [("a.png", b"not an image"), ("a.txt", b"a cat")])
    split = load_dataset(root, "all")
    with pytest.raises(DataError, match=r"a.tar, a.tar, sample 'a': image failed to decode"):
        split.images.load(0)
    packed = tmp_path / "packed"
    packed.mkdir()
    with tarfile.open(packed / "b.tar", "w:gz") as archive:
        info = tarfile.TarInfo("b.txt")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"cat"))
    with pytest.raises(DataError, match="b.tar, shard: not an uncompressed tar file"):
        load_dataset(packed, "all")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no .tar shard found"):
        load_dataset("webdataset", "all", root=str(empty))
    with pytest.warns(UserWarning, match="skipped 1 item"):
        kept = load_dataset(_shard(tmp_path / "c" / "c.tar", [("a.png", PNG), ("a.txt", b"a cat"), ("b.png", PNG)]),
                            "all", on_error="skip")
    assert kept.image_ids == ["c.tar/a"] and kept.skipped[0].reason == "sample has no caption"


def test_hf_dataset_reads_as_the_folder_it_was_made_from(tmp_path):
    folder = make_folder(tmp_path / "photos", count=20)
    saved = make_hf(tmp_path / "hf", count=20)
    assert detect_format(saved) == "hf" and gallery_split(str(saved)) == "all"
    every = load_dataset(saved, "all", image_size=SIZE)
    _same_as_folder(every, load_dataset(folder, "all", image_size=SIZE), lambda image_id: image_id)
    for name in ("train", "val", "test"):  # same names, same seeded split as the folder
        assert load_dataset(saved, name).image_ids == load_dataset(folder, name).image_ids


def test_hf_dataset_dict_gives_its_splits(tmp_path):
    saved = make_hf(tmp_path / "hfd", count=12, splits=True)
    val = load_dataset(saved, "val", image_size=SIZE)
    assert val.image_ids == ["validation/photo08.png", "validation/trip/photo09.png"]
    every = load_dataset(saved, "all", image_size=SIZE)
    assert every.num_images == 12 and every.image_ids[-1] == "test/photo11.png"
    reference = load_dataset(make_folder(tmp_path / "photos", count=12), "all", image_size=SIZE)
    assert np.array_equal(every.images.load_pixels(11), reference.images.load_pixels(11))


def test_hf_bad_columns(tmp_path):
    import datasets
    from PIL import Image

    table = datasets.Dataset.from_dict({"image": [Image.fromarray(np.zeros((4, 4, 3), np.uint8))], "label": [3]},
                                       features=datasets.Features({"image": datasets.Image(),
                                                                   "label": datasets.Value("int64")}))
    table.save_to_disk(str(tmp_path / "nocap"))
    with pytest.raises(DataError, match=r"nocap, dataset: no caption column \(columns: \['image', 'label'\]\)"):
        load_dataset(tmp_path / "nocap", "all")
    with pytest.raises(DataError, match="no image column nope"):
        load_dataset("hf", "all", root=str(tmp_path / "nocap"), image_column="nope", caption_column="label")
    with pytest.raises(DataError, match=r"row 0, label: caption is a int"):
        load_dataset("hf", "all", root=str(tmp_path / "nocap"), caption_column="label")
    with pytest.raises(DataError, match="not a saved Hugging Face dataset"):
        load_dataset("hf", "all", root=str(tmp_path))
