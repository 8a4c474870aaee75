"""Monte-Carlo draws shared by every pair: the sampled scores (``avg_l2``, ``match_prob``; PCME eqs. 1-3)
of the search draw one set of standard-normal draws ``eps [J, D]`` per side (images, captions) from a
seed, and every item of that side uses it (``z = mean + std * eps``). A pair's score is then a
function of the pair alone: not of the other items scored with it, their order, or how they are split
into blocks, and it changes continuously with the pair's values.

A sampled score drawn from one random stream gives an item the draws of its *position* in the call:
the same pair scored among other items (a candidate list, a chunk of a gallery) gets other samples
and another score. With common draws every search path (``pcmr.search``: the exact backend, faiss and
Milvus candidates re-scored exactly, gallery statistics, matchings) scores a pair alike. Each pair's
estimate has the distribution it has with independent draws; the estimates of different pairs share
their draws (common random numbers), so their errors are correlated rather than independent.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian

__all__ = ["SIDES", "common_draws", "common_samples"]

#: the sides of a score, each with its own draws (the two sides' draws are independent)
SIDES = ("image", "caption")


def common_draws(num_samples: int, dim: int, side: str, seed: int = 0, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> Tensor:
    """Standard-normal draws ``eps [J, D]`` of one ``side`` (``"image"`` or ``"caption"``), ``J =
    num_samples``: ``torch.randn(J, D)`` of a CPU generator seeded with ``2 * seed + (side == "caption")``,
    on ``device``."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    if side not in SIDES:
        raise ValueError(f"side must be one of {list(SIDES)}, got {side!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    generator = torch.Generator().manual_seed(2 * seed + SIDES.index(side))
    return torch.randn(num_samples, dim, generator=generator, dtype=dtype).to(device)


def common_samples(g: Gaussian, num_samples: int, side: str, seed: int = 0) -> Tensor:
    """``z = mean + std * eps [N, J, D]`` (PCME eq. 1) of every item of ``g`` with the side's common draws
    (:func:`common_draws`); point embeddings repeat their mean."""
    eps = common_draws(num_samples, g.dim, side, seed, dtype=g.dtype, device=g.device)
    if g.logvar is None:
        return g.mean.unsqueeze(1).expand(-1, num_samples, -1)
    return g.sample(draws=eps.unsqueeze(0).expand(g.num, -1, -1))
