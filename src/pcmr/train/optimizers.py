"""torch's optimizers without the ``torch._dynamo`` import of their first use.

``torch.optim.Optimizer`` wraps ``add_param_group``, ``zero_grad``, ``state_dict``, ``load_state_dict``
and the built-in optimizers' ``step`` in guards that exclude them from ``torch.compile``; each guard
imports ``torch._dynamo`` on its first call, a second or more of CPU time (about as much as
``import torch`` itself) that an eager training run never uses. The classes here are torch's
(subclasses with the same names, arguments, state and update) whose methods call the unguarded
functions while ``torch._dynamo`` is not loaded, and the guarded ones once anything has loaded it
(as compiling does). Only these classes change: other optimizers of a program keep their guards.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.optimizer import _use_grad_for_differentiable

__all__ = ["SGD", "Adam", "AdamW", "WithoutDynamoImport"]


def _dynamo_loaded() -> bool:
    return "torch._dynamo" in sys.modules


def _unguarded(name: str) -> Callable[..., Any]:
    """``torch.optim.Optimizer.<name>`` without its ``torch._disable_dynamo`` guard while ``torch._dynamo``
    is not loaded, with it once it is."""
    guarded = getattr(torch.optim.Optimizer, name)
    plain = inspect.unwrap(guarded)

    def method(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        return (guarded if _dynamo_loaded() else plain)(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = guarded.__doc__
    return method


def _unguarded_step(base: type[torch.optim.Optimizer]) -> Callable[..., Any]:
    """``base.step`` without its guard (which sets the grad mode and marks graph breaks for
    ``torch.compile``): the grad mode set here, the guarded step once ``torch._dynamo`` is loaded."""
    plain = inspect.unwrap(base.step)  # torch's step function itself, under the profiling and guard wrappers
    guarded = _use_grad_for_differentiable(plain)

    def step(self: torch.optim.Optimizer, closure: Callable[[], float] | None = None) -> float | None:
        if _dynamo_loaded():
            return guarded(self, closure)
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return plain(self, closure)

    step.__doc__ = plain.__doc__
    return step


class WithoutDynamoImport:
    """Mixin (before a ``torch.optim.Optimizer`` class): its bookkeeping methods without the import."""

    add_param_group = _unguarded("add_param_group")
    zero_grad = _unguarded("zero_grad")
    state_dict = _unguarded("state_dict")
    load_state_dict = _unguarded("load_state_dict")


class SGD(WithoutDynamoImport, torch.optim.SGD):
    """``torch.optim.SGD`` without the ``torch._dynamo`` import (module docstring)."""

    step = _unguarded_step(torch.optim.SGD)


class Adam(WithoutDynamoImport, torch.optim.Adam):
    """``torch.optim.Adam`` without the ``torch._dynamo`` import (module docstring)."""

    step = _unguarded_step(torch.optim.Adam)


class AdamW(WithoutDynamoImport, torch.optim.AdamW):
    """``torch.optim.AdamW`` without the ``torch._dynamo`` import (module docstring)."""

    step = _unguarded_step(torch.optim.AdamW)
