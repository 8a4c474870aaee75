"""What a loaded model's run decides for its evaluation and its gallery index, resolved in one place.

A :class:`pcmr.Model` (what :func:`pcmr.load` returns) records the resolved config of the run that
trained it (``RUN/config.yaml``, or ``run_config.json`` in a ``save_pretrained`` folder) as a plain
mapping. :func:`run_defaults` reads from it what evaluating or indexing the model needs, and nothing
else: the ``data`` section (:class:`~pcmr.data.config.DataConfig`: which dataset, its root and
options), the ``eval`` section (:class:`EvalConfig`) and ``train.device``. ``pcmr evaluate``,
``pcmr search --build``, ``pcmr demo``, the study and :func:`pcmr.evaluate` all take their defaults
from it:

==================  ===============================  ==========================================
setting             from the run config              otherwise (no run config)
==================  ===============================  ==========================================
split               ``eval.split``                   ``test``
val_split           ``data.val_split``               ``val``
similarities        ``eval.similarities``            ``DEFAULT_SIMILARITIES``
rerankers           ``eval.rerankers``               ``DEFAULT_RERANKERS``
batch_size          ``eval.batch_size``              ``ENCODE_BATCH_SIZE``
device              ``train.device``                 the model's device
data                the run's dataset (``data``)     a dataset must be named
==================  ===============================  ==========================================

:func:`load_split` loads a split: the run's own data, a registered dataset or a dataset folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pcmr.config import ConfigError, build_dataclass
from pcmr.data import ENCODE_BATCH_SIZE, RetrievalSplit, list_datasets, load_dataset
from pcmr.data.config import DataConfig, load_configured_split
from pcmr.data.registry import detect_format, gallery_split, reads_image_files
from pcmr.hub import RUN_CONFIG_FILE, RUN_CONFIG_YAML, Model
from pcmr.metrics.defaults import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES

__all__ = ["EvalConfig", "RunDefaults", "default_split", "evaluation_device", "load_split", "run_defaults"]


@dataclass
class EvalConfig:
    """What ``pcmr evaluate`` reports for this run by default (the ``eval`` section of a run config)."""

    similarities: list[str] = field(default_factory=lambda: list(DEFAULT_SIMILARITIES))
    rerankers: list[str] = field(default_factory=lambda: list(DEFAULT_RERANKERS))
    split: str = "test"
    batch_size: int = ENCODE_BATCH_SIZE


@dataclass(frozen=True)
class RunDefaults:
    """The run-config defaults of one loaded model (the module docstring's table).

    Attributes:
        data: the run's ``data`` section; None when the model records no run config.
        eval: the run's ``eval`` section (the library's defaults when it records none).
        device: the run's ``train.device``; None when it records none.
    """

    data: DataConfig | None
    eval: EvalConfig
    device: str | None

    @property
    def split(self) -> str:
        return self.eval.split

    @property
    def val_split(self) -> str:
        return (self.data or DataConfig()).val_split


def _config_file(model: Model) -> Path | str:
    if model.run_dir is not None:
        return model.run_dir / RUN_CONFIG_YAML
    return model.source / RUN_CONFIG_FILE if model.source is not None else "the model's run config"


def run_defaults(model: Model) -> RunDefaults:
    """The defaults of ``model``'s run: its ``data`` and ``eval`` sections and ``train.device``, parsed once
    per model (again only when :attr:`pcmr.Model.run_config` is replaced by another mapping).

    Raises:
        ConfigError: naming the file when one of those sections is not valid.
    """
    raw = model.run_config
    if raw is None:
        return RunDefaults(None, EvalConfig(), None)
    cached = getattr(model, _CACHE, None)
    if cached is not None and cached[0] is raw:  # parsed once per model and run config
        return cached[1]
    defaults = _parse_run_defaults(model, raw)
    object.__setattr__(model, _CACHE, (raw, defaults))
    return defaults


#: the attribute of a Model that keeps its parsed run defaults beside the run config they were parsed from
_CACHE = "_pcmr_run_defaults"


def _parse_run_defaults(model: Model, raw: dict[str, Any]) -> RunDefaults:
    """:func:`run_defaults` from ``raw``, the model's run config, parsed and checked."""
    try:
        data = build_dataclass(DataConfig, raw.get("data"), where="data")
        evaluation = build_dataclass(EvalConfig, raw.get("eval"), where="eval")
        train = raw.get("train") or {}
        if not isinstance(train, dict):
            raise ConfigError(f"config section 'train' must be a mapping of keys to values, got {train!r}")
        device = train.get("device")
        if device is not None and not isinstance(device, str):
            raise ConfigError(f"config key 'train.device' must be a device string such as cpu or cuda:0, "
                              f"got {device!r}")
    except ConfigError as exc:
        raise ConfigError(f"{_config_file(model)}: {exc}") from None
    return RunDefaults(data, evaluation, device)


