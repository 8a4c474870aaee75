"""COCO ``instances_*.json`` -> multi-hot class-label vectors for PMRP (PCME §4.1.1, App. C.1).

An image's label vector marks the categories of its instance annotations
(80 columns, ordered by category id). An image present in the file without any
annotation gets an all-False row, which PMRP treats as "no labels" (48 of the
COCO 5K test images). Captions take their image's labels (the COCO convention).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from pcmr.data.errors import DataError, SkippedItem, check_on_error, read_json, require_key

__all__ = ["coco_labels_from_instances"]

_WHAT = "a COCO instances JSON with 'images', 'annotations' and 'categories'"


def coco_labels_from_instances(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    image_ids: Sequence[int],
    *,
    on_error: str = "raise",
) -> tuple[torch.Tensor, list[str], list[SkippedItem]]:
    """Label vectors of ``image_ids`` from one or more instances files (e.g. train2014 + val2014).

    Returns ``(labels BoolTensor [N, C], category names [C], skipped)``. An id absent from every
    file raises :class:`DataError` (or, with ``on_error="skip"``, gets an all-False row and a
    :class:`SkippedItem`).
    """
    check_on_error(on_error)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    categories: dict[int, str] = {}
    known_images: set[int] = set()
    annotated: list[tuple[int, int]] = []  # (image id, category id)
    skipped: list[SkippedItem] = []
    for path in paths:
        data = read_json(path, _WHAT)
        if not isinstance(data, dict):
            raise DataError(f"top level is a {type(data).__name__}", path=path, expected=_WHAT)
        for key in ("images", "annotations", "categories"):
            require_key(data, key, list, path=path, location="top level")
        for n, category in enumerate(data["categories"]):
            cid = require_key(category, "id", int, path=path, location=f"categories[{n}]")
            name = require_key(category, "name", str, path=path, location=f"categories[{n}]")
            if categories.get(cid, name) != name:
                raise DataError(f"category id {cid} is {name!r} here but {categories[cid]!r} in an earlier file",
                                path=path, location=f"categories[{n}]", expected="the same categories in every file")
            categories[cid] = name
        file_images = {require_key(image, "id", int, path=path, location=f"images[{n}]")
                       for n, image in enumerate(data["images"])}
        known_images |= file_images
        for n, annotation in enumerate(data["annotations"]):
            image_id = require_key(annotation, "image_id", int, path=path, location=f"annotations[{n}]")
            category_id = require_key(annotation, "category_id", int, path=path, location=f"annotations[{n}]")
            if category_id not in categories:
                raise DataError(f"category_id {category_id} is not listed in 'categories'", path=path,
                                location=f"annotations[{n}]", expected="a category id of 'categories'")
            if image_id not in file_images:  # an annotation of an image the file does not list
                if on_error == "raise":
                    raise DataError(f"image_id {image_id} is not listed in 'images'", path=path,
                                    location=f"annotations[{n}].image_id", expected="an id of this file's 'images'")
                skipped.append(SkippedItem(os.fspath(path), f"annotations[{n}]",
                                           f"image_id {image_id} is not listed in 'images'; annotation ignored"))
                continue
            annotated.append((image_id, category_id))
    column = {cid: j for j, cid in enumerate(sorted(categories))}
    row = {int(image_id): i for i, image_id in enumerate(image_ids)}
    if len(row) != len(image_ids):
        raise DataError(f"{len(image_ids) - len(row)} repeated image id(s) among the split's images",
                        location="image_ids", expected="one distinct COCO image id per image")
    labels = np.zeros((len(row), len(column)), dtype=bool)
    for image_id, category_id in annotated:
        if image_id in row:
            labels[row[image_id], column[category_id]] = True
    for image_id in row:
        if image_id not in known_images:
            where = ", ".join(os.fspath(p) for p in paths)
            if on_error == "raise":
                raise DataError(f"image id {image_id} is in none of the instances files", path=where,
                                location="images[*].id", expected="every split image listed (use train2014 + val2014 "
                                "files for the Karpathy splits)")
            skipped.append(SkippedItem(where, f"image id {image_id}", "not in any instances file; labels left empty"))
    return torch.from_numpy(labels), [categories[cid] for cid in sorted(categories)], skipped
