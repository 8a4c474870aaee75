"""The one configuration layer: typed dataclasses built from plain mappings, and ``key.sub=value`` overrides.

Every configuration in pcmr (the model configs of :mod:`pcmr.models.config`, the loss configs of
:func:`pcmr.losses.create_loss`, the run configs of ``pcmr.train.config`` and the command line's
``--set`` / ``--option`` flags) goes through the functions here:

- :func:`parse_override` splits ``"train.lr=1e-3"`` into ``(["train", "lr"], 0.001)``; the value is
  read as YAML (``3`` int, ``1e-3`` float, ``true`` bool, ``none``/``null`` None, ``[a, b]`` list,
  anything else a string).
- :func:`apply_overrides` applies overrides (``key=value`` strings or a ``{dotted key: value}``
  mapping) to a nested plain dict, checking the first key against a schema dataclass.
- :func:`build_dataclass` turns a nested mapping into a dataclass, rejecting unknown keys (naming
  the accepted ones) and values of the wrong type (naming the expected type).

Errors are :class:`ConfigError` (a ``ValueError``) with one line naming the key, what was given and
what is accepted. The syntax is described in ``docs/configuration.md``.
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from pcmr.suggest import did_you_mean, name_list

__all__ = [
    "ConfigError",
    "NotAMappingError",
    "apply_overrides",
    "build_dataclass",
    "load_mapping",
    "parse_override",
    "parse_value",
    "yaml_error_text",
]


class ConfigError(ValueError):
    """A configuration (file, override or field value) is invalid."""


class NotAMappingError(ConfigError):
    """A configuration file holds something other than a mapping of keys to values (a list, a number)."""


_FLOAT_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_INT_RE = re.compile(r"^[+-]?\d+$")


# --------------------------------------------------------------------------- override syntax
def parse_value(text: str) -> Any:
    """Parse an override value as YAML; ``1e-3`` is a float and ``none`` is None (YAML 1.1 reads neither)."""
    stripped = text.strip()
    if _FLOAT_RE.match(stripped) and not _INT_RE.match(stripped):
        return float(stripped)
    if stripped.lower() in ("none", "null", "~"):
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
    path = key.strip().split(".")
    if not key.strip() or any(not part for part in path):
        raise ConfigError(f"override {item!r} has an empty key; expected a dotted key such as train.lr")
    return path, parse_value(text)


def _is_section(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) or tp is dict or typing.get_origin(tp) is dict


def _check_first_key(path: list[str], schema: type, label: str) -> None:
    hints = typing.get_type_hints(schema)
    names = [f.name for f in dataclasses.fields(schema)]
    sections = [name for name in names if _is_section(hints[name])]
    key = ".".join(path)
    if path[0] in names:
        if len(path) > 1 and path[0] not in sections:
            raise ConfigError(f"{label} key '{path[0]}' is not a section; cannot set '{key}'")
        return
    hint = did_you_mean(path[0], sections if len(path) > 1 else names)
    if len(sections) == len(names):
        raise ConfigError(f"unknown {label} key '{key}'{hint}; top-level sections: {name_list(sorted(sections))}")
    if len(path) > 1:
        raise ConfigError(f"unknown {label} key '{key}'{hint}; dotted keys start with one of: {name_list(sections)}")
    raise ConfigError(f"unknown {label} key '{key}'{hint}; accepted keys: {name_list(names)}")


def _set(result: dict[str, Any], path: list[str], value: Any, label: str, merge: bool) -> None:
    node = result
    for i, part in enumerate(path[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{label} key '{'.'.join(path[: i + 1])}' is not a section; "
                              f"cannot set '{'.'.join(path)}'")
        node = child
    last = path[-1]
    if merge and isinstance(value, Mapping) and isinstance(node.get(last, {}), dict):
        section = dict(node.get(last) or {})
        section.update({k: v for k, v in value.items() if v is not None})
        node[last] = section
    else:
        node[last] = value


def apply_overrides(
    data: Mapping[str, Any],
    overrides: Iterable[str] | Mapping[str, Any],
    *,
    schema: type | None = None,
    label: str = "config",
) -> dict[str, Any]:
    """Return a deep copy of the nested mapping ``data`` with ``overrides`` applied.

    Args:
        data: the nested plain dict to start from (left unchanged).
        overrides: ``key.sub=value`` strings (values read by :func:`parse_value`), or a mapping of
            dotted keys to values as keyword arguments give them: there a ``None`` value means "not
            given" and is skipped, and a mapping value for a section is merged into it field by field.
        schema: the dataclass the result describes; the first part of every key must be one of its
            fields (a section when the key goes deeper). Deeper keys are checked when the dataclass
            is built (:func:`build_dataclass`).
        label: how errors name the configuration (``"config"``, ``"model config"``).
    """
    result: dict[str, Any] = copy.deepcopy(dict(data))
    if isinstance(overrides, Mapping):
        items = [(str(key).split("."), value) for key, value in overrides.items() if value is not None]
        merge = True
    elif isinstance(overrides, str):
        raise ConfigError(f"overrides must be a list of key=value strings, got the string {overrides!r}")
    else:
        items = [parse_override(item) for item in overrides]
        merge = False
    for path, value in items:
        if schema is not None:
            _check_first_key(path, schema, label)
        _set(result, path, value, label, merge)
    return result


# --------------------------------------------------------------------------- typed dataclasses
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


def _coerce(value: Any, tp: Any, key: str, label: str = "config") -> Any:
    """Return ``value`` checked (and losslessly converted) against type ``tp``; raise ConfigError."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        sections = [arg for arg in args if dataclasses.is_dataclass(arg)]
        if isinstance(value, Mapping) and len(sections) == 1:  # a mapping for an optional section: its own errors
            return _coerce(value, sections[0], key, label)
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, label)
            except ConfigError:
                continue
        raise ConfigError(f"{label} key '{key}' expects {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{label} key '{key}' expects {_type_name(tp)}, got {value!r}")
    if dataclasses.is_dataclass(tp):
        return build_dataclass(typing.cast(type, tp), value, where=key, label=label)
    if origin is collections.abc.Sequence:  # a sequence argument: a list or tuple, never a string
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{label} key '{key}' expects a list, got {value!r}")
        inner = args[0] if args else Any
        return [_coerce(v, inner, f"{key}[{i}]", label) for i, v in enumerate(value)]
    if origin in (list, tuple):
        if isinstance(value, str):  # "--set eval.similarities=cosine,kl"
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{label} key '{key}' expects a list, got {value!r}")
        inner = args[0] if args else Any
        return [_coerce(v, inner, f"{key}[{i}]", label) for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{label} key '{key}' expects a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{label} key '{key}' expects true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{label} key '{key}' expects an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _FLOAT_RE.match(value.strip()):
            return float(value)
        raise ConfigError(f"{label} key '{key}' expects a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{label} key '{key}' expects a string, got {value!r}")
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    if isinstance(origin, type) and isinstance(value, origin):  # os.PathLike[str] and other generic classes
        return value
    raise ConfigError(f"{label} key '{key}' expects {_type_name(tp)}, got {value!r}")


def build_dataclass(cls: type, raw: Mapping[str, Any] | None, where: str = "", label: str = "config") -> Any:
    """Instantiate dataclass ``cls`` from mapping ``raw``, rejecting unknown keys and wrong types.

    Args:
        cls: a dataclass type whose annotations give the accepted types.
        raw: a mapping (``None`` means all defaults).
        where: dotted prefix used in error messages (e.g. ``"train"``).
        label: how errors name the configuration (``"config"``, ``"model config"``).
    """
    section = where or f"the {label}"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{label} section '{section}' must be a mapping of keys to values, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in raw.items():
        full = f"{where}.{key}" if where else str(key)
        if key not in fields:
            raise ConfigError(
                f"unknown {label} key '{full}'{did_you_mean(str(key), fields)}; accepted keys"
                f"{' in ' + where if where else ''}: {name_list(sorted(fields))}"
            )
        kwargs[key] = _coerce(value, hints[key], full, label)
    return cls(**kwargs)


# --------------------------------------------------------------------------- files
def load_mapping(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """Read a YAML (``.yaml``/``.yml``; any other suffix too) or JSON (``.json``) file holding a mapping.

    An empty YAML file is an empty mapping. Raises ``FileNotFoundError`` for a missing file and
    :class:`ConfigError` for a file that does not parse or does not hold a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    text = path.read_text(encoding="utf-8")
    is_json = path.suffix.lower() == ".json"
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{what} {path} is not valid JSON at line {error.lineno}, column {error.colno}: "
                          f"{error.msg}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{what} {path} is not valid YAML {yaml_error_text(error)}") from None
    if data is None and not is_json:
        data = {}
    if not isinstance(data, dict):
        raise NotAMappingError(f"{what} {path} must hold a mapping of keys to values, got {type(data).__name__}")
    return data


def yaml_error_text(error: Exception) -> str:
    """``at line 3, column 7: mapping values are not allowed here`` (1-based line and column of the
    place PyYAML stopped at) for a :class:`yaml.YAMLError`; callers prefix "FILE is not valid YAML"."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or (str(error).splitlines() or ["parse error"])[0]
    context = getattr(error, "context", None)
    text = problem + (f" ({context})" if context else "")
    return f"at line {mark.line + 1}, column {mark.column + 1}: {text}" if mark is not None else f"({text})"
