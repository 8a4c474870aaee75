"""One style for "unknown name" messages: a "did you mean" suggestion and the accepted names.

Every registry (recipes, similarities, re-rankers, losses, datasets, models) and every checker of
configuration keys words an unknown name the same way, through :func:`unknown_name`::

    unknown similarity 'cosin' (did you mean 'cosine'?); expected one of: cosine, kl, match_prob

Suggestions come from :func:`difflib.get_close_matches` (ratio cutoff 0.6), so a typo gets a hint
and an unrelated word does not.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean", "name_list", "unknown_name"]


def closest(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The accepted name closest to ``name`` (difflib ratio at least ``cutoff``), or None."""
    matches = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=cutoff)
    return matches[0] if matches else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'cosine'?)"`` for a near miss of one of ``choices``, else ``""``."""
    match = closest(name, choices)
    return f" (did you mean '{match}'?)" if match is not None else ""


def name_list(choices: Iterable[str]) -> str:
    """``"a, b, c"``: accepted names as plain text (no brackets, no quotes)."""
    return ", ".join(str(c) for c in choices)


def unknown_name(kind: str, names: str | Iterable[str], choices: Iterable[str]) -> str:
    """The message for unknown name(s) of ``kind`` (``"recipe"``, ``"config key"``): each name quoted
    with its suggestion, then the accepted names, e.g.
    ``unknown recipe 'pcmee' (did you mean 'pcme'?); expected one of: pcme, vsepp``."""
    accepted = list(choices)
    given = [names] if isinstance(names, str) else list(names)
    parts = [f"'{name}'{did_you_mean(name, accepted)}" for name in given]
    plural = "s" if len(given) > 1 and not kind.endswith("s") else ""
    return f"unknown {kind}{plural} {', '.join(parts)}; expected one of: {name_list(accepted)}"
