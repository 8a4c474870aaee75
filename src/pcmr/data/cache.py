"""The on-disk cache of generated data, and atomic npz/json writes (never pickle).

Cache root: ``$PCMR_CACHE`` if set, else ``$XDG_CACHE_HOME/pcmr``, else
``~/.cache/pcmr``. Files are written to a temporary name in the target folder
and moved into place with ``os.replace``, so a reader never sees half a file and
two processes generating the same data do not corrupt each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["cache_root", "config_key", "atomic_write_json", "atomic_write_npz", "load_npz"]


def cache_root() -> Path:
    """The user cache folder of pcmr (not created)."""
    explicit = os.environ.get("PCMR_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pcmr"


def config_key(config: dict[str, Any]) -> str:
    """A short stable hash of a JSON-serialisable configuration (names a cache folder)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _atomic_write(path: str | os.PathLike, write, suffix: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as UTF-8 JSON to ``path`` atomically."""
    data = json.dumps(obj, ensure_ascii=False, indent=1).encode("utf-8")
    _atomic_write(path, lambda handle: handle.write(data), ".json.tmp")


def atomic_write_npz(path: str | os.PathLike, **arrays: np.ndarray) -> None:
    """Write arrays to a compressed ``.npz`` atomically (object arrays are refused)."""
    for name, array in arrays.items():
        if np.asarray(array).dtype == object:
            raise TypeError(f"array {name!r} has dtype object; only numeric arrays are cached (no pickle)")
    _atomic_write(path, lambda handle: np.savez_compressed(handle, **arrays), ".npz.tmp")


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` into memory (``allow_pickle=False``)."""
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}
