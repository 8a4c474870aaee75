"""The learnable scale ``a > 0`` and shift ``b`` of a match-probability logit ``-a * d + b``.

PCME eq.3 (``p(m | z, z') = sigmoid(-a |z - z'| + b)``) and PCME++ (logit
``-a * csd + b``). ``a`` is stored as a free parameter ``a_raw`` with
``a = softplus(a_raw)``: it stays positive, and for large ``a`` it moves
linearly with ``a_raw`` as PCME's unconstrained parameter does. ``b`` is free.

:class:`ReleaseMatchScale` is PCME's release's own parametrisation (``criterions/probemb.py``):
two free parameters ``negative_scale`` and ``shift`` with the logit ``2 (-negative_scale d + shift)``
(its sigmoid is ``exp(l) / (exp(l) + exp(-l)) = sigmoid(2 l)``), i.e. ``a = 2 negative_scale`` and
``b = 2 shift``. An optimiser whose step is about ``lr`` per parameter (Adam, AdamP) then moves ``a`` and
``b`` by about ``2 lr`` per step, where :class:`MatchScale` moves them by about ``lr``: the same start,
twice the speed (docs/models.md, "PCME as its authors released it").
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pcmr.losses._inputs import check_positive_number

__all__ = ["MatchScale", "ReleaseMatchScale", "SCALE_PARAMETRISATIONS", "make_match_scale"]

#: how ``a`` and ``b`` are parametrised: ``softplus`` (:class:`MatchScale`) or ``release`` (:class:`ReleaseMatchScale`)
SCALE_PARAMETRISATIONS = ("softplus", "release")


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


class ReleaseMatchScale(nn.Module):
    """PCME's release's ``negative_scale`` and ``shift`` (0-dim parameters, its values: ``a / 2``, ``b / 2``);
    ``a = 2 negative_scale``, ``b = 2 shift`` (module docstring)."""

    def __init__(self, init_a: float, init_b: float) -> None:
        super().__init__()
        check_positive_number("init_a", init_a)
        if isinstance(init_b, bool) or not isinstance(init_b, (int, float)) or not math.isfinite(init_b):
            raise ValueError(f"init_b must be a finite number, got {init_b!r}")
        self.negative_scale = nn.Parameter(torch.tensor(float(init_a) / 2.0))
        self.shift = nn.Parameter(torch.tensor(float(init_b) / 2.0))

    @property
    def a(self) -> Tensor:
        """``2 negative_scale`` (0-dim, differentiable)."""
        return 2.0 * self.negative_scale

    @property
    def b(self) -> Tensor:
        """``2 shift`` (0-dim, differentiable)."""
        return 2.0 * self.shift

    def as_floats(self) -> dict[str, float]:
        """``{"a": ..., "b": ...}`` as Python floats (for evaluation with ``match_prob``)."""
        return {"a": float(self.a.detach()), "b": float(self.b.detach())}

    def extra_repr(self) -> str:
        values = self.as_floats()
        return f"a={values['a']:.4g}, b={values['b']:.4g} (release parametrisation)"


def make_match_scale(init_a: float, init_b: float, parametrisation: str = "softplus") -> MatchScale | ReleaseMatchScale:
    """The ``a``, ``b`` holder of a parametrisation of :data:`SCALE_PARAMETRISATIONS`."""
    if parametrisation == "release":
        return ReleaseMatchScale(init_a, init_b)
    if parametrisation != "softplus":
        raise ValueError(f"scale_parametrisation must be one of {list(SCALE_PARAMETRISATIONS)}, got {parametrisation!r}")
    return MatchScale(init_a, init_b)
