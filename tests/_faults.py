"""A full disk injected into the folder writes of the fault tests: ``os.replace`` raises ENOSPC at its k-th call."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest


def full_disk_at(monkeypatch: pytest.MonkeyPatch, k: int, folder: Path | None = None) -> list[int]:
    """Make the k-th ``os.replace`` raise ``OSError(ENOSPC)``; returns the call counter (``k=0``: count only).

    With ``folder``, only the calls that move ``folder`` itself or its temporary copies (``.NAME.X.tmp`` /
    ``.old`` and the files inside them) count and fail, so caches and other libraries' files (Milvus Lite's)
    are left alone; without it every call counts (the files moved into the new folder, then the old folder
    aside, then the new one in)."""
    calls = [0]
    replace = os.replace

    def patched(src, dst, *args, **kwargs):
        if folder is None or f"/.{folder.name}." in f"{src}{dst}" or str(dst) == str(folder):
            calls[0] += 1
            if calls[0] == k:
                raise OSError(errno.ENOSPC, "No space left on device")
        return replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", patched)
    return calls
