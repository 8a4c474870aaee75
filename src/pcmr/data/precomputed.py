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
    require_nonempty,
    warn_skipped,
)
from pcmr.data.images import FeatureImages
from pcmr.data.karpathy import coco_protocol_info
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import tokenize
from pcmr.suggest import unknown_name

__all__ = ["load_precomputed", "EAGER_CHECK_BYTES"]

EAGER_CHECK_BYTES = 1 << 30  # feature arrays up to this size are checked for NaN / inf at load time


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
    if features.ndim not in (2, 3) or not np.issubdtype(features.dtype, np.number) or \
            np.issubdtype(features.dtype, np.complexfloating):
        raise DataError(f"array has shape {features.shape} and dtype {features.dtype}", path=path,
                        expected="a real numeric array [N_img, F] or [N_img, R, F]")
    if 0 in features.shape[1:]:
        raise DataError(f"array has shape {features.shape}: no feature values per image", path=path,
                        expected="a numeric array [N_img, F] or [N_img, R, F] with F >= 1")
    return features, path


def _check_finite(features: np.ndarray, path: Path, *, chunk_bytes: int = 1 << 26) -> None:
    """Raise :class:`DataError` naming the first rows holding NaN or inf (read in chunks of ~64 MB)."""
    if not np.issubdtype(features.dtype, np.floating) or features.shape[0] == 0:
        return
    row_bytes = max(1, features[0].nbytes)
    step = max(1, chunk_bytes // row_bytes)
    bad: list[int] = []
    for start in range(0, features.shape[0], step):
        with np.errstate(over="ignore", invalid="ignore"):
            block = np.asarray(features[start: start + step], dtype=np.float32)  # as the model reads them
        finite = np.isfinite(block.reshape(block.shape[0], -1)).all(axis=1)
        bad.extend((start + np.flatnonzero(~finite)).tolist())
        if len(bad) >= 5:
            break
    if bad:
        raise DataError(f"image features hold NaN or inf (rows {bad[:5]}{', ...' if len(bad) > 5 else ''})",
                        path=path, location=f"row {bad[0]}", expected="finite feature values")


def _parse_id(text: str) -> int | str:
    """An id line: an integer when it reads as one in ASCII (e.g. a COCO id), else the stripped text."""
    text = text.strip()
    body = text[1:] if text.startswith("-") else text
    return int(text) if body.isascii() and body.isdigit() else text


def load_precomputed(
    root: str | os.PathLike,
    split: str = "train",
    *,
    captions_per_image: int | None = None,
    mmap: bool = True,
    check_finite: bool | None = None,
    on_error: str = "raise",
    name: str = "precomputed",
) -> RetrievalSplit:
    """One split of precomputed features + captions (see module docstring for the layout and the rule).

    Args:
        root: the feature folder. split: file prefix (``val`` also finds ``dev``).
        captions_per_image: force the number of captions per image (default: the VSE++ rule).
        mmap: memory-map ``.npy`` features instead of reading them into memory.
        check_finite: read every feature row once at load time and refuse NaN / inf; with ``False``
            each row is checked when it is loaded instead; ``None``: at load time for arrays up to
            ``EAGER_CHECK_BYTES`` (1 GiB), row by row for larger ones (COCO region features are 33 GB).
        on_error: ``"raise"`` or ``"skip"`` empty captions (recorded in ``split.skipped``).
    """
    check_on_error(on_error)
    if captions_per_image is not None and captions_per_image < 1:
        raise DataError(f"captions_per_image={captions_per_image}", location="captions_per_image",
                        expected="a positive integer or None (the VSE++ rule)")
    root = Path(root)
    require_dir(root, "a folder with {split}_ims.npy and {split}_caps.txt")
    prefix = split
    if not (root / f"{split}_caps.txt").is_file():
        if split == "val" and (root / "dev_caps.txt").is_file():
            prefix = "dev"
        else:
            raise MissingDataError(f"{unknown_name('split', split, _available_splits(root))} (the splits present; "
                                   f"{split}_caps.txt not found)", path=root, location="split")
    caps_path = root / f"{prefix}_caps.txt"
    lines = read_text_lines(caps_path, "one UTF-8 caption per line")
    features, feat_path = _load_features(root, prefix, mmap)
    if check_finite or (check_finite is None and features.nbytes <= EAGER_CHECK_BYTES):
        _check_finite(features, feat_path)
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
        if len(raw_ids) == num_lines and per_image > 1:  # one id per caption line: equal within an image
            for image in range(num_images):
                group = raw_ids[image * per_image: (image + 1) * per_image]
                if len(set(group)) != 1:
                    raise DataError(f"the {per_image} caption lines of image row {image} have different ids "
                                    f"{group}", path=ids_path, location=f"lines {image * per_image + 1}-"
                                    f"{(image + 1) * per_image}", expected="one image id repeated per caption")
            raw_ids = raw_ids[::per_image]
        if len(raw_ids) != num_images:
            raise DataError(f"{len(raw_ids)} ids for {num_images} feature rows", path=ids_path,
                            expected=f"{num_images} (per image) or {num_lines} (per caption) lines")
        image_ids = [_parse_id(x) for x in raw_ids]
        seen: dict[object, int] = {}
        for row, image_id in enumerate(image_ids):
            if image_id == "" or image_id in seen:
                problem = "empty image id" if image_id == "" else f"image id {image_id!r} repeats row {seen[image_id]}"
                raise DataError(problem + f" at image row {row}", path=ids_path, location="ids",
                                expected="one distinct, non-empty id per image")
            seen[image_id] = row
    warn_skipped(f"{name} {split}", skipped)
    require_nonempty(num_images, len(texts), path=caps_path, split=split, skipped=len(skipped))
    return RetrievalSplit(
        name=name, split="train" if prefix == "train" else split, images=FeatureImages(features, path=feat_path),
        caption_texts=texts, caption_image=np.asarray(caption_image, dtype=np.int64), image_ids=image_ids,
        caption_ids=caption_ids, skipped=skipped,
        info={"features": str(feat_path), "captions": str(caps_path), "captions_per_image": per_image,
              "caption_id_kind": "line_index", **coco_protocol_info(name, num_images)},
    )
