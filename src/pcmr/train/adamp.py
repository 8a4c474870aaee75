"""AdamP (Heo et al., "AdamP: Slowing Down the Slowdown for Momentum Optimizers on Scale-invariant
Weights", ICLR 2021, Algorithm 2), the optimiser of PCME and PCME++, with multi-tensor updates.

The update is the one of the authors' ``adamp`` package (``AdamP``), per parameter ``p`` with gradient
``g`` at step ``s``::

    m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
    u = m / (sqrt(v) / sqrt(1 - beta2^s) + eps)          (nesterov: beta1 m + (1 - beta1) g in place of m)
    for a parameter of two or more dimensions, in the views [rows, -1] ("channel"), then [1, -1] ("layer"):
        if max_rows |cos(g_row, p_row)| < delta / sqrt(row length):       (the weight is scale-invariant)
            u = u - p_hat <p_hat, u>_row,  p_hat = p_row / (|p_row| + eps)  (Algorithm 2's projection)
            the weight decay is multiplied by wd_ratio; the later view is not tried
    p = p (1 - lr weight_decay ratio) - lr / (1 - beta1^s) u

The package loops over parameters with some thirty operations each. Here the moments, the
denominators, the weight decay and the step run as ``torch._foreach_*`` operations over all
parameters of a group at once, and the projection's test reads the per-row inner products
``<g, g>, <g, p>, <p, p>`` of every matrix parameter from one batched matrix product each, with a
single transfer of all the decisions; only the projected parameters take per-parameter operations.
The cosines are ``<g, p> / (max(|g|, eps) max(|p|, eps))``, the package's up to rounding. The state
(``step`` an int, ``exp_avg``, ``exp_avg_sq``) is the package's, so either loads the other's state.

``torch.optim.Optimizer`` imports ``torch._dynamo`` (about a second) the first time its parameter
groups, gradients or state are touched; this class calls those methods without the dynamo guard
unless ``torch._dynamo`` is already loaded (as it is when anything is compiled).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["AdamP"]


def _unguarded(name: str) -> Callable[..., Any]:
    """``torch.optim.Optimizer.<name>`` without its ``torch._disable_dynamo`` wrapper (which imports
    ``torch._dynamo``) while ``torch._dynamo`` is not loaded; the wrapped method once it is."""
    guarded = getattr(torch.optim.Optimizer, name)
    plain = getattr(guarded, "__wrapped__", guarded)

    def method(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        return (guarded if "torch._dynamo" in sys.modules else plain)(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = guarded.__doc__
    return method


class AdamP(torch.optim.Optimizer):
    """AdamP with the ``adamp`` package's arguments and defaults (see the module docstring).

    Args:
        params: parameters or parameter groups.
        lr: learning rate; betas: ``(beta1, beta2)``; eps: added to the denominators and norms.
        weight_decay: decoupled weight decay (``p *= 1 - lr weight_decay``).
        delta: the cosine threshold of the scale-invariance test (0.1).
        wd_ratio: the weight decay's factor on projected parameters (0.1).
        nesterov: Nesterov momentum in the update direction.
    """

    add_param_group = _unguarded("add_param_group")
    zero_grad = _unguarded("zero_grad")
    state_dict = _unguarded("state_dict")
    load_state_dict = _unguarded("load_state_dict")

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
            by_step: dict[int, list[Tensor]] = {}
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
                by_step.setdefault(int(state["step"]), []).append(param)
            for step, params in by_step.items():  # one entry unless parameters joined at different steps
                self._update(group, step, params)
        return loss

    def _update(self, group: dict[str, Any], step: int, params: list[Tensor]) -> None:
        beta1, beta2 = group["betas"]
        eps, lr = group["eps"], group["lr"]
        grads = [p.grad for p in params if p.grad is not None]  # all of them: step() keeps those with one
        exp_avgs = [self.state[p]["exp_avg"] for p in params]
        exp_avg_sqs = [self.state[p]["exp_avg_sq"] for p in params]
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denominators, math.sqrt(1 - beta2**step))
        torch._foreach_add_(denominators, eps)
        if group["nesterov"]:
            perturbs = torch._foreach_mul(exp_avgs, beta1)
            torch._foreach_add_(perturbs, grads, alpha=1 - beta1)
            torch._foreach_div_(perturbs, denominators)
        else:
            perturbs = torch._foreach_div(exp_avgs, denominators)
        ratios = _project(params, grads, perturbs, group["delta"], group["wd_ratio"], eps)
        if group["weight_decay"] > 0:
            torch._foreach_mul_(params, [1 - lr * group["weight_decay"] * ratio for ratio in ratios])
        torch._foreach_add_(params, perturbs, alpha=-(lr / (1 - beta1**step)))


def _project(params: list[Tensor], grads: list[Tensor], perturbs: Sequence[Tensor], delta: float, wd_ratio: float,
             eps: float) -> list[float]:
    """Remove from ``perturbs`` (in place) their radial part on the scale-invariant matrix parameters
    (Algorithm 2); the weight-decay factor of each parameter (``wd_ratio`` if projected, else 1)."""
    ratios = [1.0] * len(params)
    matrices = [i for i, p in enumerate(params) if p.dim() > 1 and p.numel() > 0]
    if not matrices:
        return ratios
    grams = []  # per matrix parameter, [rows, 2, 2]: the Gram matrix of (g_row, p_row) for every row
    for i in matrices:
        rows = params[i].shape[0]
        stacked = torch.stack([grads[i].reshape(rows, -1), params[i].reshape(rows, -1)], dim=1)  # [rows, 2, C]
        grams.append(torch.bmm(stacked, stacked.transpose(1, 2)))
    rows_per = [g.shape[0] for g in grams]
    gram = torch.cat(grams).flatten(1)[:, [0, 1, 3]]  # [R, 3]: <g, g>, <g, p>, <p, p> per row
    owner = torch.repeat_interleave(torch.arange(len(matrices), device=gram.device),
                                    torch.tensor(rows_per, device=gram.device))
    layer = gram.new_zeros(len(matrices), 3).index_add_(0, owner, gram)  # [P, 3]: the same per parameter
    row_cos = _abs_cosine(gram, eps)
    channel_max = row_cos.new_zeros(len(matrices)).scatter_reduce_(0, owner, row_cos, "amax")
    sizes = torch.tensor([[params[i][0].numel(), params[i].numel()] for i in matrices], dtype=gram.dtype,
                         device=gram.device)
    thresholds = delta / sizes.sqrt()  # [P, 2]: delta / sqrt(row length), delta / sqrt(numel)
    channel = channel_max < thresholds[:, 0]
    layer_wise = ~channel & (_abs_cosine(layer, eps) < thresholds[:, 1])
    decisions = torch.stack([channel, layer_wise]).tolist()
    row_norms = gram[:, 2].sqrt().split(rows_per)
    layer_norms = layer[:, 2].sqrt()
    for slot, i in enumerate(matrices):
        if not (decisions[0][slot] or decisions[1][slot]):
            continue
        param, perturb = params[i], perturbs[i]
        rows = param.shape[0] if decisions[0][slot] else 1
        norms = row_norms[slot] if decisions[0][slot] else layer_norms[slot : slot + 1]
        unit = param.reshape(rows, -1) / norms.unsqueeze(1).add(eps)  # [rows, C]
        flat = perturb.reshape(rows, -1)
        perturb.sub_((unit * (unit * flat).sum(dim=1, keepdim=True)).view(perturb.shape))
        ratios[i] = wd_ratio
    return ratios


def _abs_cosine(gram: Tensor, eps: float) -> Tensor:
    """``|<g, p>| / (max(|g|, eps) max(|p|, eps))`` from ``[R, 3]`` rows of ``<g, g>, <g, p>, <p, p>``, as
    ``torch.nn.functional.cosine_similarity(g, p, eps=eps).abs()``."""
    return gram[:, 1].abs() / (gram[:, 0].sqrt().clamp_min(eps) * gram[:, 2].sqrt().clamp_min(eps))
