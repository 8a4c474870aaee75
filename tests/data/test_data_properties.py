"""Property-based tests of the loaders on generated, often malformed input files.

For every generated input a loader either raises one of pcmr's documented data errors
(``DataError``, ``MissingDataError``) or returns a split that holds exactly the data of
the files -- checked against an independent reading of the same input written here, so
that no call can succeed while dropping or mislabelling data. With ``on_error="skip"``
every item left out must be reported in ``split.skipped``.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pcmr.data import DataError, load_dataset
from pcmr.data.coco_labels import coco_labels_from_instances
from pcmr.data.cub import load_cub
from pcmr.data.karpathy import load_karpathy
from pcmr.data.precomputed import load_precomputed

pytestmark = pytest.mark.filterwarnings("ignore:.*skipped:UserWarning")  # the skip summaries of on_error="skip"
BOUNDED = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# values of the wrong kind (or a plausible but wrong value) that a malformed file may hold anywhere
junk = st.one_of(st.none(), st.booleans(), st.integers(-1, 3), st.integers(100, 102), st.floats(allow_nan=True),
                 st.sampled_from(["", " ", "test", "coco", "a.jpg", "sub"]), st.lists(st.integers(0, 2), max_size=2),
                 st.dictionaries(st.sampled_from(["raw", "id", "x"]), st.integers(), max_size=1))
words = st.sampled_from(["a dog", "two cats", "A red bus.", "zebra", "x y z"])


def _paths(value, prefix=()):
    """Every key/index path inside a JSON value."""
    if prefix:
        yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def mutate_json(data, document):
    """``document`` with 0-2 random edits: a key or item deleted, replaced by junk, or an item duplicated."""
    document = copy.deepcopy(document)
    for _ in range(data.draw(st.integers(0, 2), label="edits")):
        paths = list(_paths(document))
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["delete", "junk", "duplicate"]), label="action")
        if action == "delete":
            del parent[path[-1]]
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
        else:
            parent[path[-1]] = data.draw(junk, label="junk")
    return document


def mutate_lines(data, files):
    """``files`` (name -> list of lines, or None for an absent file) with 0-2 random line edits."""
    files = {name: None if lines is None else list(lines) for name, lines in files.items()}
    tokens = st.sampled_from(["x", "", "7", "01", "3", "002.B", "-1", "001.A/p.jpg", "  "])
    for _ in range(data.draw(st.integers(0, 2), label="edits")):
        name = data.draw(st.sampled_from(sorted(files)), label="file")
        lines = files[name]
        action = data.draw(st.sampled_from(["delete file", "delete", "duplicate", "replace word", "blank"]))
        if action == "delete file" or not lines:
            files[name] = None
            continue
        at = data.draw(st.integers(0, len(lines) - 1), label="line")
        if action == "delete":
            del lines[at]
        elif action == "duplicate":
            lines.insert(at, lines[at])
        elif action == "blank":
            lines[at] = ""
        else:
            parts = lines[at].split(" ", 1)
            which = data.draw(st.integers(0, len(parts) - 1), label="word")
            parts[which] = data.draw(tokens, label="token")
            lines[at] = " ".join(parts)
    return files


_COUNTER = itertools.count()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("generated")


def _fresh_dir(workdir: Path) -> Path:
    """A new empty folder for one generated example (pytest removes the base folder in time)."""
    folder = workdir / f"example-{next(_COUNTER)}"
    folder.mkdir()
    return folder


def valid_karpathy(draw_data, coco: bool):
    """A well-formed Karpathy document of 1-4 images (with or without COCO ids)."""
    records = []
    for n in range(draw_data.draw(st.integers(1, 4), label="images")):
        record = {"split": draw_data.draw(st.sampled_from(["train", "restval", "val", "test"]), label="split"),
                  "filename": "abc"[n % 3] + ".jpg", "imgid": n,
                  "sentences": [{"raw": draw_data.draw(words, label="raw"), "sentid": 10 * n + j}
                                for j in range(draw_data.draw(st.integers(1, 3), label="captions"))]}
        if n % 2:
            record["filepath"] = "sub"
        if coco:
            record["cocoid"] = 100 + n
        records.append(record)
    return {"images": records, "dataset": "coco" if coco else "flickr30k"}


def read_karpathy(document, split, dataset):
    """An independent reading of a Karpathy document: (image ids, caption texts, owner image of each caption)."""
    wanted = {"train", "restval"} if split == "train" else {split}
    name = dataset or document.get("dataset") or "karpathy"
    coco = name == "coco" or any("cocoid" in r for r in document["images"])
    ids, texts, owner, sentids = [], [], [], []
    for record in document["images"]:
        if record["split"] not in wanted:
            continue
        ids.append(record["cocoid"] if coco else record.get("imgid", record["filename"]))
        for sentence in record["sentences"]:
            texts.append(sentence["raw"].strip())
            owner.append(len(ids) - 1)
            sentids.append(sentence.get("sentid", len(sentids)))
    return ids, texts, owner, sentids


@BOUNDED
@given(data=st.data(), coco=st.booleans(), split=st.sampled_from(["train", "val", "test"]),
       dataset=st.sampled_from([None, "coco", "flickr30k"]), on_error=st.sampled_from(["raise", "skip"]))
def test_karpathy_loads_exactly_its_records_or_raises_data_error(workdir, data, coco, split, dataset, on_error):
    document = mutate_json(data, valid_karpathy(data, coco))
    root = _fresh_dir(workdir)
    (root / "images" / "sub").mkdir(parents=True)
    for name in ("a.jpg", "b.jpg", "c.jpg"):  # existence is all that check_images looks at
        (root / "images" / name).write_bytes(b"")
        (root / "images" / "sub" / name).write_bytes(b"")
    path = root / "dataset_x.json"
    path.write_text(json.dumps(document))
    try:
        loaded = load_karpathy(json_path=path, split=split, dataset=dataset, on_error=on_error)
    except DataError:
        return
    ids, texts, owner, sentids = read_karpathy(document, split, dataset)
    assert len(loaded.image_ids) == len(set(loaded.image_ids)) and loaded.num_captions > 0
    assert len(loaded.caption_ids) == len(set(loaded.caption_ids))
    if on_error == "raise":
        assert loaded.skipped == []
        assert loaded.image_ids == ids and loaded.caption_texts == texts
        assert loaded.caption_image.tolist() == owner and loaded.caption_ids == sentids
    else:  # every image and caption of the split is either loaded (with its own id) or reported
        got = {(loaded.image_ids[i], t) for i, t in zip(loaded.caption_image.tolist(), loaded.caption_texts)}
        want = {(ids[i], t) for i, t in zip(owner, texts) if t}
        assert got <= want and set(loaded.image_ids) <= set(ids)
        assert (got == want and set(loaded.image_ids) == set(ids)) or loaded.skipped
    if loaded.info["image_id_kind"] == "coco":
        assert all(isinstance(i, int) and not isinstance(i, bool) for i in loaded.image_ids)


@BOUNDED
@given(rows=st.integers(1, 3), width=st.integers(1, 3), regions=st.sampled_from([None, None, 2]),
       per=st.sampled_from([1, 5]), data=st.data(), on_error=st.sampled_from(["raise", "skip"]))
def test_precomputed_loads_exactly_its_files_or_raises_data_error(workdir, rows, width, regions, per, data, on_error):
    shape = (rows, width) if regions is None else (rows, regions, width)
    defect = st.sampled_from([None, None, None, None, "empty rows", "no width", "int16", "bool", "complex64",
                              "nan", "inf", "1e300", "captions_per_image=2", "captions_per_image=0"])
    defect = data.draw(defect, label="feature defect")
    if defect == "empty rows":
        rows, shape = 0, (0, *shape[1:])
    elif defect == "no width":
        shape = (*shape[:-1], 0)
    dtype = defect if defect in ("int16", "bool", "complex64") else data.draw(st.sampled_from(["float32", "float64"]))
    features = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).astype(dtype)
    if defect in ("nan", "inf", "1e300"):
        with np.errstate(over="ignore"):  # 1e300 becomes inf in float32
            features.reshape(-1)[data.draw(st.integers(0, features.size - 1), label="poisoned")] = float(defect)
    ids = data.draw(st.sampled_from([None, "per image", "per caption"]), label="ids")
    files = mutate_lines(data, {"caps": [data.draw(words) for _ in range(per * rows)],
                                "ids": None if ids is None else [str(7 + n) for n in range(rows)] if ids == "per image"
                                else [str(7 + n // per) for n in range(per * rows)]})
    root = _fresh_dir(workdir)
    np.save(root / "test_ims.npy", features)
    (root / "test_caps.txt").write_text("".join(f"{line}\n" for line in files["caps"] or []))
    if files["ids"] is not None:
        (root / "test_ids.txt").write_text("".join(f"{i}\n" for i in files["ids"]))
    forced = int(defect[-1]) if defect and defect.startswith("captions_per_image") else None
    try:
        loaded = load_precomputed(root, "test", captions_per_image=forced, on_error=on_error)
    except DataError:
        return
    lines = files["caps"]
    assert features.dtype.kind in "fi" and features.size > 0 and np.isfinite(features.astype(np.float32)).all()
    per = loaded.info["captions_per_image"]
    assert len(lines) == per * rows and (forced is None or per == forced)
    kept = [(n, line.strip()) for n, line in enumerate(lines) if line.strip()]
    assert loaded.caption_texts == [t for _, t in kept]
    assert loaded.caption_image.tolist() == [n // per for n, _ in kept]
    assert len(loaded.skipped) == len(lines) - len(kept) and (on_error == "skip" or not loaded.skipped)
    for n in range(rows):
        np.testing.assert_array_equal(loaded.images.load(n).numpy(), features[n].astype(np.float32))
    if files["ids"] is None:
        assert loaded.image_ids == list(range(rows))
    else:
        ids = files["ids"] if len(files["ids"]) == rows else files["ids"][::per]
        as_id = [int(i) if re.fullmatch(r"\s*-?[0-9]+\s*", i) else i.strip() for i in ids]  # ASCII integers
        assert loaded.image_ids == as_id
        assert len(set(loaded.image_ids)) == rows


CLASSES = ["001.A", "002.B", "003.C"]


@BOUNDED
@given(folders=st.lists(st.sampled_from(CLASSES), min_size=1, max_size=4), data=st.data(),
       on_error=st.sampled_from(["raise", "skip"]))
def test_cub_loads_exactly_its_files_or_raises_data_error(workdir, folders, data, on_error):
    files = {"classes": [f"{n + 1} {c}" for n, c in enumerate(CLASSES)],
             "images": [f"{n + 1} {d}/im{n}.jpg" for n, d in enumerate(folders)],
             "labels": [f"{n + 1} {CLASSES.index(d) + 1}" for n, d in enumerate(folders)],
             **{f"captions {n}": [data.draw(words) for _ in range(data.draw(st.integers(1, 3)))]
                for n in range(len(folders))}}
    files = mutate_lines(data, files)
    root = _fresh_dir(workdir)
    cub = root / "CUB_200_2011"
    cub.mkdir()
    for name, file in (("classes", "classes.txt"), ("images", "images.txt"), ("labels", "image_class_labels.txt")):
        if files[name] is not None:
            (cub / file).write_text("".join(f"{line}\n" for line in files[name]))
    (root / "trainvalclasses.txt").write_text("001.A\n002.B\n")
    for n, folder in enumerate(folders):
        if files[f"captions {n}"] is not None:
            (root / "text_c10" / folder).mkdir(parents=True, exist_ok=True)
            (root / "text_c10" / folder / f"im{n}.txt").write_text("".join(f"{c}\n" for c in files[f"captions {n}"]))
    try:
        loaded = load_cub(root, "train", check_images=False, on_error=on_error)
    except DataError:
        return
    class_of_folder = {line.split()[1]: int(line.split()[0]) for line in files["classes"] if line.strip()}
    label_of_image = {int(line.split()[0]): int(line.split()[1]) for line in files["labels"] if line.strip()}
    folder_of_image = {int(line.split()[0]): line.split()[1].split("/")[0] for line in files["images"]
                       if line.strip()}
    wanted = [i for i, folder in folder_of_image.items() if folder in ("001.A", "002.B")]
    assert set(loaded.image_ids) <= set(wanted) and len(set(loaded.image_ids)) == len(loaded.image_ids)
    columns = sorted(class_of_folder.values())
    for row, image_id in enumerate(loaded.image_ids):  # each image carries the class of its folder
        assert label_of_image[image_id] == class_of_folder[folder_of_image[image_id]]
        assert loaded.image_labels[row].nonzero().flatten().tolist() == [columns.index(label_of_image[image_id])]
    image_class = [label_of_image[i] for i in loaded.image_ids]
    relevance = loaded.relevance_matrix()
    for c, owner in enumerate(loaded.caption_image.tolist()):
        assert relevance[:, c].tolist() == [k == image_class[owner] for k in image_class]
    if on_error == "raise":
        assert loaded.skipped == [] and loaded.image_ids == wanted
        texts = []
        for line in files["images"]:
            if line.strip() and line.split()[1].split("/")[0] in ("001.A", "002.B"):
                n = int(line.split()[1].split("/")[1][2:-4])
                texts += [t.strip() for t in files[f"captions {n}"] if t.strip()]
        assert loaded.caption_texts == texts
    elif len(loaded.image_ids) < len(wanted):
        assert loaded.skipped


@BOUNDED
@given(listed=st.lists(st.integers(1, 5), min_size=1, max_size=4, unique=True), data=st.data(),
       on_error=st.sampled_from(["raise", "skip"]))
def test_instances_labels_are_exact_or_data_error(workdir, listed, data, on_error):
    annotations = [{"image_id": data.draw(st.sampled_from(listed)), "category_id": data.draw(st.sampled_from([1, 2]))}
                   for _ in range(data.draw(st.integers(0, 4)))]
    document = {"images": [{"id": i} for i in listed], "annotations": annotations,
                "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]}
    document = mutate_json(data, document)
    query = data.draw(st.lists(st.sampled_from([*listed, 9]), max_size=4), label="split image ids")
    path = _fresh_dir(workdir) / "instances.json"
    path.write_text(json.dumps(document))
    try:
        labels, names, skipped = coco_labels_from_instances(path, query, on_error=on_error)
    except DataError:
        return
    listed = [image["id"] for image in document["images"]]
    categories = sorted({(c["id"], c["name"]) for c in document["categories"]})  # a repeated entry is harmless
    assert names == [name for _, name in categories] and len(set(query)) == len(query)
    annotated = [(a["image_id"], a["category_id"]) for a in document["annotations"]]
    unlisted = [i for i, _ in annotated if i not in listed]
    absent = [i for i in query if i not in listed]
    if on_error == "raise":
        assert not unlisted and not absent and skipped == []
    else:
        assert len(skipped) == len(unlisted) + len(absent)
    for row, image_id in enumerate(query):
        expected = [(image_id, cid) in annotated and image_id in listed for cid, _ in categories]
        assert labels[row].tolist() == expected


@BOUNDED
@given(document=junk, which=st.sampled_from(["karpathy", "instances"]))
def test_a_json_file_of_the_wrong_shape_is_a_data_error(workdir, document, which):
    path = _fresh_dir(workdir) / "file.json"
    path.write_text(json.dumps(document))
    with pytest.raises(DataError):
        if which == "karpathy":
            load_karpathy(json_path=path, split="test", check_images=False)
        else:
            coco_labels_from_instances(path, [1])


setting_name = st.sampled_from(["image_size", "image_sise", "on_error", "check_images", "mmap", "captions_per_image",
                                "instances", "dataset", ""])


@BOUNDED
@given(dataset=st.sampled_from(["coco", "flickr30k", "karpathy", "precomputed", "cub"]),
       settings_=st.dictionaries(setting_name, junk, max_size=2))
def test_any_loader_setting_is_accepted_or_a_data_error(workdir, dataset, settings_):
    root = _fresh_dir(workdir)
    try:
        load_dataset(dataset, "test", root=str(root), **settings_)
    except DataError:
        return
    raise AssertionError("an empty folder cannot load")  # pragma: no cover - reached only on a loader bug
