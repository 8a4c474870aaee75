"""Training in several processes with ``torch.distributed`` (DDP; launched by ``torchrun``).

pcmr adds no launcher and no communication layer: processes are started by
``torch.distributed.run`` (``torchrun``, or ``pcmr train --nproc N``), which sets
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous variables;
:func:`init_distributed` reads them and joins the process group (``gloo`` on CPU,
``nccl`` on CUDA, overridable with ``PCMR_DIST_BACKEND``).

The global batch: ``data.batch_size`` items are split into equal contiguous shards
(one per process, ``PairBatchSampler(num_replicas, rank)``). Before the loss, every
process gathers the embeddings of all shards (:func:`gather_rows`, differentiable)
and builds the relevance matrix of the whole batch from the split's relation, so every
loss sees exactly the batch a single process would see. An image that several shards
share is encoded once, by the process of its first occurrence in the global batch (the
sampler marks it), so the gathered images are the one-process images in the same order;
batch normalisation uses the statistics of the global batch
(:mod:`pcmr.train.global_batchnorm`). Random draws do not depend on the process either:
augmentation is drawn from a seed per global item (``PairBatchSampler``), and the loss's
Monte-Carlo samples are drawn after the gather, for the whole global batch, from a
generator reseeded from ``(seed, step)``.

Gradients: every process computes the same global loss ``L``. The backward of
:func:`gather_rows` sums the gradients of the gathered tensor over processes
(``all_reduce``) and keeps the process's own rows, so process ``r`` holds
``W * dL/d(own rows)``; DDP then averages over the ``W`` processes, which gives exactly
``dL/d(parameters)`` of the one-process loss. The loss module's own parameters (PCME's
``a`` and ``b``) receive ``dL/da`` on every process, and DDP's average keeps that value.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from pcmr.gaussian import Gaussian
from pcmr.point_set import PointSet

__all__ = [
    "BACKEND_ENV",
    "DistributedContext",
    "TrainStep",
    "all_true",
    "any_flag",
    "broadcast_object",
    "gather_loss_inputs",
    "gather_rows",
    "init_distributed",
    "shutdown_distributed",
    "wrap_ddp",
]

BACKEND_ENV = "PCMR_DIST_BACKEND"  # override the backend chosen from the device (gloo | nccl | ...)
IMAGE_KEYS = ("image_views", "image_samples", "image_points", "image_residuals")  # per-image tensors a loss may take
CAPTION_KEYS = ("caption_views", "caption_samples", "caption_points", "caption_residuals")  # per-caption tensors


@dataclass(frozen=True)
class DistributedContext:
    """Where this process stands: ``rank`` of ``world_size`` processes, its device and backend."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    @property
    def enabled(self) -> bool:
        """True when training runs in several processes (a process group is initialised)."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 writes checkpoints, logs and the run summary."""
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={value!r} must be an integer (set by torchrun)") from exc


def default_backend(device: torch.device) -> str:
    """``nccl`` for CUDA devices, ``gloo`` otherwise; ``$PCMR_DIST_BACKEND`` overrides."""
    override = os.environ.get(BACKEND_ENV)
    if override:
        return override
    return "nccl" if device.type == "cuda" else "gloo"


def init_distributed(device: str | torch.device = "cpu") -> DistributedContext:
    """Join the process group started by ``torchrun`` (one process: nothing to join).

    Args:
        device: the configured device (``train.device``). Under several processes a
            CUDA device becomes ``cuda:LOCAL_RANK`` (one GPU per process).

    Returns:
        The :class:`DistributedContext` of this process. Calling it again returns the same
        context without re-initialising.
    """
    device = torch.device(device)
    world_size = _env_int("WORLD_SIZE", 1)
    if world_size <= 1:
        return DistributedContext(device=device)
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if dist.is_initialized():
        backend = str(dist.get_backend())
    else:
        backend = default_backend(device)
        dist.init_process_group(backend=backend)
    return DistributedContext(rank, world_size, local_rank, device, backend)


