"""Monte-Carlo scores over ``J`` samples per item (PCME eq.1-3, Table 1).

- ``avg_l2``: ``-(1/(J K)) sum_{j,k} |z1_j - z2_k|``;
- ``match_prob``: ``log((1/(J K)) sum_{j,k} sigmoid(-a |z1_j - z2_k| + b))`` with ``a > 0``: the log of
  the match probability, computed as a log-sum-exp over log-sigmoids minus ``log(J K)``. The
  probability itself underflows in float32 once distances are large (``sigmoid(b - a d)`` below
  ``1e-45`` for ``a d - b > 103``: every score 0 and every ranking a tie); its log never does and ranks
  the same. ``exp`` of the score is the probability.

PCME's released code evaluates ``sigmoid(2 (-a' d + b'))`` (a two-way softmax over
``(l, -l)``); that is this family with ``a = 2 a'`` and ``b = 2 b'``. The defaults
``a = b = 30`` are PCME's COCO initialisation ``a' = b' = 15`` mapped this way (CUB:
``a' = b' = 5`` -> ``a = b = 10``); at test time pass the trained values.

Samples are ``z = mean + std * eps`` (:meth:`pcmr.Gaussian.sample`), images first and
then captions from the same ``generator``, or pre-drawn ``image_samples [N_img, J, D]``
and ``caption_samples [N_cap, K, D]`` for reproducible scores. Point embeddings repeat
their mean.

Pairwise blocks: the squared distances of all ``J x K`` sample pairs of a tile of
images x captions come from ONE matrix product of augmented samples
``[z, |z|^2, 1] . [-2 a^2 z', a^2, a^2 |z'|^2]`` (the norms and ``a^2`` ride inside the
product), followed by in-place square root, ``b - .``, sigmoid (log-sigmoid for ``match_prob``) and a sum
(log-sum-exp) over the ``J x K`` pairs, on tiles of a few MiB reused across the block.

Fused tiles (opt-in, ``match_prob`` only): with ``PCMR_FUSED_SCORES=cuda`` (on CUDA devices) or ``=1``
(every device) the work after each tile's matrix product (clamp, square root, ``b - .``, log-sigmoid
and the log-sum-exp over the ``J x K`` pairs) runs as ONE kernel made by ``torch.compile`` (Triton
on CUDA, C++ on the CPU; the first call compiles, for seconds), instead of one pass over the tile per
operation. Same values as the eager path to float32 rounding (tested to 1e-5).
"""

from __future__ import annotations

import functools
import math
import os
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.similarity._primitives import DEFAULT_SQRT_EPS, rowwise_dot, safe_sqrt
from pcmr.similarity._registry import Similarity, register

# Tile of the no-grad path: captions per tile and the target floats of one [n*J, m*K] tile
# of distances (16 MiB in float32, ~330 image rows at J = K = 7). Chosen by interleaved timings
# against the [N*J, D] x [D, M*K] product on a quiet 2-core CPU at 1000 x 5000 x 512
# (median ratio 1.33x vs 1.43x for 1024-caption, 32 MiB tiles; see docs/benchmarks.md).
TILE_CAPTIONS = 512
TILE_ELEMENTS = 2**22


#: environment variable choosing the fused (compiled) tile reduction of match_prob: 0 (default), cuda, 1
FUSED_SCORES_ENV = "PCMR_FUSED_SCORES"


def fused_tiles_enabled(device: torch.device) -> bool:
    """Whether ``match_prob``'s no-grad tiles on ``device`` use the compiled reduction
    (:data:`FUSED_SCORES_ENV`: ``0``/unset: never; ``cuda``: on CUDA devices; ``1``: on every device)."""
    value = os.environ.get(FUSED_SCORES_ENV, "0").strip().lower()
    if value in ("", "0", "off", "false", "no"):
        return False
    if value in ("1", "on", "true", "yes"):
        return True
    if value == "cuda":
        return device.type == "cuda"
    raise ValueError(f"{FUSED_SCORES_ENV}={value!r}: expected 0 (eager tiles, the default), cuda (compiled "
                     f"tiles on CUDA devices) or 1 (compiled tiles on every device)")


