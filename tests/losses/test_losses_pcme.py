"""PCME soft contrastive loss, KL prior, uniformity and PCME++'s csd loss against brute-force loops."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from pcmr import Gaussian
from pcmr.losses import (
    MatchScale,
    create_loss,
    csd_loss,
    kl_prior_loss,
    match_log_probabilities,
    soft_contrastive_loss,
    uniformity_loss,
)

DT = torch.float64


def make_pair(num_img=5, num_cap=7, dim=4, seed=0, spherical_caption=False):
    gen = torch.Generator().manual_seed(seed)
    image_mean = torch.randn(num_img, dim, generator=gen, dtype=DT).requires_grad_()
    caption_mean = torch.randn(num_cap, dim, generator=gen, dtype=DT).requires_grad_()
    image_logvar = (0.5 * torch.randn(num_img, dim, generator=gen, dtype=DT) - 1).requires_grad_()
    width = 1 if spherical_caption else dim
    caption_logvar = (0.5 * torch.randn(num_cap, width, generator=gen, dtype=DT) - 1).requires_grad_()
    positives = torch.rand(num_img, num_cap, generator=gen) < 0.3
    positives[0, :3] = True
    leaves = [image_mean, caption_mean, image_logvar, caption_logvar]
    return Gaussian(image_mean, image_logvar), Gaussian(caption_mean, caption_logvar), positives, leaves


def brute_force_pcme(image_samples, caption_samples, positives, a, b):
    """Mean over pairs of -log p or -log(1 - p), p = mean over J x K samples of sigmoid(-a d + b)."""
    num_img, num_cap = positives.shape
    losses = []
    for i in range(num_img):
        for c in range(num_cap):
            probs = []
            for v in image_samples[i]:
                for t in caption_samples[c]:
                    distance = torch.sqrt(((v - t) ** 2).sum())
                    probs.append(torch.sigmoid(-a * distance + b))
            p = sum(probs) / len(probs)
            losses.append(-torch.log(p) if positives[i, c] else -torch.log(1 - p))
    return sum(losses) / len(losses)


def test_match_log_probabilities_equal_direct_probability():
    gen = torch.Generator().manual_seed(1)
    distances = torch.rand(3, 4, 5, 2, generator=gen, dtype=DT) * 2
    log_p, log_not_p = match_log_probabilities(distances, 3.0, 2.0)
    p = torch.sigmoid(-3.0 * distances + 2.0).mean(dim=(2, 3))
    torch.testing.assert_close(log_p, p.log())
    torch.testing.assert_close(log_not_p, (1 - p).log())


@pytest.mark.parametrize("num_samples", [(3, 2), (1, 1), (7, 7)])
def test_soft_contrastive_equals_brute_force_over_fixed_samples(num_samples):
    image, caption, positives, leaves = make_pair(seed=num_samples[0])
    gen = torch.Generator().manual_seed(5)
    image_samples = image.sample(num_samples[0], generator=gen)
    caption_samples = caption.sample(num_samples[1], generator=gen)
    a = torch.tensor(2.5, dtype=DT, requires_grad=True)
    b = torch.tensor(1.5, dtype=DT, requires_grad=True)
    got = soft_contrastive_loss(
        image, caption, positives, a, b, image_samples=image_samples, caption_samples=caption_samples
    )
    want = brute_force_pcme(image_samples, caption_samples, positives, a, b)
    torch.testing.assert_close(got, want)
    inputs = [*leaves, a, b]
    got_grads = torch.autograd.grad(got, inputs, retain_graph=True)
    for g_got, g_want in zip(got_grads, torch.autograd.grad(want, inputs, retain_graph=True)):
        torch.testing.assert_close(g_got, g_want)
    total = soft_contrastive_loss(
        image, caption, positives, a, b, image_samples=image_samples, caption_samples=caption_samples,
        reduction="sum",
    )
    torch.testing.assert_close(total, got * positives.numel())


def test_generator_draws_image_then_caption_samples():
    image, caption, positives, _ = make_pair(seed=2)
    got = soft_contrastive_loss(
        image, caption, positives, 4.0, 3.0, num_samples=4, generator=torch.Generator().manual_seed(9)
    )
    gen = torch.Generator().manual_seed(9)
    image_samples, caption_samples = image.sample(4, generator=gen), caption.sample(4, generator=gen)
    want = brute_force_pcme(image_samples, caption_samples, positives, 4.0, 3.0)
    torch.testing.assert_close(got, want)


def test_soft_contrastive_finite_at_logits_plus_minus_50():
    samples = torch.zeros(2, 3, 4, dtype=DT, requires_grad=True)
    image = Gaussian(torch.zeros(2, 4, dtype=DT), torch.zeros(2, 4, dtype=DT))
    positives = torch.tensor([[True, False], [False, True]])
    far = samples + torch.tensor([[[0.0]], [[100.0]]], dtype=DT)  # image 1 far from caption 0
    a = torch.tensor(1.0, dtype=DT, requires_grad=True)
    b = torch.tensor(50.0, dtype=DT, requires_grad=True)
    loss = soft_contrastive_loss(image, image, positives, a, b, image_samples=far, caption_samples=samples)
    grads = torch.autograd.grad(loss, [samples, a, b])
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
    # pair (0,1): d = 0, logit +50, negative -> -log(1 - sigmoid(50)) = 50 + log1p(exp(-50)) ~ 50
    # pair (1,0): d = 100 * 2, logit -150, negative -> ~0; (1,1): positive, logit -150 -> ~150
    assert loss.item() == pytest.approx((math.log1p(math.exp(-50)) * 1 + 50.0 + 150.0) / 4, rel=1e-6)


def test_kl_prior_matches_torch_distributions():
    image, caption, _, leaves = make_pair(spherical_caption=True)
    for gaussian in (image, caption):
        logvar = gaussian.expanded_logvar()
        per_instance = kl_divergence(Normal(gaussian.mean, (0.5 * logvar).exp()), Normal(0.0, 1.0)).sum(1)
        torch.testing.assert_close(kl_prior_loss(gaussian), per_instance.mean())
        torch.testing.assert_close(kl_prior_loss(gaussian, reduction="sum"), per_instance.sum())
        torch.testing.assert_close(
            kl_prior_loss(gaussian, reduction="element_mean"), per_instance.mean() / gaussian.dim
        )
    with pytest.raises(ValueError, match="point embedding"):
        kl_prior_loss(Gaussian.point(torch.zeros(2, 3)))


def test_uniformity_matches_loop_and_pdist_form():
    gen = torch.Generator().manual_seed(3)
    points = torch.randn(5, 3, 4, generator=gen, dtype=DT).requires_grad_()
    got = uniformity_loss(points, t=2.0)
    flat = points.reshape(-1, 4)
    terms = [torch.exp(-2.0 * ((flat[p] - flat[q]) ** 2).sum()) for p in range(15) for q in range(p + 1, 15)]
    want = torch.log(sum(terms) / len(terms))
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got, torch.pdist(flat).pow(2).mul(-2.0).exp().mean().log())  # PCME release form
    torch.testing.assert_close(torch.autograd.grad(got, points)[0], torch.autograd.grad(want, points)[0])
    same = torch.zeros(4, 3, dtype=DT, requires_grad=True)
    value = uniformity_loss(same)
    assert value.item() == 0.0 and torch.isfinite(torch.autograd.grad(value, same)[0]).all()


def test_pcme_module_terms_and_release_scaling():
    image, caption, positives, leaves = make_pair(seed=4)
    loss_fn = create_loss(
        "pcme", num_samples=3, init_a=6.0, init_b=2.0, lambda_kl=0.01, lambda_unif=0.5, kl_form="logvar"
    ).double()
    gen = torch.Generator().manual_seed(0)
    image_samples, caption_samples = image.sample(3, generator=gen), caption.sample(3, generator=gen)
    terms = loss_fn(image=image, caption=caption, positives=positives,
                    image_samples=image_samples, caption_samples=caption_samples)
    a, b = loss_fn.match_scale.a, loss_fn.match_scale.b
    assert a.item() == pytest.approx(6.0) and b.item() == pytest.approx(2.0)
    matching = 2 * positives.numel() * brute_force_pcme(image_samples, caption_samples, positives, a, b)
    kl = kl_prior_loss(image, "sum") + kl_prior_loss(caption, "sum")
    unif = uniformity_loss(torch.cat([image_samples.reshape(-1, 4), caption_samples.reshape(-1, 4)]))
    torch.testing.assert_close(terms["soft_contrastive"], matching)
    torch.testing.assert_close(terms["kl_prior"], kl)
    torch.testing.assert_close(terms["uniformity"], unif)
    torch.testing.assert_close(terms["loss"], matching + 0.01 * kl + 0.5 * unif)
    params = [loss_fn.match_scale.a_raw, loss_fn.match_scale.b]
    got = torch.autograd.grad(terms["loss"], [*leaves, *params], retain_graph=True)
    want = torch.autograd.grad(matching + 0.01 * kl + 0.5 * unif, [*leaves, *params])
    for g_got, g_want in zip(got, want):
        torch.testing.assert_close(g_got, g_want)
    options = loss_fn.similarity_options()
    assert loss_fn.similarity_name == "match_prob" and set(options) == {"a", "b"}
    assert all(isinstance(value, float) for value in options.values())


def test_pcme_module_accepts_point_embeddings_without_kl():
    gen = torch.Generator().manual_seed(0)
    image = Gaussian.point(torch.randn(3, 4, generator=gen).requires_grad_())
    caption = Gaussian.point(torch.randn(3, 4, generator=gen))
    terms = create_loss("pcme")(image=image, caption=caption, positives=torch.eye(3, dtype=torch.bool))
    assert terms["kl_prior"].item() == 0.0 and torch.isfinite(terms["loss"])


def test_pcme_release_a_b_mapping():
    # PCME's release: sigmoid(2 (-a d + b)) with its (a, b) = ours / 2
    distances = torch.linspace(0, 2, 9, dtype=DT).view(1, 1, 9, 1)
    log_p, _ = match_log_probabilities(distances, 30.0, 30.0)
    release = torch.sigmoid(2 * (-15.0 * distances + 15.0)).mean()
    torch.testing.assert_close(log_p.exp()[0, 0], release)


def test_match_scale_keeps_a_positive():
    scale = MatchScale(1e-3, -2.0)
    assert scale.a.item() == pytest.approx(1e-3) and scale.b.item() == -2.0
    assert MatchScale(200.0, 0.0).a.item() == pytest.approx(200.0)
    with pytest.raises(ValueError, match="init_a"):
        MatchScale(0.0, 1.0)


def brute_force_csd(image, caption, positives, a, b, smoothing=0.0):
    total = []
    for i in range(image.num):
        for c in range(caption.num):
            csd = ((image.mean[i] - caption.mean[c]) ** 2).sum() + image.var[i].expand(image.dim).sum() \
                + caption.var[c].expand(caption.dim).sum()
            logit = -a * csd + b
            target = 1.0 - smoothing if positives[i, c] else smoothing
            p = torch.sigmoid(logit)
            total.append(-(target * torch.log(p) + (1 - target) * torch.log(1 - p)))
    return sum(total) / len(total)


def test_csd_loss_matches_loop_values_and_gradients():
    image, caption, positives, leaves = make_pair(seed=6, spherical_caption=True)
    a = torch.tensor(0.7, dtype=DT, requires_grad=True)
    b = torch.tensor(1.5, dtype=DT, requires_grad=True)
    got = csd_loss(image, caption, positives, a, b)
    want = brute_force_csd(image, caption, positives, a, b)
    torch.testing.assert_close(got, want)
    inputs = [*leaves, a, b]
    for g_got, g_want in zip(torch.autograd.grad(got, inputs), torch.autograd.grad(want, inputs)):
        torch.testing.assert_close(g_got, g_want)


def test_csd_module_release_scaling_and_extreme_logits():
    image, caption, positives, leaves = make_pair(seed=7)
    loss_fn = create_loss("pcme_csd", init_a=3.0, init_b=1.0, lambda_kl=0.1, lambda_pseudo=0.0,
                          label_smoothing=0.0).double()
    terms = loss_fn(image=image, caption=caption, positives=positives)
    a, b = loss_fn.match_scale.a, loss_fn.match_scale.b
    matching = 2 * brute_force_csd(image, caption, positives, a, b)
    kl = kl_prior_loss(image, "element_mean") + kl_prior_loss(caption, "element_mean")
    torch.testing.assert_close(terms["loss"], matching + 0.1 * kl)
    assert loss_fn.similarity_name == "csd" and loss_fn.similarity_options() == {}
    # logits of +-50 and beyond: finite loss and gradients
    far = Gaussian(torch.tensor([[0.0, 0.0], [10.0, 0.0]], dtype=DT, requires_grad=True),
                   torch.full((2, 2), -20.0, dtype=DT))
    loss = csd_loss(far, far, torch.tensor([[False, True], [True, False]]), 1.0, 50.0)
    (grad,) = torch.autograd.grad(loss, far.mean)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert loss.item() == pytest.approx((50.0 + 50.0 + 50.0 + 50.0) / 4, rel=1e-6)


def test_pcme_without_uniformity_skips_the_term_and_bad_samples_raise():
    image, caption, positives, _ = make_pair(seed=8)
    terms = create_loss("pcme", lambda_unif=0.0, num_samples=2).double()(
        image=image, caption=caption, positives=positives
    )
    assert "uniformity" not in terms and torch.isfinite(terms["loss"])
    with pytest.raises(ValueError, match=r"image_samples must have shape \[5, J, 4\]"):
        soft_contrastive_loss(image, caption, positives, 1.0, 0.0, image_samples=torch.zeros(5, 2, 3, dtype=DT))


def test_log_sigmoid_matches_torch_values_and_gradients():
    from torch.nn import functional as F

    from pcmr.losses.soft_contrastive import log_sigmoid

    x = torch.cat([torch.linspace(-120, 120, 2001, dtype=DT), torch.zeros(1, dtype=DT)]).requires_grad_()
    ours, theirs = log_sigmoid(x), F.logsigmoid(x)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=5e-17)
    (grad_ours,) = torch.autograd.grad(ours.sum(), x)
    (grad_theirs,) = torch.autograd.grad(theirs.sum(), x)
    torch.testing.assert_close(grad_ours, grad_theirs, rtol=1e-12, atol=5e-17)
    assert grad_ours[-1].item() == 0.5
    for dtype in (DT, torch.float32):  # outside autograd the in-place path gives the same values, input untouched
        plain = x.detach().to(dtype)
        with torch.no_grad():
            assert torch.equal(log_sigmoid(plain), log_sigmoid(plain.clone().requires_grad_()))
        assert torch.equal(log_sigmoid(plain), log_sigmoid(plain.clone().requires_grad_()).detach())
        assert torch.equal(plain, x.detach().to(dtype))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("num", "dim", "spread"), [(2, 1, 1.0), (23, 7, 0.2), (61, 5, 9.0), (130, 33, 1.5)])
def test_fused_uniformity_matches_pairwise_reference(dtype, num, dim, spread):
    """The fused value and gradient against the pairwise form in float64, from clustered points to
    points so far apart that all but the closest pairs underflow in float32."""
    gen = torch.Generator().manual_seed(num)
    points = (torch.randn(num, dim, generator=gen, dtype=torch.float64) * spread).requires_grad_()
    want = torch.pdist(points).pow(2).mul(-2.0).logsumexp(0) - math.log(num * (num - 1) / 2)
    want_grad = torch.autograd.grad(want, points)[0]
    cast = points.detach().to(dtype).requires_grad_()
    got = uniformity_loss(cast, t=2.0)
    got_grad = torch.autograd.grad(got, cast)[0]
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    torch.testing.assert_close(got.double(), want, **tolerance)
    scale = want_grad.abs().max().clamp_min(1e-30)
    torch.testing.assert_close(got_grad.double() / scale, want_grad / scale, **tolerance)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("num_img", "num_cap", "j", "k", "a_value"), [(3, 5, 2, 3, 6.0), (7, 4, 1, 1, 2.0), (6, 6, 3, 2, 60.0)])
def test_fused_pair_loss_values_and_gradients_match_brute_force(dtype, num_img, num_cap, j, k, a_value):
    """The fused per-pair loss against the double loop in float64: samples, a and b all get their
    gradient; a = 60 drives logits far into the tails."""
    gen = torch.Generator().manual_seed(num_img * 10 + j)
    image_samples = torch.randn(num_img, j, 5, generator=gen, dtype=torch.float64)
    caption_samples = torch.randn(num_cap, k, 5, generator=gen, dtype=torch.float64)
    positives = torch.rand(num_img, num_cap, generator=gen) < 0.4
    leaves = [image_samples.requires_grad_(), caption_samples.requires_grad_(),
              torch.tensor(a_value, dtype=torch.float64, requires_grad=True),
              torch.tensor(1.5, dtype=torch.float64, requires_grad=True)]
    want = brute_force_pcme(leaves[0], leaves[1], positives, leaves[2], leaves[3])
    want_grads = torch.autograd.grad(want, leaves)
    cast = [t.detach().to(dtype).requires_grad_() for t in leaves]
    image = Gaussian(torch.zeros(num_img, 5, dtype=dtype), torch.zeros(num_img, 5, dtype=dtype))
    caption = Gaussian(torch.zeros(num_cap, 5, dtype=dtype), torch.zeros(num_cap, 5, dtype=dtype))
    got = soft_contrastive_loss(image, caption, positives, cast[2], cast[3], image_samples=cast[0],
                                caption_samples=cast[1])
    got_grads = torch.autograd.grad(got, cast)
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-9, "atol": 1e-12}
    torch.testing.assert_close(got.double(), want, **tolerance)
    for name, got_grad, want_grad in zip(("image_samples", "caption_samples", "a", "b"), got_grads, want_grads):
        torch.testing.assert_close(got_grad.double(), want_grad, **tolerance, msg=name)
    # a caption sample equal to an image sample: distance at the floor, finite gradients (the loop's are NaN)
    same = cast[1].detach().clone()
    same[0, 0] = cast[0].detach()[0, 0]
    same.requires_grad_()
    value = soft_contrastive_loss(image, caption, positives, cast[2], cast[3], image_samples=cast[0],
                                  caption_samples=same)
    assert all(torch.isfinite(g).all() for g in torch.autograd.grad(value, [cast[0], same]))


def test_uniformity_points_subsample_as_the_release_draws_them():
    """``uniformity_points=P``: the uniformity term over P samples drawn with replacement from the
    batch's samples (PCME's release: ``np.random.choice(len(x), 128)``, then its pdist form)."""
    image, caption, positives, _ = make_pair(seed=5)
    image_samples, caption_samples = image.sample(3), caption.sample(3)
    all_samples = torch.cat([image_samples.reshape(-1, 4), caption_samples.reshape(-1, 4)])  # 2 * 3 * ... points
    points = 5
    assert all_samples.shape[0] > points
    loss_fn = create_loss("pcme", num_samples=3, lambda_unif=1.0, uniformity_points=points).double()
    terms = loss_fn(image=image, caption=caption, positives=positives, image_samples=image_samples,
                    caption_samples=caption_samples, generator=torch.Generator().manual_seed(11))
    chosen = torch.randint(all_samples.shape[0], (points,), generator=torch.Generator().manual_seed(11))
    subset = all_samples[chosen]
    release_form = torch.pdist(subset).pow(2).mul(-2.0).exp().mean().log()
    torch.testing.assert_close(terms["uniformity"], release_form)
    everything = create_loss("pcme", num_samples=3, lambda_unif=1.0).double()(
        image=image, caption=caption, positives=positives, image_samples=image_samples,
        caption_samples=caption_samples)
    torch.testing.assert_close(everything["uniformity"], uniformity_loss(all_samples))
    few = create_loss("pcme", num_samples=3, lambda_unif=1.0, uniformity_points=10_000).double()(
        image=image, caption=caption, positives=positives, image_samples=image_samples,
        caption_samples=caption_samples)
    torch.testing.assert_close(few["uniformity"], everything["uniformity"])  # fewer samples than P: all
    for bad in (1, 2.5, True):
        with pytest.raises(ValueError, match="uniformity_points"):
            create_loss("pcme", uniformity_points=bad)


def test_logsumexp_over_samples_equals_torch_logsumexp_with_infinite_entries():
    from pcmr.losses.soft_contrastive import _logsumexp_over_samples

    gen = torch.Generator().manual_seed(5)
    terms = torch.randn(5, 3, 4, 2, generator=gen, dtype=torch.float64) * 30 - 40
    terms[1, :, 2, :] = -math.inf  # every sample of one pair at -inf
    terms[3, 0, 1, 1] = -math.inf  # one sample of another
    terms[4, 2, 0, 0] = 700.0  # beyond exp's range
    got = _logsumexp_over_samples(terms.clone())
    torch.testing.assert_close(got, torch.logsumexp(terms, dim=(1, 3)), rtol=1e-13, atol=0)
    assert got[1, 2] == -math.inf


@pytest.mark.parametrize("smoothing", [1e-4, 0.1, 0.3])
def test_csd_label_smoothing_matches_loop(smoothing):
    """Targets 1 - eps for matches and eps for the rest (PCME++'s release), several positives per row."""
    image, caption, positives, leaves = make_pair(seed=8)
    loss_fn = create_loss("pcme_csd", init_a=2.0, init_b=0.5, lambda_kl=0.0, lambda_pseudo=0.0,
                          label_smoothing=smoothing).double()
    terms = loss_fn(image=image, caption=caption, positives=positives)
    want = 2 * brute_force_csd(image, caption, positives, loss_fn.match_scale.a, loss_fn.match_scale.b, smoothing)
    torch.testing.assert_close(terms["loss"], want)
    a = torch.tensor(0.7, dtype=DT)
    torch.testing.assert_close(csd_loss(image, caption, positives, a, 0.2, label_smoothing=smoothing),
                               brute_force_csd(image, caption, positives, a, 0.2, smoothing))


@pytest.mark.parametrize("smoothing", [-0.1, 0.5])
def test_csd_label_smoothing_is_checked(smoothing):
    with pytest.raises(ValueError, match="label_smoothing"):
        create_loss("pcme_csd", label_smoothing=smoothing)


def _uniformity_with_floored_weights(points: torch.Tensor, t: float) -> torch.Tensor:
    """The earlier fused form: exponents raised to the smallest normal number's (plus one) instead of
    dropped, so its softmax weights keep every pair (autograd through the same formulas)."""
    weights = (-t * torch.cdist(points, points).pow(2)).clamp(max=0.0)
    mask = torch.eye(points.shape[0], dtype=torch.bool)
    top = weights.masked_fill(mask, float("-inf")).max().detach()
    floor = math.log(torch.finfo(points.dtype).tiny) + 1.0
    shifted = (weights - top).clamp(min=floor).masked_fill(mask, float("-inf"))
    num = points.shape[0]
    return top + shifted.exp().sum().log() - math.log(num * (num - 1))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("num", "dim", "spread"), [(97, 16, 0.5), (200, 48, 3.0), (150, 9, 8.0)])
