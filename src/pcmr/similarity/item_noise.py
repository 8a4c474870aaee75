"""Monte-Carlo draws that belong to an item: each item's standard-normal draws ``eps [J, D]`` are a
function of its own values (mean and log-variance) and a seed, never of the other items scored with
it, nor of their order, nor of how they are split into blocks.

A sampled score (``avg_l2``, ``match_prob``; PCME eqs. 1-3) drawn from one random stream gives an
item the draws of its *position* in the call: the same pair scored among other items (a candidate
list, a chunk of a gallery) gets other samples and another score. With the draws of this module, a
pair's score is the same on every path that scores it (``pcmr.search``: the exact backend, faiss and
Milvus candidates re-scored exactly, gallery statistics, matchings).

How: a 32-bit key per item hashes the bit patterns of its values (rounded to float16, so a
half-precision copy of a gallery keeps its items' draws) with their positions; draw
``(j, d)`` of an item takes two 32-bit words ``hash(key ^ hash(counter))`` and turns them into one
standard normal by the Box-Muller transform. The hash is Wellons's ``lowbias32``; every product is
taken modulo ``2**32`` in 64-bit integers without overflow, so the draws are the same on every
device up to the rounding of ``log``/``cos``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian

__all__ = ["item_keys", "item_noise", "item_samples"]

_MASK = 0xFFFFFFFF
#: draws written per step (bounds the integer temporaries of :func:`item_noise`)
_STEP_ELEMENTS = 1 << 21


def _mul32(x: Tensor, constant: int) -> Tensor:
    """``x * constant mod 2**32`` for ``0 <= x < 2**32`` in int64, without overflow (16-bit halves)."""
    low, high = constant & 0xFFFF, constant >> 16
    return (x * low + (((x * high) & 0xFFFF) << 16)) & _MASK


def _hash32(x: Tensor) -> Tensor:
    """Wellons's ``lowbias32`` integer hash of ``0 <= x < 2**32`` (int64 in, int64 in ``[0, 2**32)`` out)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _bits(values: Tensor) -> Tensor:
    """The bit patterns of ``values [N, W]`` rounded to float16, as int64 in ``[0, 2**16)``: an item
    keeps its key in a float16 copy of a gallery (``pcmr search --build --on-disk``) and in any wider
    dtype."""
    return values.detach().to(torch.float16).contiguous().view(torch.int16).to(torch.int64) & 0xFFFF


def item_keys(g: Gaussian, seed: int = 0) -> Tensor:
    """``[N]`` int64 keys in ``[0, 2**32)``: a hash of each item's mean and log-variance values (rounded to
    float16) with their positions, and of ``seed``. Equal items get equal keys; the key of an item is
    independent of the others."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {type(seed).__name__}")
    device = g.mean.device
    key = torch.full((g.num,), _hash32(torch.tensor(seed & _MASK)).item(), dtype=torch.int64, device=device)
    fields = [g.mean] if g.logvar is None else [g.mean, g.logvar]
    for field, values in enumerate(fields):
        width = values.shape[1]
        position = _hash32(torch.arange(width, device=device, dtype=torch.int64) + (field << 24))  # [W]
        mixed = _hash32(_bits(values) ^ position).sum(dim=1) & _MASK  # [N]
        key = _hash32(key ^ _hash32(mixed ^ field))
    return key


def item_noise(keys: Tensor, num_samples: int, dim: int, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Standard-normal draws ``eps [N, J, D]`` of the items with keys ``keys [N]`` (:func:`item_keys`),
    ``J = num_samples``: draw ``(j, d)`` of item ``n`` depends on ``keys[n]``, ``j`` and ``d`` alone."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    count = num_samples * dim
    counter = torch.arange(count, device=keys.device, dtype=torch.int64)
    first, second = _hash32(2 * counter), _hash32(2 * counter + 1)  # [J * D], the same for every item
    out = torch.empty(keys.shape[0], count, dtype=dtype, device=keys.device)
    step = max(1, _STEP_ELEMENTS // max(1, count))
    scale = 1.0 / 2**32
    work = torch.float64 if dtype == torch.float64 else torch.float32  # (0.5 + x) / 2**32 stays in (0, 1]
    for start in range(0, keys.shape[0], step):
        base = keys[start:start + step].unsqueeze(1)  # [n, 1]
        u1 = (_hash32(base ^ first).to(work) + 0.5) * scale  # (0, 1]
        u2 = (_hash32(base ^ second).to(work) + 0.5) * scale
        normal = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2.0 * math.pi) * u2)
        out[start:start + step] = normal.to(dtype)
    return out.view(keys.shape[0], num_samples, dim)


def item_samples(g: Gaussian, num_samples: int, seed: int = 0) -> Tensor:
    """``z = mean + std * eps [N, J, D]`` (PCME eq. 1) with each item's own draws (:func:`item_noise`);
    point embeddings repeat their mean."""
    if g.logvar is None:
        return g.mean.unsqueeze(1).expand(-1, num_samples, -1)
    return g.sample(draws=item_noise(item_keys(g, seed), num_samples, g.dim, dtype=g.dtype))
