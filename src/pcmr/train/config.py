"""Run configuration: typed sections loaded from YAML, with ``--set key=value`` overrides.

A recipe (``pcmr/recipes/*.yaml``, or any YAML file) has five sections::

    model: {name: pcme, ...options of pcmr.models.create_model}
    loss:  {name: pcme, ...options of pcmr.losses.create_loss}
    data:  {name: shapes, ...}       # DataConfig
    train: {epochs: ..., lr: ...}    # TrainConfig
    eval:  {similarities: [...]}     # EvalConfig

``data``, ``train`` and ``eval`` are dataclasses here and are type checked field by
field. ``model`` and ``loss`` are a ``name`` plus options that their factories
check (their config dataclasses own those fields); :func:`pcmr.train.validate`
does that check before any training starts.

Loading, type checking and the ``key.sub=value`` override syntax are those of
:mod:`pcmr.config` (one parser for the library, the trainer and the command line);
every user error raises :class:`ConfigError` with one line naming the key, what
was given and what is accepted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pcmr.atomic import atomic_write_text
from pcmr.config import ConfigError, apply_overrides, build_dataclass, load_mapping, parse_override
from pcmr.data import ENCODE_BATCH_SIZE
from pcmr.evaluation import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES

__all__ = [
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "RunConfig",
    "TrainConfig",
    "apply_overrides",
    "build_dataclass",
    "load_config",
    "parse_override",
]




@dataclass
class DataConfig:
    """Which dataset to train and validate on (``pcmr.data.load_dataset``)."""

    name: str = "shapes"  # dataset name from pcmr.data.list_datasets()
    root: str | None = None  # dataset folder (COCO / Flickr30k / CUB); None for built-in data
    train_split: str = "train"
    val_split: str = "val"
    test_split: str = "test"
    batch_size: int = 64  # (image, caption) pairs per training batch: the global batch, split over processes
    # in-batch positives: "source" (only the pairs written together, COCO/Flickr practice, false
    # negatives included) or "true" (the dataset's known relation: shapes grammar, CUB classes);
    # YAML reads a bare `true` as a boolean, which is accepted as "true"
    train_relevance: str | bool = "true"
    eval_batch_size: int = ENCODE_BATCH_SIZE  # items per encoding batch during validation
    num_workers: int = 0  # DataLoader workers; 0 keeps mid-epoch resume bit-exact
    options: dict[str, Any] = field(default_factory=dict)  # passed to load_dataset (e.g. size, seed)
    loader_options: dict[str, Any] = field(default_factory=dict)  # passed to split.train_loader
    vocab_options: dict[str, Any] = field(default_factory=dict)  # passed to Vocabulary.from_split


@dataclass
class TrainConfig:
    """The optimisation: epochs, optimizer, learning-rate schedule, validation, checkpoints."""

    epochs: int = 10  # total epochs, warm-up included
    optimizer: Literal["adamw", "adamp", "adam", "sgd"] = "adamw"
    lr: float = 2e-4  # initial learning rate
    weight_decay: float = 1e-4
    momentum: float = 0.9  # sgd only
    schedule: Literal["cosine", "step", "constant"] = "cosine"
    warmup_epochs: int = 0  # PCME: epochs training the heads only, backbones frozen
    warmup_lr_factor: float = 1.0  # lr multiplier during the frozen warm-up
    step_epochs: int = 15  # step schedule (VSE++): multiply lr by step_gamma every step_epochs
    step_gamma: float = 0.1
    min_lr_factor: float = 0.0  # cosine schedule floor, as a fraction of lr
    grad_clip: float | None = 2.0  # max global gradient norm; None disables clipping
    seed: int = 0
    deterministic: bool = False  # torch.use_deterministic_algorithms(True)
    select_on: Literal["rsum", "r_precision"] = "rsum"  # validation metric for model selection
    select_similarity: str | None = None  # score used for validation; None = the loss's own score
    validate_every: int = 1  # epochs between validations (0: never; the last model is kept)
    checkpoint_every_steps: int = 0  # also checkpoint mid-epoch every N steps (0: epoch ends only)
    keep_checkpoints: int = 2  # complete checkpoints kept on disk (>= 1)
    max_nonfinite_steps: int = 5  # stop after this many consecutive steps with a NaN/inf loss (each skipped)
    max_steps_per_epoch: int | None = None  # truncate epochs (smoke tests); None: full epochs
    device: str = "cpu"  # torch device string, e.g. cpu, cuda, cuda:1 (several processes: cuda:LOCAL_RANK)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"  # autocast of the model forward; the loss stays fp32
    # tqdm bars with loss terms and throughput: true (always), false (none, and no per-epoch lines),
    # null (bars only when stderr is a terminal; plain per-epoch lines otherwise)
    progress: bool | None = None
    log_every: int = 10  # steps between JSONL log lines
    # where the log goes: jsonl (RUN/log.jsonl) and/or tensorboard (RUN/tensorboard; pcmr[tensorboard])
    loggers: list[str] = field(default_factory=lambda: ["jsonl"])


@dataclass
class EvalConfig:
    """What ``pcmr evaluate`` reports for this run by default."""

    similarities: list[str] = field(default_factory=lambda: list(DEFAULT_SIMILARITIES))
    rerankers: list[str] = field(default_factory=lambda: list(DEFAULT_RERANKERS))
    split: str = "test"
    batch_size: int = ENCODE_BATCH_SIZE


@dataclass
class RunConfig:
    """A whole run: model, loss, data, train and eval sections."""

    model: dict[str, Any] = field(default_factory=lambda: {"name": "pcme"})
    loss: dict[str, Any] = field(default_factory=lambda: {"name": "pcme"})
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (YAML/JSON serialisable)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunConfig:
        """Build and type check a run config from a nested mapping."""
        config = build_dataclass(cls, raw, where="")
        for section in ("model", "loss"):
            value = getattr(config, section)
            name = value.get("name")
            if not isinstance(name, str) or not name:
                raise ConfigError(f"config section '{section}' needs a 'name' (a string), got {name!r}")
        if config.train.keep_checkpoints < 1:
            raise ConfigError(f"train.keep_checkpoints must be >= 1, got {config.train.keep_checkpoints}")
        if config.train.max_nonfinite_steps < 1:
            raise ConfigError(f"train.max_nonfinite_steps must be >= 1, got {config.train.max_nonfinite_steps}")
        if config.train.epochs < 1:
            raise ConfigError(f"train.epochs must be >= 1, got {config.train.epochs}")
        reserved = sorted(
            {"seed", "num_workers", "batch_size", "vocab", "num_replicas", "rank"} & set(config.data.loader_options)
        )
        if reserved:
            raise ConfigError(
                f"data.loader_options may not set {', '.join(reserved)}; use train.seed, data.num_workers, "
                f"data.batch_size"
            )
        if config.data.train_relevance is True:
            config.data.train_relevance = "true"
        if config.data.train_relevance not in ("source", "true"):
            raise ConfigError(
                f"config key 'data.train_relevance' expects 'source' (only the pairs written together are "
                f"positives) or 'true' (the dataset's relation), got {config.data.train_relevance!r}"
            )
        if config.data.batch_size < 1:
            raise ConfigError(f"data.batch_size must be >= 1, got {config.data.batch_size}")
        return config


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> RunConfig:
    """Load a recipe YAML (or the defaults when ``path`` is None) and apply ``--set`` overrides."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = load_mapping(path)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except ConfigError as exc:
            if "must hold a mapping" in str(exc):
                raise ConfigError(
                    f"config file {path} must hold a mapping with sections model/loss/data/train/eval"
                ) from None
            raise
    raw = apply_overrides(raw, overrides or [], schema=RunConfig)
    return RunConfig.from_dict(raw)


def save_config(config: RunConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (sections in a fixed order)."""
    text = yaml.safe_dump(config.to_dict(), sort_keys=False, default_flow_style=False)
    atomic_write_text(Path(path), text)
