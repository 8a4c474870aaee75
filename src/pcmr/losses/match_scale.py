"""The learnable scale ``a > 0`` and shift ``b`` of a match-probability logit ``-a * d + b``.

PCME eq.3 (``p(m | z, z') = sigmoid(-a |z - z'| + b)``) and PCME++ (logit
``-a * csd + b``). ``a`` is stored as a free parameter ``a_raw`` with
``a = softplus(a_raw)``: it stays positive, and for large ``a`` it moves
linearly with ``a_raw`` as PCME's unconstrained parameter does. ``b`` is free.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pcmr.losses._inputs import check_positive_number

__all__ = ["MatchScale"]


def inverse_softplus(value: float) -> float:
    """``x`` with ``softplus(x) = value`` for ``value > 0`` (stable for large and small values)."""
    return value + math.log(-math.expm1(-value))


class MatchScale(nn.Module):
    """Holds ``a = softplus(a_raw) > 0`` and ``b`` (0-dim parameters).

    Args:
        init_a: initial ``a`` (> 0).
        init_b: initial ``b``.
    """

    def __init__(self, init_a: float, init_b: float) -> None:
        super().__init__()
        check_positive_number("init_a", init_a)
        if isinstance(init_b, bool) or not isinstance(init_b, (int, float)) or not math.isfinite(init_b):
            raise ValueError(f"init_b must be a finite number, got {init_b!r}")
        self.a_raw = nn.Parameter(torch.tensor(inverse_softplus(float(init_a))))
        self.b = nn.Parameter(torch.tensor(float(init_b)))

    @property
    def a(self) -> Tensor:
        """The positive scale ``softplus(a_raw)`` (0-dim, differentiable)."""
        return F.softplus(self.a_raw)

    def as_floats(self) -> dict[str, float]:
        """``{"a": ..., "b": ...}`` as Python floats (for evaluation with ``match_prob``)."""
        return {"a": float(self.a.detach()), "b": float(self.b.detach())}

    def extra_repr(self) -> str:
        values = self.as_floats()
        return f"a={values['a']:.4g}, b={values['b']:.4g}"
