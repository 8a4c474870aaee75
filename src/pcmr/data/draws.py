"""Counter-based random draws: the uniform numbers of a training item are a pure function of its seed.

Every training item carries a 63-bit ``item_seed`` (drawn by :class:`pcmr.data.batching.PairBatchSampler`
from ``(seed, epoch)`` and the item's position in the epoch). Its augmentation reads uniform numbers
``u(item_seed, stream, slot)`` in ``[0, 1)``::

    key  = mix(item_seed XOR mix((stream + 1) * G))
    u    = (mix(key + (slot + 1) * G) >> 11) * 2**-53

with ``mix`` the SplitMix64 finaliser (Steele, Lea & Flood 2014), ``G = 0x9E3779B97F4A7C15`` and all
arithmetic modulo 2**64. A draw depends on nothing else: not on the batch the item is in, the worker
that loads it, the device that augments it, or how many other draws were read before. Batches
therefore compute the draws of all their items at once (:func:`uniforms`, numpy), while per-item code
such as a random resized crop reads them one after another (:class:`StreamDraws`); both give the same
numbers.

Streams of an item (:data:`CROP`, :data:`CUTOUT`, :data:`WORDS`; view ``v`` of ``K`` extra views uses
``3 (v + 1) +`` the same offsets) keep the draws of the image crop, the Cutout and the word dropout apart.
"""

from __future__ import annotations

import numpy as np

__all__ = ["uniforms", "uniform", "StreamDraws", "CROP", "CUTOUT", "WORDS", "view_stream"]

#: stream of the random resized crop and flip (per item, :class:`StreamDraws`)
CROP = 0
#: stream of the Cutout / random erasing
CUTOUT = 1
#: stream of the word dropout
WORDS = 2

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def view_stream(stream: int, view: int | None) -> int:
    """The stream number of ``stream`` (:data:`CROP`, ...) for the main item (``view=None``) or extra view ``view``."""
    return stream if view is None else stream + 3 * (view + 1)


def _mix_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
    return z ^ (z >> np.uint64(31))


def _stream_key_int(item_seed: int, stream: int) -> int:
    return _mix_int((item_seed & _MASK) ^ _mix_int(((stream + 1) * _GOLDEN) & _MASK))


def uniform(item_seed: int, stream: int, slot: int) -> float:
    """One draw ``u(item_seed, stream, slot)`` in ``[0, 1)`` (pure Python; the definition)."""
    z = _mix_int((_stream_key_int(item_seed, stream) + (slot + 1) * _GOLDEN) & _MASK)
    return (z >> 11) * 2.0**-53


def uniforms(item_seeds: np.ndarray, stream: int, count: int) -> np.ndarray:
    """Draws ``u(item_seeds[b], stream, s)`` for ``s < count``: float64 ``[B, count]``."""
    seeds = np.asarray(item_seeds, dtype=np.int64).astype(np.uint64).reshape(-1)
    stream_key = np.uint64(_mix_int(((stream + 1) * _GOLDEN) & _MASK))
    keys = _mix(seeds ^ stream_key)  # [B]
    slots = np.arange(1, count + 1, dtype=np.uint64) * np.uint64(_GOLDEN)  # [count]
    z = _mix(keys[:, None] + slots[None, :])  # uint64 arithmetic wraps modulo 2**64
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


class StreamDraws:
    """The draws of one item's stream read in order (``Draws`` of :mod:`pcmr.data.images`): the ``k``-th
    call reads slot ``k``. ``uniform(a, b) = a + (b - a) u``; ``integers(a, b) = a + floor((b - a) u)``."""

    def __init__(self, item_seed: int, stream: int) -> None:
        self.key = _stream_key_int(int(item_seed), stream)
        self.slot = 0

    def random(self) -> float:
        """The next draw, uniform in ``[0, 1)``."""
        z = _mix_int((self.key + (self.slot + 1) * _GOLDEN) & _MASK)
        self.slot += 1
        return (z >> 11) * 2.0**-53

    def uniform(self, low: float, high: float) -> float:
        """A float uniform in ``[low, high)``."""
        return low + (high - low) * self.random()

    def integers(self, low: int, high: int) -> int:
        """An integer uniform in ``[low, high)``."""
        return int(low + int((high - low) * self.random()))
