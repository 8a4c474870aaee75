"""pcmr.similarity against slow float64 references written from the formulas in docs/similarity.md (loops over
pairs and dimensions), POT, Monte Carlo and brute-force sample loops."""

from __future__ import annotations

import math

import pytest
import torch

from pcmr import Gaussian
from pcmr.similarity import get_similarity, list_similarities, paired, pairwise

ALL = list_similarities()
SAMPLED = [name for name in ALL if get_similarity(name).sampled]
#: the papers' scores: each must stay registered. Every registered score (these and any new one) is
#: tested by the tests parametrised over ``ALL``, against its reference in ``reference_score``.
PAPERS = {"cosine", "l2", "kl", "kl_reverse", "min_kl", "js", "elk", "bhattacharyya", "wasserstein",
          "mahalanobis_caption", "mahalanobis_image", "csd", "avg_l2", "match_prob", "max_cosine"}
A, B = 1.7, 0.6  # match_prob parameters used against the reference


# ----------------------------------------------------------------------------- reference (loops)
def _kl(m1, v1, m2, v2):
    return 0.5 * sum(math.log(v2[d] / v1[d]) + v1[d] / v2[d] + (m1[d] - m2[d]) ** 2 / v2[d] - 1
                     for d in range(len(m1)))


def reference_score(name, m1, lv1, m2, lv2, z1=None, z2=None):
    """One pair from the docs/similarity.md table; ``lv`` are per-dimension lists (or None for points)."""
    dim = len(m1)
    v1 = [math.exp(x) for x in lv1] if lv1 is not None else [0.0] * dim
    v2 = [math.exp(x) for x in lv2] if lv2 is not None else [0.0] * dim
    diff2 = [(m1[d] - m2[d]) ** 2 for d in range(dim)]
    if name in ("cosine", "max_cosine"):  # max_cosine reads a Gaussian as a set of one point (its mean)
        n1, n2 = math.sqrt(sum(x * x for x in m1)), math.sqrt(sum(x * x for x in m2))
        return sum(m1[d] * m2[d] for d in range(dim)) / (n1 * n2)
    if name == "l2":
        return -math.sqrt(sum(diff2))
    if name == "kl":
        return -_kl(m1, v1, m2, v2)
    if name == "kl_reverse":
        return -_kl(m2, v2, m1, v1)
    if name == "min_kl":
        return -min(_kl(m1, v1, m2, v2), _kl(m2, v2, m1, v1))
    if name == "js":
        return -0.5 * (_kl(m1, v1, m2, v2) + _kl(m2, v2, m1, v1))
    if name == "elk":
        return -0.5 * sum(diff2[d] / (v1[d] + v2[d]) + math.log(v1[d] + v2[d]) + math.log(2 * math.pi)
                          for d in range(dim))
    if name == "bhattacharyya":
        return -sum(0.25 * diff2[d] / (v1[d] + v2[d])
                    + 0.5 * math.log((v1[d] + v2[d]) / (2 * math.sqrt(v1[d]) * math.sqrt(v2[d])))
                    for d in range(dim))
    if name == "wasserstein":
        return -math.sqrt(sum(diff2[d] + (math.sqrt(v1[d]) - math.sqrt(v2[d])) ** 2 for d in range(dim)))
    if name == "mahalanobis_caption":
        return -math.sqrt(sum(diff2[d] / v2[d] for d in range(dim)))
    if name == "mahalanobis_image":
        return -math.sqrt(sum(diff2[d] / v1[d] for d in range(dim)))
    if name == "csd":
        return -(sum(diff2) + sum(v1) + sum(v2))
    dists = [math.sqrt(sum((zj[d] - zk[d]) ** 2 for d in range(dim))) for zj in z1 for zk in z2]
    if name == "avg_l2":
        return -sum(dists) / len(dists)
    if name == "match_prob":
        return math.log(sum(1 / (1 + math.exp(-(-A * x + B))) for x in dists) / len(dists))
    raise AssertionError(name)