def _log_match_tile(tile: Tensor, floor: Tensor, b: Tensor, rows: int, pairs: int) -> Tensor:
    """``[rows, mt]``: ``logsumexp_{j,k} logsigmoid(b - sqrt(max(tile, floor)))`` of one tile
    ``[rows * J, K * mt]`` of ``a^2 |z1 - z2|^2`` (rows (i, j), columns (k, c); ``pairs = J K``); the
    eager path's steps as one function, for ``torch.compile``."""
    values = F.logsigmoid(b - tile.clamp_min(floor).sqrt())
    return torch.logsumexp(values.view(rows, pairs, -1), dim=1)


@functools.lru_cache(maxsize=1)
def _compiled_log_match_tile() -> Callable[..., Tensor]:
    return torch.compile(_log_match_tile, dynamic=True)


def _fused_log_match(tile: Tensor, floor: Tensor, b: Tensor, rows: int, pairs: int, dest: Tensor) -> None:
    """``dest [rows, mt] <-`` :func:`_log_match_tile` compiled; a clear error when compiling fails."""
    try:
        dest.copy_(_compiled_log_match_tile()(tile, floor, b, rows, pairs))
    except Exception as exc:  # inductor / Triton / C compiler problems surface here, on first use
        raise RuntimeError(f"{FUSED_SCORES_ENV}: the compiled match_prob tile failed on {tile.device} "
                           f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]}); unset "
                           f"{FUSED_SCORES_ENV} to use the eager path") from exc


@dataclass(frozen=True)
class _SampledState:
    image_samples: Tensor  # [N_img, J, D] centred (shape only on the no-grad path)
    caption_samples: Tensor  # [N_cap, K, D] centred (shape only on the no-grad path)
    a: float | Tensor
    b: float | Tensor
    # no-grad path only:
    image_aug: Tensor | None = None  # [N_img * J, D + 2] rows (i, j)
    caption_tiles: tuple[tuple[int, int, Tensor], ...] = ()  # (c0, c1, [K * (c1-c0), D + 2] rows (k, c))
    tile_rows: int = 1  # images per tile


def _check_scalar(name: str, value: Any) -> None:
    if isinstance(value, Tensor):
        if value.dim() != 0 or not value.is_floating_point():
            raise ValueError(f"match_prob: {name} must be a float or a 0-dim floating tensor, got shape "
                             f"{tuple(value.shape)} dtype {value.dtype}")
        value = float(value.detach())
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"match_prob: {name} must be a float or a 0-dim tensor, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"match_prob: {name} must be finite, got {value}")
    if name == "a" and value <= 0:
        raise ValueError(f"match_prob: a must be > 0 (sigmoid(-a d + b) decreases with distance), got {value}")


def _samples(g: Gaussian, given: Tensor | None, options: dict[str, Any]) -> Tensor:
    if given is not None:
        return given
    return g.sample(options["num_samples"], generator=options["generator"])


def _needs_grad(images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> bool:
    """Whether the result must carry autograd (then the differentiable path is taken)."""
    inputs = (images.mean, images.logvar, captions.mean, captions.logvar, *options.values())
    return torch.is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in inputs)


def _noise(g: Gaussian, given: Tensor | None, num: int, options: dict[str, Any]) -> Tensor | None:
    """``eps [N, J, D]`` as :meth:`Gaussian.sample` would draw it; None when samples are given or
    ``g`` is a point embedding (which draws nothing)."""
    if given is not None or g.logvar is None:
        return None
    return g.noise(num, options["generator"])


