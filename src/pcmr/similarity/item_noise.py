"""Monte-Carlo draws that belong to an item: each item's standard-normal draws ``eps [J, D]`` are a
function of its own values (mean and log-variance) and a seed, never of the other items scored with
it, nor of their order, nor of how they are split into blocks.

A sampled score (``avg_l2``, ``match_prob``; PCME eqs. 1-3) drawn from one random stream gives an
item the draws of its *position* in the call: the same pair scored among other items (a candidate
list, a chunk of a gallery) gets other samples and another score. With the draws of this module, a
pair's score is the same on every path that scores it (``pcmr.search``: the exact backend, faiss and
Milvus candidates re-scored exactly, gallery statistics, matchings).

How: a 32-bit key per item hashes the bit patterns of its values (rounded to float16, so a
half-precision copy of a gallery keeps its items' draws) with their positions and a seed; the item's
draws are ``torch.randn(J, D)`` from a CPU generator seeded with that key (the same on every device,
copied to the item's). The hash is Wellons's ``lowbias32``; every product is taken modulo ``2**32``
in 64-bit integers without overflow.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian

__all__ = ["item_keys", "item_noise", "item_samples"]

_MASK = 0xFFFFFFFF


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
    independent of the others. Each field is first reduced to ``sum_d bits_d * w_d mod 2**32`` with odd
    position weights ``w_d``, so two items that differ in one value always differ there."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {type(seed).__name__}")
    device = g.mean.device
    key = torch.full((g.num,), _hash32(torch.tensor(seed & _MASK)).item(), dtype=torch.int64, device=device)
    fields = [g.mean] if g.logvar is None else [g.mean, g.logvar]
    for field, values in enumerate(fields):
        width = values.shape[1]
        weights = _hash32(torch.arange(width, device=device, dtype=torch.int64) + (field << 24)) | 1  # [W], odd
        mixed = (_bits(values) * weights).sum(dim=1) & _MASK  # [N]; each product < 2**48
        key = _hash32(key ^ _hash32(mixed ^ field))
    return key


def item_noise(keys: Tensor, num_samples: int, dim: int, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Standard-normal draws ``eps [N, J, D]`` of the items with keys ``keys [N]`` (:func:`item_keys`),
    ``J = num_samples``: item ``n``'s draws are ``torch.randn(J, D)`` of a CPU generator seeded with
    ``keys[n]``, on the device of ``keys``."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    out = torch.empty(keys.shape[0], num_samples, dim, dtype=dtype)
    generator = torch.Generator()
    for row, key in enumerate(keys.tolist()):
        generator.manual_seed(key)
        torch.randn(num_samples, dim, generator=generator, dtype=dtype, out=out[row])
    return out.to(keys.device)


def item_samples(g: Gaussian, num_samples: int, seed: int = 0) -> Tensor:
    """``z = mean + std * eps [N, J, D]`` (PCME eq. 1) with each item's own draws (:func:`item_noise`);
    point embeddings repeat their mean."""
    if g.logvar is None:
        return g.mean.unsqueeze(1).expand(-1, num_samples, -1)
    return g.sample(draws=item_noise(item_keys(g, seed), num_samples, g.dim, dtype=g.dtype))
