"""Triplet losses (SUM / MAX / semi-hard) against a slow explicit loop over triplets."""

from __future__ import annotations

import pytest
import torch

from pcmr import Gaussian
from pcmr.losses import create_loss, triplet_loss, triplet_terms

DT = torch.float64


def value(t):
    return t.detach().item()


def reference_combine(anchor, negatives, margin, mode):
    """Hinge loss of one anchor against a Python list of 0-dim negative scores."""
    if not negatives:
        return anchor * 0.0
    if mode == "sum":
        return sum(torch.clamp(margin - anchor + n, min=0.0) for n in negatives)
    if mode == "max":
        chosen = max(negatives, key=value)
    else:  # semihard: hardest below the positive, else hardest
        below = [n for n in negatives if value(n) < value(anchor)]
        chosen = max(below, key=value) if below else max(negatives, key=value)
    return torch.clamp(margin - anchor + chosen, min=0.0)


def reference_triplet(scores, positives, margin, mode, reduction="sum"):
    num_img, num_cap = scores.shape
    total = scores.sum() * 0.0
    num_pos = 0
    for i in range(num_img):
        for c in range(num_cap):
            if not positives[i, c]:
                continue
            num_pos += 1
            row_negs = [scores[i, c2] for c2 in range(num_cap) if not positives[i, c2]]
            col_negs = [scores[i2, c] for i2 in range(num_img) if not positives[i2, c]]
            total = total + reference_combine(scores[i, c], row_negs, margin, mode)
            total = total + reference_combine(scores[i, c], col_negs, margin, mode)
    if reduction == "mean":
        total = total / max(num_pos, 1)
    return total


def random_relation(num_img, num_cap, seed):
    gen = torch.Generator().manual_seed(seed)
    positives = torch.rand(num_img, num_cap, generator=gen) < 0.3
    positives[0, :3] = True  # several positives in one row
    positives[-1, :] = False
    positives[-1, -1] = True
    return positives


@pytest.mark.parametrize("mode", ["sum", "max", "semihard"])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("shape", [(5, 7), (7, 3), (1, 1), (2, 11)])
def test_triplet_matches_loop_values_and_gradients(mode, reduction, shape):
    gen = torch.Generator().manual_seed(sum(shape))
    scores = torch.randn(*shape, generator=gen, dtype=DT).requires_grad_()
    positives = random_relation(*shape, seed=shape[0] * 31 + shape[1])
    got = triplet_loss(scores, positives, margin=0.3, negatives=mode, reduction=reduction)
    (grad_got,) = torch.autograd.grad(got, scores)
    want = reference_triplet(scores, positives, 0.3, mode, reduction)
    (grad_want,) = torch.autograd.grad(want, scores, allow_unused=True)
    grad_want = torch.zeros_like(scores) if grad_want is None else grad_want
    torch.testing.assert_close(got, want.detach())
    torch.testing.assert_close(grad_got, grad_want)


def test_row_of_positives_and_no_positive_contribute_zero():
    scores = torch.tensor([[0.5, 0.4], [0.1, 0.9]], dtype=DT)
    positives = torch.tensor([[True, True], [False, False]])
    # anchors (0,0) and (0,1): no negatives in row 0; column negatives: image 1.
    want = (0.2 - 0.5 + 0.1) * 0 + max(0.0, 0.2 - 0.4 + 0.9)
    got = triplet_loss(scores, positives, margin=0.2, negatives="max")
    assert float(got) == pytest.approx(want)
    empty = torch.zeros(2, 2, dtype=torch.bool)
    assert float(triplet_loss(scores, empty, reduction="mean")) == 0.0


def test_max_picks_hardest_true_negative_not_another_positive():
    # row 0 has positives at captions 0 and 1; caption 1 scores highest but is a match.
    scores = torch.tensor([[0.5, 0.95, 0.6, 0.1]], dtype=DT)
    positives = torch.tensor([[True, True, False, False]])
    i2t, t2i = triplet_terms(scores, positives, margin=0.2, negatives="max")
    # anchor (0,0): hardest true negative is caption 2 (0.6): 0.2 - 0.5 + 0.6 = 0.3
    # anchor (0,1): 0.2 - 0.95 + 0.6 < 0 -> 0
    torch.testing.assert_close(i2t, torch.tensor([0.3, 0.0], dtype=DT))
    torch.testing.assert_close(t2i, torch.zeros(2, dtype=DT))  # a single image: no negatives


