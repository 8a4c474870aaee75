"""The ``data`` section of a run config and the split it names.

:class:`DataConfig` is declared here, in the library, so that the split a loaded model was trained,
validated and evaluated on can be loaded without the trainer (:mod:`pcmr.run_defaults`); the trainer's
``RunConfig`` (``pcmr.train.config``) holds it as its ``data`` section and adds the checks that only
training needs. :func:`load_configured_split` loads a split of that dataset with the same name, root
and options as training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pcmr.config import ConfigError
from pcmr.data.batching import ENCODE_BATCH_SIZE, TRAIN_BATCH_SIZE
from pcmr.data.registry import list_datasets, load_dataset, renders_images
from pcmr.data.split import RetrievalSplit

__all__ = ["DataConfig", "load_configured_split"]


@dataclass
class DataConfig:
    """Which dataset to train and validate on (``pcmr.data.load_dataset``)."""

    name: str = "shapes"  # dataset name from pcmr.data.list_datasets()
    root: str | None = None  # dataset folder (COCO / Flickr30k / CUB); None for built-in data
    train_split: str = "train"
    val_split: str = "val"
    test_split: str = "test"
    batch_size: int = TRAIN_BATCH_SIZE  # (image, caption) pairs per training batch: the global batch, split over processes
    # in-batch positives, a pcmr.relevance.RELEVANCE_MODES name: "source" (only the pairs written
    # together, COCO/Flickr practice, false negatives included) or "exact" (the dataset's known
    # relation: shapes grammar, CUB classes); the old spelling "true" (or a bare YAML `true`) is
    # read as "exact" with a deprecation warning
    train_relevance: str | bool = "exact"
    eval_batch_size: int = ENCODE_BATCH_SIZE  # items per encoding batch during validation
    # DataLoader workers; null: 0 on the CPU, up to 4 with pinned memory on a GPU (pcmr.train.trainer.loader_settings).
    # Every augmentation draw is a function of (seed, epoch, item), so any number gives the same batches
    num_workers: int | None = None
    options: dict[str, Any] = field(default_factory=dict)  # passed to load_dataset (e.g. size, seed)
    loader_options: dict[str, Any] = field(default_factory=dict)  # passed to split.train_loader
    vocab_options: dict[str, Any] = field(default_factory=dict)  # passed to Vocabulary.from_split


def load_configured_split(config: DataConfig, split: str) -> RetrievalSplit:
    """The split ``split`` of the dataset ``config`` names (same name, root and options as training).

    Raises:
        ConfigError: ``data.root`` names a missing folder, or a dataset read from its folder has none,
        or a folder is given to built-in generated data (``data.name`` left at ``shapes``).
    """
    options = dict(config.options)
    if config.root is not None and config.name in list_datasets() and renders_images(config.name):
        raise ConfigError(
            f"data.root={config.root} names a dataset folder, but data.name is {config.name!r} (the default: "
            f"built-in generated data, which reads no folder); also name the folder's dataset format with "
            f"--set data.name=NAME (`pcmr list datasets`, docs/datasets.md)")
    if config.root is not None:
        root = Path(config.root).expanduser()
        if not root.exists():
            raise ConfigError(
                f"data.root: dataset folder {root} does not exist (dataset {config.name!r})"
            )
        options["root"] = str(root)
    elif config.name in list_datasets() and not renders_images(config.name) and not (
            {"root", "json_path"} & set(options)):
        raise ConfigError(f"data.root: dataset {config.name!r} is read from its folder; set it with "
                          f"--set data.root=/path/to/{config.name} (layouts: docs/datasets.md)")
    return load_dataset(config.name, split, **options)