def shutdown_distributed() -> None:
    """Leave the process group (if one was joined)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(context: DistributedContext, value: Any) -> Any:
    """Rank 0's ``value`` on every process (picklable Python objects; no tensors needed)."""
    if not context.enabled:
        return value
    box = [value if context.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def any_flag(context: DistributedContext, flag: bool) -> bool:
    """True on every process when ``flag`` is true on at least one (one tiny ``all_reduce``)."""
    if not context.enabled:
        return flag
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=_comm_device(context))
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def all_true(context: DistributedContext, flag: bool) -> bool:
    """True on every process when ``flag`` is true on all of them."""
    return not any_flag(context, not flag)


def _comm_device(context: DistributedContext) -> torch.device:
    return context.device if context.backend == "nccl" else torch.device("cpu")


def _gather_sizes(count: int, device: torch.device) -> list[int]:
    size = torch.tensor([count], dtype=torch.long, device=device)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    return [int(s.item()) for s in sizes]


def _gather_padded(tensor: Tensor, sizes: list[int]) -> Tensor:
    """All processes' ``tensor`` (first dims ``sizes``) concatenated along dim 0, in rank order."""
    longest = max(sizes)
    padded = tensor.new_zeros((longest, *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([part[:size] for part, size in zip(parts, sizes)])


class _GatherRows(torch.autograd.Function):
    """Concatenate every process's rows; backward: sum the gradient over processes, keep own rows."""

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, sizes: list[int], rank: int) -> Tensor:
        ctx.sizes, ctx.rank = sizes, rank
        return _gather_padded(tensor, sizes)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start : start + ctx.sizes[ctx.rank]], None, None


def gather_rows(tensor: Tensor, context: DistributedContext, *, differentiable: bool = True) -> Tensor:
    """``[sum_r N_r, ...]``: the rows of ``tensor`` from every process, in rank order.

    Processes may hold different numbers of rows ``N_r``. With ``differentiable=True`` the
    gradient flows back to each process's own rows, summed over processes (see the module
    docstring); every process must then run the same backward.
    """
    if not context.enabled:
        return tensor
    sizes = _gather_sizes(tensor.shape[0], tensor.device)
    if differentiable and tensor.requires_grad:
        return _GatherRows.apply(tensor, sizes, context.rank)
    return _gather_padded(tensor.detach(), sizes)


def _first_occurrences(index: Tensor) -> Tensor:
    """Positions of the first occurrence of each value of ``index`` ``[N]``, in order."""
    seen: set[int] = set()
    keep = []
    for position, value in enumerate(index.tolist()):
        if value not in seen:
            seen.add(value)
            keep.append(position)
    return torch.tensor(keep, dtype=torch.long, device=index.device)


def _gather_gaussian(gaussian: Gaussian, context: DistributedContext, rows: Tensor | None) -> Gaussian:
    if isinstance(gaussian, PointSet):  # K points per item (PVSE): gather the points
        points = gather_rows(gaussian.points, context)
        return PointSet(points if rows is None else points.index_select(0, rows), check=False)
    mean = gather_rows(gaussian.mean, context)
    logvar = None if gaussian.logvar is None else gather_rows(gaussian.logvar, context)
    if rows is not None:
        mean = mean.index_select(0, rows)
        logvar = None if logvar is None else logvar.index_select(0, rows)
    return Gaussian(mean, logvar, check=False)


RelevanceFn = Callable[[Tensor, Tensor], Tensor]


def gather_loss_inputs(
    outputs: dict[str, Any],
    batch: dict[str, Any],
    context: DistributedContext,
    relevance: RelevanceFn | None,
) -> tuple[dict[str, Any], Tensor]:
    """The loss inputs of the global batch: gathered model outputs and the global relevance.

    Args:
        outputs: the model's outputs for the local shard (``image``, ``caption`` Gaussians and
            optional ``image_views [B_img, K, D]``, ``caption_views [B_cap, K, D]``,
            ``image_samples``, ``caption_samples``).
        batch: the local batch (``image_index [B_img]``, ``caption_index [B_cap]``, ``relevance``).
        context: the process group; one process returns ``outputs`` and ``batch["relevance"]``.
        relevance: ``(image_index [N_img], caption_index [N_cap]) -> bool [N_img, N_cap]``, the
            split's true relation (e.g. ``Relevance.submatrix``).

    Returns:
        ``(outputs, positives)`` for the whole global batch. Images held by several shards
        are kept once (their first row in rank order).
    """
    if not context.enabled:
        return outputs, batch["relevance"]
    if relevance is None:
        raise ValueError("training in several processes needs the split's relation to build the global relevance")
    image_index = gather_rows(batch["image_index"].to(context.device), context, differentiable=False)
    caption_index = gather_rows(batch["caption_index"].to(context.device), context, differentiable=False)
    rows = _first_occurrences(image_index)
    keep_rows = None if len(rows) == len(image_index) else rows
    gathered: dict[str, Any] = dict(outputs)
    gathered["image"] = _gather_gaussian(outputs["image"], context, keep_rows)
    gathered["caption"] = _gather_gaussian(outputs["caption"], context, None)
    for key in IMAGE_KEYS:
        if isinstance(outputs.get(key), Tensor):
            value = gather_rows(outputs[key], context)
            gathered[key] = value if keep_rows is None else value.index_select(0, keep_rows)
    for key in CAPTION_KEYS:
        if isinstance(outputs.get(key), Tensor):
            gathered[key] = gather_rows(outputs[key], context)
    positives = relevance(image_index[rows].cpu(), caption_index.cpu()).to(context.device)
    return gathered, positives


