"""``load_dataset(name_or_path, split, **config)`` and ``list_datasets()``.

Names: ``shapes`` (built in), ``coco`` / ``flickr30k`` / ``karpathy`` (Karpathy
split JSON + image folder), ``precomputed`` (VSE++/VSE-infinity feature files),
``cub`` (CUB-200-2011 + Reed et al. text_c10). A folder or file path is also
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
from pcmr.data.karpathy import load_karpathy
from pcmr.data.precomputed import load_precomputed
from pcmr.data.shapes import load_shapes
from pcmr.data.split import RetrievalSplit
from pcmr.registry import Registry
from pcmr.suggest import unknown_name

__all__ = ["DATASETS", "DatasetSpec", "load_dataset", "list_datasets", "detect_format", "offers_split"]


@dataclass(frozen=True)
class DatasetSpec:
    """A named dataset: its loader ``(split, **config) -> RetrievalSplit``, a one-line description and
    the splits it offers beyond train / val / test (``extra_splits``, e.g. shapes' ``binary_selection``),
    and whether its images are rendered from the split's generator settings rather than read from
    files (``renders_images``: the split's ``info["config"]`` loads them again, ``cache=False``)."""

    name: str
    loader: Callable[..., RetrievalSplit]
    description: str
    extra_splits: tuple[str, ...] = ()
    renders_images: bool = False


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


#: every named dataset, listed by name
DATASETS: Registry[DatasetSpec] = Registry("dataset", order=lambda spec: spec.name, error=DataError)
for _spec in (
    DatasetSpec("shapes", _shapes, "built-in synthetic many-to-many benchmark with exact relevance",
                extra_splits=("test_unseen", "binary_selection"), renders_images=True),
    DatasetSpec("coco", _karpathy("coco"), "MS-COCO, Karpathy split JSON + image folder"),
    DatasetSpec("flickr30k", _karpathy("flickr30k"), "Flickr30k, Karpathy split JSON + image folder"),
    DatasetSpec("karpathy", _karpathy(None), "any Karpathy split JSON + image folder"),
    DatasetSpec("precomputed", _precomputed, "VSE++/VSE-infinity precomputed features + captions"),
    DatasetSpec("cub", _cub, "CUB-200-2011 + Reed et al. text_c10 captions, class-level relevance"),
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


def list_datasets() -> list[str]:
    """Names accepted by :func:`load_dataset`."""
    return DATASETS.names()


def detect_format(path: str | os.PathLike) -> str:
    """The dataset name of a folder or file: ``precomputed``, ``karpathy`` or ``cub``."""
    path = os.fspath(path)
    if os.path.isfile(path):
        if path.endswith(".json"):
            return "karpathy"
        raise DataError("unrecognised data file", path=path, expected="a Karpathy split JSON or a dataset folder")
    if not os.path.isdir(path):
        raise MissingDataError("no such file or folder", path=path,
                               expected=f"a dataset folder or one of {list_datasets()}")
    names = set(os.listdir(path))
    if any(n.endswith("_caps.txt") for n in names):
        return "precomputed"
    if any(n.startswith("dataset_") and n.endswith(".json") for n in names):
        return "karpathy"
    if {"text_c10", "CUB_200_2011"} & names or "images.txt" in names:
        return "cub"
    raise DataError("unrecognised dataset folder", path=path,
                    expected="{split}_caps.txt (precomputed), dataset_*.json (Karpathy) or CUB_200_2011/ + text_c10/")


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
