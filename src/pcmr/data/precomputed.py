"""Precomputed image features in the VSE++ / SCAN / VSE-infinity layout.

Layout (``root``)::

    root/{split}_ims.npy     # float [N_img, F] (pooled) or [N_img, R, F] (regions, e.g. 36 x 2048)
      or {split}_ims.npz     # one array (key "features", "ims", or the only key)
    root/{split}_caps.txt    # one caption per line, UTF-8
    root/{split}_ids.txt     # optional: one image id per image line (or per caption line)

Split names are the files' prefixes; ``val`` falls back to ``dev`` (VSE++ naming).
Captions-per-image rule (VSE++ ``im_div``): ``N_cap == N_img`` -> one caption per
image; ``N_cap == 5 * N_img`` -> caption ``c`` belongs to image ``c // 5``;
anything else is an error naming both counts (or set ``captions_per_image``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pcmr.data.errors import (
    DataError,
    MissingDataError,
    SkippedItem,
    check_on_error,
    read_text_lines,
    require_dir,
    warn_skipped,
)
from pcmr.data.images import FeatureImages
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import tokenize

__all__ = ["load_precomputed"]


def _available_splits(root: Path) -> list[str]:
    return sorted(p.name[: -len("_caps.txt")] for p in root.glob("*_caps.txt"))


def _load_features(root: Path, prefix: str, mmap: bool) -> tuple[np.ndarray, Path]:
    npy, npz = root / f"{prefix}_ims.npy", root / f"{prefix}_ims.npz"
    try:
        if npy.is_file():
            features = np.load(npy, mmap_mode="r" if mmap else None, allow_pickle=False)
            path = npy
        elif npz.is_file():
            path = npz
            with np.load(npz, allow_pickle=False) as data:
                keys = [k for k in ("features", "ims") if k in data.files] or data.files
                if len(keys) != 1 and not {"features", "ims"} & set(data.files):
                    raise DataError(f"holds arrays {data.files}", path=npz,
                                    expected="one array, or an array named 'features' or 'ims'")
                features = data[keys[0]]
        else:
            raise MissingDataError("feature file not found", path=npy, expected=f"{npy.name} or {npz.name}")
    except (ValueError, OSError, EOFError) as err:
        if isinstance(err, DataError):
            raise
        raise DataError(f"cannot read features ({err})", path=npy if npy.is_file() else npz,
                        expected="a numeric .npy/.npz array [N, F] or [N, R, F]") from None
    if features.ndim not in (2, 3) or not np.issubdtype(features.dtype, np.number):
        raise DataError(f"array has shape {features.shape} and dtype {features.dtype}", path=path,
                        expected="a numeric array [N_img, F] or [N_img, R, F]")
    return features, path


def load_precomputed(
    root: str | os.PathLike,
    split: str = "train",
    *,
    captions_per_image: int | None = None,
    mmap: bool = True,
    on_error: str = "raise",
    name: str = "precomputed",
) -> RetrievalSplit:
    """One split of precomputed features + captions (see module docstring for the layout and the rule).

    Args:
        root: the feature folder. split: file prefix (``val`` also finds ``dev``).
        captions_per_image: force the number of captions per image (default: the VSE++ rule).
        mmap: memory-map ``.npy`` features instead of reading them into memory.
        on_error: ``"raise"`` or ``"skip"`` empty captions (recorded in ``split.skipped``).
    """
    check_on_error(on_error)
    root = Path(root)
    require_dir(root, "a folder with {split}_ims.npy and {split}_caps.txt")
    prefix = split
    if not (root / f"{split}_caps.txt").is_file():
        if split == "val" and (root / "dev_caps.txt").is_file():
            prefix = "dev"
        else:
            raise DataError(f"unknown split {split!r}: {split}_caps.txt not found", path=root, location="split",
                            expected=f"one of the splits present: {_available_splits(root)}")
    caps_path = root / f"{prefix}_caps.txt"
    lines = read_text_lines(caps_path, "one UTF-8 caption per line")
    features, feat_path = _load_features(root, prefix, mmap)
    num_images, num_lines = features.shape[0], len(lines)
    per_image = captions_per_image
    if per_image is None:
        per_image = 1 if num_lines == num_images else (5 if num_lines == 5 * num_images else None)
    if per_image is None or num_lines != per_image * num_images:
        raise DataError(f"caption/feature count mismatch: {num_lines} captions in {caps_path.name} for "
                        f"{num_images} feature rows", path=caps_path,
                        expected=f"{num_images} (1 per image) or {5 * num_images} (5 per image) lines"
                        if captions_per_image is None else f"{per_image * num_images} lines")
    skipped: list[SkippedItem] = []
    texts, caption_image, caption_ids = [], [], []
    for line_index, line in enumerate(lines):
        if not tokenize(line):
            if on_error == "raise":
                raise DataError("empty caption", path=caps_path, location=f"line {line_index + 1}",
                                expected="a caption with words on every line")
            skipped.append(SkippedItem(str(caps_path), f"line {line_index + 1}", "empty caption"))
            continue
        texts.append(line.strip())
        caption_image.append(line_index // per_image)
        caption_ids.append(line_index)
    image_ids: list = list(range(num_images))
    ids_path = root / f"{prefix}_ids.txt"
    if ids_path.is_file():
        raw_ids = read_text_lines(ids_path, "one image id per line")
        if len(raw_ids) == num_lines and per_image > 1:
            raw_ids = raw_ids[::per_image]
        if len(raw_ids) != num_images:
            raise DataError(f"{len(raw_ids)} ids for {num_images} feature rows", path=ids_path,
                            expected=f"{num_images} (per image) or {num_lines} (per caption) lines")
        image_ids = [int(x) if x.strip().lstrip("-").isdigit() else x.strip() for x in raw_ids]
    warn_skipped(f"{name} {split}", skipped)
    return RetrievalSplit(
        name=name, split="train" if prefix == "train" else split, images=FeatureImages(features),
        caption_texts=texts, caption_image=np.asarray(caption_image, dtype=np.int64), image_ids=image_ids,
        caption_ids=caption_ids, skipped=skipped,
        info={"features": str(feat_path), "captions": str(caps_path), "captions_per_image": per_image,
              "caption_id_kind": "line_index"},
    )
