"""A folder of one's own images with a captions file (CSV or JSONL), also the Hugging Face ``imagefolder`` layout.

Layout (``root``)::

    myphotos/
      captions.csv            # or captions.jsonl, metadata.csv, metadata.jsonl (Hugging Face imagefolder)
      beach.jpg
      trip/dog.png            # file names are relative to the folder of the captions file

``captions.csv``: a header row, then one row per caption (an image may have several rows)::

    image,caption
    beach.jpg,two people walking on a sandy beach
    beach.jpg,a beach at sunset
    trip/dog.png,a brown dog catching a frisbee

``captions.jsonl``: one JSON object per line, ``{"image": "beach.jpg", "caption": "..."}``; the caption may
be a list of captions. Column names: the image is ``image``, ``file_name`` (Hugging Face), ``file``,
``filename`` or ``path``; the caption ``caption``, ``text`` (Hugging Face), ``captions`` or ``sentence``.
An optional ``split`` column (``train``, ``val``/``validation``, ``test``) fixes each image's split;
without it pcmr splits by image with a seed (:mod:`pcmr.data.owndata`).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from pcmr.data.errors import (
    DataError,
    MissingDataError,
    SkippedItem,
    check_on_error,
    require_dir,
    require_file,
)
from pcmr.data.images import FileImages
from pcmr.data.owndata import (
    DEFAULT_SPLIT_FRACTIONS,
    SPLIT_ALIASES,
    OwnRecord,
    build_own_split,
    check_caption,
    split_name,
)
from pcmr.data.split import RetrievalSplit

__all__ = ["CAPTION_FILES", "IMAGE_COLUMNS", "CAPTION_COLUMNS", "IMAGE_EXTENSIONS", "find_captions_file",
           "split_folders", "read_caption_rows", "load_folder"]

#: the captions files a folder is recognised by, in the order they are looked for
CAPTION_FILES = ("captions.csv", "captions.jsonl", "metadata.csv", "metadata.jsonl")
#: column names of the image file, in order of preference
IMAGE_COLUMNS = ("image", "file_name", "file", "filename", "path")
#: column names of the caption, in order of preference
CAPTION_COLUMNS = ("caption", "text", "captions", "sentence")
#: file endings counted as images (the ``all`` split also takes images without captions)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")

_ROWS = ("a header row naming the image column (" + "/".join(IMAGE_COLUMNS) + ") and the caption column ("
         + "/".join(CAPTION_COLUMNS) + "), optionally 'split'")


def find_captions_file(folder: str | os.PathLike) -> Path | None:
    """The first of :data:`CAPTION_FILES` present in ``folder``, or None."""
    for name in CAPTION_FILES:
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    return None


def split_folders(folder: str | os.PathLike) -> list[tuple[Path, str]]:
    """``(captions file, split)`` of the split subfolders of ``folder`` that hold one (the ``imagefolder``
    layout ``train/metadata.csv``, ``test/metadata.csv``; folder names as :data:`SPLIT_ALIASES`)."""
    found = []
    for sub in sorted(p for p in Path(folder).iterdir() if p.is_dir() and p.name.lower() in SPLIT_ALIASES):
        file = find_captions_file(sub)
        if file is not None:
            found.append((file, SPLIT_ALIASES[sub.name.lower()]))
    return found


def _decode(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataError(f"not valid UTF-8 ({err.reason})", path=path, location=f"line {line}",
                        expected="a UTF-8 captions file") from None


def _column(names: list[str], choices: tuple[str, ...], what: str, *, path: Path, location: str) -> str:
    lowered = {n.strip().lower(): n for n in names}
    for choice in choices:
        if choice in lowered:
            return lowered[choice]
    raise DataError(f"no {what} column (columns: {names})", path=path, location=location,
                    expected=f"a column named one of {list(choices)}")


def read_caption_rows(path: str | os.PathLike) -> list[tuple[str, Any, Any, str]]:
    """Rows of a captions CSV / JSONL file as ``(image, caption or list of captions, split or None,
    location)``; a missing column, a malformed line or a non-string image name is a :class:`DataError`."""
    path = Path(path)
    require_file(path, "a captions file (" + " or ".join(CAPTION_FILES) + ")")
    text = _decode(path)
    rows: list[tuple[str, Any, Any, str]] = []
    if path.suffix.lower() == ".csv":
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            header = next(reader, None)
            if not header:
                raise DataError("empty captions file", path=path, location="line 1", expected=_ROWS)
            image_col = header.index(_column(header, IMAGE_COLUMNS, "image", path=path, location="line 1"))
            caption_col = header.index(_column(header, CAPTION_COLUMNS, "caption", path=path, location="line 1"))
            split_col = next((i for i, n in enumerate(header) if n.strip().lower() == "split"), None)
            for values in reader:
                where = f"line {reader.line_num}"
                if not any(v.strip() for v in values):
                    continue
                if len(values) != len(header):
                    raise DataError(f"{len(values)} fields, the header has {len(header)}", path=path, location=where,
                                    expected="one value per column (quote captions holding commas)")
                split = values[split_col] if split_col is not None and values[split_col].strip() else None
                rows.append((values[image_col], values[caption_col], split, where))
        except csv.Error as err:
            raise DataError(f"malformed CSV ({err})", path=path, location=f"line {reader.line_num}",
                            expected=_ROWS) from None
        return rows
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"line {number}"
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"malformed JSON ({err.msg})", path=path, location=f"{where} column {err.colno}",
                            expected='one JSON object per line, e.g. {"image": "a.jpg", "caption": "..."}') from None
        if not isinstance(record, dict):
            raise DataError(f"is a {type(record).__name__}", path=path, location=where, expected="a JSON object")
        image = record[_column(list(record), IMAGE_COLUMNS, "image", path=path, location=where)]
        caption = record[_column(list(record), CAPTION_COLUMNS, "caption", path=path, location=where)]
        rows.append((image, caption, record.get("split"), where))
    return rows


def _rows(sources: list[tuple[Path, str | None]]) -> Iterator[tuple[str, Any, Any, str, Path, str | None]]:
    """The rows of every captions file, with the file and the split its folder gives (None: the top)."""
    for file, forced in sources:
        for image, caption, split, where in read_caption_rows(file):
            yield image, caption, split, where, file, forced


def _image_files(folder: Path) -> list[str]:
    """Every image file under ``folder`` (by its ending), relative POSIX paths, sorted; a link whose
    target lies outside ``folder`` is left out (nothing outside the data folder is read)."""
    found = []
    inside = Path(folder).resolve()
    for directory, subdirs, files in os.walk(folder):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in files:
            if (name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith(".")
                    and (Path(directory) / name).resolve().is_relative_to(inside)):
                found.append(PurePosixPath(*(Path(directory) / name).relative_to(folder).parts).as_posix())
    return sorted(found)


def load_folder(
    root: str | os.PathLike | None = None,
    split: str = "train",
    *,
    captions_file: str | os.PathLike | None = None,
    image_size: int = 224,
    image_resize: str = "square",
    resize_size: int | None = None,
    seed: int = 0,
    split_fractions: list[float] | None = None,
    check_images: bool = True,
    on_error: str = "raise",
) -> RetrievalSplit:
    """One split of a folder of images with a captions file (module docstring).

    Args:
        root: the folder (holding one of :data:`CAPTION_FILES`), or the captions file itself.
        split: ``train``, ``val``, ``test`` or ``all`` (every image of the folder, captioned or not).
        captions_file: the captions file, when not one of :data:`CAPTION_FILES` in ``root``.
        image_size, image_resize, resize_size: how a file becomes the square model input
            (:class:`pcmr.data.images.FileImages`); ``pcmr train --data`` sets ``image_size`` from the model.
        seed, split_fractions: the seeded split by image (without a ``split`` column); default 80/10/10.
        check_images: verify at load time that every image file named exists.
        on_error: ``"raise"`` (default) or ``"skip"`` rows naming missing images or empty captions.
    """
    check_on_error(on_error)
    sources: list[tuple[Path, str | None]] = []
    if captions_file is None:
        if root is None:
            raise DataError("no data location given", location="root", expected="an image folder with a captions file")
        if Path(root).is_file():
            captions_file = root
        else:
            require_dir(root, "an image folder with a captions file")
            captions_file = find_captions_file(root)
            if captions_file is None:
                sources = [(file, split) for file, split in split_folders(root)]
                if not sources:
                    raise MissingDataError("no captions file found", path=root, expected="one of "
                                           + ", ".join(CAPTION_FILES) + " in this folder (or in its train/, val/, "
                                           "test/ subfolders)")
    if not sources and captions_file is not None:
        sources = [(Path(captions_file), None)]
    folder = sources[0][0].parent if sources[0][1] is None else sources[0][0].parent.parent
    path = sources[0][0] if len(sources) == 1 else folder
    skipped: list[SkippedItem] = []
    records: dict[str, OwnRecord] = {}
    for image, caption, given_split, where, file, forced in _rows(sources):
        if not isinstance(image, str) or not image.strip():
            raise DataError(f"image name {image!r}", path=file, location=where,
                            expected="the image's file name, relative to the captions file's folder")
        key = (PurePosixPath(*file.parent.relative_to(folder).parts) / image.strip().replace(os.sep, "/")).as_posix()
        try:
            captions = [check_caption(c, path=file, location=f"{where}, caption")
                        for c in (caption if isinstance(caption, list) else [caption])]
            if isinstance(caption, list) and not caption:
                raise DataError("empty caption list", path=file, location=f"{where}, caption",
                                expected="at least one caption")
            if not (folder / key).resolve().is_relative_to(folder.resolve()):  # never read outside the folder
                raise DataError(f"image {image.strip()!r} lies outside the data folder {folder}", path=file,
                                location=where, expected="a file name relative to the captions file's folder and "
                                "inside it (no absolute path, no '..' out of it, no link leading out)")
            if check_images and key not in records and not (folder / key).is_file():
                raise MissingDataError("image file not found", path=folder / key, location=f"{file.name}, {where}",
                                       expected="an image file next to the captions file")
        except DataError as err:
            if on_error == "raise":
                raise
            skipped.append(SkippedItem(str(file), where, err.problem))
            continue
        split_value = None if given_split is None else split_name(given_split, path=file, location=f"{where}, split")
        if forced is not None and split_value not in (None, forced):
            raise DataError(f"split {split_value!r} in the {forced!r} folder", path=file, location=f"{where}, split",
                            expected=f"{forced!r} or no split value")
        split_value = forced or split_value
        record = records.setdefault(key, OwnRecord(key, [], split_value, f"{file.name}, {where}"))
        if record.split != split_value:
            raise DataError(f"image {key!r} is in split {split_value!r} here and {record.split!r} at {record.location}",
                            path=file, location=where, expected="one split per image")
        record.captions.extend(captions)
    ordered = list(records.values())
    if split == "all":  # the images of the folder that no row names come last, without captions
        named = set(records)
        ordered += [OwnRecord(f, [], None, "") for f in _image_files(folder) if f not in named]

    def images(chosen: list[int]) -> FileImages:
        return FileImages([str(folder / ordered[i].key) for i in chosen], image_size,
                          keys=[ordered[i].location or ordered[i].key for i in chosen],
                          image_resize=image_resize, resize_size=resize_size)

    return build_own_split(ordered, split, name="folder", path=path, make_images=images, seed=seed,
                           split_fractions=split_fractions or DEFAULT_SPLIT_FRACTIONS, skipped=skipped,
                           info={"captions_file": str(path), "image_root": str(folder)})
