"""COCO and Flickr30k in the Karpathy split JSON (``dataset_coco.json``, ``dataset_flickr30k.json``).

Layout (``root``)::

    root/dataset_coco.json           # or dataset_flickr30k.json (or pass json_path)
    root/images/train2014/COCO_train2014_000000000009.jpg   # COCO: images/<filepath>/<filename>
    root/images/1000092795.jpg       # Flickr30k: images/<filename>

Each JSON image record needs ``split`` (train/restval/val/test), ``filename`` and
``sentences`` (a non-empty list of objects with a non-empty ``raw``); COCO records
also carry ``filepath`` and ``cocoid``. Relevance: each caption to its own image.

Ids: ``image_ids`` are ``cocoid`` (COCO: required on every record, since the CxC /
ECCV Caption sets and the instances files match by it) or else ``imgid``
(``split.info["image_id_kind"]`` says which); ``caption_ids`` are the
Karpathy ``sentid`` unless ``coco_captions`` (``captions_train2014.json``,
``captions_val2014.json``) is given, in which case they are the COCO caption
annotation ids -- the ids of the CxC / ECCV Caption positive sets of the
``eccv-caption`` package (``split.info["caption_id_kind"]`` says which).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from pcmr.data.coco_labels import coco_labels_from_instances
from pcmr.data.errors import (
    DataError,
    MissingDataError,
    SkippedItem,
    check_on_error,
    read_json,
    require_dir,
    require_key,
    require_nonempty,
    warn_skipped,
)
from pcmr.data.images import FileImages
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import tokenize
from pcmr.suggest import unknown_name

__all__ = ["COCO_5K_TEST_IMAGES", "COCO_EXTRA_POSITIVE_SETS", "KARPATHY_SPLITS", "coco_protocol_info", "load_karpathy"]

KARPATHY_SPLITS = ("train", "restval", "val", "test")
_WHAT = "a Karpathy split JSON: {'images': [{'split', 'filename', 'sentences': [{'raw', 'sentid'}]}]}"


#: images of the COCO 5K test split (Karpathy), evaluated in folds of 1000 too (the COCO 1K protocol)
COCO_5K_TEST_IMAGES = 5000
#: the extra positive sets defined on COCO (CxC, ECCV Caption), matched by COCO ids
COCO_EXTRA_POSITIVE_SETS = ("cxc", "eccv")


def coco_protocol_info(name: str, num_images: int) -> dict[str, Any]:
    """What a split's ``info`` says about the evaluation protocols that apply to it:
    ``extra_positive_sets`` (the positive sets defined on its images: CxC and ECCV Caption for COCO)
    and ``coco_5k_test`` (True for the 5000 COCO test images, which are also evaluated in 1K folds)."""
    coco = name == "coco"
    return {"extra_positive_sets": list(COCO_EXTRA_POSITIVE_SETS) if coco else [],
            "coco_5k_test": coco and num_images == COCO_5K_TEST_IMAGES}


def _find_json(root: Path, dataset: str | None) -> Path:
    if root.is_file():
        return root
    names = [f"dataset_{dataset}.json"] if dataset else sorted(p.name for p in root.glob("dataset_*.json"))
    for name in names:
        if (root / name).is_file():
            return root / name
    raise MissingDataError("no Karpathy split JSON found", path=root,
                           expected=f"{names[0] if names else 'dataset_<name>.json'} in this folder")


def _caption_annotation_ids(paths: Sequence[str | os.PathLike]) -> dict[tuple[int, str], list[int]]:
    """(image id, normalised text) -> COCO caption annotation ids, from captions_*.json files."""
    table: dict[tuple[int, str], list[int]] = defaultdict(list)
    for path in paths:
        data = read_json(path, "a COCO captions JSON with 'annotations' [{'id', 'image_id', 'caption'}]")
        annotations = require_key(data, "annotations", list, path=path, location="top level")
        for n, annotation in enumerate(annotations):
            where = f"annotations[{n}]"
            image_id = require_key(annotation, "image_id", int, path=path, location=where)
            caption = require_key(annotation, "caption", str, path=path, location=where)
            table[(image_id, " ".join(tokenize(caption)))].append(require_key(annotation, "id", int, path=path,
                                                                              location=where))
    return table


def _image_id(record: dict, coco_ids: bool, *, path: Path, location: str) -> int | str:
    """The record's ``cocoid`` (COCO JSONs: required) or else its Karpathy ``imgid`` (or file name)."""
    if coco_ids:
        return require_key(record, "cocoid", int, path=path, location=location)
    if "imgid" in record:
        return require_key(record, "imgid", (int, str), path=path, location=location)
    return record["filename"]


