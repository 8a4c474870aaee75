"""The one check that tensors hold finite values, named by their file or source.

Loading a model (``pcmr.hub``: its weights) and encoding (``pcmr.encode.checks``: embeddings) both
refuse NaN and inf through :func:`check_finite_tensors`, one ``ValueError`` naming the source, the
tensor, its shape and the rows at fault.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from torch import Tensor

__all__ = ["check_finite_tensors"]


def _bad_rows(tensor: Tensor) -> list[int]:
    """Indices of the rows (first dimension) holding NaN or inf; [] when all are finite."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return []
    finite = torch.isfinite(tensor.detach().reshape(tensor.shape[0], -1) if tensor.dim() else tensor.reshape(1, 1))
    return torch.nonzero(~finite.all(dim=1)).flatten().tolist()


def check_finite_tensors(tensors: Mapping[str, Tensor], source: str | os.PathLike) -> None:
    """Raise ``ValueError`` naming ``source`` and the first tensor (and rows) holding NaN or inf."""
    for name, tensor in tensors.items():
        rows = _bad_rows(tensor)
        if rows:
            shown = f"rows {rows[:5]}{' ...' if len(rows) > 5 else ''} of " if tensor.dim() > 1 else ""
            raise ValueError(f"{os.fspath(source)}: {shown}tensor {name!r} {tuple(tensor.shape)} holds NaN or inf; "
                             f"expected finite values (a diverged or corrupted model or embeddings file)")
