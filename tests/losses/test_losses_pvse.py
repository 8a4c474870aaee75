"""PVSE's objective term by term against plain loops (float64, awkward sizes): the MIL triplet loss
on the best of K x K cosines, the diversity regulariser, the MMD term, and their weighted sum."""

from __future__ import annotations

import math

import pytest
import torch

from pcmr import Gaussian, PointSet
from pcmr.losses import create_loss, diversity_loss, mil_triplet_loss, mmd_loss


def randn(*shape, seed, requires_grad=False):
    tensor = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return tensor.requires_grad_(requires_grad)


def unit(vector):
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector]


# ----------------------------------------------------------------------------- loop references
def loop_diversity(residuals):
    """mean over items of sqrt(sum_{k != l} <r_k, r_l>^2) / K^2 with unit r (release form)."""
    values = []
    for item in residuals.tolist():
        rows = [unit(r) for r in item]
        k = len(rows)
        total = sum(sum(a * b for a, b in zip(rows[p], rows[q])) ** 2 for p in range(k) for q in range(k) if p != q)
        values.append(math.sqrt(total) / k**2)
    return sum(values) / len(values)


def loop_mmd(x, y, gamma):
    def kernel_mean(a, b):
        return sum(math.exp(-gamma * math.dist(p, q)) for p in a for q in b) / (len(a) * len(b))

    a, b = x.tolist(), y.tolist()
    return kernel_mean(a, a) - 2 * kernel_mean(a, b) + kernel_mean(b, b)


def loop_mil(image_points, caption_points, positives, margin):
    """Hardest-negative hinge on the best pair of cosines, both directions, mean over positive pairs."""
    x, y, pos = image_points.tolist(), caption_points.tolist(), positives.tolist()

    def score(i, c):
        return max(sum(a * b for a, b in zip(unit(v), unit(t))) for v in x[i] for t in y[c])

    total, count = 0.0, 0
    for i in range(len(x)):
        for c in range(len(y)):
            if not pos[i][c]:
                continue
            count += 1
            anchor = score(i, c)
            row = [score(i, n) for n in range(len(y)) if not pos[i][n]]
            column = [score(n, c) for n in range(len(x)) if not pos[n][c]]
            for negatives in (row, column):
                if negatives:
                    total += max(0.0, margin - anchor + max(negatives))
    return total / count


def relation(num_images, num_captions):
    positives = torch.zeros(num_images, num_captions, dtype=torch.bool)
    for c in range(num_captions):
        positives[c % num_images, c] = True
    positives[0, -1] = True
    return positives


# ----------------------------------------------------------------------------- terms
@pytest.mark.parametrize(("batch", "k", "dim"), [(4, 3, 5), (1, 2, 7), (3, 5, 2)])
def test_diversity_matches_loop_values_and_gradients(batch, k, dim):
    residuals = randn(batch, k, dim, seed=batch + k, requires_grad=True)
    value = diversity_loss(residuals)
    assert math.isclose(float(value.detach()), loop_diversity(residuals.detach()), rel_tol=1e-12)
    assert torch.autograd.gradcheck(diversity_loss, (residuals,), eps=1e-6, atol=1e-7)


def test_diversity_is_zero_for_one_point_and_orthogonal_residuals():
    assert float(diversity_loss(randn(3, 1, 4, seed=0))) == 0.0
    orthogonal = torch.eye(3, dtype=torch.float64).repeat(2, 1, 1) * 2.5  # [2, 3, 3]
    orthogonal.requires_grad_()
    value = diversity_loss(orthogonal)
    value.backward()
    assert float(value.detach()) < 1e-5 and torch.isfinite(orthogonal.grad).all()
    with pytest.raises(ValueError, match=r"residuals must be a tensor of shape \[B, K, D\]"):
        diversity_loss(torch.zeros(3, 4))


@pytest.mark.parametrize(("n", "m", "gamma"), [(6, 9, 0.5), (1, 4, 1.3), (5, 5, 0.1)])
def test_mmd_matches_loop_values_and_gradients(n, m, gamma):
    x, y = randn(n, 3, seed=n, requires_grad=True), randn(m, 3, seed=m + 50, requires_grad=True)
    assert math.isclose(float(mmd_loss(x, y, gamma).detach()), loop_mmd(x.detach(), y.detach(), gamma), rel_tol=1e-10)
    assert torch.autograd.gradcheck(lambda a, b: mmd_loss(a, b, gamma), (x, y), eps=1e-6, atol=1e-6)


def test_mmd_is_zero_between_identical_sets_with_finite_gradients():
    x = randn(5, 4, seed=3, requires_grad=True)
    value = mmd_loss(x, x.detach().clone())
    value.backward()
    assert abs(float(value.detach())) < 1e-12 and torch.isfinite(x.grad).all()
    with pytest.raises(ValueError, match=r"mmd_loss: y must be a non-empty tensor of shape \[N, D\]"):
        mmd_loss(x, torch.zeros(0, 4))


