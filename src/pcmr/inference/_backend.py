"""Backends of the sequential acceptance loop: numba-compiled or interpreted, from one source.

``"numba"`` compiles ``_kernel.advance_stream`` with ``numba.njit(cache=True)`` (numba is the optional
extra ``pcmr[fast]``; it is imported only when this backend is first used). ``"python"`` runs the very
same function interpreted, on memoryviews of the same arrays. ``"auto"`` picks numba when it can be
imported and the interpreted loop otherwise. Both give identical lists.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

from pcmr.inference import _kernel

BACKENDS = ("auto", "numba", "python")


def resolve_backend(backend: str) -> str:
    """Map ``"auto"`` to ``"numba"`` or ``"python"``; check the name; fail clearly if numba is missing."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return "numba" if _numba_available() else "python"
    if backend == "numba" and not _numba_available():
        raise ImportError(
            "backend='numba' needs the optional package numba: pip install 'pcmr[fast]' "
            "(or use backend='python', which gives the same lists, more slowly)"
        )
    return backend


@functools.lru_cache(maxsize=1)
def _numba_available() -> bool:
    return importlib.util.find_spec("numba") is not None


@functools.lru_cache(maxsize=1)
def _compiled_advance_stream() -> Callable[..., int]:
    import numba

    return numba.njit(cache=True, nogil=True)(_kernel.advance_stream)


def stream_runner(backend: str) -> Callable[..., int]:
    """Return ``run(*arrays_and_ints) -> status`` for a resolved backend name.

    Arguments are those of ``_kernel.advance_stream``, numpy arrays for the arrays.
    """
    if backend == "numba":
        return _compiled_advance_stream()
    return _run_interpreted


def _run_interpreted(*args: Any) -> int:
    # memoryviews index a few times faster than numpy arrays from interpreted Python
    converted = [memoryview(a) if hasattr(a, "__array_interface__") else a for a in args]
    return _kernel.advance_stream(*converted)
