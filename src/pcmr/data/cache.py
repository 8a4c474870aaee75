"""The on-disk cache of generated data (npz + json, never pickle).

Cache root: ``$PCMR_CACHE`` if set, else ``$XDG_CACHE_HOME/pcmr``, else
``~/.cache/pcmr``. Files are written with :mod:`pcmr.atomic` (a temporary file in the
target folder moved into place), so a reader never sees half a file and two processes
generating the same data do not corrupt each other.

Cache format: :data:`CACHE_FORMAT_VERSION` names the layout of cached entries (which arrays, their
shapes and dtypes, the metadata fields). It is part of every :func:`config_key`, so entries
written by code with another format live under other folder names and are never read; readers
also check the version stored in each entry's metadata and regenerate on a mismatch. Bump it
whenever the cached layout changes.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

#: layout version of cached entries: 1 was the unversioned layout, 2 added the version itself
#: (in the key and in each entry's metadata) and the consistency check of entries on reading
CACHE_FORMAT_VERSION = 2

__all__ = ["CACHE_FORMAT_VERSION", "cache_root", "config_key", "load_npz"]


def cache_root() -> Path:
    """The user cache folder of pcmr (not created)."""
    explicit = os.environ.get("PCMR_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pcmr"


def config_key(config: dict[str, Any], format_version: int = CACHE_FORMAT_VERSION) -> str:
    """A short stable hash of a JSON-serialisable configuration and the cache format version
    (names a cache folder; another format version gives another name)."""
    text = json.dumps({"cache_format": format_version, "config": config}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` into memory (``allow_pickle=False``)."""
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}