def test_semihard_picks_hardest_below_positive_then_falls_back():
    scores = torch.tensor([[0.5, 0.45, 0.3, 0.7]], dtype=DT)
    positives = torch.tensor([[True, False, False, False]])
    i2t, _ = triplet_terms(scores, positives, margin=0.2, negatives="semihard")
    # negatives below 0.5: 0.45 and 0.3 -> hardest of those is 0.45 (not 0.7)
    torch.testing.assert_close(i2t, torch.tensor([0.2 - 0.5 + 0.45], dtype=DT))
    scores_all_above = torch.tensor([[0.1, 0.45, 0.3, 0.7]], dtype=DT)
    i2t, _ = triplet_terms(scores_all_above, positives, margin=0.2, negatives="semihard")
    torch.testing.assert_close(i2t, torch.tensor([0.2 - 0.1 + 0.7], dtype=DT))  # fallback: hardest


def test_vse_diagonal_case_matches_classic_formula():
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(6, 6, generator=gen, dtype=DT)
    eye = torch.eye(6, dtype=torch.bool)
    diagonal = scores.diag()
    cost_c = (0.2 + scores - diagonal[:, None]).clamp(min=0).masked_fill(eye, 0)
    cost_i = (0.2 + scores - diagonal[None, :]).clamp(min=0).masked_fill(eye, 0)
    torch.testing.assert_close(triplet_loss(scores, eye, 0.2, "sum"), cost_c.sum() + cost_i.sum())
    torch.testing.assert_close(
        triplet_loss(scores, eye, 0.2, "max"), cost_c.max(1).values.sum() + cost_i.max(0).values.sum()
    )


def test_float32_default_dtype_and_extreme_scores_are_finite():
    scores = (torch.randn(4, 5) * 1e4).requires_grad_()
    positives = torch.eye(4, 5, dtype=torch.bool)
    for mode in ("sum", "max", "semihard"):
        loss = triplet_loss(scores, positives, negatives=mode)
        (grad,) = torch.autograd.grad(loss, scores)
        assert loss.dtype == torch.float32
        assert torch.isfinite(loss) and torch.isfinite(grad).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"negatives": "hardest"}, "negatives"),
        ({"reduction": "none"}, "reduction"),
        ({"margin": -0.1}, "margin"),
    ],
)
def test_bad_options_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        triplet_loss(torch.zeros(2, 2), torch.eye(2, dtype=torch.bool), **kwargs)


def test_bad_positives_raise():
    scores = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="positives must have dtype torch.bool"):
        triplet_loss(scores, torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"positives must have shape \[B_img, B_cap\] = \[2, 3\]"):
        triplet_loss(scores, torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="scores must be a floating tensor"):
        triplet_loss(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool))


@pytest.mark.parametrize("similarity", ["cosine", "kl", "min_kl", "wasserstein", "mahalanobis_caption"])
def test_module_uses_registered_score_with_gradients_to_means_and_logvars(similarity):
    from pcmr.similarity import get_similarity, pairwise

    gen = torch.Generator().manual_seed(11)
    image_mean = torch.randn(5, 4, generator=gen, dtype=DT).requires_grad_()
    caption_mean = torch.randn(7, 4, generator=gen, dtype=DT).requires_grad_()
    image_logvar = (0.3 * torch.randn(5, 4, generator=gen, dtype=DT)).requires_grad_()
    caption_logvar = (0.3 * torch.randn(7, 1, generator=gen, dtype=DT)).requires_grad_()  # spherical
    image, caption = Gaussian(image_mean, image_logvar), Gaussian(caption_mean, caption_logvar)
    positives = random_relation(5, 7, seed=5)
    loss_fn = create_loss("triplet_semihard", similarity=similarity, margin=0.2)
    assert loss_fn.similarity_name == similarity and loss_fn.similarity_options() == {}
    terms = loss_fn(image=image, caption=caption, positives=positives, image_views=torch.zeros(1))
    want = reference_triplet(pairwise(similarity, image, caption), positives, 0.2, "semihard")
    torch.testing.assert_close(terms["loss"], want)
    inputs = [image_mean, caption_mean, image_logvar, caption_logvar]
    got_grads = torch.autograd.grad(terms["loss"], inputs, allow_unused=True)
    want_grads = torch.autograd.grad(want, inputs, allow_unused=True)
    spec = get_similarity(similarity)
    for got, ref in zip(got_grads, want_grads):
        if ref is None:
            assert got is None or torch.all(got == 0)
            continue
        torch.testing.assert_close(got, ref)
    if spec.needs_image_variance:
        assert got_grads[2] is not None and got_grads[2].abs().sum() > 0
    if spec.needs_caption_variance:
        assert got_grads[3] is not None and got_grads[3].abs().sum() > 0
