"""The registry of pairwise scores and the blocked driver behind ``pairwise``/``paired``.

Every score (formulas in ``docs/similarity.md``) is a :class:`Similarity` object registered under its name.
The driver validates inputs once, asks the score to ``prepare`` per-item features
(caption-side and image-side vectors, drawn samples), then fills the ``[N_img, N_cap]``
matrix in blocks of ``block_size`` image rows, so memory stays bounded and results do
not depend on the block size. Outside autograd each block is written in place into
the output; with autograd the blocks are concatenated.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.point_set import PointSet
from pcmr.registry import Registry
from pcmr.suggest import unknown_name

__all__ = ["AnnVectors", "SIMILARITIES", "Similarity", "register", "pairwise", "paired", "list_similarities", "get_similarity",
           "check_similarity_option_values"]

# Memory for one block's temporaries when ``block_size`` is not given (bytes).
DEFAULT_BLOCK_BYTES = 256 * 2**20



@dataclass(frozen=True)
class AnnVectors:
    """How a score that is exactly a nearest-neighbour problem on fixed vectors builds them
    (``pcmr.search.ann``, docs/search.md).

    Attributes:
        normalised: unit means under the inner product (cosine); otherwise the Euclidean distance.
        spread: what joins the means: ``"none"``, ``"std"`` (the standard deviations, 2-Wasserstein)
            or ``"variance"`` (the root of the summed variance on the gallery side, csd).
        squared: the score is minus the squared distance (csd), not minus the distance.
    """

    normalised: bool = False
    spread: str = "none"
    squared: bool = False


class Similarity(ABC):
    """Base of every score. Subclasses set the class attributes and implement
    ``prepare``, ``block`` and ``paired``.

    Attributes:
        name: registry name.
        sampled: True for Monte-Carlo scores over ``J`` samples per item.
        needs_image_variance / needs_caption_variance: whether point embeddings
            (``logvar=None``) are refused on that side.
        accepts_point_sets: whether ``pcmr.PointSet`` inputs (K points per item) are scored;
            every other score refuses them.
        options: accepted options and their defaults.
        learned_options: options whose value a training learns (their defaults are placeholders, so
            an evaluation without the learned values skips the score).
        reference: paper and equation.
        means_only: True when the score reads the means alone (never a log-variance), so the
            search re-scores it from the means of a gallery on disk.
        ann_score: the score of a nearest-neighbour index (``pcmr.search.ann.ANN_SCORES``) whose
            candidates the search re-scores with this score: the score itself when an ANN index
            ranks by it exactly (``ann_exact``), else the closest one that ranks by fixed vectors.
        ann_vectors: the vectors of a nearest-neighbour index that ranks by this score exactly
            (:class:`AnnVectors`); None for a score that no fixed vectors rank by.
        listing_rank: where the score is listed (``list_similarities``, ``pcmr list similarities``,
            the evaluation tables): by rank, then by name; the built-in scores follow the table of
            ``docs/similarity.md``, a score that sets none comes after them.
    """

    name: str = ""
    sampled: bool = False
    needs_image_variance: bool = False
    needs_caption_variance: bool = False
    accepts_point_sets: bool = False
    options: Mapping[str, Any] = {}
    learned_options: tuple[str, ...] = ()
    reference: str = ""
    means_only: bool = False
    ann_score: str = "wasserstein"
    ann_vectors: AnnVectors | None = None
    batched_candidates: bool = False  # candidate_scores has a batched form (the search's fast re-scoring)
    listing_rank: float = float("inf")

    @property
    def ann_exact(self) -> bool:
        """Whether an ANN index can rank by this score itself (its candidates' scores are exact)."""
        return self.ann_score == self.name

    @abstractmethod
    def prepare(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Any:
        """Per-item features computed once (image side and caption side)."""

    @abstractmethod
    def block(self, state: Any, rows: slice, out: Tensor | None) -> Tensor:
        """Scores of image rows ``rows`` against all captions, ``[n, N_cap]``. With ``out``
        (no autograd) the result is written into it."""

    @abstractmethod
    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        """Scores of aligned rows, ``[N]``."""

    def row_bytes(self, images: Gaussian, captions: Gaussian, options: dict[str, Any], grad: bool) -> int:
        """Bytes of temporaries per image row of a block (for the default block size), beyond
        the output row itself; ``grad`` tells whether the differentiable path will run."""
        return 4 * captions.num * images.mean.element_size()

    def candidate_scores(self, candidate_means: Tensor, query_means: Tensor, options: dict[str, Any]) -> Tensor | None:
        """Scores ``[Q, C]`` of each query ``query_means [Q, D]`` against its own candidates
        ``candidate_means [Q, C, D]`` in one batched call, for a score that reads the means alone and
        has such a form; None (the default) where the search re-scores candidates pair by pair."""
        return None

    def option_tensors(self, options: dict[str, Any]) -> list[Tensor]:
        """Tensors among the options (to decide whether autograd is needed)."""
        return [v for v in options.values() if isinstance(v, Tensor)]

    def check_options(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> None:
        """Validate option values (shapes, ranges); raise ValueError. Scores without
        value constraints accept every option value."""
        return None

    def __repr__(self) -> str:
        return (
            f"Similarity(name={self.name!r}, sampled={self.sampled}, "
            f"needs_image_variance={self.needs_image_variance}, "
            f"needs_caption_variance={self.needs_caption_variance})"
        )


#: every score, by name, listed by :attr:`Similarity.listing_rank`
SIMILARITIES: Registry[Similarity] = Registry("similarity", order=lambda score: score.listing_rank)


def register(cls: type[Similarity]) -> type[Similarity]:
    """Class decorator: instantiate and register a score under ``cls.name``."""
    SIMILARITIES.register(cls())
    return cls


def list_similarities() -> list[str]:
    """Names of every registered score, in the order of the table in ``docs/similarity.md`` (later additions at the end)."""
    return SIMILARITIES.names()


def get_similarity(name: str) -> Similarity:
    """The spec object of a score (``.name``, ``.sampled``, ``.needs_image_variance``,
    ``.needs_caption_variance``, ``.options``, ``.reference``)."""
    return SIMILARITIES.get(name)


def _resolve(
    name: str, images: Gaussian, captions: Gaussian, options: dict[str, Any], paired_rows: bool
) -> tuple[Similarity, dict[str, Any]]:
    spec = get_similarity(name)
    for arg, g in (("images", images), ("captions", captions)):
        if not isinstance(g, Gaussian):
            raise ValueError(f"{name}: {arg} must be a pcmr.Gaussian, got {type(g).__name__}")
        if isinstance(g, PointSet) and not spec.accepts_point_sets:
            raise ValueError(
                f"{name} scores one embedding per item, but {arg} is a PointSet of K={g.num_points} points per "
                f"item; scores that accept point sets: {_set_friendly()}"
            )
    if images.dim != captions.dim:
        raise ValueError(
            f"{name}: images and captions must share the dimension D, got {images.dim} and {captions.dim}"
        )
    if images.dtype != captions.dtype or images.device != captions.device:
        raise ValueError(
            f"{name}: images and captions must share dtype and device, got ({images.dtype}, {images.device})"
            f" and ({captions.dtype}, {captions.device})"
        )
    if paired_rows and images.num != captions.num:
        raise ValueError(f"{name}: paired scores need as many images as captions, got {images.num} and "
                         f"{captions.num}")
    if spec.needs_image_variance and images.is_point:
        raise ValueError(f"{name} needs image variances, but images is a point embedding (logvar=None); "
                         f"scores that accept points: {_point_friendly('image')}")
    if spec.needs_caption_variance and captions.is_point:
        raise ValueError(f"{name} needs caption variances, but captions is a point embedding (logvar=None); "
                         f"scores that accept points: {_point_friendly('caption')}")
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        raise ValueError(f"{name}: " + unknown_name("option", unknown, sorted(spec.options)))
    resolved = {**spec.options, **options}
    spec.check_options(images, captions, resolved)
    return spec, resolved


def check_similarity_option_values(name: str, options: dict[str, Any]) -> None:
    """Check option values of similarity ``name`` before any embedding exists (e.g. a command line's
    ``--option match_prob.a=abc``): unknown names and values the score refuses raise ValueError. Options
    whose check needs the embeddings (given samples) are checked when scoring."""
    spec = get_similarity(name)
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        raise ValueError(f"{name}: " + unknown_name("option", unknown, sorted(spec.options)))
    given = {k: v for k, v in options.items() if k not in ("image_samples", "caption_samples")}
    point = Gaussian(torch.zeros(1, 1), torch.zeros(1, 1))  # stands in for the embeddings
    spec.check_options(point, point, {**spec.options, **given})


def _set_friendly() -> list[str]:
    return [n for n, s in SIMILARITIES.items() if s.accepts_point_sets]


def _point_friendly(side: str) -> list[str]:
    attr = f"needs_{side}_variance"
    return [n for n, s in SIMILARITIES.items() if not getattr(s, attr)]


def _needs_grad(tensors: list[Tensor | None]) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def pairwise(
    name: str, images: Gaussian, captions: Gaussian, *, block_size: int | None = None, **options: Any
) -> Tensor:
    """Score matrix ``S[i, c]`` between every image and every caption; higher is
    more similar.

    Args:
        name: one of :func:`list_similarities`.
        images: ``Gaussian`` with ``N_img`` rows; captions: ``Gaussian`` with ``N_cap`` rows.
        block_size: image rows per block. ``None`` picks the largest block whose
            temporaries fit in ``DEFAULT_BLOCK_BYTES`` (256 MiB); a score whose blocks need no
            temporaries beyond the output (one-expansion closed forms, sampled scores without
            autograd) then runs as one block. Results do not depend on it.
        **options: score options (e.g. ``num_samples``, ``generator``, ``image_samples``,
            ``caption_samples``, ``a``, ``b``); unknown options raise ``ValueError``.

    Returns:
        ``[N_img, N_cap]`` tensor in the inputs' dtype and device; differentiable when an
        input requires grad.
    """
    spec, opts = _resolve(name, images, captions, options, paired_rows=False)
    n, m = images.num, captions.num
    grad = _needs_grad([images.mean, images.logvar, captions.mean, captions.logvar, *spec.option_tensors(opts)])
    if block_size is None:
        block_size = max(1, DEFAULT_BLOCK_BYTES // max(1, spec.row_bytes(images, captions, opts, grad)))
    elif isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"{name}: block_size must be a positive int (image rows per block), got {block_size!r}")
    if n == 0 or m == 0:
        return images.mean.new_zeros(n, m)
    state = spec.prepare(images, captions, opts)
    starts = range(0, n, block_size)
    if grad:
        return torch.cat([spec.block(state, slice(i, min(i + block_size, n)), None) for i in starts], 0)
    out = images.mean.new_empty(n, m)  # [N_img, N_cap]
    with torch.no_grad():
        for i in starts:
            j = min(i + block_size, n)
            spec.block(state, slice(i, j), out[i:j])
    return out


def paired(name: str, images: Gaussian, captions: Gaussian, **options: Any) -> Tensor:
    """Scores of aligned rows ``S[k] = score(images[k], captions[k])``, ``[N]``,
    differentiable; used by the losses. Options as in :func:`pairwise`."""
    spec, opts = _resolve(name, images, captions, options, paired_rows=True)
    return spec.paired(images, captions, opts)

