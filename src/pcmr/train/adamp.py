"""AdamP (Heo et al., "AdamP: Slowing Down the Slowdown for Momentum Optimizers on Scale-invariant
Weights", ICLR 2021, Algorithm 2), the optimiser of PCME and PCME++, over all parameters at once.

The update is the one of the authors' ``adamp`` package (``AdamP``), per parameter ``p`` with gradient
``g`` at step ``s``::

    m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
    u = m / (sqrt(v) / sqrt(1 - beta2^s) + eps)          (nesterov: beta1 m + (1 - beta1) g in place of m)
    for a parameter of two or more dimensions, in the views [rows, -1] ("channel"), then [1, -1] ("layer"):
        if max_rows |cos(g_row, p_row)| < delta / sqrt(row length):       (the weight is scale-invariant)
            u = u - p_hat <p_hat, u>_row,  p_hat = p_row / (|p_row| + eps)  (Algorithm 2's projection)
            the weight decay is multiplied by wd_ratio; the later view is not tried
    p = p (1 - lr weight_decay ratio) - lr / (1 - beta1^s) u

The package loops over parameters with some thirty operations each. Here the projection's test
reads the per-row inner products ``<g, g>, <g, p>, <p, p>`` of every matrix parameter from one small
batched matrix product each, with a single transfer of all the decisions, before the update. A
parameter that is not projected (and without Nesterov momentum) takes exactly AdamW's update, which
torch's fused kernel (``torch._fused_adamw_``, the one behind ``AdamW(fused=True)``) applies to all of
them at once; the projected ones get their moments from the same kernel and the rest of the update
from multi-tensor (``torch._foreach_*``) operations. The cosines are ``<g, p> / (max(|g|, eps)
max(|p|, eps))``, the package's up to rounding. The state (``step`` an int, ``exp_avg``,
``exp_avg_sq``) is the package's, so either loads the other's state.

Like the other optimizers :func:`pcmr.train.schedules.build_optimizer` makes, it does not import
``torch._dynamo`` (:mod:`pcmr.train.optimizers`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from pcmr.train.optimizers import WithoutDynamoImport

__all__ = ["AdamP"]


class AdamP(WithoutDynamoImport, torch.optim.Optimizer):
    """AdamP with the ``adamp`` package's arguments and defaults (see the module docstring).

    Args:
        params: parameters or parameter groups.
        lr: learning rate; betas: ``(beta1, beta2)``; eps: added to the denominators and norms.
        weight_decay: decoupled weight decay (``p *= 1 - lr weight_decay``).
        delta: the cosine threshold of the scale-invariance test (0.1).
        wd_ratio: the weight decay's factor on projected parameters (0.1).
        nesterov: Nesterov momentum in the update direction.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, delta: float = 0.1, wd_ratio: float = 0.1,
                 nesterov: bool = False) -> None:
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay), ("delta", delta),
                            ("wd_ratio", wd_ratio)):
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"AdamP: {name} must be a number >= 0, got {value!r}")
        if len(betas) != 2 or not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"AdamP: betas must be two numbers in [0, 1), got {betas!r}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "delta": delta,
                    "wd_ratio": wd_ratio, "nesterov": nesterov}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One AdamP step over every parameter with a gradient; ``closure`` re-evaluates the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            by_step: dict[tuple[int, torch.device, torch.dtype], list[Tensor]] = {}
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError("AdamP does not support sparse gradients")
                state = self.state[param]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                state["step"] += 1
                by_step.setdefault((int(state["step"]), param.device, param.dtype), []).append(param)
            # one entry unless parameters joined at different steps or live on several devices or dtypes
            for (step, _, _), params in by_step.items():
                self._update(group, step, params)
        return loss

    def _update(self, group: dict[str, Any], step: int, params: list[Tensor]) -> None:
        beta1, beta2 = group["betas"]
        eps, lr, weight_decay = group["eps"], group["lr"], group["weight_decay"]
        grads = [p.grad for p in params if p.grad is not None]  # all of them: step() keeps those with one
        plans = _projection_plans(params, grads, group["delta"], eps)  # decided on p and g before the update
        # an unprojected parameter without Nesterov momentum takes exactly AdamW's update (decoupled
        # weight decay, bias-corrected moments): torch's fused kernel, one pass per parameter
        plain = [] if group["nesterov"] else [i for i in range(len(params)) if i not in plans]
        rest = list(range(len(params))) if group["nesterov"] else sorted(plans)
        steps = [torch.tensor(float(step), dtype=torch.float32, device=params[0].device)] * len(params)
        for chosen, step_lr, decay in ((plain, lr, weight_decay), (rest, 0.0, 0.0)):  # rest: moments only
            if chosen:
                torch._fused_adamw_([params[i] for i in chosen], [grads[i] for i in chosen],
                                    [self.state[params[i]]["exp_avg"] for i in chosen],
                                    [self.state[params[i]]["exp_avg_sq"] for i in chosen], [],
                                    steps[: len(chosen)], amsgrad=False, lr=step_lr, beta1=beta1, beta2=beta2,
                                    weight_decay=decay, eps=eps, maximize=False)
        if not rest:
            return
        exp_avgs = [self.state[params[i]]["exp_avg"] for i in rest]
        denominators = torch._foreach_sqrt([self.state[params[i]]["exp_avg_sq"] for i in rest])
        torch._foreach_div_(denominators, math.sqrt(1 - beta2**step))
        torch._foreach_add_(denominators, eps)
        if group["nesterov"]:
            perturbs = torch._foreach_mul(exp_avgs, beta1)
            torch._foreach_add_(perturbs, [grads[i] for i in rest], alpha=1 - beta1)
            torch._foreach_div_(perturbs, denominators)
        else:
            perturbs = torch._foreach_div(exp_avgs, denominators)
        for slot, i in enumerate(rest):
            if i in plans:
                rows, norms = plans[i]
                unit = params[i].reshape(rows, -1) / norms.unsqueeze(1).add(eps)  # [rows, C]: p / (|p| + eps)
                flat = perturbs[slot].reshape(rows, -1)
                perturbs[slot].sub_((unit * (unit * flat).sum(dim=1, keepdim=True)).view(perturbs[slot].shape))
        rest_params = [params[i] for i in rest]
        if weight_decay > 0:
            torch._foreach_mul_(rest_params, [1 - lr * weight_decay * (group["wd_ratio"] if i in plans else 1.0)
                                              for i in rest])
        torch._foreach_add_(rest_params, perturbs, alpha=-(lr / (1 - beta1**step)))


