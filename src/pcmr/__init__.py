"""pcmr: probabilistic cross-modal retrieval.

Gaussian image/caption embeddings, exact and fast pairwise scores, the training
objectives, hub-aware inference and the evaluation protocols of PCME, ProbVSE,
GCE/GIE/GCIE, HAL/RGM and calibrated probabilistic embeddings.

Sub-packages and the embedding types are imported lazily (``pcmr.similarity``, ``pcmr.Gaussian``, ...),
so ``import pcmr`` stays cheap (no torch until one is used). ``pcmr.load(RUN)`` opens a trained model for raw text and images
(:class:`pcmr.hub.Model`). The training application (``pcmr.train``) and the
command line (``pcmr.cli``) are never imported by the library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use (below), so `import pcmr` does not import torch
    from pcmr.gaussian import Gaussian
    from pcmr.point_set import PointSet

__version__ = "0.1.0"
__all__ = ["Gaussian", "Model", "PointSet", "__version__", "create_model", "evaluate", "load", "load_model", "list_models",
           "save_model"]

_SUBMODULES = {"similarity", "metrics", "inference", "losses", "models", "data", "evaluation", "search",
               "report", "hub"}
_MODEL_API = {"create_model", "load_model", "list_models", "save_model"}
_HUB_API = {"load", "Model"}  # pcmr.load(RUN_OR_DIR) / pcmr.Model.from_pretrained(path_or_hub_id)
_EVALUATION_API = {"evaluate"}  # pcmr.evaluate(model, split): the one evaluation of a loaded model


_TYPES = {"Gaussian": "pcmr.gaussian", "PointSet": "pcmr.point_set"}


def __getattr__(name: str) -> Any:
    if name in _TYPES:
        return getattr(importlib.import_module(_TYPES[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"pcmr.{name}")
    if name in _MODEL_API:
        return getattr(importlib.import_module("pcmr.models"), name)
    if name in _HUB_API:
        return getattr(importlib.import_module("pcmr.hub"), name)
    if name in _EVALUATION_API:
        return getattr(importlib.import_module("pcmr.evaluation.model"), name)
    raise AttributeError(f"module 'pcmr' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names plus the lazily imported sub-packages and API (``dir(pcmr)`` lists them)."""
    return sorted({*globals(), *_TYPES, *_SUBMODULES, *_MODEL_API, *_HUB_API, *_EVALUATION_API})
