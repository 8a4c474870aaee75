"""The seeds of training and the settings of its loader: what every step and every epoch start from.

- :func:`seed_everything` seeds torch, numpy and Python from ``(seed, *parts)`` (a SeedSequence hash): the
  trainer reseeds before every step from ``(seed, global_step)``;
- :func:`loss_seed` is the seed of a step's sampled loss (``(seed, step, 1)``), the same in every process;
- :func:`loader_settings`: the workers, pinned memory and prefetching of the training loader.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

__all__ = ["GPU_PREFETCH_FACTOR", "MAX_DEFAULT_WORKERS", "loader_settings", "loss_seed", "seed_everything",
           "torch_seed"]


def seed_everything(seed: int, *parts: int) -> None:
    """Seed torch, numpy and Python from ``(seed, *parts)`` (a SeedSequence hash)."""
    value = torch_seed(seed, *parts)
    torch.manual_seed(value)
    np.random.seed(value >> 32)
    random.seed(value)


def torch_seed(seed: int, *parts: int) -> int:
    """The value :func:`seed_everything` gives ``torch.manual_seed`` for ``(seed, *parts)``."""
    state = np.random.SeedSequence([seed, *parts]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 32 | int(state[1])


def loss_seed(seed: int, step: int) -> int:
    """The seed of step ``step``'s sampled loss (PCME's J samples), whatever the number of processes."""
    state = np.random.SeedSequence([seed, step, 1]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 32 | int(state[1])


#: DataLoader workers per process when ``data.num_workers`` is unset and the device is a GPU
MAX_DEFAULT_WORKERS = 4
#: batches each worker prepares ahead (``prefetch_factor``) when training on a GPU
GPU_PREFETCH_FACTOR = 4


def loader_settings(num_workers: int | None, device: torch.device, world_size: int = 1) -> dict[str, Any]:
    """``num_workers``, ``pin_memory`` and ``prefetch_factor`` of the training loader.

    On a GPU (``device.type == "cuda"``) batches are prepared by worker processes (``data.num_workers``, or
    when unset ``min(4, CPUs per process - 1)``, at least 1), in pinned memory, 4 batches ahead per
    worker, and their images are normalised and erased on the GPU. On other devices ``num_workers``
    defaults to 0 (the batch-wise loader costs a few microseconds per pair; docs/benchmarks.md).
    """
    if device.type != "cuda":
        return {"num_workers": 0 if num_workers is None else num_workers, "pin_memory": False,
                "prefetch_factor": None}
    if num_workers is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        num_workers = max(1, min(MAX_DEFAULT_WORKERS, cpus // max(world_size, 1) - 1))
    return {"num_workers": num_workers, "pin_memory": True,
            "prefetch_factor": GPU_PREFETCH_FACTOR if num_workers > 0 else None}
