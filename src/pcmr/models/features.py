"""The features an encoder hands to the heads: local features, their padding mask, a pooled feature."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["EncodedFeatures"]


@dataclass(frozen=True)
class EncodedFeatures:
    """Output of every image/text encoder (docs/models.md).

    Attributes:
        local: ``[B, R, F]`` local features (grid cells, regions or words).
        pooled: ``[B, F]`` one global feature per item (average pool, GRU state, ...).
        mask: ``[B, R]`` bool, True at real (non-padded) positions; ``None`` when all are real.
    """

    local: Tensor
    pooled: Tensor
    mask: Tensor | None = None

    @property
    def dim(self) -> int:
        """Feature size ``F``."""
        return self.pooled.shape[-1]
