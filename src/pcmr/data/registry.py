"""``load_dataset(name_or_path, split, **config)`` and ``list_datasets()``.

Names: ``shapes`` (built in), ``coco`` / ``flickr30k`` / ``karpathy`` (Karpathy
split JSON + image folder), ``precomputed`` (VSE++/VSE-infinity feature files),
``cub`` (CUB-200-2011 + Reed et al. text_c10), and one's own captioned images: ``folder`` (an image
folder with ``captions.csv`` / ``captions.jsonl`` or the Hugging Face ``metadata.csv`` /
``metadata.jsonl``), ``hf`` (a Hugging Face dataset written by ``save_to_disk``) and ``webdataset``
(``.tar`` shards). A folder or file path is also
accepted: its format is recognised from the files it holds (see
docs/datasets.md), and its keys are passed on as ``root``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pcmr.data.cub import load_cub
from pcmr.data.errors import DataError, MissingDataError, check_settings
from pcmr.data.folder import CAPTION_FILES, find_captions_file, load_folder, split_folders
from pcmr.data.hf import HF_MARKERS, load_hf
from pcmr.data.karpathy import load_karpathy
from pcmr.data.owndata import ALL_SPLIT
from pcmr.data.precomputed import load_precomputed
from pcmr.data.shapes import load_shapes
from pcmr.data.shards import find_shards, load_shards
from pcmr.data.split import RetrievalSplit
from pcmr.registry import Registry
from pcmr.suggest import unknown_name

__all__ = ["DATASETS", "DatasetSpec", "load_dataset", "list_datasets", "detect_format", "offers_split",
           "gallery_split", "image_size_from_model", "reads_image_files"]


@dataclass(frozen=True)
class DatasetSpec:
    """A named dataset: its loader ``(split, **config) -> RetrievalSplit``, a one-line description and
    the splits it offers beyond train / val / test (``extra_splits``, e.g. shapes' ``binary_selection``),
    and whether its images are rendered from the split's generator settings rather than read from
    files (``renders_images``: the split's ``info["config"]`` loads them again, ``cache=False``), and the
    split a search gallery is built from by default (``gallery_split``: ``all`` for one's own images,
    None: the run's evaluation split), and whether a run sets its ``image_size`` from the model when
    the run does not (``image_size_from_model``: one's own images have no size of their own), and whether
    its images are read from image files (``reads_image_files``: its loader then takes a model's test-time
    transform, ``image_size``, ``image_resize`` and ``resize_size``, so a model evaluated or indexed on it
    sees its images as it saw its own validation images)."""

    name: str
    loader: Callable[..., RetrievalSplit]
    description: str
    extra_splits: tuple[str, ...] = ()
    renders_images: bool = False
    gallery_split: str | None = None
    image_size_from_model: bool = False
    reads_image_files: bool = False


def _shapes(split: str, **config: Any) -> RetrievalSplit:
    return load_shapes(split, **config)


def _karpathy(dataset: str | None) -> Callable[..., RetrievalSplit]:
    def load(split: str, **config: Any) -> RetrievalSplit:
        check_settings(load_karpathy, config, dataset=dataset or "karpathy")
        if dataset is not None:
            config.setdefault("dataset", dataset)
        return load_karpathy(split=split, **config)

    return load


def _precomputed(split: str, **config: Any) -> RetrievalSplit:
    check_settings(load_precomputed, config, dataset="precomputed")
    return load_precomputed(split=split, **config)


def _cub(split: str, **config: Any) -> RetrievalSplit:
    check_settings(load_cub, config, dataset="cub")
    return load_cub(split=split, **config)


def _own(name: str, loader: Callable[..., RetrievalSplit]) -> Callable[..., RetrievalSplit]:
    def load(split: str, **config: Any) -> RetrievalSplit:
        check_settings(loader, config, dataset=name)
        return loader(split=split, **config)

    return load



#: every named dataset, listed by name
DATASETS: Registry[DatasetSpec] = Registry("dataset", order=lambda spec: spec.name, error=DataError)
for _spec in (
    DatasetSpec("shapes", _shapes, "built-in synthetic many-to-many benchmark with exact relevance",
                extra_splits=("test_unseen", "binary_selection"), renders_images=True),
    DatasetSpec("coco", _karpathy("coco"), "MS-COCO, Karpathy split JSON + image folder", reads_image_files=True),
    DatasetSpec("flickr30k", _karpathy("flickr30k"), "Flickr30k, Karpathy split JSON + image folder",
                reads_image_files=True),
    DatasetSpec("karpathy", _karpathy(None), "any Karpathy split JSON + image folder", reads_image_files=True),
    DatasetSpec("precomputed", _precomputed, "VSE++/VSE-infinity precomputed features + captions"),
    DatasetSpec("cub", _cub, "CUB-200-2011 + Reed et al. text_c10 captions, class-level relevance",
                reads_image_files=True),
    DatasetSpec("folder", _own("folder", load_folder), "your own image folder + captions.csv / captions.jsonl",
                extra_splits=(ALL_SPLIT,), gallery_split=ALL_SPLIT, image_size_from_model=True,
                reads_image_files=True),
    DatasetSpec("hf", _own("hf", load_hf), "a Hugging Face datasets dataset saved with save_to_disk (pcmr[hf])",
                extra_splits=(ALL_SPLIT,), gallery_split=ALL_SPLIT, image_size_from_model=True,
                reads_image_files=True),
    DatasetSpec("webdataset", _own("webdataset", load_shards), "webdataset .tar shards of image + caption",
                extra_splits=(ALL_SPLIT,), gallery_split=ALL_SPLIT, image_size_from_model=True,
                reads_image_files=True),
):
    DATASETS.register(_spec)


def offers_split(name: str | os.PathLike, split: str) -> bool:
    """Whether the dataset ``name`` (a registered name; a folder is taken as offering none) has the
    extra split ``split`` (:attr:`DatasetSpec.extra_splits`)."""
    spec = DATASETS.find(os.fspath(name))
    return spec is not None and split in spec.extra_splits


def renders_images(name: str) -> bool:
    """Whether the registered dataset ``name`` renders its images from a split's generator settings
    (:attr:`DatasetSpec.renders_images`); False for a name that is not registered."""
    spec = DATASETS.find(name)
    return spec is not None and spec.renders_images


def gallery_split(name: str | os.PathLike) -> str | None:
    """The split a search gallery of the dataset ``name`` (a registered name, or a folder whose format is
    detected) is built from by default (:attr:`DatasetSpec.gallery_split`): ``all`` for one's own images,
    None otherwise (or when the folder's format is not recognised)."""
    key = os.fspath(name)
    if key not in DATASETS and os.path.exists(key):
        try:
            key = detect_format(key)
        except DataError:
            return None
    spec = DATASETS.find(key)
    return spec.gallery_split if spec is not None else None


def image_size_from_model(name: str) -> bool:
    """Whether a run on the registered dataset ``name`` takes its image size from the model
    (:attr:`DatasetSpec.image_size_from_model`); False for a name that is not registered."""
    spec = DATASETS.find(name)
    return spec is not None and spec.image_size_from_model


def reads_image_files(name: str) -> bool:
    """Whether the registered dataset ``name`` reads its images from image files (its loader takes a model's
    test-time transform; :attr:`DatasetSpec.reads_image_files`); False for a name that is not registered."""
    spec = DATASETS.find(name)
    return spec is not None and spec.reads_image_files


def list_datasets() -> list[str]:
    """Names accepted by :func:`load_dataset`."""
    return DATASETS.names()


def detect_format(path: str | os.PathLike) -> str:
    """The dataset name of a folder or file: ``precomputed``, ``karpathy``, ``cub``, ``hf``, ``folder`` or
    ``webdataset`` (the files looked for are listed in the error when none is found)."""
    path = os.fspath(path)
    if os.path.isfile(path):
        if os.path.basename(path) in CAPTION_FILES or path.endswith((".csv", ".jsonl")):
            return "folder"
        if path.endswith(".tar"):
            return "webdataset"
        if path.endswith(".json"):
            return "karpathy"
        raise DataError("unrecognised data file", path=path,
                        expected="a Karpathy split JSON, a captions .csv / .jsonl, a .tar shard or a dataset folder")
    if not os.path.isdir(path):
        raise MissingDataError("no such file or folder", path=path,
                               expected=f"a dataset folder or one of {list_datasets()}")
    names = set(os.listdir(path))
    if set(HF_MARKERS) & names:  # before Karpathy: save_to_disk's dataset_*.json are no split JSONs
        return "hf"
    if any(n.endswith("_caps.txt") for n in names):
        return "precomputed"
    if any(n.startswith("dataset_") and n.endswith(".json") for n in names):
        return "karpathy"
    if {"text_c10", "CUB_200_2011"} & names or "images.txt" in names:
        return "cub"
    if find_captions_file(path) is not None or split_folders(path):
        return "folder"
    if find_shards(path):
        return "webdataset"
    raise DataError("unrecognised dataset folder: none of the files pcmr reads", path=path,
                    expected=f"images + {' / '.join(CAPTION_FILES)} (your own images), *.tar (webdataset shards), "
                    f"{' / '.join(HF_MARKERS)} (Hugging Face save_to_disk), {{split}}_caps.txt (precomputed), "
                    "dataset_*.json (Karpathy) or CUB_200_2011/ + text_c10/ (CUB); layouts: docs/datasets.md")


def load_dataset(name: str | os.PathLike, split: str, **config: Any) -> RetrievalSplit:
    """Load one split of a dataset given by name or path.

    Args:
        name: a name of :func:`list_datasets`, or a folder/file path whose format is detected.
        split: split name (``"train"``, ``"val"``, ``"test"``, ... depending on the dataset).
        **config: loader settings (documented per dataset in docs/datasets.md); ``None`` values are
            dropped so unset command-line flags never override defaults.
    """
    config = {key: value for key, value in config.items() if value is not None}
    key = os.fspath(name)
    if key not in DATASETS:
        if os.sep in key or os.path.exists(key):
            fmt = detect_format(key)
            config.setdefault("root", key)
            return DATASETS.get(fmt).loader(split, **config)
        raise DataError(unknown_name("dataset", key, list_datasets()) + ", or a dataset folder")
    return DATASETS.get(key).loader(split, **config)
