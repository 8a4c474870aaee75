"""Save and load models without pickle: safetensors weights + JSON config (+ extra JSON files).

A saved model is a folder:

- ``config.json``: the resolved :class:`ModelConfig` as a plain dict (loadable by ``create_model``);
- ``model.safetensors``: every tensor of the ``state_dict`` (parameters and buffers, including
  those of frozen pretrained backbones, so the model is rebuilt exactly);
- ``<name>.json`` for each entry of ``extra_json`` (e.g. the vocabulary).

Every file is written to a temporary file in the same folder and moved into place with
``os.replace`` (atomic: a crash never leaves a half-written file). Loading reads JSON and
safetensors only, so opening someone else's model can never execute code, and it compares the
sizes ``config.json`` implies with the tensor shapes in the weights file's header before anything
is allocated (:mod:`pcmr.models.shape_check`), so a config naming huge sizes fails at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from pcmr.atomic import atomic_write_json, atomic_write_safetensors
from pcmr.models.config import config_from_dict, config_to_dict
from pcmr.models.factory import build_model
from pcmr.models.model import RetrievalModel
from pcmr.models.shape_check import check_config_against_weights, weight_shapes

__all__ = ["save_model", "load_model", "read_extra_json", "CONFIG_FILE", "WEIGHTS_FILE"]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
_FORMAT = {"format": "pcmr.models", "format_version": "1"}
_EXTRA_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def save_model(
    model: RetrievalModel, directory: str | Path, extra_json: Mapping[str, Any] | None = None
) -> Path:
    """Save ``model`` into ``directory`` (created if needed); returns the folder path.

    Args:
        model: a model made by ``create_model`` / ``load_model``.
        directory: target folder; existing files of the same names are replaced atomically.
        extra_json: optional ``{name: JSON-serialisable object}``; each is written to
            ``<name>.json`` (e.g. ``{"vocabulary": vocab.to_dict()}``) and read back with
            :func:`read_extra_json`.
    """
    if not isinstance(model, RetrievalModel):
        raise TypeError(f"save_model expects a model made by pcmr.create_model, got {type(model).__name__}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    extras = dict(extra_json or {})
    encoded: dict[str, str] = {}
    for name, value in extras.items():
        stem = name[:-5] if isinstance(name, str) and name.endswith(".json") else name
        if not isinstance(stem, str) or not _EXTRA_NAME.match(stem) or stem in ("config", "model"):
            raise ValueError(
                f"extra_json key {name!r} is not a valid file stem (letters, digits, '_', '-', '.'; not "
                f"'config' or 'model')"
            )
        try:
            json.dumps(value)
        except (TypeError, ValueError) as error:
            raise ValueError(f"extra_json[{name!r}] is not JSON-serialisable: {error}") from error
        encoded[stem] = value
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    atomic_write_safetensors(directory / WEIGHTS_FILE, state, metadata=_FORMAT)
    atomic_write_json(directory / CONFIG_FILE, config_to_dict(model.config))
    for stem, value in encoded.items():
        atomic_write_json(directory / f"{stem}.json", value)
    return directory


def _read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise FileNotFoundError(
            f"{what} file {str(path)!r} does not exist (is this a folder written by save_model?)"
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{what} file {str(path)!r} is not valid JSON: {error}") from error


def load_model(directory: str | Path, map_location: str | torch.device = "cpu") -> RetrievalModel:
    """Rebuild the exact model saved by :func:`save_model` (returned in eval mode).

    Reads ``config.json`` and ``model.safetensors`` only (no pickle). Raises
    ``FileNotFoundError`` / ``ValueError`` naming the file when one is missing, malformed, or
    its tensors do not match the config.
    """
    directory = Path(directory)
    config_data = _read_json(directory / CONFIG_FILE, "model config")
    if not isinstance(config_data, dict):
        raise ValueError(f"model config file {str(directory / CONFIG_FILE)!r} must hold a JSON object")
    config = config_from_dict(config_data)
    weights_path = directory / WEIGHTS_FILE
    if not weights_path.is_file():
        raise FileNotFoundError(f"model weights file {str(weights_path)!r} does not exist")
    check_config_against_weights(config, weight_shapes(weights_path), weights_path)  # before any allocation
    try:
        state = load_file(str(weights_path), device=str(map_location))
    except (SafetensorError, OSError, ValueError) as error:
        raise ValueError(
            f"model weights file {str(weights_path)!r} is not a valid safetensors file: {error}"
        ) from error
    model = build_model(config, load_pretrained=False)
    float_dtypes = {v.dtype for v in state.values() if v.is_floating_point()}
    if len(float_dtypes) == 1:
        model.to(float_dtypes.pop())
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong_shape = sorted(k for k in set(expected) & set(state) if expected[k].shape != state[k].shape)
    if missing or unexpected or wrong_shape:
        raise ValueError(
            f"model weights file {str(weights_path)!r} does not match {CONFIG_FILE}: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}, wrong shape {wrong_shape[:5]}"
        )
    model.load_state_dict(state, strict=True)
    model.to(map_location)
    return model.eval()


def read_extra_json(directory: str | Path, name: str) -> Any:
    """Read back ``<name>.json`` saved through ``save_model(..., extra_json={name: ...})``."""
    stem = name[:-5] if name.endswith(".json") else name
    return _read_json(Path(directory) / f"{stem}.json", f"{stem!r}")
