"""The run folder and the parts a run is built from (data, vocabulary, model, loss).

Run folder layout (``RUN/``)::

    config.yaml               the resolved config (recipe + --set overrides)
    run.json                  summary: status, trained similarity, selected epoch, validation history
    log.jsonl                 one JSON object per line: step / epoch / validation / resume events
    tensorboard/              TensorBoard scalars (train.loggers: [..., tensorboard]; pcmr.train.loggers)
    vocab.json                the training vocabulary (pcmr.data.Vocabulary.save)
    similarity_options.json   {similarity name: options} for evaluation, e.g. {"match_prob": {"a": .., "b": ..}}
                              (read by pcmr.hub.read_similarity_options)
    model/                    the selected model (best validation metric), written by pcmr.Model.save_pretrained
                              (all or nothing); pcmr.load(RUN) opens it with its vocabulary, options and config
    model_last/               the model after the last epoch, written the same way
    checkpoints/              crash-safe training state (see pcmr.train.checkpoint)
    train.lock                PID and host of the process training the run (see pcmr.train.lock)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pcmr.atomic import atomic_write_text
from pcmr.data import RetrievalSplit, Vocabulary, list_datasets
from pcmr.data.config import load_configured_split
from pcmr.data.errors import DataError
from pcmr.data.registry import detect_format, image_size_from_model
from pcmr.device import resolve_device
from pcmr.evaluation.columns import SELECTION_METRICS
from pcmr.hub import RUN_VOCAB_FILE, SIMILARITY_OPTIONS_FILE
from pcmr.inference import list_rerankers
from pcmr.losses import RetrievalLoss, create_loss, list_losses
from pcmr.models import RetrievalModel, create_model, list_models, load_word_vectors
from pcmr.models.factory import resolve_config as resolve_model_config
from pcmr.similarity import list_similarities
from pcmr.suggest import unknown_name
from pcmr.train.config import ConfigError, RunConfig
from pcmr.train.loggers import check_loggers

__all__ = [
    "CONFIG_FILE",
    "LOG_FILE",
    "MODEL_DIR",
    "MODEL_LAST_DIR",
    "RUN_FILE",
    "RunParts",
    "SIMILARITY_OPTIONS_FILE",
    "VOCAB_FILE",
    "build_parts",
    "check_config",
    "resolve_image_size",
    "load_run_split",
    "write_json",
]

CONFIG_FILE = "config.yaml"
RUN_FILE = "run.json"
LOG_FILE = "log.jsonl"
VOCAB_FILE = RUN_VOCAB_FILE
MODEL_DIR = "model"
MODEL_LAST_DIR = "model_last"
CHECKPOINT_DIR = "checkpoints"


@dataclass
class RunParts:
    """Everything a training run needs, built from a :class:`RunConfig`."""

    train_split: RetrievalSplit
    val_split: RetrievalSplit | None
    vocab: Vocabulary
    model: RetrievalModel
    loss: RetrievalLoss
    word_vectors_found: int | None = None  # vocabulary words given a vector by train.word_vectors


def write_json(path: Path, data: Any) -> None:
    """Atomically write ``data`` as indented JSON."""
    atomic_write_text(Path(path), json.dumps(data, indent=2, sort_keys=False) + "\n")


def _load_split(config: RunConfig, split: str) -> RetrievalSplit:
    return load_configured_split(config.data, split)


def _load_vocab(config: RunConfig, train_split: RetrievalSplit, run_dir: Path) -> Vocabulary:
    path = run_dir / VOCAB_FILE
    if path.is_file():  # resuming: the vocabulary of the run, not a rebuilt one
        return Vocabulary.load(path)
    vocab = Vocabulary.from_split(train_split, **config.data.vocab_options)
    vocab.save(path)  # atomic
    return vocab


def build_parts(config: RunConfig, run_dir: Path) -> RunParts:
    """Load the splits, build (or reload) the vocabulary, create the model and the loss."""

    train_split = _load_split(config, config.data.train_split).with_relevance(str(config.data.train_relevance))
    val_split = _load_split(config, config.data.val_split) if config.train.validate_every > 0 else None
    vocab = _load_vocab(config, train_split, run_dir)
    model_options = dict(config.model.options)
    model_options["vocab_size"] = len(vocab)
    model = create_model(config.model.name, **model_options)
    found = _load_word_vectors(config, model, vocab)
    loss = create_loss(config.loss.name, **config.loss.options)
    return RunParts(train_split=train_split, val_split=val_split, vocab=vocab, model=model, loss=loss,
                    word_vectors_found=found)


def _load_word_vectors(config: RunConfig, model: RetrievalModel, vocab: Vocabulary) -> int | None:
    """``train.word_vectors`` into the caption encoder's word embeddings (rows by ``vocab``); the
    number of vocabulary words found, or None without a file."""
    path = config.train.word_vectors
    if path is None:
        return None
    if not model.config.text_encoder.reads_word_ids:
        raise ConfigError(f"train.word_vectors={path!r}: word vectors need model.text_encoder.kind gru, "
                          f"not {model.config.text_encoder.kind!r}")
    try:
        return load_word_vectors(model, Path(path).expanduser(), vocab.words, match=config.train.word_vectors_match)
    except (OSError, ValueError) as error:
        raise ConfigError(f"train.word_vectors: {error}") from None


def _check_names(key: str, names: list[str], accepted: list[str]) -> None:
    for name in names:
        if name not in accepted:
            raise ConfigError(f"config key '{key}': " + unknown_name("name", name, accepted))


def check_config(config: RunConfig) -> None:
    """Check the names a config refers to (model, loss, dataset, similarities, re-rankers) before a
    run folder is made; option values are checked by the factories when the run is built."""

    _check_names("model.name", [config.model.name], list(list_models()))
    _check_names("loss.name", [config.loss.name], list(list_losses()))
    name = config.data.name
    if os.sep in name or Path(name).exists():  # a dataset folder or file, format detected by pcmr.data
        if not Path(name).expanduser().exists():
            raise ConfigError(
                f"data.name: dataset path {name} does not exist; give a folder or one of "
                f"{', '.join(list_datasets())}"
            )
    else:
        _check_names("data.name", [name], list(list_datasets()))
    resolve_device(config.train.device, what="train.device")
    similarities = list(list_similarities())
    if config.train.select_similarity is not None:
        _check_names("train.select_similarity", [config.train.select_similarity], similarities)
    _check_names("eval.similarities", config.eval.similarities, similarities + ["all"])
    _check_names("eval.rerankers", config.eval.rerankers, list(list_rerankers()) + ["all"])
    _check_names("train.select_on", [config.train.select_on], list(SELECTION_METRICS))
    check_loggers(config.train.loggers)


def resolve_image_size(config: RunConfig) -> str | None:
    """Give a dataset whose image size the model decides (``DatasetSpec.image_size_from_model``: one's own
    images) the model's input side when the run does not set ``data.options.image_size``
    (``ImageEncoderConfig.pixel_input_size``: ``input_size`` of a pretrained backbone, 64 for the ``cnn``
    encoder). Sets it in ``config`` (so the run's config.yaml records it) and returns a line saying what
    is used; None when nothing was set."""
    name = config.data.name
    if name not in list_datasets() and Path(name).expanduser().exists():  # a folder: its detected format
        try:
            name = detect_format(Path(name).expanduser())
        except DataError:  # reported with the file names looked for when the split is loaded
            return None
    if not image_size_from_model(name) or "image_size" in config.data.options:
        return None
    try:
        encoder = resolve_model_config(config.model.name, **config.model.options).image_encoder
    except (ValueError, TypeError):  # the model's own checks report a bad config when the run is built
        return None
    size = encoder.pixel_input_size
    if size is None:
        return None
    config.data.options["image_size"] = size
    return (f"data: images are resized to {size} x {size} pixels (the input side of the {encoder.kind} image "
            "encoder); set data.options.image_size to change it")


def load_run_split(config: RunConfig, split: str) -> RetrievalSplit:
    """The split ``split`` of the run's dataset (same name, root and options as training)."""
    return _load_split(config, split)
