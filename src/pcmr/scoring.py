"""Score matrices and re-ranked top-k lists, shared by the evaluation and the search (both import this
module, never each other).

- :func:`score_matrix`: ``pcmr.similarity.pairwise`` with a fixed-seed generator for sampled scores
  (so an evaluation is reproducible) and no autograd.
- :func:`unsupported_reason`: why a model's embeddings cannot be scored with a similarity (point
  embeddings for a score that needs variances; match_prob without learned ``a, b``), or None.
- :func:`rerank_topk`: the top-k list of every query under a named re-ranker of
  ``pcmr.inference`` (a re-weighting such as ``nns``/``is``/``csls``, then top-k or a matching);
  :func:`reranked_topk` the same with the re-ranker object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.inference import Reranker, get_reranker
from pcmr.similarity import get_similarity, pairwise
from pcmr.similarity.common_draws import common_samples
from pcmr.suggest import unknown_name

__all__ = ["score_matrix", "unsupported_reason", "check_similarity_supported", "rerank_topk", "get_method",
           "check_names", "DEFAULT_SEED"]

DEFAULT_SEED = 0


def check_names(kind: str, names: Sequence[str], accepted: list[str]) -> list[str]:
    """Validate requested names (``"all"`` expands to ``accepted``); ValueError listing the accepted ones."""
    names = list(names)
    if names == ["all"]:
        return list(accepted)
    unknown = [n for n in names if n not in accepted]
    if unknown:
        raise ValueError(unknown_name(kind, unknown, accepted) + " (or all)")
    if not names:
        raise ValueError(f"at least one {kind} is needed; accepted: {', '.join(accepted)}")
    return list(dict.fromkeys(names))


def unsupported_reason(name: str, images: Gaussian, captions: Gaussian,
                       options: dict[str, Any] | None = None) -> str | None:
    """Why ``name`` cannot score these embeddings (a sentence), or None when it can."""

    spec = get_similarity(name)
    if spec.needs_image_variance and images.is_point:
        return "needs image variances; the model's image embeddings are points"
    if spec.needs_caption_variance and captions.is_point:
        return "needs caption variances; the model's caption embeddings are points"
    missing = [key for key in spec.learned_options if key not in (options or {})]
    if missing:
        return (f"needs the learned parameter(s) {', '.join(missing)}, which this model's training did not "
                f"learn (they come from the match-probability loss; pass them as similarity options)")
    return None


def check_similarity_supported(name: str, images: Gaussian, captions: Gaussian,
                               options: dict[str, Any] | None = None) -> None:
    """Raise ValueError when :func:`unsupported_reason` gives a reason."""
    reason = unsupported_reason(name, images, captions, options)
    if reason is not None:
        raise ValueError(f"similarity {name!r} cannot be used here: {reason}")


def score_matrix(name: str, images: Gaussian, captions: Gaussian, options: dict[str, Any] | None = None,
                 *, seed: int = DEFAULT_SEED, block_size: int | None = None, common: bool = False) -> Tensor:
    """``S [N_img, N_cap]`` of similarity ``name`` (higher = more similar), without autograd.

    Sampled scores draw their samples from a generator seeded with ``seed`` on the inputs' device
    (one stream for the whole matrix), unless ``options`` carries its own ``generator`` or samples.
    ``common=True``: every item of a side uses that side's common draws from ``seed``
    (:func:`pcmr.similarity.common_draws.common_samples`), so a pair's score does not depend on the other
    items of the call (what the search needs: a candidate list scores a pair as the whole gallery does).
    """

    opts = dict(options or {})
    spec = get_similarity(name)
    if spec.sampled and "generator" not in opts and "image_samples" not in opts:
        if common:
            num = int(opts.get("num_samples", spec.options["num_samples"]))
            opts["image_samples"] = common_samples(images.detach(), num, "image", seed)
            opts["caption_samples"] = common_samples(captions.detach(), num, "caption", seed)
        else:
            opts["generator"] = torch.Generator(device=images.device).manual_seed(seed)
    with torch.no_grad():
        return pairwise(name, images.detach(), captions.detach(), block_size=block_size, **opts)


def get_method(name: str, params: dict[str, Any] | None = None, *, size: tuple[int, ...] | None = None) -> Any:
    """``pcmr.inference.get_reranker(name, **params)``, ``fitted`` to ``size = (Q, G)`` when given (CSLS's
    neighbourhood clamped to ``min(Q, G)`` so tiny galleries still work). ValueError for an unknown
    name/parameter."""

    method = get_reranker(name, **(params or {}))
    return method if size is None else method.fitted(size)


def rerank_topk(name: str, scores: Tensor, k: int, **params: Any) -> tuple[Tensor, Tensor]:
    """Top-k lists of every query under re-ranker ``name`` (queries in rows of ``scores [Q, G]``);
    ``params`` as ``pcmr.inference.get_reranker`` takes them (``beta``, ``csls_k``, ``lam``, ``backend``).

    Returns ``(values [Q, k], indices [Q, k])``, the order of every pair the search returns: ``values``
    are the re-weighted scores of the listed items (for matchings, in acceptance order, not necessarily
    sorted).
    """
    _check_k(scores, k)
    return reranked_topk(get_reranker(name, **params), scores, k)


def reranked_topk(reranker: Reranker, scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """:func:`rerank_topk` with the re-ranker object itself (its parameters already set), ``fitted`` to
    the shape of ``scores [Q, G]``: ``(values [Q, k], indices [Q, k])``."""
    _check_k(scores, k)
    method = reranker.fitted(tuple(scores.shape))
    rescored = method.rescore(scores)  # [Q, G]
    indices = method.topk_rescored(rescored, k)  # [Q, k]
    return rescored.gather(1, indices), indices


def _check_k(scores: Tensor, k: int) -> None:
    if not 1 <= k <= scores.shape[1]:
        raise ValueError(f"k must be in [1, {scores.shape[1]}] (the gallery size), got {k}")