@pytest.mark.parametrize(("num_images", "num_captions", "k_img", "k_cap"), [(5, 7, 2, 2), (3, 3, 1, 4), (4, 9, 3, 1)])
def test_mil_triplet_matches_loop_values_and_gradients(num_images, num_captions, k_img, k_cap):
    x = randn(num_images, k_img, 6, seed=1, requires_grad=True)
    y = randn(num_captions, k_cap, 6, seed=2, requires_grad=True)
    positives = relation(num_images, num_captions)
    value = mil_triplet_loss(x, y, positives, margin=0.3)
    assert math.isclose(float(value.detach()), loop_mil(x.detach(), y.detach(), positives, 0.3), rel_tol=1e-12)
    assert torch.autograd.gradcheck(lambda a, b: mil_triplet_loss(a, b, positives, margin=0.3), (x, y),
                                    eps=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- the registered loss
def test_pvse_loss_is_the_weighted_sum_of_its_terms():
    x, y = randn(5, 2, 6, seed=4, requires_grad=True), randn(7, 2, 6, seed=5, requires_grad=True)
    rx, ry = randn(5, 2, 6, seed=6, requires_grad=True), randn(7, 2, 6, seed=7, requires_grad=True)
    positives = relation(5, 7)
    loss_fn = create_loss("pvse", lambda_div=0.3, lambda_mmd=0.2, margin=0.25, mmd_gamma=0.7)
    assert loss_fn.similarity_name == "max_cosine" and loss_fn.similarity_options() == {}
    terms = loss_fn(image=PointSet(x), caption=PointSet(y), positives=positives, image_residuals=rx,
                    caption_residuals=ry)
    ranking = loop_mil(x.detach(), y.detach(), positives, 0.25)
    diversity = loop_diversity(rx.detach()) + loop_diversity(ry.detach())
    mmd = loop_mmd(x.detach().reshape(-1, 6), y.detach().reshape(-1, 6), 0.7)
    for key, expected in (("ranking", ranking), ("diversity", diversity), ("mmd", mmd)):
        assert math.isclose(float(terms[key].detach()), expected, rel_tol=1e-10), key
    assert math.isclose(float(terms["loss"].detach()), ranking + 0.3 * diversity + 0.2 * mmd, rel_tol=1e-10)
    terms["loss"].backward()
    for leaf in (x, y, rx, ry):
        assert leaf.grad is not None and torch.isfinite(leaf.grad).all() and leaf.grad.abs().sum() > 0


def test_points_given_as_tensors_override_the_embeddings():
    # a data-parallel wrapper may hand over centroid Gaussians plus the points as tensors
    x, y = randn(4, 3, 5, seed=8), randn(6, 2, 5, seed=9)
    positives = relation(4, 6)
    loss_fn = create_loss("pvse")
    from_sets = loss_fn(image=PointSet(x), caption=PointSet(y), positives=positives)
    from_tensors = loss_fn(image=Gaussian(x.mean(1)), caption=Gaussian(y.mean(1)), positives=positives,
                           image_points=x, caption_points=y)
    for key in ("loss", "ranking", "mmd"):
        torch.testing.assert_close(from_sets[key], from_tensors[key], rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"image_points must be a tensor of shape \[B, K, D\] with B = 4"):
        loss_fn(image=PointSet(x), caption=PointSet(y), positives=positives, image_points=x[:2])
    with pytest.raises(ValueError, match="caption_residuals must be a tensor of the points' shape"):
        loss_fn(image=PointSet(x), caption=PointSet(y), positives=positives, caption_residuals=x)


def test_one_point_per_item_is_vsepp_max_and_regularisers_are_off():
    mean_i, mean_c = randn(5, 4, seed=10), randn(6, 4, seed=11)
    positives = relation(5, 6)
    pvse = create_loss("pvse", margin=0.2, reduction="sum")(image=Gaussian(mean_i), caption=Gaussian(mean_c),
                                                            positives=positives)
    vsepp = create_loss("triplet_max", margin=0.2, similarity="cosine")(image=Gaussian(mean_i),
                                                                         caption=Gaussian(mean_c), positives=positives)
    torch.testing.assert_close(pvse["loss"], vsepp["loss"], rtol=1e-12, atol=1e-12)
    assert float(pvse["diversity"]) == 0.0 and float(pvse["mmd"]) == 0.0


def test_config_defaults_and_bad_values():
    config = create_loss("pvse").config
    assert (config.margin, config.lambda_div, config.lambda_mmd, config.mmd_gamma, config.reduction) == (
        0.1, 0.1, 0.01, 0.5, "mean")
    with pytest.raises(ValueError, match="mmd_gamma must be a number > 0"):
        create_loss("pvse", mmd_gamma=0.0)
    with pytest.raises(ValueError, match="lambda_div must be a number >= 0"):
        create_loss("pvse", lambda_div=-1.0)
