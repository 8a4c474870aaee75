"""Monte-Carlo scores over ``J`` samples per item (PCME eq.1-3, Table 1; SPEC §3).

- ``avg_l2``: ``-(1/(J K)) sum_{j,k} |z1_j - z2_k|``;
- ``match_prob``: ``(1/(J K)) sum_{j,k} sigmoid(-a |z1_j - z2_k| + b)`` with ``a > 0``.

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
product), followed by in-place square root, ``b - .``, sigmoid and a sum over the
``J x K`` pairs, on tiles of a few MiB reused across the block.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.similarity._primitives import DEFAULT_SQRT_EPS, safe_sqrt
from pcmr.similarity._registry import Similarity, register

# Tile of the no-grad path: captions per tile and the target floats of one
# [n*J, m*K] tile of distances (32 MiB in float32): large enough that few thread-pool hand-offs
# happen between the matrix product and the in-place passes (robust on a busy machine), and
# with enough image rows per tile (~170 at J = 7) for the matrix product to run near its
# full-size speed (measured on a quiet 2-core CPU at 1000 x 5000 x 512: 1.2 s vs 1.4 s with
# 2048-caption, 16 MiB tiles; see docs/benchmarks.md).
TILE_CAPTIONS = 1024
TILE_ELEMENTS = 2**23


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

    def row_bytes(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> int:
        j, k = _num_samples(options, "image_samples"), _num_samples(options, "caption_samples")
        return 3 * j * k * captions.num * images.mean.element_size()

    def prepare(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> _SampledState:
        centre = ((images.mean.sum(0) + captions.mean.sum(0)) / (images.num + captions.num)).detach()  # [D]
        z1 = _samples(images, options["image_samples"], options) - centre  # [N_img, J, D]
        z2 = _samples(captions, options["caption_samples"], options) - centre  # [N_cap, K, D]
        a, b = self.scale(options)
        inputs = (z1, z2, a, b, images.mean, images.logvar, captions.mean, captions.logvar)
        grad = torch.is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in inputs)
        if grad:
            return _SampledState(z1, z2, a, b)
        a2 = float(a) ** 2
        (n, j, dim), (m, k, _) = z1.shape, z2.shape
        x = z1.reshape(n * j, dim)
        image_aug = torch.cat([x, x.square().sum(1, keepdim=True), x.new_ones(n * j, 1)], 1)  # [N_img*J, D+2]
        tiles = []
        for c0 in range(0, m, TILE_CAPTIONS):
            c1 = min(c0 + TILE_CAPTIONS, m)
            y = z2[c0:c1].transpose(0, 1).reshape(k * (c1 - c0), dim)  # rows (k, c)
            aug = torch.cat([y * (-2.0 * a2), y.new_full((y.shape[0], 1), a2), y.square().sum(1, keepdim=True) * a2], 1)
            tiles.append((c0, c1, aug))  # [K*(c1-c0), D+2]
        tile_rows = max(1, TILE_ELEMENTS // (j * k * TILE_CAPTIONS))
        # keep only the augmented copies (shape-only views of the samples), not the samples
        shape_1, shape_2 = z1.new_zeros(()).expand(n, j, dim), z2.new_zeros(()).expand(m, k, dim)
        return _SampledState(shape_1, shape_2, float(a), float(b), image_aug, tuple(tiles), tile_rows)

    def block(self, state: _SampledState, rows: slice, out: Tensor | None) -> Tensor:
        (_, j, dim), (m, k, _) = state.image_samples.shape, state.caption_samples.shape
        if out is None:
            z1 = state.image_samples[rows]
            n = z1.shape[0]
            x, y = z1.reshape(n * j, dim), state.caption_samples.reshape(m * k, dim)
            sq = x.square().sum(1, keepdim=True) + y.square().sum(1) - 2.0 * (x @ y.T)  # [n*J, N_cap*K]
            values = self.transform(safe_sqrt(sq), state.a, state.b)
            return self.sign * values.view(n, j, m, k).mean(dim=(1, 3))  # [n, N_cap]
        floor = DEFAULT_SQRT_EPS * float(state.a) ** 2
        b = out.new_tensor(float(state.b))
        buf = out.new_empty(state.tile_rows * j * k * min(m, TILE_CAPTIONS))
        for r0 in range(rows.start, rows.stop, state.tile_rows):
            r1 = min(r0 + state.tile_rows, rows.stop)
            x = state.image_aug[r0 * j: r1 * j]  # type: ignore[index]  # [nt*J, D+2]
            for c0, c1, y in state.caption_tiles:
                tile = buf[: x.shape[0] * y.shape[0]].view(x.shape[0], y.shape[0])  # [nt*J, K*mt]
                torch.mm(x, y.T, out=tile)  # a^2 |z1 - z2|^2
                tile.clamp_min_(floor).sqrt_()  # a d
                self.transform_(tile, b)
                dest = out[r0 - rows.start: r1 - rows.start, c0:c1]
                torch.sum(tile.view(r1 - r0, j * k, c1 - c0), dim=1, out=dest)
        return out.mul_(self.sign / (j * k))

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        z1 = _samples(images, options["image_samples"], options)  # [N, J, D]
        z2 = _samples(captions, options["caption_samples"], options)  # [N, K, D]
        centre = captions.mean.detach().unsqueeze(1)  # [N, 1, D]: per-pair shift, distances unchanged
        z1, z2 = z1 - centre, z2 - centre
        sq = z1.square().sum(2, keepdim=True) + z2.square().sum(2).unsqueeze(1) - 2.0 * torch.bmm(z1, z2.transpose(1, 2))
        a, b = self.scale(options)
        return self.sign * self.transform(safe_sqrt(sq), a, b).mean(dim=(1, 2))  # [N]


@register
class AverageL2(_Sampled):
    """``-(1/(J K)) sum_{j,k} |z1_j - z2_k|`` (PCME Table 1, 'avg L2')."""

    name = "avg_l2"
    reference = "PCME Table 1 (average sampled distance)"
    sign = -1.0

    def transform_(self, scaled_distances: Tensor, b: Tensor) -> None:
        return None

    def transform(self, distances: Tensor, a: float | Tensor, b: float | Tensor) -> Tensor:
        return distances


@register
class MatchProbability(_Sampled):
    """``(1/(J K)) sum_{j,k} sigmoid(-a |z1_j - z2_k| + b)`` (PCME eq.2-3).

    PCME's release computes ``sigmoid(2(-a' d + b'))``: pass ``a = 2 a'``, ``b = 2 b'``.
    """

    name = "match_prob"
    reference = "PCME eq.2-3 (match probability)"
    options: dict[str, Any] = {**_Sampled.options, "a": 30.0, "b": 30.0}

    def check_options(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> None:
        super().check_options(images, captions, options)
        _check_scalar("a", options["a"])
        _check_scalar("b", options["b"])

    def scale(self, options: dict[str, Any]) -> tuple[float | Tensor, float | Tensor]:
        return options["a"], options["b"]

    def transform_(self, scaled_distances: Tensor, b: Tensor) -> None:
        torch.sub(b, scaled_distances, out=scaled_distances).sigmoid_()

    def transform(self, distances: Tensor, a: float | Tensor, b: float | Tensor) -> Tensor:
        return torch.sigmoid(b - a * distances)