def reference_matrix(name, images, captions, zi=None, zc=None):
    def rows(g):
        lv = None if g.logvar is None else g.expanded_logvar().tolist()
        return g.mean.tolist(), lv
    m1, lv1 = rows(images)
    m2, lv2 = rows(captions)
    out = torch.empty(images.num, captions.num, dtype=torch.float64)
    for i in range(images.num):
        for c in range(captions.num):
            out[i, c] = reference_score(
                name, m1[i], None if lv1 is None else lv1[i], m2[c], None if lv2 is None else lv2[c],
                None if zi is None else zi[i].tolist(), None if zc is None else zc[c].tolist())
    return out


# ----------------------------------------------------------------------------- helpers
def gaussian(n, d, width, seed, dtype=torch.float64, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    mean = torch.randn(n, d, generator=gen, dtype=dtype)
    logvar = None if width is None else 0.5 * torch.randn(n, width, generator=gen, dtype=dtype)
    if requires_grad:
        mean.requires_grad_()
        if logvar is not None:
            logvar.requires_grad_()
    return Gaussian(mean, logvar)


def options_for(name, images, captions, j=3, k=2, seed=5):
    """Options that make a score deterministic: pre-drawn samples and fixed a, b."""
    spec = get_similarity(name)
    opts = {}
    if spec.sampled:
        gen = torch.Generator().manual_seed(seed)
        opts["image_samples"] = images.detach().sample(j, generator=gen)
        opts["caption_samples"] = captions.detach().sample(k, generator=gen)
    if name == "match_prob":
        opts.update(a=A, b=B)
    return opts


def widths(name, d):
    """(image, caption) logvar widths to test: ellipsoidal, spherical, mixed, points where allowed."""
    spec = get_similarity(name)
    cases = [(d, d), (1, 1), (1, d), (d, 1)]
    if not spec.needs_image_variance:
        cases.append((None, d))
    if not spec.needs_caption_variance:
        cases.append((d, None))
    if not spec.needs_image_variance and not spec.needs_caption_variance:
        cases.append((None, None))
    return cases


# ----------------------------------------------------------------------------- registry
def test_the_papers_scores_are_registered_with_their_flags():
    assert PAPERS <= set(ALL)
    need_both = {"kl", "kl_reverse", "min_kl", "js", "elk", "bhattacharyya"}
    for n in PAPERS:
        spec = get_similarity(n)
        assert spec.sampled == (n in ("avg_l2", "match_prob"))
        assert spec.needs_image_variance == (n in need_both or n == "mahalanobis_image")
        assert spec.needs_caption_variance == (n in need_both or n == "mahalanobis_caption")


@pytest.mark.parametrize("name", ALL)
def test_registry_entry_is_named_and_listed_once(name):
    spec = get_similarity(name)
    assert spec.name == name and ALL.count(name) == 1
    assert ALL == list_similarities()  # a stable order (the order of registration)


def test_unknown_name_and_option_raise():
    g = gaussian(3, 4, 4, 0)
    with pytest.raises(ValueError, match="expected one of: .*cosine"):
        pairwise("nope", g, g)
    with pytest.raises(ValueError, match="unknown option"):
        pairwise("kl", g, g, num_samples=3)
    with pytest.raises(ValueError, match="unknown option"):
        paired("match_prob", g, g, c=1.0)


# ----------------------------------------------------------------------------- values vs reference
@pytest.mark.parametrize("name", ALL)
def test_pairwise_and_paired_match_reference(name):
    d = 3
    for k, (wi, wc) in enumerate(widths(name, d)):
        images, captions = gaussian(5, d, wi, 10 + k), gaussian(7, d, wc, 20 + k)
        opts = options_for(name, images, captions)
        ref = reference_matrix(name, images, captions, opts.get("image_samples"), opts.get("caption_samples"))
        torch.testing.assert_close(pairwise(name, images, captions, block_size=2, **opts), ref,
                                   rtol=1e-10, atol=1e-10)
        cap5 = captions[:5]
        opts5 = dict(opts)
        if "caption_samples" in opts:
            opts5["caption_samples"] = opts["caption_samples"][:5]
        torch.testing.assert_close(paired(name, images, cap5, **opts5), ref[:, :5].diagonal(),
                                   rtol=1e-10, atol=1e-10)


def test_kl_against_monte_carlo():
    gen = torch.Generator().manual_seed(3)
    d, num = 3, 400_000
    m1, m2 = torch.randn(d, generator=gen, dtype=torch.float64), torch.randn(d, generator=gen, dtype=torch.float64)
    lv1, lv2 = 0.4 * torch.randn(d, generator=gen, dtype=torch.float64), 0.4 * torch.randn(d, generator=gen, dtype=torch.float64)
    p = torch.distributions.Normal(m1, (lv1 / 2).exp())
    q = torch.distributions.Normal(m2, (lv2 / 2).exp())
    z = p.sample((num,))
    log_ratio = (p.log_prob(z) - q.log_prob(z)).sum(1)
    estimate, stderr = float(log_ratio.mean()), float(log_ratio.std()) / math.sqrt(num)
    images, captions = Gaussian(m1[None], lv1[None]), Gaussian(m2[None], lv2[None])
    kl = -float(pairwise("kl", images, captions))
    assert abs(kl - estimate) < 5 * stderr
    z2 = q.sample((num,))
    reverse = float((q.log_prob(z2) - p.log_prob(z2)).sum(1).mean())
    assert abs(-float(pairwise("kl_reverse", images, captions)) - reverse) < 0.02 * max(1.0, reverse)
    assert -float(pairwise("kl", images, captions)) > 0  # sign of the log-variance term


def test_wasserstein_against_pot():
    ot_gaussian = pytest.importorskip("ot.gaussian")
    images, captions = gaussian(4, 3, 3, 1), gaussian(5, 3, 3, 2)
    cov = lambda g: torch.diag_embed(g.var).numpy()  # noqa: E731
    expected = ot_gaussian.bures_wasserstein_distance(images.mean.numpy(), captions.mean.numpy(),
                                                      cov(images), cov(captions))
    torch.testing.assert_close(-pairwise("wasserstein", images, captions),
                               torch.as_tensor(expected, dtype=torch.float64), rtol=1e-7, atol=1e-7)


def test_sampled_pair_distances_and_safe_sqrt():
    from pcmr.similarity import safe_sqrt, sampled_pair_distances

    zi = torch.randn(3, 2, 4, dtype=torch.float64)
    zc = torch.randn(5, 3, 4, dtype=torch.float64)
    zc[1, 2] = zi[2, 1]  # an identical pair of samples
    dist = sampled_pair_distances(zi, zc)
    assert dist.shape == (3, 5, 2, 3)
    for i in range(3):
        for c in range(5):
            for j in range(2):
                for k in range(3):
                    expected = math.sqrt(sum((float(zi[i, j, d]) - float(zc[c, k, d])) ** 2 for d in range(4)))
                    assert abs(float(dist[i, c, j, k]) - expected) < 1e-5
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    y = safe_sqrt(x)
    y.sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    zi.requires_grad_()
    sampled_pair_distances(zi, zi).sum().backward()
    assert torch.isfinite(zi.grad).all()
    with pytest.raises(ValueError, match="image_samples"):
        sampled_pair_distances(zi[0], zc)


# ----------------------------------------------------------------------------- blocking
@pytest.mark.parametrize("name", ALL)
def test_block_size_invariance(name, monkeypatch):
    from pcmr.similarity import product_kernels as kernel
    from pcmr.similarity import sampled

    monkeypatch.setattr(kernel, "TILE_ROWS", 2)
    monkeypatch.setattr(kernel, "TILE_ELEMENTS", 2 * 3 * 5)  # tiles of 2 x 3 captions (D = 5)
    monkeypatch.setattr(sampled, "TILE_CAPTIONS", 3)
    monkeypatch.setattr(sampled, "TILE_ELEMENTS", 2 * 2 * 3 * 3)
    images, captions = gaussian(13, 5, 5, 1), gaussian(11, 5, 1, 2)
    opts = options_for(name, images, captions, j=2, k=3)
    full = pairwise(name, images, captions, block_size=13, **opts)
    ref = reference_matrix(name, images, captions, opts.get("image_samples"), opts.get("caption_samples"))
    torch.testing.assert_close(full, ref, rtol=1e-10, atol=1e-10)
    for block_size in (1, 4, 12, None):  # 4 and 12 leave a last block of 1
        torch.testing.assert_close(pairwise(name, images, captions, block_size=block_size, **opts), full,
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ALL)
def test_spherical_equals_ellipsoidal(name):
    images, captions = gaussian(4, 6, 1, 3), gaussian(5, 6, 1, 4)
    expanded = (Gaussian(images.mean, images.expanded_logvar().contiguous()),
                Gaussian(captions.mean, captions.expanded_logvar().contiguous()))
    opts = options_for(name, images, captions)
    for pair in ((images, expanded[1]), (expanded[0], captions), expanded):
        torch.testing.assert_close(pairwise(name, *pair, **opts), pairwise(name, images, captions, **opts),
                                   rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ALL)
def test_float32_default_and_autograd_path_agrees(name):
    images, captions = gaussian(6, 8, 8, 5, dtype=torch.float32), gaussian(9, 8, 8, 6, dtype=torch.float32)
    opts = options_for(name, images, captions)
    fast = pairwise(name, images, captions, **opts)
    assert fast.dtype == torch.float32 and fast.shape == (6, 9)
    graded = Gaussian(images.mean.clone().requires_grad_(), images.logvar)
    slow = pairwise(name, graded, captions, **opts)
    assert slow.requires_grad or get_similarity(name).sampled
    torch.testing.assert_close(slow.detach(), fast, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- gradients
def _inputs_for_grad(name, n, m, d):
    spec = get_similarity(name)
    wi = d if spec.needs_image_variance or name != "cosine" else None
    images = gaussian(n, d, wi, 7, requires_grad=True)
    captions = gaussian(m, d, 1 if spec.needs_caption_variance else d, 8, requires_grad=True)
    return images, captions


@pytest.mark.parametrize("name", ALL)
def test_gradcheck_pairwise_and_paired(name):
    images, captions = _inputs_for_grad(name, 3, 2, 3)
    leaves = [t for t in (images.mean, images.logvar, captions.mean, captions.logvar) if t is not None]

    def options():
        opts = {}
        if get_similarity(name).sampled:
            opts.update(num_samples=2, generator=torch.Generator().manual_seed(11))
        return opts

    def run_pairwise(*tensors):
        it = iter(tensors)
        img = Gaussian(next(it), next(it) if images.logvar is not None else None)
        cap = Gaussian(next(it), next(it) if captions.logvar is not None else None)
        return pairwise(name, img, cap, block_size=2, **options())

    def run_paired(*tensors):
        it = iter(tensors)
        img = Gaussian(next(it)[:2], (next(it)[:2]) if images.logvar is not None else None)
        cap = Gaussian(next(it), next(it) if captions.logvar is not None else None)
        return paired(name, img, cap, **options())

    assert torch.autograd.gradcheck(run_pairwise, leaves, eps=1e-6, atol=1e-5)
    assert torch.autograd.gradcheck(run_paired, leaves, eps=1e-6, atol=1e-5)


def test_match_prob_parameters_are_differentiable():
    images, captions = gaussian(3, 4, 4, 1), gaussian(2, 4, 4, 2)
    a = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    opts = options_for("match_prob", images, captions)
    opts.pop("a"), opts.pop("b")
    assert torch.autograd.gradcheck(lambda a, b: pairwise("match_prob", images, captions, a=a, b=b, **opts),
                                    (a, b))
    opts2 = {k: v[:2] for k, v in opts.items()}
    assert torch.autograd.gradcheck(lambda a, b: paired("match_prob", images[:2], captions, a=a, b=b, **opts2),
                                    (a, b))
    for bad in (0.0, -1.0, torch.tensor([1.0]), "x"):
        with pytest.raises(ValueError, match="match_prob: a"):
            pairwise("match_prob", images, captions, a=bad)


def test_generator_gives_reproducible_sampled_scores():
    images, captions = gaussian(3, 4, 4, 1), gaussian(5, 4, 1, 2)
    first = pairwise("match_prob", images, captions, num_samples=4, generator=torch.Generator().manual_seed(9))
    again = pairwise("match_prob", images, captions, num_samples=4, generator=torch.Generator().manual_seed(9),
                     block_size=1)
    torch.testing.assert_close(first, again, rtol=0, atol=1e-14)
    gen = torch.Generator().manual_seed(9)
    zi, zc = images.sample(4, generator=gen), captions.sample(4, generator=gen)
    torch.testing.assert_close(first, pairwise("match_prob", images, captions, image_samples=zi,
                                               caption_samples=zc), rtol=0, atol=1e-14)



@pytest.mark.parametrize("name", SAMPLED)
@pytest.mark.parametrize("widths", [(4, 4), (1, 4), (4, None), (None, 1)])
def test_generator_path_across_tiles_matches_presampled_reference(name, widths, monkeypatch):
    """The no-grad path writes ``mean + std * eps - centre`` straight into the tile operands;
    with several caption tiles and a partial last one it must equal the brute-force loop on
    the samples ``Gaussian.sample`` draws from the same generator state (images first)."""
    from pcmr.similarity import sampled

    monkeypatch.setattr(sampled, "TILE_CAPTIONS", 3)
    monkeypatch.setattr(sampled, "TILE_ELEMENTS", 2 * 3 * 2 * 3)
    images, captions = gaussian(5, 4, widths[0], 21), gaussian(7, 4, widths[1], 22)
    extra = {"a": A, "b": B} if name == "match_prob" else {}
    got = pairwise(name, images, captions, num_samples=3, generator=torch.Generator().manual_seed(4), **extra)
    gen = torch.Generator().manual_seed(4)
    zi, zc = images.sample(3, generator=gen), captions.sample(3, generator=gen)
    ref = reference_matrix(name, images, captions, zi, zc)
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------------- edge cases
@pytest.mark.parametrize("name", ALL)
def test_identical_inputs_finite_values_and_gradients(name):
    for width in (4, 1):
        base = gaussian(3, 4, width, 2)
        for dtype in (torch.float64, torch.float32):
            mean = base.mean.detach().to(dtype).clone().requires_grad_()
            logvar = base.logvar.detach().to(dtype).clone().requires_grad_()
            g = Gaussian(mean, logvar)
            opts = {"num_samples": 3} if get_similarity(name).sampled else {}
            if get_similarity(name).sampled:  # identical samples too
                opts = {"image_samples": g.sample(3, generator=torch.Generator().manual_seed(0))}
                opts["caption_samples"] = opts["image_samples"]
            for scores in (pairwise(name, g, g, **opts), paired(name, g, g, **opts)):
                assert torch.isfinite(scores).all()
                mean.grad = logvar.grad = None
                scores.sum().backward(retain_graph=True)
                assert mean.grad is not None and torch.isfinite(mean.grad).all()
                assert logvar.grad is None or torch.isfinite(logvar.grad).all()
            with torch.no_grad():
                assert torch.isfinite(pairwise(name, g, g, **opts)).all()


@pytest.mark.parametrize("name", ALL)
def test_extreme_log_variances_are_finite(name):
    gen = torch.Generator().manual_seed(4)
    for dtype in (torch.float64, torch.float32):
        mean = torch.randn(4, 6, generator=gen).to(dtype)
        logvar = torch.tensor([[-20.0], [20.0], [-20.0], [20.0]], dtype=dtype).expand(4, 6).contiguous()
        logvar[2, :3] = 20.0
        g = Gaussian(mean, logvar)
        for images, captions in ((g, g), (g, g[[1, 0, 3, 2]])):
            assert torch.isfinite(pairwise(name, images, captions)).all()
            assert torch.isfinite(paired(name, images, captions)).all()


@pytest.mark.parametrize("name", ALL)
def test_point_embeddings(name):
    spec = get_similarity(name)
    points, gauss = gaussian(3, 4, None, 1), gaussian(2, 4, 4, 2)
    for images, captions, needs in ((points, gauss, spec.needs_image_variance),
                                    (gauss, points, spec.needs_caption_variance)):
        if needs:
            with pytest.raises(ValueError, match="point embedding"):
                pairwise(name, images, captions)
        else:
            assert torch.isfinite(pairwise(name, images, captions)).all()


def test_bad_inputs_raise_clear_errors():
    images, captions = gaussian(3, 4, 4, 1), gaussian(2, 4, 4, 2)
    with pytest.raises(ValueError, match="dimension D"):
        pairwise("kl", images, gaussian(2, 5, 5, 3))
    with pytest.raises(ValueError, match="dtype"):
        pairwise("kl", images, captions.to(torch.float32))
    with pytest.raises(ValueError, match="block_size"):
        pairwise("kl", images, captions, block_size=0)
    with pytest.raises(ValueError, match="pcmr.Gaussian"):
        pairwise("kl", images.mean, captions)
    with pytest.raises(ValueError, match="as many images as captions"):
        paired("kl", images, captions)
    with pytest.raises(ValueError, match=r"image_samples must be a tensor of shape \[3, J, 4\]"):
        pairwise("avg_l2", images, captions, image_samples=torch.zeros(2, 3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="num_samples"):
        pairwise("avg_l2", images, captions, num_samples=0)
    assert pairwise("kl", images[:0], captions).shape == (0, 2)


@pytest.mark.parametrize("chunk_bytes", [8, 8 * 7 * 3, 2**21])
def test_rowwise_dot_matches_loop_on_strided_views(chunk_bytes):
    from pcmr.similarity._primitives import rowwise_dot

    gen = torch.Generator().manual_seed(3)
    feats = torch.randn(13, 3 * 7, generator=gen, dtype=torch.float64)
    a, b = feats[:, :7], feats[:, 14:]  # strided column blocks of one buffer
    ref = torch.tensor([sum(float(a[i, d]) * float(b[i, d]) for d in range(7)) for i in range(13)],
                       dtype=torch.float64)
    torch.testing.assert_close(rowwise_dot(a, b, chunk_bytes=chunk_bytes), ref, rtol=1e-14, atol=1e-14)
    out = torch.zeros(13, 2, dtype=torch.float64)
    rowwise_dot(a, b, out=out[:, 1], chunk_bytes=chunk_bytes)  # strided destination
    torch.testing.assert_close(out[:, 1], ref, rtol=1e-14, atol=1e-14)
    assert torch.equal(out[:, 0], torch.zeros(13, dtype=torch.float64))
    assert rowwise_dot(a[:0], b[:0]).shape == (0,)


@pytest.mark.parametrize("name", ["kl", "kl_reverse", "min_kl", "js"])
def test_kl_family_float32_in_place_path_is_accurate(name):
    """The in-place float32 path folds the log-determinants and quadratic terms into the
    product; at D = 96 with log-variances in [-6, 1] it must stay within float32 accuracy of
    a float64 evaluation of the direct (per-pair) form."""
    gen = torch.Generator().manual_seed(8)
    n, m, d = 17, 23, 96
    mean_1, mean_2 = torch.randn(n, d, generator=gen), torch.randn(m, d, generator=gen) + 0.3
    lv_1, lv_2 = -6 + 7 * torch.rand(n, d, generator=gen), -6 + 7 * torch.rand(m, d, generator=gen)
    got = pairwise(name, Gaussian(mean_1, lv_1), Gaussian(mean_2, lv_2))
    assert got.dtype == torch.float32
    images64 = Gaussian(mean_1.double().repeat_interleave(m, 0), lv_1.double().repeat_interleave(m, 0))
    captions64 = Gaussian(mean_2.double().repeat(n, 1), lv_2.double().repeat(n, 1))
    ref = paired(name, images64, captions64).view(n, m)
    scale = ref.abs().max().item()
    torch.testing.assert_close(got.double(), ref, rtol=0, atol=3e-6 * scale)  # measured ~5e-7 * scale
