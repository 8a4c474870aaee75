"""Run configuration: typed sections loaded from YAML, with ``--set key=value`` overrides.

A recipe (``pcmr/recipes/*.yaml``, or any YAML file) has five sections::

    model: {name: pcme, ...options of pcmr.models.create_model}
    loss:  {name: pcme, ...options of pcmr.losses.create_loss}
    data:  {name: shapes, ...}       # DataConfig
    train: {epochs: ..., lr: ...}    # TrainConfig
    eval:  {similarities: [...]}     # EvalConfig

``data``, ``train`` and ``eval`` are dataclasses (``DataConfig`` from :mod:`pcmr.data.config` and
``EvalConfig`` from :mod:`pcmr.run_defaults`, which the library reads from a loaded model's run without
the trainer) and are type checked field by field. ``model`` and ``loss`` are a ``name`` plus options that their factories
check (their config dataclasses own those fields); :func:`pcmr.train.validate`
does that check before any training starts.

Loading, type checking and the ``key.sub=value`` override syntax are those of
:mod:`pcmr.config` (one parser for the library, the trainer and the command line);
every user error raises :class:`ConfigError` with one line naming the key, what
was given and what is accepted.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pcmr.atomic import atomic_write_text
from pcmr.config import (
    ConfigError,
    NotAMappingError,
    apply_overrides,
    build_dataclass,
    load_mapping,
    parse_override,
)
from pcmr.data.config import DataConfig
from pcmr.metrics.defaults import DEFAULT_SELECT_ON
from pcmr.relevance import relevance_mode
from pcmr.run_defaults import EvalConfig

__all__ = [
    "ComponentConfig",
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
class TrainConfig:
    """The optimisation: epochs, optimizer, learning-rate schedule, validation, checkpoints."""

    epochs: int = 10  # total epochs, warm-up included
    optimizer: Literal["adamw", "adamp", "adam", "sgd"] = "adamw"
    lr: float = 2e-4  # initial learning rate
    weight_decay: float = 1e-4
    momentum: float = 0.9  # sgd only
    amsgrad: bool = False  # adam / adamw only: the AMSGrad variant (the PVSE release trains with it)
    schedule: Literal["cosine", "step", "plateau", "constant"] = "cosine"
    warmup_epochs: int = 0  # PCME: epochs training the heads only, backbones frozen
    # the warm-up as a share of `epochs` (wins over warmup_epochs): a run's epoch count scales it
    warmup_fraction: float | None = None
    warmup_lr_factor: float = 1.0  # lr multiplier during the frozen warm-up
    # the warm-up's own schedule: "constant" (lr * warmup_lr_factor throughout) or "cosine" (a cosine of
    # its own, as the PCME release's first phase); the main schedule starts afresh when the warm-up ends
    warmup_schedule: Literal["constant", "cosine"] = "constant"
    finetune_lr_factor: float = 1.0  # lr multiplier after the warm-up (PCME release: COCO 0.1, CUB 1)
    # a fresh optimizer (new moments) when the warm-up ends, as the PCME release's fine-tune phase
    restart_optimizer: bool = False
    # the cosine's period in epochs (torch's T_max; PCME release: COCO 30, CUB 50, both phases); null: the
    # phase's length. Past the period the lr stays at its floor
    cosine_epochs: int | None = None
    # the schedule moves every step, or once per epoch (the PCME release steps its scheduler per epoch)
    schedule_every: Literal["step", "epoch"] = "step"
    step_epochs: int = 15  # step schedule (VSE++): multiply lr by step_gamma every step_epochs
    # the step period as a share of the post-warm-up epochs (wins over step_epochs): VSE++'s "lr / 10
    # at epoch 15 of 30" is 0.5, and stays half-way through training at any epoch count
    step_fraction: float | None = None
    step_gamma: float = 0.1
    min_lr_factor: float = 0.0  # cosine schedule floor, as a fraction of lr
    # plateau schedule (the PVSE release's ReduceLROnPlateau in mode 'min' fed the validation rsum):
    # lr x plateau_factor after every (plateau_patience + 1) epochs, counted from the second epoch
    plateau_patience: int = 10
    plateau_factor: float = 0.5
    # what the plateau schedule counts: "epochs" (the formula above: the PVSE release's lr whenever the
    # validation metric never falls below its running minimum) or "validation" (torch's ReduceLROnPlateau
    # in mode 'min' replayed on the validation select_on metric of every finished epoch, as the PVSE
    # release feeds it rsum; with data.val_split=test, on its split)
    plateau_on: Literal["epochs", "validation"] = "epochs"
    # a word-vector file the gru caption encoder's word embeddings start from: GloVe text
    # (glove.840B.300d.txt) or a .npy / .safetensors matrix with its words in NAME.words.txt; rows are
    # placed by the run's vocabulary, words absent from the file keep their random init (PCME: GloVe,
    # frozen in the warm-up with the other pretrained parts; docs/training.md)
    word_vectors: str | None = None
    # which file word a vocabulary word takes: "release" (itself, else without - . ' and cut at '/',
    # as PCME's release) or "lowercase" (itself, else lower-cased)
    word_vectors_match: Literal["lowercase", "release"] = "release"
    # the loss of this epoch (1-based) is scaled by (step + 1) / steps, a linear ramp over the epoch: the
    # PCME++ release's embedding warm-up after its 2 frozen-backbone epochs (epoch 3, pcmepp/engine.py:241-245)
    loss_ramp_epoch: int | None = None
    grad_clip: float | None = 2.0  # max global gradient norm; None disables clipping
    # what the clipping covers: "all" trained parameters (the loss's too, e.g. PCME's a, b; PCME++'s
    # release) or the "model"'s only (the PCME release)
    grad_clip_scope: Literal["all", "model"] = "all"
    seed: int = 0
    deterministic: bool = False  # torch.use_deterministic_algorithms(True)
    select_on: str = DEFAULT_SELECT_ON  # validation metric for model selection (pcmr.evaluation.columns.SELECTION_METRICS)
    select_similarity: str | None = None  # score used for validation; None = the loss's own score
    validate_every: int = 1  # epochs between validations (0: never; the last model is kept)
    checkpoint_every_steps: int = 0  # also checkpoint mid-epoch every N steps (0: epoch ends only)
    keep_checkpoints: int = 2  # complete checkpoints kept on disk (>= 1)
    max_nonfinite_steps: int = 5  # stop after this many consecutive steps with a NaN/inf loss (each skipped)
    max_steps_per_epoch: int | None = None  # truncate epochs (smoke tests); None: full epochs
    device: str = "cpu"  # torch device string, e.g. cpu, cuda, cuda:1 (several processes: cuda:LOCAL_RANK)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"  # autocast of the model forward; the loss stays fp32
    # keep the outputs of frozen pretrained backbones per training item and reuse them from the second
    # epoch on (needs that modality un-augmented; pcmr.train.feature_cache, docs/training.md)
    cache_frozen_features: bool = False
    # tqdm bars with loss terms and throughput: true (always), false (none, and no per-epoch lines),
    # null (bars only when stderr is a terminal; plain per-epoch lines otherwise)
    progress: bool | None = None
    log_every: int = 10  # steps between JSONL log lines
    # where the log goes: jsonl (RUN/log.jsonl) and/or tensorboard (RUN/tensorboard; pcmr[tensorboard])
    loggers: list[str] = field(default_factory=lambda: ["jsonl"])

    def __post_init__(self) -> None:
        for name, low_open in (("warmup_fraction", False), ("step_fraction", True)):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    0.0 < value <= 1.0 if low_open else 0.0 <= value < 1.0):
                raise ConfigError(f"train.{name}={value!r}: expected a number in "
                                  f"{'(0, 1]' if low_open else '[0, 1)'} or null")
        for name in ("warmup_lr_factor", "finetune_lr_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"train.{name}={value!r}: expected a positive number")
        if self.loss_ramp_epoch is not None and (isinstance(self.loss_ramp_epoch, bool)
                                                 or not isinstance(self.loss_ramp_epoch, int) or self.loss_ramp_epoch < 1):
            raise ConfigError(f"train.loss_ramp_epoch={self.loss_ramp_epoch!r}: expected an epoch number >= 1 or null")
        if self.cosine_epochs is not None and (isinstance(self.cosine_epochs, bool)
                                               or not isinstance(self.cosine_epochs, int) or self.cosine_epochs < 1):
            raise ConfigError(f"train.cosine_epochs={self.cosine_epochs!r}: expected a positive integer or null")
        if isinstance(self.plateau_patience, bool) or not isinstance(self.plateau_patience, int) \
                or self.plateau_patience < 0:
            raise ConfigError(f"train.plateau_patience={self.plateau_patience!r}: expected an integer >= 0")
        if isinstance(self.plateau_factor, bool) or not isinstance(self.plateau_factor, (int, float)) \
                or not 0.0 < self.plateau_factor < 1.0:
            raise ConfigError(f"train.plateau_factor={self.plateau_factor!r}: expected a number in (0, 1)")

    def warmup_epoch_count(self) -> int:
        """Epochs of the frozen warm-up: ``round(warmup_fraction * epochs)``, else ``warmup_epochs``."""
        if self.warmup_fraction is None:
            return self.warmup_epochs
        return int(round(self.warmup_fraction * self.epochs))

    def step_period(self) -> int:
        """Epochs between two steps of the step schedule (>= 1): ``round(step_fraction * post-warm-up
        epochs)``, else ``step_epochs``."""
        if self.step_fraction is None:
            return max(1, self.step_epochs)
        return max(1, int(round(self.step_fraction * max(1, self.epochs - self.warmup_epoch_count()))))

    def schedule_summary(self) -> dict[str, Any]:
        """The schedule a run used, in epochs (recorded in ``run.json``; the study reports it)."""
        out: dict[str, Any] = {"schedule": self.schedule, "epochs": self.epochs,
                               "warmup_epochs": self.warmup_epoch_count()}
        if self.schedule == "step":
            out.update(step_period=self.step_period(), step_gamma=self.step_gamma)
        if self.schedule == "plateau":
            out.update(plateau_patience=self.plateau_patience, plateau_factor=self.plateau_factor,
                       plateau_on=self.plateau_on)
        if self.schedule == "cosine":
            out["min_lr_factor"] = self.min_lr_factor
            if self.cosine_epochs is not None:
                out["cosine_epochs"] = self.cosine_epochs
        # the two-phase settings where they differ from their defaults (the warm-up's only with a warm-up)
        names = ["schedule_every", "finetune_lr_factor"]
        if self.warmup_epoch_count():
            names += ["warmup_schedule", "restart_optimizer"]
        defaults = TrainConfig.__dataclass_fields__
        out.update({name: getattr(self, name) for name in names if getattr(self, name) != defaults[name].default})
        return out


@dataclass
class ComponentConfig:
    """A registry entry and its options: the ``model`` and ``loss`` sections of a run config.

    In YAML the options sit next to the name (``model: {name: pcme, embed_dim: 16}``); the model's
    options override its family config (``pcmr.models.create_model``), the loss's are its config
    dataclass's fields (``pcmr.losses.create_loss``), both checked when the run is built.
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_section(cls, section: str, raw: Any) -> ComponentConfig:
        """Read the section ``section`` (``model`` / ``loss``) of a run config: a mapping with a ``name``."""
        if not isinstance(raw, dict):
            raise ConfigError(f"config section '{section}' must be a mapping with a 'name', got {raw!r}")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"config section '{section}' needs a 'name' (a string), got {name!r}")
        return cls(name, {key: value for key, value in raw.items() if key != "name"})

    def to_dict(self) -> dict[str, Any]:
        """The section as written in YAML: ``{"name": ..., **options}``."""
        return {"name": self.name, **copy.deepcopy(self.options)}


