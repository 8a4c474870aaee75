"""Training application for pcmr (the library never imports it).

``load_config`` resolves a recipe (``pcmr/recipes/*.yaml`` or a path) plus ``--set`` overrides into a typed
:class:`RunConfig`; :class:`Trainer` runs it into a run folder with crash-safe checkpoints
(see ``docs/training.md`` for the folder layout and ``docs/configuration.md`` for every key).
"""

from __future__ import annotations

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
