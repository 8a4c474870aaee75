"""CalibPE calibrated triplet loss against an explicit per-pair computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pcmr import Gaussian
from pcmr.losses import (
    calibrated_scores,
    calibrated_triplet_loss,
    create_loss,
    gaussian_from_views,
    triplet_loss,
)

DT = torch.float64


def cosine(u, v):
    return (u * v).sum() / torch.sqrt((u * u).sum() * (v * v).sum())


def reference_scores(image_points, caption_points, image_mean, image_std, caption_mean, caption_std, beta, point):
    """S_cal[i, c] = point term - beta * sqrt(|m_i - m_c|^2 + |s_i - s_c|^2), one pair at a time."""
    rows = []
    for i in range(image_mean.shape[0]):
        row = []
        for c in range(caption_mean.shape[0]):
            if point == "mean_cosine":
                cosines = [cosine(u, v) for u in image_points[i] for v in caption_points[c]]
                point_term = sum(cosines) / len(cosines)
            else:
                point_term = cosine(image_mean[i], caption_mean[c])
            w2 = torch.sqrt(((image_mean[i] - caption_mean[c]) ** 2).sum()
                            + ((image_std[i] - caption_std[c]) ** 2).sum())
            row.append(point_term - beta * w2)
        rows.append(torch.stack(row))
    return torch.stack(rows)


def view_stats(views):
    mean = views.mean(1)
    std = torch.sqrt(((views - mean[:, None]) ** 2).mean(1))
    return mean, std


def setup(seed=0, num_img=5, num_cap=7, dim=4, k_img=3, k_cap=2):
    gen = torch.Generator().manual_seed(seed)
    image = Gaussian(torch.randn(num_img, dim, generator=gen, dtype=DT).requires_grad_(),
                     (0.3 * torch.randn(num_img, dim, generator=gen, dtype=DT)).requires_grad_())
    caption = Gaussian(torch.randn(num_cap, dim, generator=gen, dtype=DT).requires_grad_(),
                       (0.3 * torch.randn(num_cap, 1, generator=gen, dtype=DT)).requires_grad_())
    image_views = torch.randn(num_img, k_img, dim, generator=gen, dtype=DT).requires_grad_()
    caption_views = torch.randn(num_cap, k_cap, dim, generator=gen, dtype=DT).requires_grad_()
    positives = torch.rand(num_img, num_cap, generator=gen) < 0.3
    positives[0, :3] = True
    return image, caption, image_views, caption_views, positives


def test_gaussian_from_views_is_population_mean_and_variance():
    views = torch.randn(4, 5, 3, dtype=DT)
    g = gaussian_from_views(views)
    np.testing.assert_allclose(g.mean.numpy(), views.numpy().mean(1))
    np.testing.assert_allclose(g.var.numpy(), views.numpy().var(1, ddof=0))
    single = gaussian_from_views(views[:, :1])  # K = 1: zero variance, still finite
    assert torch.isfinite(single.logvar).all()


@pytest.mark.parametrize("point", ["mean_cosine", "cosine_of_means"])
@pytest.mark.parametrize("use_image_views, use_caption_views", [(True, True), (False, False), (True, False)])
def test_calibrated_scores_and_loss_match_reference(point, use_image_views, use_caption_views):
    image, caption, image_views, caption_views, positives = setup(seed=3)
    iv = image_views if use_image_views else None
    cv = caption_views if use_caption_views else None
    got = calibrated_scores(image, caption, image_views=iv, caption_views=cv, beta=0.7, point_term=point)
    if iv is not None:
        image_mean, image_std = view_stats(iv)
        image_points = iv
    else:
        image_mean, image_std = image.mean, image.std.expand(-1, image.dim)
        image_points = image.mean[:, None]
    if cv is not None:
        caption_mean, caption_std = view_stats(cv)
        caption_points = cv
    else:
        caption_mean, caption_std = caption.mean, caption.std.expand(-1, caption.dim)
        caption_points = caption.mean[:, None]
    want = reference_scores(image_points, caption_points, image_mean, image_std, caption_mean, caption_std,
                            0.7, point)
    torch.testing.assert_close(got, want)
    leaves = [image.mean, image.logvar, caption.mean, caption.logvar, image_views, caption_views]
    loss = calibrated_triplet_loss(image, caption, positives, image_views=iv, caption_views=cv, beta=0.7,
                                   point_term=point, margin=0.2)
    ref_loss = triplet_loss(want, positives, 0.2, "max")
    torch.testing.assert_close(loss, ref_loss)
    got_grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    want_grads = torch.autograd.grad(ref_loss, leaves, allow_unused=True)
    for g_got, g_want in zip(got_grads, want_grads):
        if g_want is None:
            assert g_got is None or torch.all(g_got == 0)
        else:
            torch.testing.assert_close(g_got, g_want)


def test_identical_views_and_identical_pairs_give_finite_gradients():
    base = torch.randn(3, 1, 4, dtype=DT)
    views = base.expand(3, 4, 4).clone().requires_grad_()  # 4 identical views: variance 0
    head = Gaussian.point(torch.zeros(3, 4, dtype=DT))
    loss = calibrated_triplet_loss(head, head, torch.eye(3, dtype=torch.bool),
                                   image_views=views, caption_views=views)
    (grad,) = torch.autograd.grad(loss, views)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()


def test_module_defaults_and_views_as_optional_inputs():
    image, caption, image_views, caption_views, positives = setup(seed=5)
    image, caption = Gaussian.point(image.mean), Gaussian.point(caption.mean)  # CalibPE: point encoders
    loss_fn = create_loss("calibpe")
    assert loss_fn.config.negatives == "max" and loss_fn.similarity_name == "cosine"
    terms = loss_fn(image=image, caption=caption, positives=positives,
                    image_views=image_views, caption_views=caption_views)
    want = calibrated_triplet_loss(image, caption, positives, image_views=image_views,
                                   caption_views=caption_views)
    torch.testing.assert_close(terms["loss"], want)
    assert set(terms) == {"loss", "positive_score"}


def test_bad_views_raise():
    image, caption, image_views, _, positives = setup()
    with pytest.raises(ValueError, match=r"image_views must be a floating tensor of shape \[5, K, 4\]"):
        calibrated_scores(image, caption, image_views=image_views[:, :, :2])
    with pytest.raises(ValueError, match="point_term"):
        calibrated_scores(image, caption, point_term="log_cosine")


def test_views_with_variance_heads_raise_and_heads_mode_trains_the_heads():
    """With views, CalibPE (§3.3) estimates the distributions from them, so a model's variance heads
    would get no gradient: the loss refuses that combination; distributions="heads" trains them."""
    image, caption, image_views, caption_views, positives = setup(seed=6)
    with pytest.raises(ValueError, match=r"image variance head would get no gradient.*distributions=heads"):
        create_loss("calibpe")(image=image, caption=caption, positives=positives,
                               image_views=image_views, caption_views=caption_views)
    loss = create_loss("calibpe", distributions="heads")(
        image=image, caption=caption, positives=positives, image_views=image_views, caption_views=caption_views
    )["loss"]
    grads = torch.autograd.grad(loss, [image.logvar, caption.logvar, image_views, caption_views])
    assert all(g.abs().sum() > 0 for g in grads)
    want = calibrated_triplet_loss(image, caption, positives, image_views=image_views, caption_views=caption_views,
                                   distributions="heads")
    torch.testing.assert_close(loss, want)
    # heads mode: the W2 term is the heads' W2 while the point term still averages the views
    scores = calibrated_scores(image, caption, image_views=image_views, caption_views=caption_views, beta=0.5,
                               distributions="heads")
    point = calibrated_scores(image, caption, image_views=image_views, caption_views=caption_views, beta=0.0)
    reference = reference_scores(image_views, caption_views, image.mean, image.std, caption.mean,
                                 caption.std.expand_as(caption.mean), 0.5, "mean_cosine")
    torch.testing.assert_close(scores, reference)
    assert not torch.allclose(scores, point)


def test_negative_pairs_are_pushed_to_a_larger_w2():
    """The sign convention for negatives: one calibrated score for every pair, so the triplet loss
    lowers a hard negative's S_cal = point - beta * W2: with the means (point terms) and the positive
    pairs' W2 fixed, a larger W2 between the negative pairs gives a smaller loss."""
    means = torch.tensor([[1.0, 0.0], [0.9, 0.1]], dtype=DT)
    positives = torch.eye(2, dtype=torch.bool)

    def loss_for(logvar_1):  # item 1 (image and caption alike) spreads out; item 0 stays at logvar -2
        logvar = torch.tensor([[-2.0, -2.0], [logvar_1, logvar_1]], dtype=DT)
        image, caption = Gaussian(means, logvar), Gaussian(means.clone(), logvar.clone())
        return float(calibrated_triplet_loss(image, caption, positives, beta=1.0, margin=1.0,
                                             point_term="cosine_of_means", distributions="heads"))

    losses = [loss_for(v) for v in (-2.0, -1.0, 0.0, 1.0)]
    assert losses[0] > 0 and all(a > b for a, b in zip(losses, losses[1:]))


def test_the_conventions_that_depart_from_the_paper_are_documented():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "losses.md").read_text()
    section = text[text.index("## CalibPE"):]
    assert "The log of the hinge is dropped" in section and "eq.3" in section.lower().replace("eq. 3", "eq.3")
    assert "Sign of the distribution term for negatives" in section and "raises* its W2" in section