def _projection_plans(params: list[Tensor], grads: list[Tensor], delta: float, eps: float
                      ) -> dict[int, tuple[int, Tensor]]:
    """The scale-invariant matrix parameters (Algorithm 2's test, channel view first, then layer view):
    index -> (rows of the view, ``|p_row|`` ``[rows]``), from one pass over each parameter and one
    transfer of all decisions."""
    matrices = [i for i, p in enumerate(params) if p.dim() > 1 and p.numel() > 0]
    if not matrices:
        return {}
    stats = []  # per matrix parameter: <g, g>, <g, p>, <p, p> of every row, by one small batched product
    for i in matrices:
        rows = params[i].shape[0]
        pair = torch.stack([grads[i].reshape(rows, -1), params[i].reshape(rows, -1)], dim=1)  # [rows, 2, C]
        stats.append(torch.bmm(pair, pair.transpose(1, 2)))  # [rows, 2, 2]: the Gram matrix of (g_row, p_row)
    rows_per = [s.shape[0] for s in stats]
    rows_all = torch.cat(stats).flatten(1)[:, [0, 1, 3]]  # [R, 3]
    owner = torch.repeat_interleave(torch.arange(len(matrices)), torch.tensor(rows_per)).to(rows_all.device)
    layer = rows_all.new_zeros(len(matrices), 3).index_add_(0, owner, rows_all)  # [P, 3]: per parameter
    channel_max = rows_all.new_zeros(len(matrices)).scatter_reduce_(0, owner, _abs_cosine(rows_all, eps), "amax")
    sizes = torch.tensor([[params[i][0].numel(), params[i].numel()] for i in matrices], dtype=rows_all.dtype,
                         device=rows_all.device)
    thresholds = delta / sizes.sqrt()  # [P, 2]: delta / sqrt(row length), delta / sqrt(numel)
    channel = channel_max < thresholds[:, 0]
    layer_wise = ~channel & (_abs_cosine(layer, eps) < thresholds[:, 1])
    by_channel, by_layer = torch.stack([channel, layer_wise]).tolist()
    row_norms = rows_all[:, 2].sqrt().split(rows_per)
    layer_norms = layer[:, 2].sqrt()
    plans = {}
    for slot, i in enumerate(matrices):
        if by_channel[slot]:
            plans[i] = (rows_per[slot], row_norms[slot])
        elif by_layer[slot]:
            plans[i] = (1, layer_norms[slot : slot + 1])
    return plans


def _abs_cosine(gram: Tensor, eps: float) -> Tensor:
    """``|<g, p>| / (max(|g|, eps) max(|p|, eps))`` from ``[R, 3]`` rows of ``<g, g>, <g, p>, <p, p>``, as
    ``torch.nn.functional.cosine_similarity(g, p, eps=eps).abs()``."""
    return gram[:, 1].abs() / (gram[:, 0].sqrt().clamp_min(eps) * gram[:, 2].sqrt().clamp_min(eps))
