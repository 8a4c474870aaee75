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

Every user error raises :class:`ConfigError` with one line naming the key, what
was given and what is accepted.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

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


class ConfigError(ValueError):
    """A run configuration (YAML file, ``--set`` override or field value) is invalid."""


@dataclass
class DataConfig:
    """Which dataset to train and validate on (``pcmr.data.load_dataset``)."""

    name: str = "shapes"  # dataset name from pcmr.data.list_datasets()
    root: str | None = None  # dataset folder (COCO / Flickr30k / CUB); None for built-in data
    train_split: str = "train"
    val_split: str = "val"
    test_split: str = "test"
    batch_size: int = 64  # images per training batch
    # in-batch positives: "source" (only the pairs written together, COCO/Flickr practice, false
    # negatives included) or "true" (the dataset's known relation: shapes grammar, CUB classes);
    # YAML reads a bare `true` as a boolean, which is accepted as "true"
    train_relevance: str | bool = "true"
    eval_batch_size: int = 256  # items per encoding batch during validation
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
    max_steps_per_epoch: int | None = None  # truncate epochs (smoke tests); None: full epochs
    device: str = "cpu"  # torch device string, e.g. cpu, cuda, cuda:1
    progress: bool = True  # tqdm bars with loss terms and throughput
    log_every: int = 10  # steps between JSONL log lines


@dataclass
class EvalConfig:
    """What ``pcmr evaluate`` reports for this run by default."""

    similarities: list[str] = field(
        default_factory=lambda: ["cosine", "wasserstein", "match_prob", "elk", "kl"]
    )
    rerankers: list[str] = field(default_factory=lambda: ["nns", "is", "csls", "csls+rgm"])
    split: str = "test"
    batch_size: int = 256


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
        if config.train.epochs < 1:
            raise ConfigError(f"train.epochs must be >= 1, got {config.train.epochs}")
        reserved = sorted({"seed", "num_workers", "batch_size", "vocab"} & set(config.data.loader_options))
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


# --------------------------------------------------------------------------- type checking


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any value"
    if origin is not None:
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", str(tp))


_FLOAT_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Return ``value`` checked (and losslessly converted) against type ``tp``; raise ConfigError."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"config key '{key}' expects {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"config key '{key}' expects {_type_name(tp)}, got {value!r}")
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, where=key)
    if origin in (list, tuple):
        if isinstance(value, str):  # "--set eval.similarities=cosine,kl"
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}' expects a list, got {value!r}")
        inner = args[0] if args else Any
        return [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' expects a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config key '{key}' expects true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"config key '{key}' expects an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _FLOAT_RE.match(value.strip()):
            return float(value)
        raise ConfigError(f"config key '{key}' expects a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"config key '{key}' expects a string, got {value!r}")
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"config key '{key}' expects {_type_name(tp)}, got {value!r}")


def build_dataclass(cls: type, raw: Any, where: str = "") -> Any:
    """Instantiate dataclass ``cls`` from mapping ``raw``, rejecting unknown keys and wrong types.

    Args:
        cls: a dataclass type whose annotations give the accepted types.
        raw: a mapping (``None`` means all defaults).
        where: dotted prefix used in error messages (e.g. ``"train"``).
    """
    label = where or "the config"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config section '{label}' must be a mapping of keys to values, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in raw.items():
        full = f"{where}.{key}" if where else str(key)
        if key not in fields:
            raise ConfigError(
                f"unknown config key '{full}'; accepted keys in {label}: {', '.join(sorted(fields))}"
            )
        kwargs[key] = _coerce(value, hints[key], full)
    return cls(**kwargs)


# --------------------------------------------------------------------------- YAML + overrides


def parse_value(text: str) -> Any:
    """Parse an override value as YAML (``1e-3`` and ``none`` included)."""
    if _FLOAT_RE.match(text.strip()) and not re.match(r"^[+-]?\d+$", text.strip()):
        return float(text)
    if text.strip().lower() in ("none", "null", "~"):
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_override(item: str) -> tuple[list[str], Any]:
    """Split ``"train.lr=1e-3"`` into ``(["train", "lr"], 0.001)``."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must have the form key=value, e.g. train.epochs=3")
    key, text = item.split("=", 1)
    path = [part for part in key.strip().split(".")]
    if not key.strip() or any(not part for part in path):
        raise ConfigError(f"override {item!r} has an empty key; expected a dotted key such as train.lr")
    return path, parse_value(text)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of the nested mapping ``raw`` with each ``key=value`` override applied."""
    import copy

    result = copy.deepcopy(raw)
    sections = {f.name for f in dataclasses.fields(RunConfig)}
    for item in overrides:
        path, value = parse_override(item)
        if path[0] not in sections:
            raise ConfigError(
                f"unknown config key '{'.'.join(path)}'; top-level sections: {', '.join(sorted(sections))}"
            )
        node = result
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(
                    f"config key '{'.'.join(path[: i + 1])}' is not a section; cannot set {item!r}"
                )
            node = child
        node[path[-1]] = value
    return result


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> RunConfig:
    """Load a recipe YAML (or the defaults when ``path`` is None) and apply ``--set`` overrides."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "invalid YAML"
            raise ConfigError(f"config file {path} is not valid YAML: {first}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"config file {path} must hold a mapping with sections model/loss/data/train/eval"
            )
        raw = loaded
    raw = apply_overrides(raw, overrides or [])
    return RunConfig.from_dict(raw)


def save_config(config: RunConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (sections in a fixed order)."""
    from pcmr.train.checkpoint import atomic_write_text

    text = yaml.safe_dump(config.to_dict(), sort_keys=False, default_flow_style=False)
    atomic_write_text(Path(path), text)
