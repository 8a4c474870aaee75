"""pcmr: probabilistic cross-modal retrieval.

Gaussian image/caption embeddings, exact and fast pairwise scores, the training
objectives, hub-aware inference and the evaluation protocols of PCME, ProbVSE,
GCE/GIE/GCIE, HAL/RGM and calibrated probabilistic embeddings.

Sub-packages are imported lazily (``pcmr.similarity``, ``pcmr.metrics``, ...), so
``import pcmr`` stays cheap. The training application (``pcmr.train``) and the
command line (``pcmr.cli``) are never imported by the library.
"""

from __future__ import annotations

import importlib
from typing import Any

from pcmr.gaussian import Gaussian
from pcmr.point_set import PointSet

__version__ = "0.1.0"
__all__ = ["Gaussian", "PointSet", "__version__", "create_model", "load_model", "list_models", "save_model"]

_SUBMODULES = {"similarity", "metrics", "inference", "losses", "models", "data", "search"}
_MODEL_API = {"create_model", "load_model", "list_models", "save_model"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"pcmr.{name}")
    if name in _MODEL_API:
        return getattr(importlib.import_module("pcmr.models"), name)
    raise AttributeError(f"module 'pcmr' has no attribute {name!r}")
