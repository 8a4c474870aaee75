import math

import pytest
import torch

from pcmr import Gaussian


def _g(n=5, d=4, spherical=False, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    mean = torch.randn(n, d, generator=gen, dtype=dtype)
    logvar = torch.randn(n, 1 if spherical else d, generator=gen, dtype=dtype)
    return Gaussian(mean, logvar)


def test_shapes_and_variances():
    g = _g()
    assert g.num == 5 and g.dim == 4 and len(g) == 5 and not g.is_point and not g.is_spherical
    torch.testing.assert_close(g.var, g.logvar.exp())
    torch.testing.assert_close(g.std, (g.logvar / 2).exp())
    torch.testing.assert_close(g.std**2, g.var)
    s = _g(spherical=True)
    assert s.is_spherical and s.expanded_logvar().shape == (5, 4)


def test_uncertainty_measures_match_spec():
    g = _g(n=3, d=6)
    for i in range(3):
        lv = g.logvar[i]
        assert math.isclose(float(g.log_det()[i]), float(lv.sum()), rel_tol=1e-12)
        assert math.isclose(float(g.geometric_mean_std()[i]), float(torch.prod(lv.exp().sqrt()) ** (1 / 6)), rel_tol=1e-10)
        ent = 0.5 * (6 + 6 * math.log(2 * math.pi) + float(lv.sum()))
        assert math.isclose(float(g.entropy()[i]), ent, rel_tol=1e-12)
    s = _g(n=3, d=6, spherical=True)
    torch.testing.assert_close(s.log_det(), Gaussian(s.mean, s.expanded_logvar().clone()).log_det())
    assert torch.equal(g.uncertainty("entropy"), g.entropy())
    with pytest.raises(ValueError, match="unknown uncertainty"):
        g.uncertainty("nope")


def test_sample_reparametrised_and_differentiable():
    mean = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    logvar = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    g = Gaussian(mean, logvar)
    z = g.sample(4, generator=torch.Generator().manual_seed(1))
    assert z.shape == (2, 4, 3)
    z.sum().backward()
    assert mean.grad is not None and logvar.grad is not None
    z2 = g.sample(4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(z.detach(), z2.detach())



def test_noise_is_the_draw_behind_sample():
    g = Gaussian(torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 1, dtype=torch.float64))
    eps = g.noise(4, generator=torch.Generator().manual_seed(2))
    assert eps.shape == (3, 4, 5) and eps.dtype == torch.float64
    z = g.sample(4, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(z, g.mean.unsqueeze(1) + g.std.unsqueeze(1) * eps, rtol=1e-15, atol=1e-15)
    with pytest.raises(ValueError, match="num_samples"):
        g.noise(0)

def test_sample_moments():
    g = Gaussian(torch.tensor([[1.0, -2.0]]), torch.tensor([[math.log(4.0), math.log(0.25)]]))
    z = g.sample(200_000, generator=torch.Generator().manual_seed(0))[0]
    torch.testing.assert_close(z.mean(0), torch.tensor([1.0, -2.0]), atol=0.02, rtol=0)
    torch.testing.assert_close(z.var(0), torch.tensor([4.0, 0.25]), atol=0.05, rtol=0.02)


def test_point_embeddings():
    p = Gaussian.point(torch.randn(3, 2))
    assert p.is_point and p.var.shape == (3, 1) and float(p.std.abs().sum()) == 0
    assert torch.equal(p.sample(2)[:, 0], p.mean)
    with pytest.raises(ValueError, match="point embedding"):
        p.log_det()


def test_indexing_cat_and_to():
    g = _g(n=6)
    assert g[2].mean.shape == (1, 4) and torch.equal(g[-1].mean, g.mean[-1:])
    assert g[1:4].num == 3 and g[torch.tensor([0, 5])].num == 2
    c = Gaussian.cat([g[:2], g[2:]])
    assert torch.equal(c.mean, g.mean) and torch.equal(c.logvar, g.logvar)
    mixed = Gaussian.cat([g[:2], _g(n=2, spherical=True)])
    assert mixed.logvar.shape == (4, 4)
    f = g.to(torch.float32)
    assert f.dtype == torch.float32 and f.logvar.dtype == torch.float32
    with pytest.raises(ValueError, match="mix point"):
        Gaussian.cat([g, Gaussian.point(g.mean)])
    with pytest.raises(IndexError):
        g[10]


@pytest.mark.parametrize(
    "mean, logvar, match",
    [
        (torch.zeros(3), None, r"shape \[N, D\]"),
        (torch.zeros(3, 2, dtype=torch.long), None, "floating"),
        (torch.tensor([[0.0, float("nan")]]), None, "non-finite"),
        (torch.zeros(3, 2), torch.zeros(3, 3), "logvar must have shape"),
        (torch.zeros(3, 2), torch.zeros(2, 2), "logvar must have shape"),
        (torch.zeros(1, 2), torch.tensor([[0.0, float("inf")]]), "logvar holds 1 non-finite"),
        (torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.float64), "dtype and device"),
    ],
)
def test_validation_errors(mean, logvar, match):
    with pytest.raises(ValueError, match=match):
        Gaussian(mean, logvar)
