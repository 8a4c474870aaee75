"""HAL re-weighting (eq.4), HAL / MAX+HAL and the released log-sum-exp HAL against loops and hand values."""

from __future__ import annotations

import math

import pytest
import torch

from pcmr.losses import hal_loss, hal_released_loss, hal_weights, triplet_loss

DT = torch.float64


def reference_neighbour_mean(values, k, zero):
    """Mean of the k largest of a Python list of 0-dim tensors (``zero`` for an empty list)."""
    if not values:
        return zero
    top = sorted(values, key=lambda t: t.detach().item(), reverse=True)[:k]
    return sum(top) / len(top)


def reference_hal_weights(scores, positives, k, exclude_positives=False):
    num_img, num_cap = scores.shape
    rows = []
    for i in range(num_img):
        row = []
        for c in range(num_cap):
            captions = [
                scores[i, c2] for c2 in range(num_cap)
                if c2 != c and not (exclude_positives and positives[i, c2])
            ]
            images = [
                scores[i2, c] for i2 in range(num_img)
                if i2 != i and not (exclude_positives and positives[i2, c])
            ]
            zero = scores.sum() * 0.0
            row.append(torch.exp(reference_neighbour_mean(captions, k, zero) + reference_neighbour_mean(images, k, zero)))
        rows.append(torch.stack(row))
    return torch.stack(rows)


HAND = torch.tensor([[0.9, 0.1, 0.3], [0.2, 0.8, 0.4], [0.5, 0.0, 0.7]], dtype=DT)


def test_hal_weights_k1_hand_computed():
    weights = hal_weights(HAND, torch.eye(3, dtype=torch.bool), k=1)
    # (0,0): best other caption of image 0 is 0.3, best other image of caption 0 is 0.5
    # (0,1): other captions {0.9, 0.3} -> 0.9; other images of caption 1 {0.8, 0.0} -> 0.8
    # (2,1): other captions of image 2 {0.5, 0.7} -> 0.7; other images {0.1, 0.8} -> 0.8
    # (1,2): other captions {0.2, 0.8} -> 0.8; other images {0.3, 0.7} -> 0.7
    assert float(weights[0, 0]) == pytest.approx(math.exp(0.3 + 0.5))
    assert float(weights[0, 1]) == pytest.approx(math.exp(0.9 + 0.8))
    assert float(weights[2, 1]) == pytest.approx(math.exp(0.7 + 0.8))
    assert float(weights[1, 2]) == pytest.approx(math.exp(0.8 + 0.7))


def test_hal_weights_k_batch_minus_one_is_mean_of_all_others():
    weights = hal_weights(HAND, torch.eye(3, dtype=torch.bool), k=2)
    # (0,0): captions {0.1, 0.3} -> 0.2; images {0.2, 0.5} -> 0.35
    assert float(weights[0, 0]) == pytest.approx(math.exp(0.2 + 0.35))
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(5, 5, generator=gen, dtype=DT)
    closed = ((scores.sum(1, keepdim=True) - scores) / 4 + (scores.sum(0, keepdim=True) - scores) / 4).exp()
    torch.testing.assert_close(hal_weights(scores, torch.eye(5, dtype=torch.bool), k=4), closed)
    # k larger than the batch: every other item is a neighbour
    torch.testing.assert_close(hal_weights(scores, torch.eye(5, dtype=torch.bool), k=50), closed)


@pytest.mark.parametrize("shape", [(5, 7), (7, 5), (1, 3), (2, 2)])
@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("exclude_positives", [False, True])
def test_hal_weights_match_loop_values_and_gradients(shape, k, exclude_positives):
    gen = torch.Generator().manual_seed(shape[0] * 13 + shape[1] + k)
    scores = torch.randn(*shape, generator=gen, dtype=DT).requires_grad_()
    positives = torch.rand(*shape, generator=gen) < 0.35
    positives[0, 0] = True
    got = hal_weights(scores, positives, k=k, exclude_positives=exclude_positives)
    want = reference_hal_weights(scores, positives, k, exclude_positives)
    torch.testing.assert_close(got, want)
    probe = torch.randn(*shape, generator=gen, dtype=DT)
    (grad_got,) = torch.autograd.grad((got * probe).sum(), scores)
    (grad_want,) = torch.autograd.grad((want * probe).sum(), scores)
    torch.testing.assert_close(grad_got, grad_want)


