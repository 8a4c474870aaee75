"""Score matrices and re-ranked top-k lists, shared by the evaluation and the gallery index.

- :func:`score_matrix`: ``pcmr.similarity.pairwise`` with a fixed-seed generator for sampled scores
  (so an evaluation is reproducible) and no autograd.
- :func:`unsupported_reason`: why a model's embeddings cannot be scored with a similarity (point
  embeddings for a score that needs variances; match_prob without learned ``a, b``), or None.
- :func:`rerank_topk`: the top-k list of every query under a named re-ranker (SPEC §5). A name is
  a weighting (``nns``, ``is``, ``csls``) optionally followed by ``+`` and a matching (``gm``,
  ``rgm``); ``gm`` and ``rgm`` alone mean NNS weighting.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian

__all__ = ["score_matrix", "unsupported_reason", "check_similarity_supported", "rerank_topk",
           "reweight", "parse_reranker", "check_names", "WEIGHTINGS", "MATCHINGS", "DEFAULT_SEED"]

DEFAULT_SEED = 0
WEIGHTINGS = ("nns", "is", "csls")
MATCHINGS = ("gm", "rgm")
#: options that need a learned value to be meaningful, per similarity
LEARNED_OPTIONS = {"match_prob": ("a", "b")}


def check_names(kind: str, names: list[str] | tuple[str, ...], accepted: list[str]) -> list[str]:
    """Validate requested names (``"all"`` expands to ``accepted``); ValueError listing the accepted ones."""
    names = list(names)
    if names == ["all"]:
        return list(accepted)
    unknown = [n for n in names if n not in accepted]
    if unknown:
        raise ValueError(f"unknown {kind} name(s) {unknown}; accepted: {', '.join(accepted)} (or 'all')")
    if not names:
        raise ValueError(f"at least one {kind} is needed; accepted: {', '.join(accepted)}")
    return list(dict.fromkeys(names))


def unsupported_reason(name: str, images: Gaussian, captions: Gaussian,
                       options: dict[str, Any] | None = None) -> str | None:
    """Why ``name`` cannot score these embeddings (a sentence), or None when it can."""
    from pcmr.similarity import get_similarity

    spec = get_similarity(name)
    if spec.needs_image_variance and images.is_point:
        return "needs image variances; the model's image embeddings are points"
    if spec.needs_caption_variance and captions.is_point:
        return "needs caption variances; the model's caption embeddings are points"
    missing = [key for key in LEARNED_OPTIONS.get(name, ()) if key not in (options or {})]
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
                 *, seed: int = DEFAULT_SEED, block_size: int | None = None) -> Tensor:
    """``S [N_img, N_cap]`` of similarity ``name`` (higher = more similar), without autograd.

    Sampled scores draw their samples from a generator seeded with ``seed`` on the inputs' device,
    unless ``options`` carries its own ``generator`` or samples.
    """
    from pcmr.similarity import get_similarity, pairwise

    opts = dict(options or {})
    spec = get_similarity(name)
    if spec.sampled and "generator" not in opts and "image_samples" not in opts:
        opts["generator"] = torch.Generator(device=images.device).manual_seed(seed)
    with torch.no_grad():
        return pairwise(name, images.detach(), captions.detach(), block_size=block_size, **opts)


def parse_reranker(name: str) -> tuple[str, str | None]:
    """``"csls+rgm"`` -> ``("csls", "rgm")``; ``"rgm"`` -> ``("nns", "rgm")``; ``"is"`` -> ``("is", None)``."""
    parts = name.split("+") if isinstance(name, str) else []
    accepted = list(WEIGHTINGS) + list(MATCHINGS) + [f"{w}+{m}" for w in WEIGHTINGS[1:] for m in MATCHINGS]
    if len(parts) == 1 and parts[0] in WEIGHTINGS:
        return parts[0], None
    if len(parts) == 1 and parts[0] in MATCHINGS:
        return "nns", parts[0]
    if len(parts) == 2 and parts[0] in WEIGHTINGS and parts[1] in MATCHINGS:
        return parts[0], parts[1]
    raise ValueError(f"unknown re-ranker {name!r}; accepted: {', '.join(accepted)}")


def reweight(weighting: str, scores: Tensor, *, beta: float = 30.0, csls_k: int = 10) -> Tensor:
    """Apply a score re-weighting to ``scores [Q, G]`` (queries in rows): ``nns`` (identity), ``is``
    (inverted softmax, HAL/RGM eq.5) or ``csls`` (HAL/RGM eq.6). Returns ``[Q, G]``."""
    if weighting == "nns":
        return scores
    if weighting == "is":
        from pcmr.inference import inverted_softmax

        return inverted_softmax(scores, beta=beta)
    if weighting == "csls":
        from pcmr.inference import csls

        return csls(scores, k=min(csls_k, scores.shape[0], scores.shape[1]))
    raise ValueError(f"unknown weighting {weighting!r}; accepted: {', '.join(WEIGHTINGS)}")


def _stable_topk(scores: Tensor, k: int) -> Tensor:
    """Indices of the k best items per row, ties to the lower index (the metrics' tie rule)."""
    return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]


def matched_topk(matching: str | None, scores: Tensor, k: int, *, lam: float | None = None) -> Tensor:
    """Top-k lists ``[Q, k]`` of already re-weighted ``scores [Q, G]`` under a matching.

    ``None``: plain top-k. ``rgm``: relaxed greedy matching with item capacity ``round(lam * k)``
    (``lam=None`` means infinity, i.e. plain top-k). ``gm``: the one-to-one greedy match first, then
    the row's other items in score order (rows left unmatched: score order).
    """
    if matching is None or (matching == "rgm" and lam is None):
        return _stable_topk(scores, k)
    if matching == "rgm":
        from pcmr.inference import relaxed_greedy_matching

        return relaxed_greedy_matching(scores, k, lam)
    if matching == "gm":
        from pcmr.inference import greedy_matching

        match = greedy_matching(scores)  # [Q], -1 = unmatched
        order = _stable_topk(scores, scores.shape[1])  # [Q, G]
        matched = match >= 0
        first = torch.where(matched, match, order[:, 0])  # [Q]
        rest = order[order != first.unsqueeze(1)].view(scores.shape[0], -1)  # [Q, G-1]
        return torch.cat([first.unsqueeze(1), rest], dim=1)[:, :k]
    raise ValueError(f"unknown matching {matching!r}; accepted: {', '.join(MATCHINGS)}")


def rerank_topk(name: str, scores: Tensor, k: int, *, beta: float = 30.0, csls_k: int = 10,
                lam: float | None = None) -> tuple[Tensor, Tensor]:
    """Top-k lists of every query under re-ranker ``name`` (queries in rows of ``scores [Q, G]``).

    Returns ``(indices [Q, k], values [Q, k])`` where ``values`` are the re-weighted scores of the
    listed items (for ``+rgm``/``+gm`` lists, not necessarily sorted).
    """
    weighting, matching = parse_reranker(name)
    if not 1 <= k <= scores.shape[1]:
        raise ValueError(f"k must be in [1, {scores.shape[1]}] (the gallery size), got {k}")
    weighted = reweight(weighting, scores, beta=beta, csls_k=csls_k)  # [Q, G]
    indices = matched_topk(matching, weighted, k, lam=lam)  # [Q, k]
    return indices, weighted.gather(1, indices)
