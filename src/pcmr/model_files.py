"""The on-disk form of a :class:`pcmr.Model` (a ``save_pretrained`` folder, or ``RUN/model`` with its run
beside it): its file names, the readers and checks of its small JSON files, the generated model card.
:mod:`pcmr.hub` writes and opens the folder through these; nothing here builds a model."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from pcmr.data import Vocabulary
from pcmr.data.images import IMAGE_MEAN, IMAGE_STD
from pcmr.models.model import RetrievalModel
from pcmr.report import Report

__all__ = ["MAX_IMAGE_SIDE", "METRICS_FILE", "MODEL_CARD", "MODEL_FILES", "PREPROCESSOR_FILE", "RUN_CONFIG_FILE",
           "RUN_CONFIG_YAML", "RUN_VOCAB_FILE", "SIMILARITY_OPTIONS_FILE", "VOCABULARY_FILE", "check_image_side",
           "check_model_vocabulary", "companion", "metrics_markdown", "not_model_files", "preprocessor_config",
           "preprocessor_transform", "read_json_file", "read_run_config", "read_similarity_options", "run_metrics"]

VOCABULARY_FILE = "vocabulary.json"
PREPROCESSOR_FILE = "preprocessor_config.json"
SIMILARITY_OPTIONS_FILE = "similarity_options.json"
METRICS_FILE = "metrics.json"
RUN_CONFIG_FILE = "run_config.json"  # a save_pretrained folder: the config of the run that trained it
RUN_VOCAB_FILE = "vocab.json"  # RUN/vocab.json, next to RUN/model
RUN_CONFIG_YAML = "config.yaml"  # RUN/config.yaml, written by pcmr train
_SIMILARITY_OPTIONS_FORM = 'an object mapping similarity names to their options, e.g. {"match_prob": {"a": 12.0, "b": 4.0}}'
MODEL_CARD = """---
{{ card_data }}
---

# {{ title }}

A probabilistic cross-modal retrieval model trained with [pcmr]({{ repo_url | default("https://pypi.org/project/pcmr/", true) }}):
each image and each caption is encoded as a Gaussian (mean and log-variance) in a shared
{{ embed_dim }}-dimensional space.

{{ description }}

## Use

```python
import pcmr

model = pcmr.Model.from_pretrained("{{ model_id }}")
captions = model.encode_text(["a red circle"])      # pcmr.Gaussian [1, {{ embed_dim }}]
images = model.encode_image(["photo.png"])           # pcmr.Gaussian [1, {{ embed_dim }}]
scores = pcmr.similarity.pairwise({{ pairwise_arguments }})
```

## Metrics

{{ metrics }}
"""


def preprocessor_config(image_size: int | None, image_resize: str = "square",
                        resize_size: int | None = None) -> dict[str, Any]:
    """The ``preprocessor_config.json`` of a model: how raw images become its input at test time (None:
    features): ``image_resize`` ``square`` (the whole image resized, bicubic, to ``image_size``) or
    ``center_crop`` (the shorter side resized, bilinear, to ``resize_size``, then the central
    ``image_size`` square: Resize 256 + CenterCrop 224 for the PCME release)."""
    if image_size is None:
        return {"input": "features"}
    if image_resize == "center_crop":
        size = int(resize_size) if resize_size is not None else int(round(int(image_size) * 8 / 7))
        transform: dict[str, Any] = {"image_resize": "center_crop", "resize_size": size, "resample": "bilinear"}
    else:
        transform = {"image_resize": "square", "resample": "bicubic"}
    return {"input": "pixels", "image_size": int(image_size), **transform, "convert": "RGB",
            "image_mean": list(IMAGE_MEAN), "image_std": list(IMAGE_STD)}


#: the largest image side a model's preprocessing may ask for: pcmr's models see 32 to 256 pixels (shapes
#: 64, EfficientNet 224, the PCME release 256 -> 224); a size read from a file beyond it is refused, so an
#: edited preprocessor_config.json or index manifest cannot make one query allocate gigabytes
MAX_IMAGE_SIDE = 1024


def check_image_side(value: Any, where: str, field: str, run_config: dict[str, Any] | None = None) -> int:
    """``value`` (an image side read from ``where``'s ``field``) as an int, refused with one ``ValueError``
    naming the file, field and value unless it is an integer in ``[1, MAX_IMAGE_SIDE]`` and, for
    ``image_size``, equal to the side the model's run trained at (``data.options.image_size`` of
    ``run_config``) where that is recorded."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_IMAGE_SIDE:
        raise ValueError(f"{where}: {field} must be an integer side in pixels from 1 to {MAX_IMAGE_SIDE}, got "
                         f"{value!r}; the file was edited or is not a pcmr model's")
    trained = (((run_config or {}).get("data") or {}).get("options") or {}).get("image_size")
    if field == "image_size" and isinstance(trained, int) and not isinstance(trained, bool) and trained != value:
        raise ValueError(f"{where}: image_size {value} differs from the image_size {trained} the model was trained "
                         "at (its run config's data.options.image_size); the file was edited")
    return value


