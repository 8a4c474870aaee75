"""PCME's soft cross-modal contrastive loss with its KL and uniformity regularisers.

PCME eq.1-3 and §A.1 (``docs/losses.md``). For every image/caption pair of the batch the
match probability is estimated from ``J x K`` samples::

    p(m | i, c) = 1/(J K) sum_{j, k} sigmoid(-a |v_j - t_k| + b)        (eq.2-3)

and the pair's loss is ``-log p`` if it is relevant, ``-log(1 - p)`` otherwise
(eq.1). Both logs are computed in log space, never as ``log(1 - p)``::

    log p     = logsumexp_{j,k} logsigmoid(-a d_jk + b) - log(J K)
    log(1-p)  = logsumexp_{j,k} logsigmoid( a d_jk - b) - log(J K)

so they stay finite for logits of any size.

``a`` and ``b``: PCME's release computes ``sigmoid(2 (-a d + b))`` (a softmax over
``(l, -l)``), i.e. the same family with ``a`` and ``b`` doubled. PCME's initial
values ``a = b = 15`` (COCO) and ``a = b = 5`` (CUB) are therefore ``30`` and ``10``
here. Our default ``init_a = init_b = 10`` is the CUB setting carried over: the
built-in data, like CUB, is a many-to-many relation, and the decision boundary
``d = b / a = 1`` sits between matched (near) and unrelated (about ``sqrt(2)`` apart)
unit-norm means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from pcmr.gaussian import Gaussian
from pcmr.losses._inputs import check_choice, check_gaussian_pair, check_positive_number
from pcmr.losses.base import RetrievalLoss
from pcmr.losses.match_scale import SCALE_PARAMETRISATIONS, make_match_scale
from pcmr.losses.regularisers import kl_prior_loss, uniformity_loss
from pcmr.similarity._primitives import DEFAULT_SQRT_EPS, squared_distances

__all__ = [
    "PcmeConfig",
    "PcmeLoss",
    "draw_samples",
    "match_log_probabilities",
    "release_kl_prior",
    "soft_contrastive_loss",
]

KL_FORMS = ("release", "logvar")

# Beyond |x| = 40 the term log1p(exp(-|x|)) (< 4.3e-18) is replaced by its value at 40.
LOG_SIGMOID_TAIL = 40.0


def log_sigmoid(x: Tensor) -> Tensor:
    """``log sigmoid(x) = min(x, 0) - log1p(exp(-|x|))`` without subnormal numbers.

    ``F.logsigmoid`` forms ``exp(-|x|)`` in forward and backward; for float32
    logits of magnitude 87-103 these are subnormal and slow the CPU kernels down
    by orders of magnitude (PCME loss, 128 x 128 pairs, J = 7, D = 1024, logits
    near -90: 3.8 s instead of 0.09 s of CPU time). Such logits are common for
    1024-d samples early in training.
    Here ``|x|`` is capped at 40 inside the exponential: an absolute error below
    4.3e-18, and the ``min(x, 0)`` part keeps the exact gradient of the tails.
    ``0.5 * (x - |x|)`` is ``min(x, 0)`` with the symmetric gradient 0.5 at 0.
    """
    magnitude = x.abs()
    if not (torch.is_grad_enabled() and x.requires_grad):  # no autograd: the same values, in place
        tail = magnitude.clamp_(max=LOG_SIGMOID_TAIL).neg_().exp_().log1p_()
        return x.clamp(max=0.0).sub_(tail)
    return 0.5 * (x - magnitude) - torch.log1p(torch.exp(-magnitude.clamp(max=LOG_SIGMOID_TAIL)))


def match_log_probabilities(distances: Tensor, a: Tensor | float, b: Tensor | float) -> tuple[Tensor, Tensor]:
    """``log p`` and ``log(1 - p)`` of the match probability (PCME eq.2-3), in log space.

    Args:
        distances: ``[N, M, J, K]`` sample distances ``|v_j - t_k|``.
        a: scale ``> 0``; b: shift (floats or 0-dim tensors, differentiable).

    Returns:
        ``(log_p, log_one_minus_p)``, each ``[N, M]``.
    """
    num = distances.shape[2] * distances.shape[3]
    logits = (-a * distances + b).flatten(2)  # [N, M, J*K]
    log_p = torch.logsumexp(log_sigmoid(logits), dim=2) - math.log(num)
    log_not_p = torch.logsumexp(log_sigmoid(-logits), dim=2) - math.log(num)
    return log_p, log_not_p


def _check_samples(name: str, samples: Tensor, gaussian: Gaussian) -> None:
    if (
        not isinstance(samples, Tensor)
        or samples.dim() != 3
        or samples.shape[0] != gaussian.num
        or samples.shape[2] != gaussian.dim
        or samples.shape[1] < 1
    ):
        shape = tuple(samples.shape) if isinstance(samples, Tensor) else type(samples).__name__
        raise ValueError(f"{name} must have shape [{gaussian.num}, J, {gaussian.dim}] (J >= 1), got {shape}")


def draw_samples(
    gaussian: Gaussian,
    num_samples: int,
    generator: torch.Generator | None = None,
    samples: Tensor | None = None,
    name: str = "samples",
) -> Tensor:
    """``samples`` when given (checked; errors call it ``name``), else
    ``gaussian.sample(num_samples)``; a point embedding gives its mean once
    (``[N, 1, D]``), as all its samples are equal."""
    if samples is not None:
        _check_samples(name, samples, gaussian)
        return samples
    if gaussian.is_point:
        return gaussian.mean.unsqueeze(1)  # [N, 1, D]
    return gaussian.sample(num_samples, generator=generator)  # [N, J, D]


def soft_contrastive_loss(
    image: Gaussian,
    caption: Gaussian,
    positives: Tensor,
    a: Tensor | float,
    b: Tensor | float,
    *,
    num_samples: int = 7,
    generator: torch.Generator | None = None,
    image_samples: Tensor | None = None,
    caption_samples: Tensor | None = None,
    reduction: str = "mean",
) -> Tensor:
    """PCME soft contrastive loss (eq.1-3) over all ``B_img x B_cap`` pairs.

    Args:
        image: ``B_img`` Gaussians; caption: ``B_cap`` Gaussians.
        positives: ``[B_img, B_cap]`` bool relation.
        a: scale ``> 0``; b: shift (PCME eq.3 form, see the module docstring).
        num_samples: ``J`` samples per embedding (PCME: 7).
        generator: random generator for the samples.
        image_samples / caption_samples: pre-drawn samples ``[B_img, J, D]`` /
            ``[B_cap, K, D]`` (then ``num_samples`` and ``generator`` are not used for that side).
        reduction: ``"mean"`` or ``"sum"`` over the pairs.

    Returns:
        A 0-dim tensor.
    """

    check_gaussian_pair(image, caption, positives)
    check_choice("reduction", reduction, ("mean", "sum"))
    image_samples = draw_samples(image, num_samples, generator, image_samples, "image_samples")  # [B_img, J, D]
    caption_samples = draw_samples(caption, num_samples, generator, caption_samples, "caption_samples")  # [B_cap, K, D]
    a_tensor = a if isinstance(a, Tensor) else image_samples.new_tensor(float(a))
    b_tensor = b if isinstance(b, Tensor) else image_samples.new_tensor(float(b))
    nll = _PairNll.apply(image_samples, caption_samples, positives, a_tensor, b_tensor)  # [B_img, B_cap]
    return nll.sum() if reduction == "sum" else nll.mean()


def _logsumexp_over_samples(terms: Tensor) -> Tensor:
    """``torch.logsumexp(terms, dim=(1, 3))`` for ``terms [N, J, M, K]``, reduced one dimension at a
    time: each step runs over contiguous memory, where the two-dimension reduction strides across the
    matrix (at 128 x 7 x 128 x 7 about 1 ms instead of 3.5 ms on one CPU thread). An all ``-inf``
    pair gives ``-inf``, as ``torch.logsumexp``."""
    n, _, m, _ = terms.shape
    peak = terms.amax(dim=1).amax(dim=2)  # [N, M]
    peak = torch.where(torch.isinf(peak), torch.zeros_like(peak), peak)
    shifted = (terms - peak.view(n, 1, m, 1)).exp_()
    return shifted.sum(dim=1).sum(dim=2).log_().add_(peak)


class _PairNll(torch.autograd.Function):
    """The per-pair loss of eq.1 from the samples, value and gradient in a few passes.

    Forward, on the ``[N J, M K]`` matrix of every image sample against every caption sample (viewed
    as ``[N, J, M, K]``): squared distances by one matrix product (floored at 0), ``d = sqrt(max(sq,
    1e-12))`` as :func:`pcmr.similarity.sampled_pair_distances`, ``l = b - a d``, ``s = log_sigmoid(+-l)``
    (``+`` for relevant pairs) and ``nll = log(J K) - logsumexp_{j, k} s``. Backward: with
    ``w = exp(s - logsumexp s)`` (the softmax over the pair's ``J x K`` samples) the gradient of
    ``nll`` with respect to ``l`` is ``-(+-1) w sigmoid(-(+-l))``; from there to ``a``, ``b`` and,
    through ``d(d)/d(sq) = 1 / (2 d)`` and one matrix product per side, to the samples. Equal to the
    autograd of the same formulas up to float rounding (``tests/losses/test_losses_pcme.py``), with
    about a third of the passes over the matrix.
    """

    @staticmethod
    def forward(ctx: Any, image_samples: Tensor, caption_samples: Tensor, positives: Tensor,
                a: Tensor, b: Tensor) -> Tensor:
        n, j, dim = image_samples.shape
        m, k, _ = caption_samples.shape
        images, captions = image_samples.reshape(n * j, dim), caption_samples.reshape(m * k, dim)
        squared = squared_distances(images, captions, out=images.new_empty(n * j, m * k))  # [N J, M K]
        distances = squared.clamp_min(DEFAULT_SQRT_EPS).sqrt_()  # safe_sqrt, one new tensor
        sign = torch.where(positives, 1.0, -1.0).to(distances.dtype).view(n, 1, m, 1)
        signed = distances.mul(a.neg()).add_(b).view(n, j, m, k).mul_(sign)  # [N, J, M, K]: +-logits
        log_terms = log_sigmoid(signed)
        log_sum = _logsumexp_over_samples(log_terms)  # [N, M]
        ctx.save_for_backward(images, captions, squared, distances, signed, log_terms, log_sum, sign, a)
        ctx.shape = (n, j, m, k)
        return math.log(j * k) - log_sum

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        images, captions, squared, distances, signed, log_terms, log_sum, sign, a = ctx.saved_tensors
        n, j, m, k = ctx.shape
        # d nll / d logit = -(+-1) * w * sigmoid(-(+-logit)), scaled by the incoming gradient
        grad_logits = (log_terms - log_sum.view(n, 1, m, 1)).exp_()  # w: softmax over (j, k)
        grad_logits.mul_(signed.neg().sigmoid_()).mul_(sign).mul_(grad_nll.view(n, 1, m, 1)).neg_()
        grad_logits = grad_logits.view(n * j, m * k)
        grad_a = -torch.dot(grad_logits.reshape(-1), distances.reshape(-1)) if ctx.needs_input_grad[3] else None
        grad_b = grad_logits.sum() if ctx.needs_input_grad[4] else None
        grad_image = grad_caption = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            # through d = sqrt(max(sq, eps)) (no gradient at the floor) and sq = |x|^2 + |y|^2 - 2 x.y
            grad_squared = grad_logits.mul(-0.5 * a).div_(distances).mul_(squared > DEFAULT_SQRT_EPS)
            if ctx.needs_input_grad[0]:
                grad_image = (grad_squared.sum(1, keepdim=True) * images - grad_squared @ captions).mul_(2.0)
                grad_image = grad_image.view(n, j, -1)
            if ctx.needs_input_grad[1]:
                grad_caption = (grad_squared.sum(0).unsqueeze(1) * captions - grad_squared.t() @ images).mul_(2.0)
                grad_caption = grad_caption.view(m, k, -1)
        return grad_image, grad_caption, None, grad_a, grad_b


def release_kl_prior(gaussian: Gaussian, samples: Tensor) -> Tensor:
    """The KL ("vib") term of PCME's release (``criterions/probemb.py``: ``kl_divergence``), summed.

    The release's heads output log sigma, and its KL treats that output as a log-variance, with
    the mean of the drawn samples in place of the mean::

        0.5 * sum_{n, d} (sigma_nd + mu_hat_nd^2 - 1 - log sigma_nd),  mu_hat_n = mean_j samples_nj

    With ``log sigma = logvar / 2`` this is ``0.5 sum (exp(logvar/2) + mu_hat^2 - 1 - logvar/2)``:
    its minimum is at ``sigma = 1`` as the exact KL's, but its pull on ``logvar`` is half as strong.

    Args:
        gaussian: ``N`` Gaussians (``logvar [N, D]`` or ``[N, 1]``, broadcast).
        samples: ``[N, J, D]`` samples drawn from it.

    Returns:
        A 0-dim tensor.
    """
    log_sigma = 0.5 * gaussian.expanded_logvar()  # [N, D]
    sample_mean = samples.mean(dim=1)  # [N, D]
    return 0.5 * (log_sigma.exp() + sample_mean.pow(2) - 1.0 - log_sigma).sum()


@dataclass
class PcmeConfig:
    """Configuration of ``pcme`` (PCME eq.1-3 + regularisers; defaults: PCME's CUB setting).

    Attributes:
        num_samples: ``J`` samples per embedding (PCME: 7).
        init_a / init_b: initial scale and shift of ``sigmoid(-a d + b)`` (ours; PCME's
            release values doubled: COCO 30 / 30, CUB 10 / 10).
        lambda_kl: weight of the KL prior (PCME COCO 1e-5, CUB 1e-3).
        lambda_unif: weight of the uniformity loss (PCME COCO 0, CUB 10).
        uniformity_t: temperature ``t`` of the uniformity loss (2).
        uniformity_points: ``None`` (default, PCME eq.A.1): the uniformity term over all drawn
            samples of the batch; an int ``P``: over ``P`` of them drawn uniformly *with replacement*
            when there are more than ``P`` (as PCME's release does, ``P = 128``, to avoid a CUDA
            limit; a point drawn twice contributes a pair at distance 0, as there).
        kl_form: ``"release"`` (default): the KL term PCME's release computes, with its weights
            meaning what they mean there (:func:`release_kl_prior`); ``"logvar"``: the exact
            ``KL(N(mean, var) || N(0, I))`` (:func:`pcmr.losses.regularisers.kl_prior_loss`),
            which pulls log sigma twice as hard at the same ``lambda_kl``.
        scale_parametrisation: ``"softplus"`` (default: ``a = softplus(a_raw)``, ``b`` free) or
            ``"release"`` (PCME's release: ``a = 2 negative_scale``, ``b = 2 shift``, both free; an
            AdamP step moves them twice as far: ``pcmr.losses.match_scale``).
    """

    num_samples: int = 7
    init_a: float = 10.0
    init_b: float = 10.0
    lambda_kl: float = 1e-3
    lambda_unif: float = 10.0
    uniformity_t: float = 2.0
    kl_form: str = "release"
    uniformity_points: int | None = None
    scale_parametrisation: str = "softplus"

    def __post_init__(self) -> None:
        check_choice("kl_form", self.kl_form, KL_FORMS)
        check_choice("scale_parametrisation", self.scale_parametrisation, SCALE_PARAMETRISATIONS)
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ValueError(f"num_samples must be an int >= 1, got {self.num_samples!r}")
        check_positive_number("init_a", self.init_a)
        check_positive_number("lambda_kl", self.lambda_kl, allow_zero=True)
        check_positive_number("lambda_unif", self.lambda_unif, allow_zero=True)
        check_positive_number("uniformity_t", self.uniformity_t)
        if self.uniformity_points is not None and (
            isinstance(self.uniformity_points, bool) or not isinstance(self.uniformity_points, int)
            or self.uniformity_points < 2
        ):
            raise ValueError(f"uniformity_points must be null or an int >= 2, got {self.uniformity_points!r}")


class PcmeLoss(RetrievalLoss):
    """PCME's training objective with the scaling of its public release, so the
    paper's weights apply unchanged::

        loss = soft_contrastive + lambda_kl * kl_prior + lambda_unif * uniformity

    * ``soft_contrastive``: the sum of the eq.1 loss over all pairs, counted in both
      directions (image->text and text->image sums are equal, the release adds both);
    * ``kl_prior``: the KL term of every Gaussian of the batch, summed over instances of both
      modalities (point embeddings contribute 0): by default the release's form
      (:func:`release_kl_prior`), with ``kl_form="logvar"`` the exact KL to ``N(0, I)``;
    * ``uniformity``: Wang & Isola's log-mean-exp form of PCME eq.A.1 over all drawn
      samples of both modalities (all pairs; the release subsamples 128 points); only
      computed, and only reported, when ``lambda_unif > 0``.

    Holds the learnable ``a`` (softplus-parametrised, or as the release) and ``b``; the optimiser must
    include this module's parameters. Optional inputs: ``generator``,
    ``image_samples``, ``caption_samples`` (pre-drawn samples). Returns the terms
    above plus ``a`` and ``b`` (detached, for logging) and ``loss``.
    """

    scale_note = ("PCME's objective as its release scales it: the soft contrastive term is summed (not averaged) "
                  "over every image x caption pair of a batch in both directions, plus the KL prior summed over "
                  "the batch's Gaussians, so values in the tens of thousands at a batch of 128 are normal; the "
                  "uniformity term is a log and may be negative. Compare it between epochs of one run")

    similarity_name = "match_prob"

    def __init__(self, config: PcmeConfig) -> None:
        super().__init__(config)
        self.match_scale = make_match_scale(config.init_a, config.init_b, config.scale_parametrisation)

    def similarity_options(self) -> dict[str, float]:
        return self.match_scale.as_floats()

    def forward(
        self,
        image: Gaussian,
        caption: Gaussian,
        positives: Tensor,
        *,
        generator: torch.Generator | None = None,
        image_samples: Tensor | None = None,
        caption_samples: Tensor | None = None,
        **optional: object,
    ) -> dict[str, Tensor]:
        check_gaussian_pair(image, caption, positives)
        cfg = self.config
        image_samples = draw_samples(image, cfg.num_samples, generator, image_samples, "image_samples")  # [B_img, J, D]
        caption_samples = draw_samples(caption, cfg.num_samples, generator, caption_samples, "caption_samples")  # [B_cap, K, D]
        a, b = self.match_scale.a, self.match_scale.b
        matching = 2.0 * soft_contrastive_loss(
            image, caption, positives, a, b,
            image_samples=image_samples, caption_samples=caption_samples, reduction="sum",
        )
        kl = matching.new_zeros(())
        for gaussian, samples in ((image, image_samples), (caption, caption_samples)):
            if gaussian.is_point:
                continue
            if cfg.kl_form == "release":
                kl = kl + release_kl_prior(gaussian, samples)
            else:
                kl = kl + kl_prior_loss(gaussian, reduction="sum")
        terms = {"soft_contrastive": matching, "kl_prior": kl}
        total = matching + cfg.lambda_kl * kl
        if cfg.lambda_unif > 0:
            all_samples = torch.cat([image_samples.flatten(0, 1), caption_samples.flatten(0, 1)])  # [B_img J + B_cap K, D]
            if cfg.uniformity_points is not None and all_samples.shape[0] > cfg.uniformity_points:
                device = generator.device if generator is not None else all_samples.device
                chosen = torch.randint(all_samples.shape[0], (cfg.uniformity_points,), generator=generator,
                                       device=device).to(all_samples.device)
                all_samples = all_samples[chosen]  # [P, D], drawn with replacement (the release)
            terms["uniformity"] = uniformity_loss(all_samples, cfg.uniformity_t)
            total = total + cfg.lambda_unif * terms["uniformity"]
        return {"loss": total, **terms, "a": a.detach(), "b": b.detach()}