@pytest.mark.parametrize("negatives", ["sum", "max"])
def test_hal_loss_is_triplet_on_reweighted_scores(negatives):
    gen = torch.Generator().manual_seed(4)
    scores = torch.randn(5, 7, generator=gen, dtype=DT).requires_grad_()
    positives = torch.rand(5, 7, generator=gen) < 0.3
    positives[0, :3] = True
    got = hal_loss(scores, positives, margin=0.2, k=3, negatives=negatives)
    weighted = scores * reference_hal_weights(scores, positives, 3)
    want = triplet_loss(weighted, positives, 0.2, negatives)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, scores)[0], torch.autograd.grad(want, scores)[0])


def reference_hal_released(scores, positives, alpha, eps):
    num_img, num_cap = scores.shape
    image_terms = []
    for i in range(num_img):
        inner = sum((torch.exp(alpha * (scores[i, c] - eps)) for c in range(num_cap) if not positives[i, c]),
                    torch.zeros((), dtype=DT))
        image_terms.append(torch.log(1 + inner) / alpha)
    caption_terms = []
    for c in range(num_cap):
        inner = sum((torch.exp(alpha * (scores[i, c] - eps)) for i in range(num_img) if not positives[i, c]),
                    torch.zeros((), dtype=DT))
        caption_terms.append(torch.log(1 + inner) / alpha)
    positive_terms = [torch.log(1 + torch.relu(scores[i, c]))
                      for i in range(num_img) for c in range(num_cap) if positives[i, c]]
    total = sum(image_terms) / num_img + sum(caption_terms) / num_cap
    if positive_terms:
        total = total - sum(positive_terms) / len(positive_terms)
    return total


@pytest.mark.parametrize("shape", [(5, 7), (3, 3), (1, 2)])
def test_hal_released_matches_loop_values_and_gradients(shape):
    gen = torch.Generator().manual_seed(shape[0] + 7 * shape[1])
    scores = torch.rand(*shape, generator=gen, dtype=DT).mul(2).sub(1).requires_grad_()
    positives = torch.rand(*shape, generator=gen) < 0.4
    positives[0, 0] = True
    got = hal_released_loss(scores, positives, alpha=30.0, eps=0.3)
    want = reference_hal_released(scores, positives, 30.0, 0.3)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, scores)[0], torch.autograd.grad(want, scores)[0])


def test_hal_released_diagonal_form_differs_from_zeroed_diagonal_only_by_the_constant():
    gen = torch.Generator().manual_seed(8)
    scores = torch.rand(6, 6, generator=gen, dtype=DT) * 2 - 1
    eye = torch.eye(6, dtype=torch.bool)
    alpha, eps = 30.0, 0.3
    zeroed = scores.masked_fill(eye, 0.0)
    exp_zeroed = torch.exp(alpha * (zeroed - eps))  # the authors' zeroed-diagonal S' (diagonal kept)
    released = (
        torch.log(1 + exp_zeroed.sum(0)) / alpha + torch.log(1 + exp_zeroed.sum(1)) / alpha
        - torch.log(1 + torch.relu(scores.diag()))
    ).mean()
    ours = hal_released_loss(scores, eye, alpha, eps)
    assert abs(float(ours - released)) <= 2 * math.exp(-alpha * eps) / alpha


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hal_released_finite_at_alpha_60_and_large_scores(dtype):
    scores = (torch.linspace(-20, 20, 35, dtype=dtype).view(5, 7)).requires_grad_()
    positives = torch.eye(5, 7, dtype=torch.bool)
    loss = hal_released_loss(scores, positives, alpha=60.0, eps=0.7)
    (grad,) = torch.autograd.grad(loss, scores)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    # log(1 + sum exp(x)) / alpha -> max(x) / alpha for large x: largest negative of row 4 is 20
    assert loss.item() > 0


def test_hal_weights_bad_k_raises():
    with pytest.raises(ValueError, match="k"):
        hal_weights(HAND, torch.eye(3, dtype=torch.bool), k=0)