def preprocessor_transform(preprocessor: dict[str, Any], path: Path) -> dict[str, Any]:
    """``image_resize`` / ``resize_size`` of a ``preprocessor_config.json`` (absent: ``square``, as files written
    before the transform was recorded)."""
    resize = preprocessor.get("image_resize", "square")
    if resize == "square":
        return {"image_resize": "square", "resize_size": None}
    size = preprocessor.get("resize_size")
    if resize != "center_crop" or isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"preprocessor config file {str(path)!r}: image_resize must be 'square', or 'center_crop' "
                         f"with an integer resize_size; got image_resize={resize!r}, resize_size={size!r}")
    return {"image_resize": "center_crop", "resize_size": size}


def read_json_file(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{what} file {str(path)!r} is not readable JSON: {error}") from error


def read_similarity_options(path: str | os.PathLike[str]) -> dict[str, dict[str, float]]:
    """The trained score parameters of ``similarity_options.json``: ``{similarity: {option: number}}``.

    Raises:
        ValueError: naming the file and the expected form when it is not JSON, or not that mapping.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"similarity options file {str(path)!r} cannot be read ({error}); expected "
                         f"{_SIMILARITY_OPTIONS_FORM}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"similarity options file {str(path)!r} is not valid JSON ({error.msg} at line "
                         f"{error.lineno}, column {error.colno}); expected {_SIMILARITY_OPTIONS_FORM}") from None
    if not isinstance(data, dict):
        raise ValueError(f"similarity options file {str(path)!r} holds a JSON {type(data).__name__}; expected "
                         f"{_SIMILARITY_OPTIONS_FORM}")
    for name, options in data.items():
        if not isinstance(options, dict):
            raise ValueError(f"similarity options file {str(path)!r}: the options of {name!r} are a JSON "
                             f"{type(options).__name__}; expected {_SIMILARITY_OPTIONS_FORM}")
        for key, value in options.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"similarity options file {str(path)!r}: {name}.{key} is {value!r}, not a number; "
                                 f"expected {_SIMILARITY_OPTIONS_FORM}")
    return data


def read_run_config(path: Path) -> dict[str, Any]:
    """The raw mapping of a run's ``config.yaml`` or a model's ``run_config.json`` (checked by the trainer's
    config layer where it is used)."""
    try:
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as error:
        raise ValueError(f"run config file {str(path)!r} is not readable: {error}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"run config file {str(path)!r} must hold a mapping with sections model/loss/data/train/"
                         f"eval, got a {type(raw).__name__}")
    return raw


#: the files a :meth:`Model.save_pretrained` folder may hold (the Hugging Face layout of this module)
MODEL_FILES = frozenset({"config.json", "model.safetensors", "README.md", "vocabulary.json", "similarity_options.json",
                         "metrics.json", "preprocessor_config.json", RUN_CONFIG_FILE})


def not_model_files(directory: Path) -> str:
    """The entries of an existing ``directory`` that a saved model does not hold, as a short list ('' when
    none, or when it does not exist)."""
    if not os.path.lexists(directory):
        return ""
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory} is a file; save_pretrained writes a folder")
    foreign = sorted(p.name for p in directory.iterdir() if p.name not in MODEL_FILES or not p.is_file())
    return ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")


def metrics_markdown(metrics: dict[str, Any]) -> str:
    """The model card's metrics section: the validation choice and the test table, when known."""
    lines: list[str] = []
    validation = metrics.get("validation")
    if isinstance(validation, dict) and validation:
        lines.append("Validation (the selected epoch): " + ", ".join(
            f"{key} = {value:.4g}" if isinstance(value, float) else f"{key} = {value}"
            for key, value in validation.items()))
    test = metrics.get("test")
    if isinstance(test, dict) and test.get("markdown"):
        table = [("###" + line[1:]) if line.startswith("# ") else line for line in str(test["markdown"]).splitlines()]
        lines += ["", f"Test ({test.get('source', 'evaluation report')}):", "", *table]
    return "\n".join(lines).strip() or "No metrics were recorded for this model (evaluate it with `pcmr evaluate`)."


def run_metrics(run_dir: Path) -> dict[str, Any]:
    """Metrics of a run folder: the best validation epoch (run.json) and the newest evaluation report."""
    metrics: dict[str, Any] = {}
    summary_path = run_dir / "run.json"
    if summary_path.is_file():
        summary = read_json_file(summary_path, "run summary")
        best = summary.get("best_epoch") if isinstance(summary, dict) else None
        history = summary.get("history", []) if isinstance(summary, dict) else []
        for record in history if isinstance(history, list) else []:
            if isinstance(record, dict) and record.get("epoch") == best and isinstance(record.get("val"), dict):
                metrics["validation"] = {"epoch": best, **record["val"]}
    reports = sorted(run_dir.glob("eval-*/results.json"), key=lambda p: p.stat().st_mtime)
    if reports:
        report = Report.load(reports[-1])
        metrics["test"] = {"source": f"{reports[-1].parent.name}/results.json", "markdown": report.to_markdown()}
    return metrics



def check_model_vocabulary(model: RetrievalModel, vocab: Vocabulary, model_dir: str | os.PathLike, vocab_path: str | os.PathLike) -> None:
    """Raise ``ValueError`` when ``vocab`` (read from ``vocab_path``) is not the vocabulary the model in
    ``model_dir`` was trained with: its size differs from the model's ``vocab_size`` (word-embedding
    text encoders), or it differs from the ``vocabulary.json`` saved with the model."""
    config = getattr(model, "config", None)
    uses_vocabulary = config is not None and bool(getattr(config.text_encoder, "reads_word_ids", False))
    if uses_vocabulary and config is not None and config.vocab_size != len(vocab):
        raise ValueError(f"{os.fspath(vocab_path)} holds {len(vocab)} words but the model in {os.fspath(model_dir)} "
                         f"embeds {config.vocab_size} token ids; expected the vocabulary of the run that trained "
                         f"this model")
    saved = Path(model_dir) / "vocabulary.json"
    if saved.is_file() and Path(vocab_path).resolve() != saved.resolve():
        if Vocabulary.load(saved) != vocab:
            raise ValueError(f"{os.fspath(vocab_path)} differs from {saved}, the vocabulary saved with the model; "
                             f"expected the vocabulary of the run that trained this model")


def companion(directory: Path, *names: str) -> Path | None:
    """The first of ``names`` in ``directory``, else beside it (a run's ``RUN/model`` finds ``RUN/vocab.json``
    and ``RUN/similarity_options.json``; so does the ``model/`` of ``pcmr convert``)."""
    for folder in (directory, directory.parent):
        for name in names:
            if (folder / name).is_file():
                return folder / name
    return None


