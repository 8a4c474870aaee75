"""Batch normalisation over the global batch when training runs in several processes.

In one process a ``BatchNorm`` layer in training mode normalises with the mean and variance of
the whole batch (Ioffe and Szegedy, 2015, Algorithm 1). With ``W`` processes each holds a shard
of the batch, so a plain layer would normalise every shard with its own statistics and the
training would change with the process count. :class:`GlobalBatchNorm` computes the
statistics of the union of the shards: per channel it sums ``x`` and the item count over the
processes (``all_reduce``), takes the mean, then sums ``(x - mean)^2`` the same way for the
biased variance. Both reductions are differentiable (the backward of a sum over processes is
the sum of the gradients over processes), which matches the gradient convention of
:mod:`pcmr.train.distributed`: process ``r`` holds ``W`` times the gradient of the global loss
with respect to its own rows, and DDP's average over ``W`` processes gives the one-process
gradient.

Running statistics are updated as ``torch.nn.BatchNorm`` does, from the global mean and the
unbiased global variance, so every process keeps the same buffers. In evaluation mode the
layer is a plain ``BatchNorm``. It works on every device and backend (``torch``'s own
``SyncBatchNorm`` needs CUDA) and accepts a process holding no items at all (all its images
were held by earlier processes of the same global batch).
"""

from __future__ import annotations

from typing import TypeVar, cast

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ["GlobalBatchNorm", "convert_global_batchnorm"]


class GlobalBatchNorm(_BatchNorm):
    """``BatchNorm`` whose training statistics cover the batches of all processes.

    Input ``[N, C]``, ``[N, C, L]`` or ``[N, C, H, W]``; the same parameters and buffers as
    ``nn.BatchNorm1d`` / ``nn.BatchNorm2d`` (so a saved state dict loads into either).
    """

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"GlobalBatchNorm expects an input [N, C, ...], got shape {tuple(input.shape)}")

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if not (self.training and distributed):
            return super().forward(input)
        dims = [0, *range(2, input.dim())]
        shape = [1, -1] + [1] * (input.dim() - 2)
        count = input.new_tensor([input.numel() / max(input.shape[1], 1)])
        totals = dist_fn.all_reduce(torch.cat([input.sum(dims), count]))  # [C + 1]
        total_count = totals[-1].detach()
        if float(total_count) < 2:
            raise ValueError("batch normalisation in training needs at least 2 items per channel over all processes")
        mean = totals[:-1] / total_count  # [C]
        centred = input - mean.reshape(shape)
        var = dist_fn.all_reduce((centred * centred).sum(dims)) / total_count  # biased variance [C]
        output = centred * torch.rsqrt(var + self.eps).reshape(shape)
        if self.affine:
            output = output * self.weight.reshape(shape) + self.bias.reshape(shape)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            self._update_running_stats(mean.detach(), var.detach(), float(total_count))
        return output

    @torch.no_grad()
    def _update_running_stats(self, mean: Tensor, var: Tensor, count: float) -> None:
        assert self.num_batches_tracked is not None and self.running_mean is not None
        assert self.running_var is not None
        self.num_batches_tracked.add_(1)
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
        unbiased = var * (count / (count - 1))
        self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)


ModuleT = TypeVar("ModuleT", bound=nn.Module)


def convert_global_batchnorm(module: ModuleT) -> ModuleT:
    """``module`` with every ``BatchNorm1d/2d/3d`` replaced by a :class:`GlobalBatchNorm` holding the
    same parameters and buffers (in place for children; the converted root is returned)."""
    if isinstance(module, _BatchNorm) and not isinstance(module, GlobalBatchNorm):
        converted = GlobalBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                    module.track_running_stats, device=None, dtype=None)
        if module.affine:
            with torch.no_grad():
                converted.weight = module.weight
                converted.bias = module.bias
        converted.running_mean = module.running_mean
        converted.running_var = module.running_var
        converted.num_batches_tracked = module.num_batches_tracked
        converted.train(module.training)
        return cast(ModuleT, converted)
    for name, child in module.named_children():
        module.add_module(name, convert_global_batchnorm(child))
    return module