def evaluation_device(model: Model, device: torch.device | str | None = None,
                      defaults: RunDefaults | None = None) -> torch.device:
    """Where ``model`` is evaluated: ``device``, else its run's ``train.device`` (when this machine has
    it: a CUDA run opened where CUDA is absent stays on the model's device), else the model's device
    (``defaults``: the model's :func:`run_defaults` when the caller has them already)."""
    if device is not None:
        return torch.device(device)
    trained = (defaults if defaults is not None else run_defaults(model)).device
    if trained is not None:
        trained_on = torch.device(trained)
        if trained_on.type != "cuda" or torch.cuda.is_available():
            return trained_on
    return model.device


def _transform_options(name: str, model: Model | None) -> dict[str, Any]:
    """The model's test-time image transform as loader options, for a dataset that reads image files
    (:attr:`pcmr.data.registry.DatasetSpec.reads_image_files`)."""
    transform = model.image_transform if model is not None and reads_image_files(name) else None
    if transform is None:
        return {}
    options = {"image_size": transform["image_size"], "image_resize": transform["image_resize"]}
    if transform["image_resize"] == "center_crop":
        options["resize_size"] = transform["resize_size"]
    return options


def _is_run_root(data: str, run_data: DataConfig) -> bool:
    """Whether the folder ``data`` is the run's own dataset folder (``data.root``): then it is read with the
    run's options (its split seed and image size), so its test split is the one held out in training."""
    if run_data.root is None:
        return False
    try:
        return Path(data).expanduser().resolve() == Path(run_data.root).expanduser().resolve()
    except OSError:
        return False


def default_split(data: str | None, run_data: DataConfig | None, fallback: str) -> str:
    """The split a search gallery is built from when none is named: ``all`` (every image) for one's own
    images (``pcmr.data.registry.gallery_split``: ``--data`` or the run's dataset), else ``fallback``."""
    source = data if data is not None else (run_data.name if run_data is not None else None)
    return (gallery_split(source) if source is not None else None) or fallback


def load_split(data: str | None, split: str, run_data: DataConfig | None, data_name: str | None = None, *,
               model: Model | None = None) -> RetrievalSplit:
    """A retrieval split: ``data`` is a dataset name (``pcmr list datasets``) or a dataset folder
    (format ``data_name``, default: detected from its files); None, or the run's own dataset name,
    uses the run's data section ``run_data`` (same root and options as training). Another dataset of
    image files is read with ``model``'s test-time transform (:attr:`pcmr.Model.image_transform`: e.g.
    Resize 256 + CenterCrop 224), so its images reach the model as the run's validation images did."""

    opts: dict[str, Any] = {}
    if data is None or (run_data is not None and data_name is None and (data == run_data.name
                                                                        or _is_run_root(data, run_data))):
        if run_data is None:
            raise ValueError(
                "--data is required: the model folder records no run config "
                f"(a dataset name: {', '.join(list_datasets())}, or a dataset folder)"
            )
        return load_configured_split(run_data, split)
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
