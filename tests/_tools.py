"""Load a script of ``tools/`` or ``benchmarks/`` as a module (they are not packages)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """The module of ``ROOT/relative`` (e.g. ``tools/device_agreement.py``), its folder importable."""
    path = ROOT / relative
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # benchmarks import their _measure helper by name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
