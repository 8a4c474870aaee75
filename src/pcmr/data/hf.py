"""A Hugging Face ``datasets`` dataset saved on disk (``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``).

Read with ``datasets.load_from_disk`` (the optional extra ``pip install 'pcmr[hf]'``); nothing is
downloaded. One row per image: an image column (a ``datasets.Image`` feature, or a column named
``image``) and a caption column (``caption``, ``text``, ``captions``, ``sentences`` or ``sentence``: a
string or a list of strings). A ``DatasetDict`` with more than one split gives its splits
(``validation`` read as ``val``); a single ``Dataset`` (or a ``DatasetDict`` holding one split) is split
by its ``split`` column when it has one, else by pcmr with a seed (:mod:`pcmr.data.owndata`). An image
folder with a ``metadata.csv`` / ``metadata.jsonl`` (the ``imagefolder`` layout) is read without
``datasets`` by :func:`pcmr.data.folder.load_folder`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from pcmr.data.errors import DataError, MissingDataError, SkippedItem, check_on_error
from pcmr.data.images import ImageSource
from pcmr.data.owndata import (
    DEFAULT_SPLIT_FRACTIONS,
    DecodedImages,
    OwnRecord,
    build_own_split,
    check_caption,
    split_name,
)
from pcmr.data.split import RetrievalSplit

__all__ = ["HF_MARKERS", "HFImages", "load_hf"]

#: files ``save_to_disk`` writes: a ``DatasetDict`` folder, a ``Dataset`` folder
HF_MARKERS = ("dataset_dict.json", "dataset_info.json")
_CAPTION_COLUMNS = ("caption", "text", "captions", "sentences", "sentence")
_NAME_COLUMNS = ("file_name", "filename", "image_path", "path", "image_id", "id")


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise DataError("reading a Hugging Face dataset needs the 'datasets' package",
                        expected="pip install 'pcmr[hf]' (or pip install datasets)") from None
    return datasets


class HFImages(DecodedImages):
    """Rows of a ``datasets.Dataset`` image column, decoded by ``datasets`` to Pillow images on demand
    (:class:`pcmr.data.owndata.DecodedImages`)."""

    def __init__(self, table: Any, column: str, rows: list[int], image_size: int = 224, keys: list[str] | None = None,
                 *, image_resize: str = "square", resize_size: int | None = None) -> None:
        super().__init__(len(rows), image_size, keys, image_resize=image_resize, resize_size=resize_size)
        self.table, self.column, self.rows = table, column, list(rows)

    def decode(self, index: int, convert: Callable[[Image.Image], Any]) -> Any:
        try:
            value = self.table[self.rows[index]][self.column]
        except (OSError, ValueError) as err:
            raise DataError(f"image failed to decode ({err})", location=self.keys[index],
                            expected="an image the datasets Image feature can decode") from None
        if not isinstance(value, Image.Image):
            raise DataError(f"column {self.column!r} holds a {type(value).__name__}", location=self.keys[index],
                            expected="a datasets Image feature (decoded to a Pillow image)")
        return convert(value)


def _image_column(table: Any, datasets: Any, *, path: Path, where: str) -> str:
    for name, feature in table.features.items():
        if isinstance(feature, datasets.Image):
            return str(name)
    if "image" in table.column_names:
        return "image"
    raise DataError(f"no image column (columns: {table.column_names})", path=path, location=where,
                    expected="a column of the datasets Image feature (or named 'image')")


def _column(table: Any, choices: tuple[str, ...]) -> str | None:
    return next((c for c in choices if c in table.column_names), None)


def load_hf(
    root: str | os.PathLike | None = None,
    split: str = "train",
    *,
    image_column: str | None = None,
    caption_column: str | None = None,
    image_size: int = 224,
    image_resize: str = "square",
    resize_size: int | None = None,
    seed: int = 0,
    split_fractions: list[float] | None = None,
    on_error: str = "raise",
) -> RetrievalSplit:
    """One split (``train``, ``val``, ``test`` or ``all``) of a dataset saved by ``datasets``' ``save_to_disk``.

    Args:
        root: the folder ``save_to_disk`` wrote.
        image_column, caption_column: column names (default: found by feature type / name, module docstring).
        image_size, image_resize, resize_size, seed, split_fractions, on_error: as
            :func:`pcmr.data.folder.load_folder`.
    """
    check_on_error(on_error)
    if root is None:
        raise DataError("no data location given", location="root", expected="a folder written by save_to_disk")
    path = Path(root)
    if not any((path / marker).is_file() for marker in HF_MARKERS):
        raise MissingDataError("not a saved Hugging Face dataset", path=path,
                               expected=" or ".join(HF_MARKERS) + " (written by save_to_disk) in this folder")
    datasets = _datasets()
    try:
        loaded = datasets.load_from_disk(str(path))
    except (OSError, ValueError) as err:
        raise DataError(f"datasets.load_from_disk failed ({err})", path=path,
                        expected="a folder written by Dataset.save_to_disk or DatasetDict.save_to_disk") from None
    parts = dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"": loaded}
    named = len(parts) > 1
    records: list[OwnRecord] = []
    sources: list[tuple[Any, str, int]] = []
    skipped: list[SkippedItem] = []
    for part_name, table in parts.items():
        where = f"split {part_name!r}" if part_name else "dataset"
        image_col = image_column or _image_column(table, datasets, path=path, where=where)
        caption_col = caption_column or _column(table, _CAPTION_COLUMNS)
        for column, what in ((image_col, "image"), (caption_col, "caption")):
            if column is None or column not in table.column_names:
                raise DataError(f"no {what} column {column or ''} (columns: {table.column_names})".replace("  ", " "),
                                path=path, location=where,
                                expected=f"a {what} column" + ("" if what == "image" else f", one of {list(_CAPTION_COLUMNS)}"))
        images_only = table.select_columns([image_col])  # rows decode only the image
        part_split = split_name(part_name, path=path, location=where) if named else None
        captions_column = table[caption_col]
        split_column = table["split"] if not named and "split" in table.column_names else None
        name_col = _column(table, _NAME_COLUMNS)
        names = table[name_col] if name_col is not None else None
        prefix = f"{part_name}/" if part_name else ""
        for row, value in enumerate(captions_column):
            at = f"{where}, row {row}"
            try:
                captions = [check_caption(c, path=path, location=f"{at}, {caption_col}")
                            for c in (value if isinstance(value, list) else [value])]
                if not captions:
                    raise DataError("empty caption list", path=path, location=at, expected="at least one caption")
            except DataError as err:
                if on_error == "raise":
                    raise
                skipped.append(SkippedItem(str(path), at, err.problem))
                continue
            given = part_split if named else (None if split_column is None
                                              else split_name(split_column[row], path=path, location=f"{at}, split"))
            label = str(names[row]) if names is not None and names[row] is not None else f"row {row}"
            records.append(OwnRecord(f"{prefix}{label}", captions, given, at))
            sources.append((images_only, image_col, row))
    keys = [r.key for r in records]
    if len(set(keys)) != len(keys):  # names that repeat: number the rows instead
        for record in records:
            record.key = record.location

    def images(chosen: list[int]) -> ImageSource:
        if len({id(sources[i][0]) for i in chosen}) <= 1:
            table, column = (sources[chosen[0]][0], sources[chosen[0]][1]) if chosen else (None, "")
            return HFImages(table, column, [sources[i][2] for i in chosen], image_size,
                            keys=[records[i].location for i in chosen], image_resize=image_resize,
                            resize_size=resize_size)
        tables = list({id(sources[i][0]): sources[i][0] for i in chosen}.values())
        column = sources[chosen[0]][1]
        joined = datasets.concatenate_datasets(tables)
        offsets = np.cumsum([0] + [len(t) for t in tables]).tolist()
        position = {id(t): offsets[n] for n, t in enumerate(tables)}
        return HFImages(joined, column, [position[id(sources[i][0])] + sources[i][2] for i in chosen], image_size,
                        keys=[records[i].location for i in chosen], image_resize=image_resize, resize_size=resize_size)

    return build_own_split(records, split, name="hf", path=path, make_images=images, seed=seed,
                           split_fractions=split_fractions or DEFAULT_SPLIT_FRACTIONS, skipped=skipped)
