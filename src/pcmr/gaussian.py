"""The Gaussian embedding type shared by every part of pcmr.

An embedding is ``N(mean, diag(exp(logvar)))`` in ``R^D`` (PCME §3,
ProbVSE §3, GCIE §3). ``mean`` has shape ``[N, D]``; ``logvar`` is ``[N, D]``
(ellipsoidal), ``[N, 1]`` (spherical, broadcast over ``D``) or ``None`` (a
point embedding, the limit ``sigma -> 0``).

The stored quantity is always the *log-variance* (never a log standard
deviation): ``var = exp(logvar)``, ``std = exp(logvar / 2)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from pcmr.suggest import unknown_name

__all__ = ["DEFAULT_UNCERTAINTY_MEASURE", "Gaussian", "NonFiniteEmbeddingError"]

#: the uncertainty measure of a Gaussian unless one is named: log det Sigma (PCME Sec. 4.4)
DEFAULT_UNCERTAINTY_MEASURE = "log_det"


class NonFiniteEmbeddingError(ValueError):
    """An embedding (a ``Gaussian``'s mean or log-variance, a ``PointSet``'s points) holds NaN or inf."""


def _check_finite(name: str, tensor: Tensor) -> None:
    if not bool(torch.isfinite(tensor).all()):
        bad = int((~torch.isfinite(tensor)).sum())
        raise NonFiniteEmbeddingError(
            f"Gaussian.{name} holds {bad} non-finite value(s) (NaN or inf) out of {tensor.numel()}; "
            f"expected finite numbers"
        )


@dataclass(frozen=True, eq=False)
class Gaussian:
    """A batch of diagonal Gaussian (or point) embeddings.

    Args:
        mean: ``[N, D]`` floating tensor of means.
        logvar: ``[N, D]`` (ellipsoidal), ``[N, 1]`` (spherical) log-variances, or
            ``None`` for point embeddings.
        check: validate shapes and finiteness (one device sync). Internal code that
            derives a Gaussian from an already-checked one passes ``False``.

    Raises:
        ValueError: wrong rank, mismatched ``N`` or ``D``, dtype/device mismatch, or a
            NaN/inf entry.
    """

    mean: Tensor
    logvar: Tensor | None = None
    check: bool = field(default=True, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.check:
            return
        mean, logvar = self.mean, self.logvar
        if not isinstance(mean, Tensor):
            raise ValueError(f"Gaussian.mean must be a torch.Tensor of shape [N, D], got {type(mean).__name__}")
        if mean.dim() != 2:
            raise ValueError(f"Gaussian.mean must have shape [N, D], got shape {tuple(mean.shape)}")
        if not mean.is_floating_point():
            raise ValueError(f"Gaussian.mean must be a floating tensor, got dtype {mean.dtype}")
        _check_finite("mean", mean)
        if logvar is None:
            return
        if not isinstance(logvar, Tensor):
            raise ValueError(
                f"Gaussian.logvar must be a torch.Tensor of shape [N, D] or [N, 1], got {type(logvar).__name__}"
            )
        n, d = mean.shape
        if logvar.dim() != 2 or logvar.shape[0] != n or logvar.shape[1] not in (1, d):
            raise ValueError(
                f"Gaussian.logvar must have shape [N, D] = [{n}, {d}] (ellipsoidal) or [{n}, 1] (spherical), "
                f"got shape {tuple(logvar.shape)}"
            )
        if logvar.dtype != mean.dtype or logvar.device != mean.device:
            raise ValueError(
                f"Gaussian.logvar must match mean's dtype and device ({mean.dtype}, {mean.device}), "
                f"got ({logvar.dtype}, {logvar.device})"
            )
        _check_finite("logvar", logvar)

    # ----------------------------------------------------------------- constructors
    @classmethod
    def point(cls, mean: Tensor) -> Gaussian:
        """A point embedding (no variance): ``mean [N, D]``."""
        return cls(mean, None)

    @staticmethod
    def cat(gaussians: Sequence[Gaussian]) -> Gaussian:
        """Concatenate along ``N``. Spherical and ellipsoidal parts are combined by
        broadcasting the spherical log-variance to ``D``; points cannot be mixed with
        Gaussians."""
        if len(gaussians) == 0:
            raise ValueError("Gaussian.cat needs at least one Gaussian")
        kinds = {type(g) for g in gaussians}
        if kinds != {Gaussian}:  # a subclass (e.g. pcmr.PointSet) concatenates its own kind
            if len(kinds) != 1:
                names = sorted(k.__name__ for k in kinds)
                raise ValueError(f"Gaussian.cat cannot mix kinds of embeddings, got {names}")
            return kinds.pop().cat(gaussians)
        points = [g.is_point for g in gaussians]
        if any(points) and not all(points):
            raise ValueError("Gaussian.cat cannot mix point embeddings (logvar=None) with Gaussians")
        mean = torch.cat([g.mean for g in gaussians], dim=0)
        if all(points):
            return Gaussian(mean, None, check=False)
        widths = {g.logvar.shape[1] for g in gaussians}  # type: ignore[union-attr]
        if len(widths) == 1:
            logvar = torch.cat([g.logvar for g in gaussians], dim=0)  # type: ignore[misc]
        else:
            logvar = torch.cat([g.expanded_logvar() for g in gaussians], dim=0)
        return Gaussian(mean, logvar, check=True)

    # ----------------------------------------------------------------- properties
    @property
    def is_point(self) -> bool:
        """True when the embedding has no variance."""
        return self.logvar is None

    @property
    def is_spherical(self) -> bool:
        """True when one log-variance is shared by all ``D`` dimensions."""
        return self.logvar is not None and self.logvar.shape[1] == 1 and self.mean.shape[1] != 1

    @property
    def num(self) -> int:
        """Number of embeddings ``N``."""
        return self.mean.shape[0]

    @property
    def dim(self) -> int:
        """Embedding dimension ``D``."""
        return self.mean.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.mean.dtype

    @property
    def device(self) -> torch.device:
        return self.mean.device

    def __len__(self) -> int:
        return self.mean.shape[0]

    def __repr__(self) -> str:
        kind = "point" if self.is_point else ("spherical" if self.is_spherical else "ellipsoidal")
        return f"Gaussian(N={self.num}, D={self.dim}, {kind}, dtype={self.dtype}, device={self.device})"

    # ----------------------------------------------------------------- variances
    def expanded_logvar(self) -> Tensor:
        """Log-variance broadcast to ``[N, D]``. Raises for point embeddings."""
        if self.logvar is None:
            raise ValueError("this Gaussian is a point embedding (logvar=None); it has no log-variance")
        return self.logvar.expand(-1, self.dim)

    @property
    def var(self) -> Tensor:
        """Variance ``exp(logvar)``: ``[N, D]`` or ``[N, 1]``; zeros ``[N, 1]`` for points."""
        if self.logvar is None:
            return self.mean.new_zeros(self.num, 1)
        return self.logvar.exp()

    @property
    def std(self) -> Tensor:
        """Standard deviation ``exp(logvar / 2)``: ``[N, D]`` or ``[N, 1]``; zeros ``[N, 1]`` for points."""
        if self.logvar is None:
            return self.mean.new_zeros(self.num, 1)
        return (0.5 * self.logvar).exp()

    # ----------------------------------------------------------------- sampling
    def sample(
        self, num_samples: int | None = None, generator: torch.Generator | None = None, *, draws: Tensor | None = None
    ) -> Tensor:
        """Reparametrised samples ``z = mean + std * eps`` (PCME eq.1), differentiable
        with respect to ``mean`` and ``logvar``.

        Args:
            num_samples: ``J``; may be left out when ``draws`` is given.
            generator: random generator of the draws.
            draws: the standard-normal draws ``eps [N, J, D]`` to use instead of new ones (e.g.
                those a reference implementation drew, to reproduce its samples exactly).

        Returns:
            ``[N, J, D]``. Point embeddings repeat their mean.
        """
        if draws is not None:
            if not isinstance(draws, Tensor) or draws.dim() != 3 or (draws.shape[0], draws.shape[2]) != (self.num, self.dim):
                shape = tuple(draws.shape) if isinstance(draws, Tensor) else type(draws).__name__
                raise ValueError(f"draws must have shape [N, J, D] = [{self.num}, J, {self.dim}], got {shape}")
            if num_samples is not None and draws.shape[1] != num_samples:
                raise ValueError(f"draws hold {draws.shape[1]} samples per embedding, num_samples is {num_samples}")
            num_samples = draws.shape[1]
        if num_samples is None or num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        mean = self.mean.unsqueeze(1)  # [N, 1, D]
        if self.logvar is None:
            return mean.expand(-1, num_samples, -1)
        eps = self.noise(num_samples, generator) if draws is None else draws.to(self.mean)
        return torch.addcmul(mean, self.std.unsqueeze(1), eps)  # [N, J, D] = mean + std * eps

    def noise(self, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """The standard-normal draws ``eps [N, J, D]`` behind :meth:`sample`: the same
        generator state gives the same ``eps`` here as inside ``sample``."""
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        return torch.randn((self.num, num_samples, self.dim), generator=generator, dtype=self.dtype, device=self.device)

    # ----------------------------------------------------------------- uncertainty
    def log_det(self) -> Tensor:
        """``log det Sigma = sum_d logvar_d`` (ProbVSE, GCIE). Returns ``[N]``."""
        if self.logvar is None:
            raise ValueError("log_det is undefined for a point embedding (logvar=None)")
        if self.logvar.shape[1] == 1:
            return self.logvar[:, 0] * self.dim
        return self.logvar.sum(dim=1)

    def geometric_mean_std(self) -> Tensor:
        """Geometric mean of the standard deviations ``exp(mean_d logvar_d / 2)`` (PCME §3.4).
        Returns ``[N]``."""
        if self.logvar is None:
            raise ValueError("geometric_mean_std is undefined for a point embedding (logvar=None)")
        return (0.5 * self.logvar.mean(dim=1)).exp()

    def entropy(self) -> Tensor:
        """Differential entropy ``0.5 * (D + D log(2 pi) + log det Sigma)`` (GCIE eq.18).
        Returns ``[N]``."""
        d = self.dim
        return 0.5 * (d + d * math.log(2 * math.pi) + self.log_det())

    def uncertainty(self, measure: str = DEFAULT_UNCERTAINTY_MEASURE) -> Tensor:
        """One uncertainty value per embedding, ``[N]``; ``measure`` is one of
        ``log_det``, ``geometric_mean_std``, ``entropy``."""
        measures = {"log_det": self.log_det, "geometric_mean_std": self.geometric_mean_std,
                    "entropy": self.entropy}
        if measure not in measures:
            raise ValueError(unknown_name("uncertainty measure", str(measure), sorted(measures)))
        return measures[measure]()

    # ----------------------------------------------------------------- indexing / devices
    def __getitem__(self, index: int | slice | Tensor | Sequence[int]) -> Gaussian:
        """Select rows. An integer index keeps the batch dimension (``[1, D]``)."""
        if isinstance(index, int):
            if not -self.num <= index < self.num:
                raise IndexError(f"index {index} out of range for a Gaussian of N={self.num}")
            index = slice(index, index + 1 if index != -1 else None)
        mean = self.mean[index]
        logvar = None if self.logvar is None else self.logvar[index]
        if mean.dim() != 2:
            raise IndexError(f"index {index!r} must select rows and keep shape [n, D]")
        return Gaussian(mean, logvar, check=False)

    def to(self, *args, **kwargs) -> Gaussian:
        """``Tensor.to`` applied to mean and logvar (device and/or dtype)."""
        mean = self.mean.to(*args, **kwargs)
        logvar = None if self.logvar is None else self.logvar.to(*args, **kwargs)
        return Gaussian(mean, logvar, check=False)

    def detach(self) -> Gaussian:
        """A copy cut from the autograd graph."""
        logvar = None if self.logvar is None else self.logvar.detach()
        return Gaussian(self.mean.detach(), logvar, check=False)

    def with_mean(self, mean: Tensor) -> Gaussian:
        """The same log-variance with a new mean of identical shape (e.g. normalised)."""
        if mean.shape != self.mean.shape:
            raise ValueError(f"with_mean expects shape {tuple(self.mean.shape)}, got {tuple(mean.shape)}")
        return Gaussian(mean, self.logvar, check=False)
