"""Values of command-line arguments shared by the commands: ``--option NAME.OPTION=VALUE`` (``pcmr search``,
``pcmr serve`` and ``pcmr evaluate``: one parser, :func:`parse_option`), and the argparse types of the commands' numeric flags, checked when the command line is
read, before any model is loaded or data encoded. Light: argparse, the standard library and the
config parser (no torch)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from pcmr.config import ConfigError, parse_override

__all__ = ["checked_name", "option_value", "parse_option", "positive_int"]

_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}


def option_value(flag: str, value: Any, example: str) -> Any:
    """``value`` as read from ``flag`` (``"--option is.beta=..."``, parsed as in ``--set``), with the
    spellings ``nan``/``inf`` read as the floats they name. ValueError naming the flag for an empty value
    (``is.beta=``: it would silently mean the default) and for NaN (never a valid option); infinity is
    passed on to the owner, which accepts it where it means something (``rgm.lam=inf``: plain top-k)."""
    if value is None:
        raise ValueError(f"{flag}: VALUE is empty; give a value after '=', e.g. {example}, or leave the option "
                         f"out for its default")
    if isinstance(value, str) and value.strip().lower() in _NON_FINITE:
        value = float(value.strip())
    if isinstance(value, float) and math.isnan(value):
        raise ValueError(f"{flag}: VALUE must be a finite number, got nan")
    return value


def parse_option(item: str, example: str, *, bare: bool = False) -> tuple[str | None, str, Any]:
    """One ``--option`` item, ``NAME.OPTION=VALUE`` (the value read as in ``--set``, through
    :func:`option_value`), as ``(NAME, OPTION, value)``. With ``bare``, the older form ``OPTION=VALUE`` is
    also read, as ``(None, OPTION, value)`` (``pcmr search``: a parameter of its re-ranker). ValueError
    naming the item and the expected form otherwise; ``example`` shows it."""
    try:
        path, value = parse_override(item)
    except ConfigError:
        path, value = [], None
    if not (len(path) == 2 or (bare and len(path) == 1)):
        if bare and not path:  # as read before: nothing after the name is an empty value
            option_value(f"--option {item}", None, example)
        raise ValueError(f"--option {item!r}: expected NAME.OPTION=VALUE, e.g. {example}")
    value = option_value(f"--option {item}", value, example)
    return (None, path[0], value) if len(path) == 1 else (path[0], path[1], value)


def positive_int(text: str) -> int:
    """argparse type of a count that must be at least 1 (``--batch-size``, ``-k``): an error at parse
    time, before any work, for ``0``, ``-5`` or ``abc``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (1 or more), got {value}")
    return value


def checked_name(flag: str, name: str, lookup: Callable[[str], Any]) -> None:
    """``lookup(name)`` (a registry's ``get``: ``pcmr.similarity.get_similarity``,
    ``pcmr.inference.get_reranker``) with its error prefixed by ``flag``, so a misspelt ``--similarity``
    or ``--rerank`` is named as such, before anything is loaded."""
    try:
        lookup(name)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None