@dataclass
class RunConfig:
    """A whole run: model, loss, data, train and eval sections."""

    model: ComponentConfig = field(default_factory=lambda: ComponentConfig("pcme"))
    loss: ComponentConfig = field(default_factory=lambda: ComponentConfig("pcme"))
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (YAML/JSON serialisable)."""
        data = dataclasses.asdict(self)
        data["model"], data["loss"] = self.model.to_dict(), self.loss.to_dict()
        return data

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunConfig:
        """Build and type check a run config from a nested mapping."""
        raw = dict(raw)
        components = {section: raw.pop(section) for section in ("model", "loss") if section in raw}
        config = build_dataclass(cls, raw, where="")
        for section, value in components.items():
            setattr(config, section, ComponentConfig.from_section(section, value))
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
        try:
            config.data.train_relevance = relevance_mode(config.data.train_relevance,
                                                         "config key 'data.train_relevance'")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if config.data.batch_size < 1:
            raise ConfigError(f"data.batch_size must be >= 1, got {config.data.batch_size}")
        if config.data.num_workers is not None and config.data.num_workers < 0:
            raise ConfigError(f"data.num_workers must be >= 0 or null (0 on the CPU, workers on a GPU), "
                              f"got {config.data.num_workers}")
        reserved = sorted({"finish", "pin_memory", "prefetch_factor"} & set(config.data.loader_options))
        if reserved:
            raise ConfigError(f"data.loader_options may not set {', '.join(reserved)}; the trainer chooses them "
                              "from train.device (data.num_workers sets the workers)")
        return config


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> RunConfig:
    """Load a recipe YAML (or the defaults when ``path`` is None) and apply ``--set`` overrides."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = load_mapping(path)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except NotAMappingError:
            raise ConfigError(
                f"config file {path} must hold a mapping with sections model/loss/data/train/eval"
            ) from None
    raw = apply_overrides(raw, overrides or [], schema=RunConfig)
    return RunConfig.from_dict(raw)


def save_config(config: RunConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (sections in a fixed order)."""
    text = yaml.safe_dump(config.to_dict(), sort_keys=False, default_flow_style=False)
    atomic_write_text(Path(path), text)
