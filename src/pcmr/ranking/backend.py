"""The one numba switch of pcmr: whether compiled loops are used, and backend names.

numba is the optional extra ``pcmr[fast]``. Compiled code is used when numba is installed and not
switched off; ``PCMR_NUMBA=0`` in the environment or ``with numba_disabled():`` switch it off (the
torch / interpreted paths give identical results). Nothing here rebinds a module global: the
switch is a context variable and the compiled functions live in ``pcmr.ranking._numba_kernels``,
which is imported only when they are first needed.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import os
from collections.abc import Iterator

#: Backends of the sequential greedy-matching loop (identical lists).
BACKENDS = ("auto", "numba", "python")

_SWITCH: contextvars.ContextVar[bool] = contextvars.ContextVar("pcmr_numba", default=True)


@functools.lru_cache(maxsize=1)
def numba_available() -> bool:
    """Whether numba can be imported (the ``pcmr[fast]`` extra)."""
    return importlib.util.find_spec("numba") is not None


def numba_enabled() -> bool:
    """Whether compiled loops are used now: numba installed, ``PCMR_NUMBA`` not ``0``, not switched off."""
    return _SWITCH.get() and os.environ.get("PCMR_NUMBA", "1") != "0" and numba_available()


@contextlib.contextmanager
def numba_disabled() -> Iterator[None]:
    """Run the block with the torch / interpreted paths only (same results, slower)."""
    token = _SWITCH.set(False)
    try:
        yield
    finally:
        _SWITCH.reset(token)


def resolve_backend(backend: str) -> str:
    """Map ``"auto"`` to ``"numba"`` or ``"python"``; check the name; fail clearly if numba is missing."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return "numba" if numba_enabled() else "python"
    if backend == "numba" and not numba_available():
        raise ImportError(
            "backend='numba' needs the optional package numba: pip install 'pcmr[fast]' "
            "(or use backend='python', which gives the same lists, more slowly)"
        )
    return backend
