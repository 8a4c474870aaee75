"""What a loaded model's run knows: its config, and the splits it is evaluated or indexed on.

A trained model is opened with :func:`pcmr.load` (a run folder, ``RUN/model`` or a
``save_pretrained`` folder): a :class:`pcmr.Model` whose ``run_config`` is the run's resolved config
as a plain mapping. :func:`run_config` reads it as a :class:`~pcmr.train.config.RunConfig` (checked
field by field); :func:`load_split` loads a split: the run's own data, a dataset name or a dataset
folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pcmr.config import ConfigError
from pcmr.data import RetrievalSplit, list_datasets, load_dataset
from pcmr.data.registry import detect_format
from pcmr.hub import RUN_CONFIG_FILE, Model
from pcmr.train.config import RunConfig
from pcmr.train.run import CONFIG_FILE, load_run_split

__all__ = ["load_split", "run_config"]


def _config_file(model: Model) -> Path | str:
    if model.run_dir is not None:
        return model.run_dir / CONFIG_FILE
    return model.source / RUN_CONFIG_FILE if model.source is not None else "the model's run config"


def run_config(model: Model) -> RunConfig | None:
    """The config of the run that trained ``model`` (None when its folder records none).

    Raises:
        ConfigError: naming the file when the recorded config is not a valid run config.
    """
    if model.run_config is None:
        return None
    try:
        return RunConfig.from_dict(dict(model.run_config))
    except ConfigError as exc:
        raise ConfigError(f"{_config_file(model)}: {exc}") from None


#: dataset formats read from image files, whose loaders take the test-time transform (image_size,
#: image_resize, resize_size)
_FILE_IMAGE_FORMATS = ("karpathy", "coco", "flickr30k", "cub")


def _transform_options(name: str, model: Model | None) -> dict[str, Any]:
    """The model's test-time image transform as loader options, for a dataset of image files."""
    transform = model.image_transform if model is not None and name in _FILE_IMAGE_FORMATS else None
    if transform is None:
        return {}
    options = {"image_size": transform["image_size"], "image_resize": transform["image_resize"]}
    if transform["image_resize"] == "center_crop":
        options["resize_size"] = transform["resize_size"]
    return options


def load_split(data: str | None, split: str, config: RunConfig | None,
               data_name: str | None = None, *, model: Model | None = None) -> RetrievalSplit:
    """A retrieval split: ``data`` is a dataset name (``pcmr list datasets``) or a dataset folder
    (format ``data_name``, default: detected from its files); None, or the run's own dataset name,
    uses the run config's data section (same root and options as training). Another dataset of image
    files is read with ``model``'s test-time transform (:attr:`pcmr.Model.image_transform`: e.g. Resize
    256 + CenterCrop 224), so its images reach the model as the run's validation images did."""

    opts: dict[str, Any] = {}
    if data is None or (config is not None and data == config.data.name and data_name is None):
        if config is None:
            raise ValueError(
                "--data is required: the model folder records no run config "
                f"(a dataset name: {', '.join(list_datasets())}, or a dataset folder)"
            )

        return load_run_split(config, split)
    if data in list_datasets():
        name = data
    elif Path(data).expanduser().exists():
        path = str(Path(data).expanduser())
        if data_name is None:  # format detected from the folder's files
            return load_dataset(path, split, **_transform_options(detect_format(path), model))
        name, opts = data_name, {"root": path}
    else:
        raise ValueError(
            f"--data {data!r} is neither a dataset name ({', '.join(list_datasets())}) nor an "
            f"existing file or folder"
        )
    return load_dataset(name, split, **opts, **_transform_options(name, model))
