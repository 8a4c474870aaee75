"""CUB-200-2011 with Reed et al.'s ``text_c10`` captions and the 150/50 class split (PCME "CUB Captions").

Layout (``root``)::

    root/CUB_200_2011/images.txt              # "<image id> <class dir>/<file>.jpg"
    root/CUB_200_2011/image_class_labels.txt  # "<image id> <class id>"
    root/CUB_200_2011/classes.txt             # "<class id> <class dir>"
    root/CUB_200_2011/images/<class dir>/<file>.jpg
    root/text_c10/<class dir>/<file>.txt      # 10 captions, one per line (Reed et al. 2016)
    root/trainvalclasses.txt, root/testclasses.txt   # class dirs, one per line (Xian et al. split)
    root/trainclasses.txt, root/valclasses.txt       # optional, for "train_minus_val" / "val"

Splits: ``train`` = the 150 ``trainvalclasses``, ``test`` = the 50 unseen ``testclasses``,
``val`` / ``train_minus_val`` = ``valclasses`` / ``trainclasses`` when those files exist,
``seen_test`` = the trainval-class images listed in ``seen_test_images.txt``. Relevance is
class-level: a caption is relevant to every image of its class. Image labels:
one-hot over the 200 classes.

``protocol`` chooses what ``train`` holds:

- ``pcmr`` (default): every image of the trainval classes;
- ``release``: as PCME's release (naver-ai/pcme ``datasets/_dataloader.py``, dataset ``cub``): the
  trainval-class images minus the 1,764 of ``seen_test_images.txt`` (the zero-shot split's held-out
  images of seen classes). The release validates once, at the end, on ``test`` (the recipe
  ``pcme_cub``). The list is read from ``root`` (or ``CUB_200_2011/``, or ``class_split_dir``) when
  there, else the copy shipped with pcmr (``pcmr/data/cub_release/seen_test_images.txt``, the
  release's file, one ``<class dir>/<file>.jpg`` per line).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from pcmr.data.errors import (
    DataError,
    MissingDataError,
    SkippedItem,
    check_on_error,
    read_text_lines,
    require_dir,
    require_nonempty,
    warn_skipped,
)
from pcmr.data.images import FileImages
from pcmr.data.relevance import Relevance
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import tokenize
from pcmr.suggest import unknown_name

__all__ = ["load_cub", "CUB_PROTOCOLS", "CUB_SPLIT_FILES", "SHIPPED_SEEN_TEST"]

CUB_SPLIT_FILES = {"train": "trainvalclasses.txt", "test": "testclasses.txt", "val": "valclasses.txt",
                   "train_minus_val": "trainclasses.txt", "seen_test": "trainvalclasses.txt"}
#: ``load_cub(protocol=...)``: what the ``train`` split holds (module docstring)
CUB_PROTOCOLS = ("pcmr", "release")
SEEN_TEST_FILE = "seen_test_images.txt"
#: the PCME release's list of held-out images of the trainval classes (its datasets/annotations/cub/)
SHIPPED_SEEN_TEST = Path(__file__).resolve().parent / "cub_release" / SEEN_TEST_FILE


def _seen_test_images(split_dirs: list[Path]) -> set[str]:
    """The ``<class dir>/<file>.jpg`` entries of ``seen_test_images.txt`` (the user's, else pcmr's copy)."""
    path = _first_existing(*(d / SEEN_TEST_FILE for d in split_dirs)) or SHIPPED_SEEN_TEST
    entries = set()
    for number, line in enumerate(read_text_lines(path, "'<class dir>/<file>.jpg' per line"), start=1):
        entry = line.strip()
        if not entry:
            continue
        if entry.count("/") != 1 or entry.startswith("/") or entry.endswith("/"):
            raise DataError(f"line reads {line!r}", path=path, location=f"line {number}",
                            expected="'<class dir>/<file>.jpg' per line, as in CUB_200_2011/images.txt")
        entries.add(entry)
    return entries


def _pairs(path: Path, what: str) -> list[tuple[str, str]]:
    out = []
    for number, line in enumerate(read_text_lines(path, what), start=1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2:
            raise DataError(f"line reads {line!r}", path=path, location=f"line {number}", expected=what)
        out.append((parts[0], parts[1].strip()))
    return out


def _numbered(path: Path, what: str) -> list[tuple[int, str, int]]:
    """``(id, rest, line number)`` of the ``"<integer id> <rest>"`` lines; ids must be distinct."""
    out: list[tuple[int, str, int]] = []
    seen: dict[int, int] = {}
    for number, (first, rest) in enumerate(_pairs(path, what), start=1):
        if not (first.isascii() and first.isdigit()):
            raise DataError(f"id {first!r} is not a non-negative integer", path=path, location=f"line {number}",
                            expected=what)
        key = int(first)
        if key in seen:
            raise DataError(f"id {key} repeats line {seen[key]}", path=path, location=f"line {number}",
                            expected=f"{what}, each id once")
        seen[key] = number
        out.append((key, rest, number))
    return out


def _first_existing(*candidates: Path) -> Path | None:
    return next((c for c in candidates if c.exists()), None)


def load_cub(
    root: str | os.PathLike,
    split: str = "train",
    *,
    image_size: int = 224,
    image_resize: str = "square",
    resize_size: int | None = None,
    class_split_dir: str | os.PathLike | None = None,
    protocol: str = "pcmr",
    check_images: bool = True,
    on_error: str = "raise",
) -> RetrievalSplit:
    """One class split of CUB Captions (see module docstring for the layout and ``protocol``).

    ``image_size``, ``image_resize``, ``resize_size``: how an image file becomes the square model input
    (``pcmr.data.images.FileImages``; the PCME release: ``center_crop``, 256 then 224).
    """
    check_on_error(on_error)
    if protocol not in CUB_PROTOCOLS:
        raise DataError(unknown_name("protocol", str(protocol), CUB_PROTOCOLS), location="protocol")
    root = Path(root)
    require_dir(root, "a folder holding CUB_200_2011/ and text_c10/")
    cub = root / "CUB_200_2011" if (root / "CUB_200_2011").is_dir() else root
    text_dir = _first_existing(root / "text_c10", cub / "text_c10")
    if text_dir is None:
        raise MissingDataError("folder not found", path=root / "text_c10",
                               expected="Reed et al.'s text_c10/<class dir>/<image>.txt captions")
    if split not in CUB_SPLIT_FILES:
        raise DataError(unknown_name("split", str(split), CUB_SPLIT_FILES))
    split_dirs = [Path(class_split_dir)] if class_split_dir is not None else [root, cub]
    split_file = _first_existing(*(d / CUB_SPLIT_FILES[split] for d in split_dirs))
    if split_file is None:
        raise MissingDataError("class split file not found", path=split_dirs[0] / CUB_SPLIT_FILES[split],
                               expected=f"{CUB_SPLIT_FILES[split]} listing class folders, one per line")
    classes_file = cub / "classes.txt"
    classes = {cid: directory for cid, directory, _ in _numbered(classes_file, "'<class id> <class dir>' per line")}
    class_ids = {directory: cid for cid, directory in classes.items()}
    if len(class_ids) != len(classes):
        raise DataError("a class folder is listed under two ids", path=classes_file, location="classes",
                        expected="one line per class folder")
    column = {cid: j for j, cid in enumerate(sorted(classes))}
    wanted = [line.strip() for line in read_text_lines(split_file, "class folders, one per line") if line.strip()]
    for number, directory in enumerate(wanted, start=1):
        if directory not in class_ids:
            raise DataError(f"class {directory!r} is not in classes.txt", path=split_file, location=f"line {number}",
                            expected="class folder names of CUB_200_2011/classes.txt")
    wanted_set = set(wanted)
    seen_test = _seen_test_images(split_dirs) if split == "seen_test" or (
        split == "train" and protocol == "release") else None
    labels_file = cub / "image_class_labels.txt"
    labels: dict[int, int] = {}
    for image_id, text, number in _numbered(labels_file, "'<image id> <class id>' per line"):
        if not (text.isascii() and text.isdigit()) or int(text) not in classes:
            raise DataError(f"class id {text!r} is not in classes.txt", path=labels_file, location=f"line {number}",
                            expected="a class id of CUB_200_2011/classes.txt")
        labels[image_id] = int(text)
    skipped: list[SkippedItem] = []
    paths: list[str] = []
    keys: list[str] = []
    image_ids: list[int] = []
    image_class: list[int] = []
    texts: list[str] = []
    caption_image: list[int] = []
    caption_ids: list[int] = []
    images_file = cub / "images.txt"
    for image_id, relative, _ in _numbered(images_file, "'<image id> <class dir>/<file>.jpg' per line"):
        directory = relative.split("/", 1)[0]
        if directory not in wanted_set:
            continue
        if seen_test is not None and (relative in seen_test) != (split == "seen_test"):
            continue  # release protocol: seen_test images leave train; seen_test keeps only them
        if image_id not in labels:
            raise DataError(f"image id {image_id} has no class", path=labels_file,
                            location=f"image id {image_id}", expected="a line for every image of images.txt")
        if labels[image_id] != class_ids[directory]:
            raise DataError(f"image id {image_id} has class {labels[image_id]} but lies in folder {directory!r} "
                            f"(class {class_ids[directory]})", path=labels_file, location=f"image id {image_id}",
                            expected="the class of the image's folder in classes.txt")
        image_path = cub / "images" / relative
        text_path = text_dir / (os.path.splitext(relative)[0] + ".txt")
        problem: str | None = None
        error: type[DataError] = MissingDataError  # a missing file; a file without a caption: DataError
        where = text_path
        if check_images and not image_path.is_file():
            problem, where = "image file not found", image_path
        elif not text_path.is_file():
            problem = "caption file not found"
        lines: list[str] = []
        if problem is None:
            lines = read_text_lines(text_path, "one UTF-8 caption per line")
            if not any(tokenize(line) for line in lines):
                problem, error = "caption file has no caption", DataError
            elif len(lines) > 100:  # caption ids are image id * 100 + line
                raise DataError(f"{len(lines)} lines", path=text_path, location="captions",
                                expected="at most 100 captions per image (text_c10 has 10)")
        if problem:
            if on_error == "raise":
                raise error(problem, path=where,
                            location=f"images.txt id {image_id}", expected="an image and its text_c10 captions")
            skipped.append(SkippedItem(str(images_file), f"image id {image_id}", problem))
            continue
        index = len(paths)
        for number, line in enumerate(lines, start=1):
            if not tokenize(line):
                if number == len(lines) and not line.strip():
                    continue  # a trailing blank line is not a caption
                if on_error == "raise":
                    raise DataError("empty caption", path=text_path, location=f"line {number}",
                                    expected="a caption with words on every line")
                skipped.append(SkippedItem(str(text_path), f"line {number}", "empty caption"))
                continue
            texts.append(line.strip())
            caption_image.append(index)
            caption_ids.append(image_id * 100 + number - 1)
        paths.append(str(image_path))
        keys.append(f"images.txt id {image_id}")
        image_ids.append(image_id)
        image_class.append(labels[image_id])
    image_class_arr = np.asarray(image_class, dtype=np.int64)
    caption_image_arr = np.asarray(caption_image, dtype=np.int64)
    one_hot = torch.zeros(len(paths), len(classes), dtype=torch.bool)  # columns: class ids in increasing order
    one_hot[torch.arange(len(paths)), torch.tensor([column[c] for c in image_class], dtype=torch.long)] = True
    warn_skipped(f"cub {split}", skipped)
    require_nonempty(len(paths), len(texts), path=images_file, split=split, skipped=len(skipped))
    return RetrievalSplit(
        name="cub", split=split, images=FileImages(paths, image_size, keys=keys, image_resize=image_resize,
                              resize_size=resize_size), caption_texts=texts,
        caption_image=caption_image_arr,
        relevance=Relevance.from_classes(image_class_arr, image_class_arr[caption_image_arr]),
        image_ids=image_ids, caption_ids=caption_ids, image_labels=one_hot,
        label_names=[classes[cid] for cid in sorted(classes)],
        skipped=skipped,
        info={"classes": wanted, "image_class": image_class_arr, "caption_id_kind": "image_id*100+line",
              "protocol": protocol},
    )
