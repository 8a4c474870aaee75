"""VSRN-style region reasoning: graph convolutions over regions, then a GRU (host of ProbVSRN).

Li et al., "Visual Semantic Reasoning for Image-Text Matching" (ICCV 2019), as used by ProbVSE
§4.1: region features ``[B, R, F]`` are projected to ``H`` and L2-normalised; each of the
``num_layers`` residual graph-convolution layers computes the region affinity
``A = theta(V) phi(V)^T / R`` and ``V <- W(A g(V)) + V``; a GRU then reads the regions in order
and its final hidden state is the pooled image feature.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pcmr.models.features import EncodedFeatures

__all__ = ["RegionGraphConvolution", "VSRNReasoning"]


class RegionGraphConvolution(nn.Module):
    """One residual reasoning layer (VSRN eq. 2-4): ``V + W((theta(V) phi(V)^T / R) g(V))``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.theta = nn.Linear(dim, dim)
        self.phi = nn.Linear(dim, dim)
        self.g = nn.Linear(dim, dim)
        self.w = nn.Linear(dim, dim)

    def forward(self, regions: Tensor) -> Tensor:
        """``regions [B, R, H]`` -> ``[B, R, H]``."""
        num_regions = regions.shape[1]
        affinity = (
            torch.bmm(self.theta(regions), self.phi(regions).transpose(1, 2)) / num_regions
        )  # [B, R, R]
        return regions + self.w(torch.bmm(affinity, self.g(regions)))


class VSRNReasoning(nn.Module):
    """Region reasoning on top of any local-feature backbone.

    Input :class:`EncodedFeatures` with ``local [B, R, F]``; output ``local [B, R, H]`` (reasoned
    regions) and ``pooled [B, H]`` (final GRU state), ``H = dim``.
    """

    def __init__(self, in_dim: int, dim: int, num_layers: int) -> None:
        super().__init__()
        self.project = nn.Linear(in_dim, dim)
        self.layers = nn.ModuleList([RegionGraphConvolution(dim) for _ in range(num_layers)])
        self.gru = nn.GRU(dim, dim, batch_first=True)
        self.out_dim = dim

    def forward(self, features: EncodedFeatures) -> EncodedFeatures:
        regions = F.normalize(self.project(features.local), dim=-1)  # [B, R, H]
        for layer in self.layers:
            regions = layer(regions)
        _, hidden = self.gru(regions)  # hidden [1, B, H]
        return EncodedFeatures(local=regions, pooled=hidden[-1], mask=features.mask)