def test_uniformity_without_subnormal_weights_keeps_values_and_gradients(dtype, num, dim, spread):
    """Weights whose exponent falls below the cutoff are exactly 0: no saved weight times a coordinate
    is subnormal, and value and gradient equal the floored form (and the float64 pairwise form)
    to float tolerance, from clustered points to points whose pairs nearly all underflow."""
    gen = torch.Generator().manual_seed(num + dim)
    base = torch.randn(num, dim, generator=gen, dtype=torch.float64) * spread
    points = base.to(dtype).requires_grad_()
    got = uniformity_loss(points, t=2.0)
    weights = got.grad_fn.next_functions[0][0].saved_tensors[1]  # the fused function's exp(l - max l)
    products = (weights.unsqueeze(2) * points.detach().unsqueeze(0)).abs()
    tiny = torch.finfo(dtype).tiny
    assert not ((products > 0) & (products < tiny)).any()
    got_grad = torch.autograd.grad(got, points)[0]
    old_points = base.to(dtype).requires_grad_()
    old = _uniformity_with_floored_weights(old_points, 2.0)
    old_grad = torch.autograd.grad(old, old_points)[0]
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-11, "atol": 1e-13}
    torch.testing.assert_close(got, old, **tolerance)
    scale = old_grad.abs().max()
    torch.testing.assert_close(got_grad / scale, old_grad / scale, **tolerance)
    reference = base.clone().requires_grad_()
    want = torch.pdist(reference).pow(2).mul(-2.0).logsumexp(0) - math.log(num * (num - 1) / 2)
    torch.testing.assert_close(got.double(), want, **tolerance)
    want_grad = torch.autograd.grad(want, reference)[0]
    torch.testing.assert_close(got_grad.double() / want_grad.abs().max(), want_grad / want_grad.abs().max(),
                               **tolerance)