def _write_centred(out: Tensor, mean: Tensor, std: Tensor | None, given: Tensor | None, eps: Tensor | None,
                   centre: Tensor, sample_axis: int) -> None:
    """``out <- z - centre`` with ``z`` the given samples or ``mean + std * eps`` (bitwise as
    :meth:`Gaussian.sample`; ``mean`` alone for a point embedding). ``mean``/``std`` are
    ``[n, D]`` (``std`` may be ``[n, 1]``), ``given``/``eps`` ``[n, J, D]``, and ``out`` is
    ``[n, J, D]`` (``sample_axis=1``) or ``[J, n, D]`` (``sample_axis=0``)."""
    mean = mean.unsqueeze(sample_axis)  # broadcast over the samples
    if given is not None:
        torch.sub(given if sample_axis == 1 else given.transpose(0, 1), centre, out=out)
    elif eps is None or std is None:
        out.copy_(mean.expand_as(out)).sub_(centre)
    else:
        eps = eps if sample_axis == 1 else eps.transpose(0, 1)
        torch.addcmul(mean, std.unsqueeze(sample_axis), eps, out=out).sub_(centre)


def _num_samples(options: dict[str, Any], key: str) -> int:
    given = options[key]
    return options["num_samples"] if given is None else given.shape[1]


