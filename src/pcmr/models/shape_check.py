"""A model config checked against the tensor shapes of its weights file before the model is built.

``config.json`` decides how much memory building the model takes (``vocab_size`` rows of word
embeddings, ``num_layers`` GRU layers, ...); ``model.safetensors`` is the ground truth. Loading first
reads the weights file's header only (names and shapes, no tensor data), then:

1. compares the layer counts of the config (GRU layers of the text encoder, VSRN reasoning layers,
   CNN stages) with the layers the file holds: a count costs Python objects per layer even on the
   ``meta`` device, so it is checked from the names alone;
2. builds the model on the ``meta`` device (shapes without storage) and compares every tensor shape.

A mismatch raises one ``ValueError`` naming the config key, its value and the value the weights
imply, e.g. ``vocab_size is 4000000 in config.json but the weights imply 1000``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch.overrides import TorchFunctionMode

from pcmr.models.config import ModelConfig, config_to_dict
from pcmr.models.factory import build_model

__all__ = ["check_config_against_weights", "weight_shapes"]

_TEXT_GRU_LAYER = re.compile(r"^caption_tower\.encoder\.(?:.+\.)?gru\.weight_ih_l(\d+)$")
_REASONING_LAYER = re.compile(r"^image_tower\.encoder\.refine\.layers\.(\d+)\.")
_CNN_PREFIX = "image_tower.encoder.backbone."


def weight_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """``{tensor name: shape}`` of a safetensors file, read from its header (no tensor is loaded)."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
    except (SafetensorError, OSError, ValueError) as error:
        raise ValueError(f"model weights file {str(path)!r} is not a valid safetensors file: {error}") from error


def check_config_against_weights(config: ModelConfig, shapes: dict[str, tuple[int, ...]], weights_path: str | Path,
                                  config_name: str = "config.json") -> None:
    """Raise ``ValueError`` naming the config key and the value the weights imply when ``config`` does not
    describe the tensors ``shapes`` (:func:`weight_shapes`) holds; nothing of the model's size is allocated."""
    where = f"model weights file {str(weights_path)!r} does not match {config_name}"
    for key, value, implied, evidence in _layer_counts(config, shapes):
        if value != implied:
            raise ValueError(f"{where}: {key} is {value} in {config_name} but the weights imply {implied} "
                             f"({evidence})")
    if config.text_encoder.kind == "minilm":
        return  # a pretrained package model of fixed size; compared after it is built
    try:
        with torch.device("meta"), _SkipInPlaceOnMeta():
            model = build_model(config, load_pretrained=False)
    except (RuntimeError, OverflowError) as error:  # sizes beyond what a tensor can describe
        largest = max((d for shape in shapes.values() for d in shape), default=0)
        sizes = sorted(((v, k) for k, v in _integer_fields(config_to_dict(config)) if v > largest), reverse=True)
        named = ", ".join(f"{k} = {v}" for v, k in sizes[:3])
        raise ValueError(f"{where}: the sizes of {config_name} cannot be built ({str(error).splitlines()[0]}); "
                         f"the largest dimension in the weights is {largest}"
                         + (f", the config gives {named}" if named else "")) from None
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    wrong = sorted(name for name in set(expected) & set(shapes) if expected[name] != shapes[name])
    if wrong:
        name = wrong[0]
        keys = _keys_for(config, expected[name], shapes[name])
        raise ValueError(f"{where}: tensor {name} is {list(shapes[name])} in the weights but {config_name} implies "
                         f"{list(expected[name])}" + (f"; {keys}" if keys else "")
                         + (f" ({len(wrong)} tensors differ)" if len(wrong) > 1 else ""))
    if missing or unexpected:
        raise ValueError(f"{where}: missing {missing[:5]}, unexpected {unexpected[:5]}, wrong shape []")


#: in-place operations that only write values (parameter initialisers): skipped on ``meta`` tensors
_VALUE_WRITES = frozenset({
    "normal_", "uniform_", "trunc_normal_", "constant_", "zeros_", "ones_", "eye_", "dirac_", "orthogonal_",
    "sparse_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "zero_", "fill_",
    "copy_", "bernoulli_", "exponential_", "random_", "erfinv_", "clamp_", "clamp_min_", "clamp_max_", "mul_",
    "add_", "sub_", "div_", "masked_fill_", "fill_diagonal_"})


class _SkipInPlaceOnMeta(TorchFunctionMode):
    """Value-only in-place operations on ``meta`` tensors (the parameter initialisers ``normal_``,
    ``uniform_``, ...: :data:`_VALUE_WRITES`) skipped: they change no shape or flag, and their first call on ``meta`` imports torch's symbolic-shape
    machinery (about 1.5 s), more than the whole check needs."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _VALUE_WRITES:
            target = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
            if target is not None and target.is_meta:
                return target
        return func(*args, **kwargs)


def _layer_counts(config: ModelConfig, shapes: dict[str, tuple[int, ...]]) -> list[tuple[str, Any, Any, str]]:
    """(config key, its value, the value the weights imply, which tensors say so) for each layer count."""
    out: list[tuple[str, Any, Any, str]] = []
    if config.text_encoder.kind == "gru":
        layers = {int(m.group(1)) for name in shapes if (m := _TEXT_GRU_LAYER.match(name))}
        out.append(("text_encoder.num_layers", config.text_encoder.num_layers, len(layers),
                    "caption_tower.encoder...gru.weight_ih_l*"))
    if config.image_encoder.reasoning == "vsrn":
        layers = {int(m.group(1)) for name in shapes if (m := _REASONING_LAYER.match(name))}
        out.append(("image_encoder.reasoning_layers", config.image_encoder.reasoning_layers, len(layers),
                    "image_tower.encoder.refine.layers.*"))
    if config.image_encoder.kind == "cnn":
        convs = sorted(((_layer_index(name), shape[0]) for name, shape in shapes.items()
                        if name.startswith(_CNN_PREFIX) and len(shape) == 4))
        out.append(("image_encoder.cnn_channels", list(config.image_encoder.cnn_channels), [c for _, c in convs],
                    f"the 4-d convolution weights under {_CNN_PREFIX}"))
    return out


def _layer_index(name: str) -> int:
    match = re.search(r"\.(\d+)\.weight$", name)
    return int(match.group(1)) if match else -1


def _keys_for(config: ModelConfig, implied: tuple[int, ...], actual: tuple[int, ...]) -> str:
    """The config keys whose value is a size where the implied and actual shapes differ, e.g.
    ``vocab_size is 4000000 in config.json; the weights imply 1000``."""
    values = _integer_fields(config_to_dict(config))
    notes = []
    for got, want in zip(implied, actual):
        if got == want:
            continue
        keys = [key for key, value in values if value == got]
        if keys:
            notes.append(" or ".join(keys) + f" is {got} in the config; the weights imply {want}")
    if len(implied) != len(actual):
        notes.append(f"the weights hold a {len(actual)}-d tensor where the config implies {len(implied)}-d")
    return "; ".join(dict.fromkeys(notes))


def _integer_fields(data: dict[str, Any], prefix: str = "") -> list[tuple[str, int]]:
    """Dotted keys and values of the integer fields of a config dict (list entries as ``key[i]``)."""
    out: list[tuple[str, int]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _integer_fields(value, f"{name}.")
        elif isinstance(value, list):
            out += [(f"{name}[{i}]", v) for i, v in enumerate(value) if isinstance(v, int) and not isinstance(v, bool)]
        elif isinstance(value, int) and not isinstance(value, bool):
            out.append((name, value))
    return out
