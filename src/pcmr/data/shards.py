"""Webdataset shards: uncompressed ``.tar`` files of samples, each an image and its caption(s).

Layout (``root``: a folder of shards, or one shard)::

    shards/
      shard-000000.tar        # or train-000000.tar, val-000000.tar, test-000000.tar: the split by name
      shard-000001.tar

Inside a shard the files of one sample share a key (the path up to the first dot of the file name)::

    beach.jpg   beach.txt     # .jpg/.jpeg/.png/.webp: the image; .txt: one caption per non-empty line
    dog.png     dog.json      # .json: {"caption": "..."} or {"captions": [...]} (also "text"), optional "split"

Shards are read with Python's ``tarfile``, once, to list the members; images are then decoded on demand
from their byte range in the shard (no extraction), so the data never has to fit a folder. Shards whose
names start with ``train``, ``val``/``validation`` or ``test`` give their samples that split; otherwise a
``split`` entry in the ``.json`` does, else pcmr splits by image with a seed (:mod:`pcmr.data.owndata`).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from pcmr.data.errors import DataError, MissingDataError, SkippedItem, check_on_error
from pcmr.data.owndata import (
    DEFAULT_SPLIT_FRACTIONS,
    SPLIT_ALIASES,
    DecodedImages,
    OwnRecord,
    build_own_split,
    check_caption,
    split_name,
)
from pcmr.data.split import RetrievalSplit

__all__ = ["SHARD_IMAGE_EXTENSIONS", "ShardImages", "find_shards", "load_shards"]

#: member endings read as the sample's image
SHARD_IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
_SAMPLE = "samples of an image (.jpg/.jpeg/.png/.webp) and a caption (.txt or .json) sharing a key"


class ShardImages(DecodedImages):
    """Images stored in tar shards, read from their byte range ``(shard path, offset, size)`` and decoded
    with Pillow (:class:`pcmr.data.owndata.DecodedImages`)."""

    def __init__(self, members: list[tuple[str, int, int]], image_size: int = 224, keys: list[str] | None = None, *,
                 image_resize: str = "square", resize_size: int | None = None) -> None:
        super().__init__(len(members), image_size, keys, image_resize=image_resize, resize_size=resize_size)
        self.members = list(members)

    def decode(self, index: int, convert: Callable[[Image.Image], Any]) -> Any:
        shard, offset, size = self.members[index]
        try:
            with open(shard, "rb") as handle:
                handle.seek(offset)
                data = handle.read(size)
        except FileNotFoundError:
            raise MissingDataError("shard not found", path=shard, location=self.keys[index],
                                   expected="the tar shard read when the split was loaded") from None
        try:
            with Image.open(io.BytesIO(data)) as image:
                return convert(image)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
            raise DataError(f"image failed to decode ({err})", path=shard, location=self.keys[index],
                            expected="a JPEG/PNG/WebP image Pillow can read") from None


def find_shards(root: str | os.PathLike) -> list[Path]:
    """The ``.tar`` shards of ``root`` (a folder, sorted by name, or one shard)."""
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_file() and p.name.endswith(".tar"))


def _shard_split(shard: Path) -> str | None:
    stem = shard.name.split(".")[0].lower()
    for alias, name in sorted(SPLIT_ALIASES.items(), key=lambda item: -len(item[0])):
        if stem == alias or stem.startswith((alias + "-", alias + "_")):
            return name
    return None


def _member_key(name: str) -> tuple[str, str]:
    folder, _, base = name.rpartition("/")
    stem, _, extension = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), extension.lower()


def _sample_captions(data: bytes, extension: str, *, shard: Path, where: str) -> tuple[list[Any], Any]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataError(f"not valid UTF-8 ({err.reason})", path=shard, location=where, expected="UTF-8 text") from None
    if extension == "txt":
        return [line for line in text.splitlines() if line.strip()] or [""], None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"malformed JSON ({err.msg})", path=shard, location=where,
                        expected='{"caption": "..."} or {"captions": [...]}') from None
    if not isinstance(record, dict):
        raise DataError(f"is a {type(record).__name__}", path=shard, location=where, expected="a JSON object")
    for key in ("caption", "captions", "text"):
        if key in record:
            value = record[key]
            return (value if isinstance(value, list) else [value]), record.get("split")
    raise DataError(f"no caption (keys: {sorted(record)})", path=shard, location=where,
                    expected="a 'caption' (or 'captions' / 'text') entry")


def load_shards(
    root: str | os.PathLike | None = None,
    split: str = "train",
    *,
    image_size: int = 224,
    image_resize: str = "square",
    resize_size: int | None = None,
    seed: int = 0,
    split_fractions: list[float] | None = None,
    on_error: str = "raise",
) -> RetrievalSplit:
    """One split of webdataset tar shards (module docstring); ``split``: ``train``, ``val``, ``test`` or ``all``.
    The other settings are those of :func:`pcmr.data.folder.load_folder`."""
    check_on_error(on_error)
    if root is None:
        raise DataError("no data location given", location="root", expected="a folder of .tar shards")
    if not Path(root).exists():
        raise MissingDataError("no such file or folder", path=root, expected="a folder of .tar shards")
    shards = find_shards(root)
    if not shards:
        raise MissingDataError("no .tar shard found", path=root, expected="webdataset shards (*.tar) in this folder")
    records: list[OwnRecord] = []
    members: list[tuple[str, int, int]] = []
    skipped: list[SkippedItem] = []
    for shard in shards:
        try:
            archive = tarfile.open(shard, mode="r:")  # uncompressed: members are read by byte range
        except tarfile.ReadError as err:
            raise DataError(f"not an uncompressed tar file ({err})", path=shard, location="shard",
                            expected="a .tar webdataset shard (compressed shards: unpack to .tar first)") from None
        samples: dict[str, dict[str, Any]] = {}
        with archive:
            for member in archive:
                if not member.isfile():
                    continue
                key, extension = _member_key(member.name)
                sample = samples.setdefault(key, {})
                if extension in SHARD_IMAGE_EXTENSIONS:
                    sample["image"] = (str(shard), member.offset_data, member.size)
                elif extension in ("txt", "json") and "captions" not in sample:
                    handle = archive.extractfile(member)
                    data = handle.read() if handle is not None else b""
                    sample["captions"], sample["split"] = _sample_captions(data, extension, shard=shard,
                                                                           where=member.name)
        by_name = _shard_split(shard)
        for key, sample in samples.items():
            where = f"{shard.name}, sample {key!r}"
            try:
                if "image" not in sample:
                    raise DataError("sample has no image", path=shard, location=f"sample {key!r}", expected=_SAMPLE)
                if "captions" not in sample:
                    raise DataError("sample has no caption", path=shard, location=f"sample {key!r}", expected=_SAMPLE)
                captions = [check_caption(c, path=shard, location=f"sample {key!r}, caption") for c in sample["captions"]]
                if not captions:
                    raise DataError("empty caption list", path=shard, location=f"sample {key!r}",
                                    expected="at least one caption")
            except DataError as err:
                if on_error == "raise":
                    raise
                skipped.append(SkippedItem(str(shard), f"sample {key!r}", err.problem))
                continue
            given = sample.get("split")
            split_value = by_name if by_name is not None else (
                None if given is None else split_name(given, path=shard, location=f"sample {key!r}, split"))
            records.append(OwnRecord(f"{shard.name}/{key}", captions, split_value, where))
            members.append(sample["image"])

    def images(chosen: list[int]) -> ShardImages:
        return ShardImages([members[i] for i in chosen], image_size, keys=[records[i].location for i in chosen],
                           image_resize=image_resize, resize_size=resize_size)

    return build_own_split(records, split, name="webdataset", path=root, make_images=images, seed=seed,
                           split_fractions=split_fractions or DEFAULT_SPLIT_FRACTIONS, skipped=skipped,
                           info={"shards": [str(s) for s in shards]})