class _Sampled(Similarity):
    sampled = True
    options: dict[str, Any] = {"num_samples": 7, "generator": None, "image_samples": None, "caption_samples": None}

    def check_options(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> None:
        num = options["num_samples"]
        if isinstance(num, bool) or not isinstance(num, int) or num < 1:
            raise ValueError(f"{self.name}: num_samples must be a positive int, got {num!r}")
        gen = options["generator"]
        if gen is not None and not isinstance(gen, torch.Generator):
            raise ValueError(f"{self.name}: generator must be a torch.Generator or None, got {type(gen).__name__}")
        for key, g in (("image_samples", images), ("caption_samples", captions)):
            s = options[key]
            if s is None:
                continue
            if not isinstance(s, Tensor) or s.dim() != 3 or s.shape[0] != g.num or s.shape[2] != g.dim:
                shape = tuple(s.shape) if isinstance(s, Tensor) else type(s).__name__
                raise ValueError(f"{self.name}: {key} must be a tensor of shape [{g.num}, J, {g.dim}] "
                                 f"([N, J, D] of the matching Gaussian), got {shape}")
            if s.dtype != g.dtype or s.device != g.device:
                raise ValueError(f"{self.name}: {key} must have dtype {g.dtype} on {g.device}, got "
                                 f"{s.dtype} on {s.device}")
            if s.shape[1] == 0:
                raise ValueError(f"{self.name}: {key} must hold at least one sample per item (J >= 1)")

    def scale(self, options: dict[str, Any]) -> tuple[float | Tensor, float | Tensor]:
        """``(a, b)`` of the per-pair score ``f(a d, b)``; ``avg_l2`` uses ``a = 1``."""
        return 1.0, 0.0

    @abstractmethod
    def transform_(self, scaled_distances: Tensor, b: Tensor) -> None:
        """In place: ``a d`` -> per-pair score before averaging (no autograd)."""

    @abstractmethod
    def transform(self, distances: Tensor, a: float | Tensor, b: float | Tensor) -> Tensor:
        """Differentiable per-pair score of distances ``d``."""

    sign = 1.0  # multiplies the mean of the per-pair values (avg_l2: -1)
    #: whether the no-grad tiles may use the compiled reduction (:func:`fused_tiles_enabled`)
    fusable = False
    #: True when the per-pair values are logs and the score is the log of their mean (a log-sum-exp
    #: over the J x K pairs minus log(J K)) instead of their mean.
    log_mean = False

    def _reduce(self, values: Tensor, dims: tuple[int, ...]) -> Tensor:
        """The score from per-pair values over the sample axes ``dims`` (differentiable paths)."""
        if self.log_mean:
            count = math.prod(values.shape[d] for d in dims)
            return self.sign * (torch.logsumexp(values, dim=dims) - math.log(count))
        return self.sign * values.mean(dim=dims)

    def row_bytes(self, images: Gaussian, captions: Gaussian, options: dict[str, Any], grad: bool) -> int:
        if not grad:  # the no-grad path works in fixed-size tiles, whatever the block size
            return 0
        j, k = _num_samples(options, "image_samples"), _num_samples(options, "caption_samples")
        return 3 * j * k * captions.num * images.mean.element_size()

    def prepare(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> _SampledState:
        centre = ((images.mean.sum(0) + captions.mean.sum(0)) / (images.num + captions.num)).detach()  # [D]
        a, b = self.scale(options)
        given_1, given_2 = options["image_samples"], options["caption_samples"]
        if _needs_grad(images, captions, options):
            z1 = _samples(images, given_1, options) - centre  # [N_img, J, D]
            z2 = _samples(captions, given_2, options) - centre  # [N_cap, K, D]
            return _SampledState(z1, z2, a, b)
        # No autograd: write the centred samples straight into the augmented operands of the
        # tile products (one pass each instead of sample -> centre -> copy -> scale).
        j, k = _num_samples(options, "image_samples"), _num_samples(options, "caption_samples")
        eps_1 = _noise(images, given_1, j, options)  # images first, then captions (as Gaussian.sample)
        eps_2 = _noise(captions, given_2, k, options)
        a2, (n, m, dim) = float(a) ** 2, (images.num, captions.num, images.dim)
        image_aug = images.mean.new_empty(n * j, dim + 2)  # rows (i, j): [-2 a^2 z1, a^2 |z1|^2, a^2]
        z1 = image_aug[:, :dim]
        std_1, std_2 = (None if g.logvar is None else g.std for g in (images, captions))
        _write_centred(z1.view(n, j, dim), images.mean, std_1, given_1, eps_1, centre, sample_axis=1)
        rowwise_dot(z1, z1, out=image_aug[:, dim]).mul_(a2)
        image_aug[:, dim + 1] = a2
        z1.mul_(-2.0 * a2)
        tiles = []
        for c0 in range(0, m, TILE_CAPTIONS):
            c1 = min(c0 + TILE_CAPTIONS, m)
            aug = captions.mean.new_empty(k * (c1 - c0), dim + 2)  # rows (k, c): [z2, 1, |z2|^2]
            z2 = aug[:, :dim]
            _write_centred(z2.view(k, c1 - c0, dim), captions.mean[c0:c1], None if std_2 is None else std_2[c0:c1],
                           None if given_2 is None else given_2[c0:c1], None if eps_2 is None else eps_2[c0:c1],
                           centre, sample_axis=0)
            aug[:, dim] = 1.0
            rowwise_dot(z2, z2, out=aug[:, dim + 1])
            tiles.append((c0, c1, aug))
        tile_rows = max(1, TILE_ELEMENTS // (j * k * TILE_CAPTIONS))
        # keep only the augmented copies (shape-only views stand in for the samples)
        shape_1, shape_2 = centre.new_zeros(()).expand(n, j, dim), centre.new_zeros(()).expand(m, k, dim)
        return _SampledState(shape_1, shape_2, float(a), float(b), image_aug, tuple(tiles), tile_rows)

    def block(self, state: _SampledState, rows: slice, out: Tensor | None) -> Tensor:
        (_, j, dim), (m, k, _) = state.image_samples.shape, state.caption_samples.shape
        if out is None:
            z1 = state.image_samples[rows]
            n = z1.shape[0]
            x, y = z1.reshape(n * j, dim), state.caption_samples.reshape(m * k, dim)
            sq = x.square().sum(1, keepdim=True) + y.square().sum(1) - 2.0 * (x @ y.T)  # [n*J, N_cap*K]
            values = self.transform(safe_sqrt(sq), state.a, state.b)
            return self._reduce(values.view(n, j, m, k), (1, 3))  # [n, N_cap]
        floor = DEFAULT_SQRT_EPS * float(state.a) ** 2
        b = out.new_tensor(float(state.b))
        fused = self.fusable and fused_tiles_enabled(out.device)
        floor_tensor = out.new_tensor(floor)
        buf = out.new_empty(state.tile_rows * j * k * min(m, TILE_CAPTIONS))
        for r0 in range(rows.start, rows.stop, state.tile_rows):
            r1 = min(r0 + state.tile_rows, rows.stop)
            x = state.image_aug[r0 * j: r1 * j]  # type: ignore[index]  # [nt*J, D+2]
            for c0, c1, y in state.caption_tiles:
                tile = buf[: x.shape[0] * y.shape[0]].view(x.shape[0], y.shape[0])  # [nt*J, K*mt]
                torch.mm(x, y.T, out=tile)  # a^2 |z1 - z2|^2
                dest = out[r0 - rows.start: r1 - rows.start, c0:c1]
                if fused:  # clamp, sqrt, log-sigmoid and log-sum-exp in one compiled kernel
                    _fused_log_match(tile, floor_tensor, b, r1 - r0, j * k, dest)
                    continue
                tile.clamp_min_(floor).sqrt_()  # a d
                self.transform_(tile, b)
                pairs = tile.view(r1 - r0, j * k, c1 - c0)
                if self.log_mean:  # log-sum-exp in place: max, exp of the shifted values, sum, log
                    top = pairs.amax(dim=1, keepdim=True)  # [nt, 1, mt]
                    torch.sum(pairs.sub_(top).exp_(), dim=1, out=dest)
                    dest.log_().add_(top.squeeze(1))
                else:
                    torch.sum(pairs, dim=1, out=dest)
        if self.log_mean:
            return out.sub_(math.log(j * k)).mul_(self.sign)
        return out.mul_(self.sign / (j * k))

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        z1 = _samples(images, options["image_samples"], options)  # [N, J, D]
        z2 = _samples(captions, options["caption_samples"], options)  # [N, K, D]
        centre = captions.mean.detach().unsqueeze(1)  # [N, 1, D]: per-pair shift, distances unchanged
        z1, z2 = z1 - centre, z2 - centre
        sq = z1.square().sum(2, keepdim=True) + z2.square().sum(2).unsqueeze(1) - 2.0 * torch.bmm(z1, z2.transpose(1, 2))
        a, b = self.scale(options)
        return self._reduce(self.transform(safe_sqrt(sq), a, b), (1, 2))  # [N]


@register
class AverageL2(_Sampled):
    """``-(1/(J K)) sum_{j,k} |z1_j - z2_k|`` (PCME Table 1, 'avg L2')."""

    name = "avg_l2"
    listing_rank = 13
    ann_score = "csd"  # ranked by the expected squared distance of two samples
    reference = "PCME Table 1 (average sampled distance)"
    sign = -1.0

    def transform_(self, scaled_distances: Tensor, b: Tensor) -> None:
        return None

    def transform(self, distances: Tensor, a: float | Tensor, b: float | Tensor) -> Tensor:
        return distances


@register
class MatchProbability(_Sampled):
    """``log((1/(J K)) sum_{j,k} sigmoid(-a |z1_j - z2_k| + b))``, the log of PCME's match probability
    (PCME eq.2-3), as ``logsumexp_{j,k} logsigmoid(b - a d_jk) - log(J K)`` so that it never underflows.

    PCME's release computes ``sigmoid(2(-a' d + b'))``: pass ``a = 2 a'``, ``b = 2 b'``.
    """

    name = "match_prob"
    listing_rank = 14
    ann_score = "csd"  # a decreasing function of the sample distances: ranked like their expected square
    reference = "PCME eq.2-3 (match probability)"
    options: dict[str, Any] = {**_Sampled.options, "a": 30.0, "b": 30.0}
    log_mean = True
    fusable = True
    learned_options = ("a", "b")  # learned by the match-probability loss (pcmr.losses.match_scale)

    def check_options(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> None:
        super().check_options(images, captions, options)
        _check_scalar("a", options["a"])
        _check_scalar("b", options["b"])

    def scale(self, options: dict[str, Any]) -> tuple[float | Tensor, float | Tensor]:
        return options["a"], options["b"]

    def transform_(self, scaled_distances: Tensor, b: Tensor) -> None:
        torch.sub(b, scaled_distances, out=scaled_distances)
        F.logsigmoid(scaled_distances, out=scaled_distances)  # type: ignore[call-arg]  # out= is accepted

    def transform(self, distances: Tensor, a: float | Tensor, b: float | Tensor) -> Tensor:
        return F.logsigmoid(b - a * distances)
