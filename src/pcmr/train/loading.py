"""Loading a trained model for evaluation, search or serving: a run folder or a bare model folder.

``load_run_or_model`` reads a run folder written by ``pcmr train`` (``config.yaml``, ``model/``,
``vocab.json``, ``similarity_options.json``) or a model folder written by
``pcmr.models.save_model`` (its vocabulary given, or ``vocab.json`` inside the folder or next to
it), checks that the weights are finite and that the vocabulary is the one the model was trained
with. ``load_split`` loads the split to evaluate or index: the run's own data, a dataset name or a
dataset folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pcmr.data import RetrievalSplit, Vocabulary, list_datasets, load_dataset
from pcmr.evaluation.checks import check_finite_tensors, check_model_vocabulary
from pcmr.models import load_model
from pcmr.models.serialization import WEIGHTS_FILE
from pcmr.train.config import RunConfig
from pcmr.train.run import (
    CONFIG_FILE,
    MODEL_DIR,
    SIMILARITY_OPTIONS_FILE,
    VOCAB_FILE,
    load_run,
    load_run_split,
)

__all__ = ["LoadedModel", "load_run_or_model", "load_split"]


@dataclass
class LoadedModel:
    """A model ready for evaluation or indexing, with what its run knows about it."""

    model: Any
    vocab: Any
    similarity_options: dict[str, dict[str, Any]]
    config: Any  # pcmr.train.config.RunConfig or None for a bare model folder
    source: Path


def _read_options(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{path} is not valid JSON ({err}); expected {{similarity: {{option: value}}}}"
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError(
            f"{path} must map similarity names to option dicts, e.g. "
            f'{{"match_prob": {{"a": 12.0, "b": 4.0}}}}'
        )
    return data


def load_run_or_model(
    path: str | Path, vocab_path: str | Path | None = None, device: str | None = None
) -> LoadedModel:
    """Load a run folder (``config.yaml`` + ``model/``, via ``pcmr.train.run.load_run``) or a bare
    model folder (vocabulary: ``vocab_path``, else ``vocab.json`` in the folder or next to it;
    learned options: ``similarity_options.json`` next to it, if any)."""

    source = Path(path).expanduser()
    if not source.is_dir():
        raise FileNotFoundError(
            f"RUN_OR_MODEL: folder not found: {source} (expected a run folder from "
            f"`pcmr train` or a model folder from pcmr.models.save_model)"
        )
    map_location = device or "cpu"
    if (source / CONFIG_FILE).is_file():
        trained = load_run(source, map_location=map_location)
        vocab = Vocabulary.load(vocab_path) if vocab_path is not None else trained.vocab
        _check_loaded(trained.model, vocab, source / MODEL_DIR, vocab_path or source / VOCAB_FILE)
        return LoadedModel(trained.model, vocab, dict(trained.similarity_options), trained.config, source)
    model = load_model(source, map_location=map_location)
    candidates = (
        [Path(vocab_path)] if vocab_path is not None else [source / VOCAB_FILE, source.parent / VOCAB_FILE]
    )
    vocab_file = next((p for p in candidates if p.is_file()), None)
    if vocab_file is None:
        raise FileNotFoundError(
            f"vocabulary not found (looked for {', '.join(map(str, candidates))}); "
            f"pass --vocab PATH to the vocab.json of the training run"
        )
    options_file = source.parent / SIMILARITY_OPTIONS_FILE
    options = _read_options(options_file) if options_file.is_file() else {}
    vocab = Vocabulary.load(vocab_file)
    _check_loaded(model, vocab, source, vocab_file)
    return LoadedModel(model, vocab, options, None, source)


def _check_loaded(model: Any, vocab: Any, model_dir: Path, vocab_file: str | Path) -> None:
    """Finite weights, and the vocabulary the model was trained with (pcmr.evaluation.checks)."""

    check_finite_tensors(model.state_dict(), model_dir / WEIGHTS_FILE)
    check_model_vocabulary(model, vocab, model_dir, vocab_file)


def load_split(data: str | None, split: str, config: RunConfig | None,
               data_name: str | None = None) -> RetrievalSplit:
    """A retrieval split: ``data`` is a dataset name (``pcmr list datasets``) or a dataset folder
    (format ``data_name``, default: detected from its files); None, or the run's own dataset name,
    uses the run config's data section (same root and options as training)."""

    opts: dict[str, Any] = {}
    if data is None or (config is not None and data == config.data.name and data_name is None):
        if config is None:
            raise ValueError(
                "--data is required when RUN_OR_MODEL is a model folder "
                f"(a dataset name: {', '.join(list_datasets())}, or a dataset folder)"
            )

        return load_run_split(config, split)
    if data in list_datasets():
        name = data
    elif Path(data).expanduser().exists():
        path = str(Path(data).expanduser())
        if data_name is None:  # format detected from the folder's files
            return load_dataset(path, split)
        name, opts = data_name, {"root": path}
    else:
        raise ValueError(
            f"--data {data!r} is neither a dataset name ({', '.join(list_datasets())}) nor an "
            f"existing file or folder"
        )
    return load_dataset(name, split, **opts)