def load_karpathy(
    root: str | os.PathLike | None = None,
    split: str = "train",
    *,
    json_path: str | os.PathLike | None = None,
    image_root: str | os.PathLike | None = None,
    dataset: str | None = None,
    image_size: int = 224,
    image_resize: str = "square",
    resize_size: int | None = None,
    include_restval: bool = True,
    coco_captions: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    instances: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    check_images: bool = True,
    on_error: str = "raise",
) -> RetrievalSplit:
    """One split of a Karpathy JSON dataset, images decoded lazily with Pillow.

    Args:
        root: folder holding ``dataset_<dataset>.json`` and ``images/`` (or the JSON file itself).
        split: ``train`` (with ``restval`` when ``include_restval``), ``restval``, ``val`` or ``test``.
        json_path, image_root: override the file / image folder found from ``root``.
        dataset: ``"coco"`` or ``"flickr30k"`` (picks the JSON name; the name inside the JSON otherwise).
        image_size: side of the square model input.
        image_resize, resize_size: how a file becomes that square (``pcmr.data.images.FileImages``):
            ``"square"`` (resize the whole image) or ``"center_crop"`` (shorter side to ``resize_size``,
            default 256 for 224, then the central square: the PCME release's evaluation transform).
        coco_captions: COCO captions JSON(s) mapping sentences to caption annotation ids.
        instances: COCO instances JSON(s) giving PMRP class labels.
        check_images: verify at load time that every image file exists.
        on_error: ``"raise"`` (default) or ``"skip"`` bad captions/images, recorded in ``split.skipped``.
    """
    check_on_error(on_error)
    if json_path is not None:
        path = Path(json_path)
    elif root is not None:
        path = _find_json(Path(root), dataset)
    else:
        raise DataError("no data location given", location="root", expected="a dataset folder or json_path")
    images_dir = Path(image_root) if image_root is not None else (Path(root) if root is not None and Path(root).is_dir()
                                                                   else path.parent) / "images"
    data = read_json(path, _WHAT)
    records = require_key(data, "images", list, path=path, location="top level")
    name = dataset or (data.get("dataset") if isinstance(data.get("dataset"), str) else "karpathy")
    present = sorted({str(r["split"]) for r in records if isinstance(r, dict) and isinstance(r.get("split"), str)})
    if split not in KARPATHY_SPLITS:
        raise DataError(unknown_name("split", split, KARPATHY_SPLITS), path=path, location="split")
    wanted = {"train", "restval"} if (split == "train" and include_restval) else {split}
    if not wanted & set(present):
        raise DataError(f"no image has split {split!r}", path=path, location="images[*].split",
                        expected=f"one of the splits present: {present}")
    if check_images:
        require_dir(images_dir, "the image folder (images/<filepath>/<filename>)")
    # COCO image ids ("cocoid") are what the CxC / ECCV Caption sets and the instances files use: a
    # COCO JSON (or one where any record has a cocoid) needs one on every record; other datasets use
    # the Karpathy "imgid", which is no COCO id, so COCO-id matching refuses them below.
    coco_ids = name == "coco" or any(isinstance(r, dict) and "cocoid" in r for r in records)
    if not coco_ids and (coco_captions is not None or instances is not None):
        raise DataError("coco_captions / instances match captions and labels by COCO image id, but no record "
                        f"of this {name!r} JSON has a 'cocoid'", path=path, location="images[*].cocoid",
                        expected="the Karpathy COCO JSON (dataset_coco.json) with 'cocoid' on every image")
    skipped: list[SkippedItem] = []
    first_record: dict[object, str] = {}
    image_paths: list[str] = []
    image_keys: list[str] = []
    image_ids: list[int | str] = []
    texts: list[str] = []
    caption_image: list[int] = []
    caption_ids: list[Any] = []
    for n, record in enumerate(records):
        where = f"images[{n}]"
        if require_key(record, "split", str, path=path, location=where) not in wanted:
            continue
        filename = require_key(record, "filename", str, path=path, location=where)
        sentences = require_key(record, "sentences", list, path=path, location=where)
        subfolder = require_key(record, "filepath", str, path=path, location=where) if "filepath" in record else ""
        file = images_dir / subfolder / filename
        problem = "has no sentences" if not sentences else (
            "image file not found" if check_images and not file.is_file() else None)
        if problem:
            if on_error == "raise":
                error = MissingDataError if "file" in problem else DataError
                raise error(problem, path=file if "file" in problem else path, location=where,
                            expected="an existing image with at least one caption")
            skipped.append(SkippedItem(str(path), where, f"{problem} ({file})"))
            continue
        image_index = len(image_paths)
        image_id = _image_id(record, coco_ids, path=path, location=where)
        if image_id in first_record:
            raise DataError(f"image id {image_id!r} repeats {first_record[image_id]}", path=path, location=where,
                            expected="one record per image (distinct 'cocoid' / 'imgid')")
        first_record[image_id] = where
        captions_before = len(texts)
        for m, sentence in enumerate(sentences):
            at = f"{where}.sentences[{m}]"
            raw = require_key(sentence, "raw", str, path=path, location=at)
            if not tokenize(raw):
                if on_error == "raise":
                    raise DataError("empty caption", path=path, location=f"{at}.raw", expected="a caption with words")
                skipped.append(SkippedItem(str(path), f"{at}.raw", "empty caption"))
                continue
            texts.append(raw.strip())
            caption_image.append(image_index)
            caption_ids.append(require_key(sentence, "sentid", int, path=path, location=at) if "sentid" in sentence
                               else len(caption_ids))
        if len(texts) == captions_before:  # every caption was skipped: the image goes too
            skipped.append(SkippedItem(str(path), where, "no usable caption left"))
            continue
        image_paths.append(str(file))
        image_keys.append(f"{path.name} {where} (image id {image_id})")
        image_ids.append(image_id)
    if len(set(caption_ids)) != len(caption_ids):
        repeated = sorted(c for c, n in Counter(caption_ids).items() if n > 1)
        raise DataError(f"sentid {repeated[0]!r} is used by more than one caption", path=path,
                        location="images[*].sentences[*].sentid", expected="one distinct 'sentid' per sentence")
    if not texts:
        warn_skipped(f"{name} {split}", skipped)
        require_nonempty(len(image_paths), len(texts), path=path, split=split, skipped=len(skipped))
    id_kind = "karpathy_sentid"
    if coco_captions is not None:
        table = _caption_annotation_ids([coco_captions] if isinstance(coco_captions, (str, os.PathLike))
                                        else coco_captions)
        for c, text in enumerate(texts):
            candidates = table.get((int(image_ids[caption_image[c]]), " ".join(tokenize(text))))
            if not candidates:
                raise DataError(f"caption {text!r} of image id {image_ids[caption_image[c]]} has no annotation",
                                path=str(coco_captions), location="annotations",
                                expected="the COCO captions files of the same images")
            caption_ids[c] = candidates.pop(0)
        id_kind = "coco_annotation"
    labels, label_names = None, None
    if instances is not None:
        # instances files come with COCO JSONs, whose image ids are the integer cocoids
        labels, label_names, label_skips = coco_labels_from_instances(instances, cast(list[int], image_ids),
                                                                      on_error=on_error)
        skipped.extend(label_skips)
    warn_skipped(f"{name} {split}", skipped)
    return RetrievalSplit(
        name=name, split="train+restval" if wanted == {"train", "restval"} else split,
        images=FileImages(image_paths, image_size, keys=image_keys, image_resize=image_resize,
                              resize_size=resize_size), caption_texts=texts,
        caption_image=np.asarray(caption_image, dtype=np.int64), image_ids=image_ids, caption_ids=caption_ids,
        image_labels=labels, label_names=label_names, skipped=skipped,
        info={"json": str(path), "image_root": str(images_dir), "caption_id_kind": id_kind,
              "image_id_kind": "coco" if coco_ids else "karpathy_imgid",
              **coco_protocol_info(name, len(image_paths))},
    )
