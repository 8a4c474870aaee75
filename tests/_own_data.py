"""Tiny datasets of one's own images, generated on the fly: an image folder with a captions CSV, the same
as webdataset shards and as a Hugging Face ``save_to_disk`` folder.

Every image is a flat colour with a small square of another colour, and its two captions name both, so a
model can learn something in one epoch; the names are what the tests check."""

from __future__ import annotations

import csv
import io
import json
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

COLOURS = {"red": (220, 40, 40), "green": (40, 190, 60), "blue": (40, 60, 220), "yellow": (230, 220, 40),
           "purple": (150, 50, 170)}


def samples(count: int = 20) -> list[tuple[str, np.ndarray, list[str]]]:
    """``(file name, uint8 pixels [H, W, 3], captions)`` of ``count`` images (sizes vary: 20-27 x 24 px)."""
    names = list(COLOURS)
    out = []
    for i in range(count):
        ground, spot = names[i % 5], names[(i + 1 + (i // 5) % 4) % 5]
        height = 20 + i % 8
        pixels = np.empty((height, 24, 3), dtype=np.uint8)
        pixels[:] = COLOURS[ground]
        pixels[4:12, 4 + i % 8: 12 + i % 8] = COLOURS[spot]
        folder = "trip/" if i % 3 == 0 else ""
        out.append((f"{folder}photo{i:02d}.png", pixels,
                    [f"a {ground} picture with a {spot} square", f"{spot} on {ground}, a plain photo"]))
    return out


def make_folder(root: Path, count: int = 20, *, jsonl: bool = False, extra_images: int = 0,
                split_column: bool = False) -> Path:
    """An image folder with ``captions.csv`` (or ``captions.jsonl``): ``image,caption`` rows, two per image;
    ``extra_images`` more images that no row names; ``split_column``: a split per image (train/val/test)."""
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for n, (name, pixels, captions) in enumerate(samples(count)):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(root / name)
        split = ("val" if n % 5 == 1 else "test" if n % 5 == 2 else "train") if split_column else None
        rows += [(name, caption, split) for caption in captions]
    for n in range(extra_images):
        Image.fromarray(np.full((16, 16, 3), 90 + n, dtype=np.uint8)).save(root / f"uncaptioned{n}.jpg")
    if jsonl:
        with open(root / "captions.jsonl", "w", encoding="utf-8") as handle:
            for name, caption, split in rows:
                handle.write(json.dumps({"image": name, "caption": caption, **({"split": split} if split else {})}) + "\n")
    else:
        with open(root / "captions.csv", "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["image", "caption", *(["split"] if split_column else [])])
            for name, caption, split in rows:
                writer.writerow([name, caption, *([split] if split_column else [])])
    return root


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def make_shards(root: Path, count: int = 20, *, per_shard: int = 8, caption_json: bool = False) -> Path:
    """Webdataset shards ``shard-00000N.tar`` of ``per_shard`` samples: ``KEY.png`` + ``KEY.txt`` (one
    caption per line) or ``KEY.json`` (``{"captions": [...]}``)."""
    root.mkdir(parents=True, exist_ok=True)
    items = samples(count)
    for shard in range(0, count, per_shard):
        with tarfile.open(root / f"shard-{shard // per_shard:06d}.tar", "w") as archive:
            for name, pixels, captions in items[shard: shard + per_shard]:
                key = name.replace("/", "_").rsplit(".", 1)[0]
                _add(archive, f"{key}.png", _png(pixels))
                if caption_json:
                    _add(archive, f"{key}.json", json.dumps({"captions": captions}).encode())
                else:
                    _add(archive, f"{key}.txt", "\n".join(captions).encode())
    return root


def make_hf(root: Path, count: int = 20, *, splits: bool = False) -> Path:
    """A ``datasets`` dataset written by ``save_to_disk``: columns ``image`` (Image feature), ``file_name`` and
    ``captions`` (two per row); ``splits``: a ``DatasetDict`` of train / validation / test."""
    import datasets

    items = samples(count)
    columns = {"image": [Image.fromarray(p) for _, p, _ in items], "file_name": [n for n, _, _ in items],
               "captions": [c for _, _, c in items]}
    table = datasets.Dataset.from_dict(columns, features=datasets.Features({
        "image": datasets.Image(), "file_name": datasets.Value("string"),
        "captions": datasets.Sequence(datasets.Value("string"))}))
    if splits:
        parts = {"train": range(0, count - 4), "validation": range(count - 4, count - 2), "test": range(count - 2, count)}
        datasets.DatasetDict({k: table.select(list(v)) for k, v in parts.items()}).save_to_disk(str(root))
    else:
        table.save_to_disk(str(root))
    return root
