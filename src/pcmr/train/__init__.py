"""Training application for pcmr (the library never imports it).

``load_config`` resolves a recipe (``pcmr/recipes/*.yaml`` or a path) plus ``--set`` overrides into a typed
:class:`RunConfig`; :class:`Trainer` runs it into a run folder with crash-safe checkpoints
(see ``docs/training.md`` for the folder layout and ``docs/configuration.md`` for every key).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use (__getattr__), so `pcmr.train.recipes` alone stays light
    from pcmr.train.checkpoint import CheckpointError, CheckpointWriteError
    from pcmr.train.config import (
        ConfigError,
        DataConfig,
        EvalConfig,
        RunConfig,
        TrainConfig,
        load_config,
        save_config,
    )
    from pcmr.train.faults import NonFiniteLossError
    from pcmr.train.lock import RunLock, RunLockedError
    from pcmr.train.run import check_config
    from pcmr.train.trainer import Trainer

#: name -> the module of pcmr.train defining it
_EXPORTS = {
    "CheckpointError": "checkpoint", "CheckpointWriteError": "checkpoint", "ConfigError": "config",
    "DataConfig": "config", "EvalConfig": "config", "RunConfig": "config", "TrainConfig": "config",
    "load_config": "config", "save_config": "config", "NonFiniteLossError": "faults", "RunLock": "lock",
    "RunLockedError": "lock", "check_config": "run", "Trainer": "trainer",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"pcmr.train.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'pcmr.train' has no attribute {name!r}")


__all__ = [
    "CheckpointError",
    "CheckpointWriteError",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "NonFiniteLossError",
    "RunConfig",
    "RunLock",
    "RunLockedError",
    "TrainConfig",
    "Trainer",
    "check_config",
    "load_config",
    "save_config",
]
