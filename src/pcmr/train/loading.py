"""What a loaded model's run knows: its config, and the splits it is evaluated or indexed on.

A trained model is opened with :func:`pcmr.load` (a run folder, ``RUN/model`` or a
``save_pretrained`` folder): a :class:`pcmr.Model` whose ``run_config`` is the run's resolved config
as a plain mapping. :func:`run_config` reads it as a :class:`~pcmr.train.config.RunConfig` (checked
field by field), for the trainer's layer; the library reads the parts of it that evaluation and
search need with :func:`pcmr.run_defaults.run_defaults`.
"""

from __future__ import annotations

from pathlib import Path

from pcmr.config import ConfigError
from pcmr.data import RetrievalSplit
from pcmr.hub import RUN_CONFIG_FILE, Model
from pcmr.run_defaults import load_split as load_library_split
from pcmr.train.config import RunConfig
from pcmr.train.run import CONFIG_FILE

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


def load_split(data: str | None, split: str, config: RunConfig | None,
               data_name: str | None = None, *, model: Model | None = None) -> RetrievalSplit:
    """:func:`pcmr.run_defaults.load_split` with a whole run config (its data section is used)."""
    return load_library_split(data, split, config.data if config is not None else None, data_name, model=model)