def _to_float32(outputs: dict[str, Any]) -> dict[str, Any]:
    """Model outputs in float32 (the loss, its exponentials, KL and sampling run in float32)."""
    result: dict[str, Any] = {}
    for key, value in outputs.items():
        if isinstance(value, PointSet):
            result[key] = PointSet(value.points.float(), check=False)
        elif isinstance(value, Gaussian):
            logvar = None if value.logvar is None else value.logvar.float()
            result[key] = Gaussian(value.mean.float(), logvar, check=False)
        elif isinstance(value, Tensor) and value.is_floating_point():
            result[key] = value.float()
        else:
            result[key] = value
    return result


class TrainStep(nn.Module):
    """Model forward (under the precision's autocast), global gathering, loss in float32.

    ``DistributedDataParallel`` wraps this module, so that the model's and the loss's
    parameters (PCME's ``a``, ``b``) are averaged over processes.

    Args:
        model: maps a batch to ``{"image": Gaussian, "caption": Gaussian, ...}``.
        loss: a registered loss (``pcmr.losses.create_loss``).
        context: the process group (:func:`init_distributed`).
        relevance: the split's relation ``(image_index, caption_index) -> bool matrix``;
            only used with several processes.
        autocast: a zero-argument factory of the autocast context of the model forward.
    """

    def __init__(
        self,
        model: nn.Module,
        loss: nn.Module,
        context: DistributedContext,
        relevance: RelevanceFn | None = None,
        autocast: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__()
        self.model, self.loss = model, loss
        self.context, self.relevance = context, relevance
        self.autocast = autocast

    def forward(self, batch: dict[str, Any], loss_seed: int | None = None) -> dict[str, Tensor]:
        """The loss terms of the global batch (``loss_seed`` reseeds torch before the loss, so
        sampled losses draw the same samples whatever the number of processes)."""

        with self.autocast() if self.autocast is not None else contextlib.nullcontext():
            outputs = self.model(batch)
        outputs = _to_float32(outputs)
        outputs, positives = gather_loss_inputs(outputs, batch, self.context, self.relevance)
        if loss_seed is not None:
            torch.manual_seed(loss_seed)
        device_type = positives.device.type
        with torch.autocast(device_type=device_type, enabled=False):
            terms = self.loss(**outputs, positives=positives)
        return {**terms, **_mean_logvars(outputs)}


def _mean_logvars(outputs: dict[str, Any]) -> dict[str, Tensor]:
    """``{"<modality>_logvar_mean": mean log-variance}`` of the batch's image / caption Gaussians (for the
    logs: the mean uncertainty per modality; none for point embeddings)."""
    means = {}
    for modality in ("image", "caption"):
        value = outputs.get(modality)
        if isinstance(value, Gaussian) and value.logvar is not None:
            means[f"{modality}_logvar_mean"] = value.logvar.detach().mean()
    return means


def wrap_ddp(module: nn.Module, context: DistributedContext) -> nn.Module:
    """``module`` in ``DistributedDataParallel`` (over its parameters that require gradients now).

    ``find_unused_parameters=True``: a head whose output the loss ignores (e.g. log-variances
    under a cosine triplet loss) gets no gradient, as in one process.
    """
    if not context.enabled:
        return module

    device_ids = [context.device.index] if context.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=device_ids, find_unused_parameters=True)
