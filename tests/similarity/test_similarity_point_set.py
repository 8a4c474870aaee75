"""``pcmr.PointSet`` and the ``max_cosine`` score (PVSE) against plain loops: values, blocks,
gradients, K = 1 equals cosine, and every other score refusing point sets."""

from __future__ import annotations

import math

import pytest
import torch

from pcmr import Gaussian, PointSet
from pcmr.similarity import list_similarities, paired, pairwise


def point_set(n, k, d, seed, dtype=torch.float64, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    points = torch.randn(n, k, d, generator=gen, dtype=dtype)
    return PointSet(points.requires_grad_(requires_grad))


def loop_max_cosine(images, captions):
    """The best of the K1 x K2 cosines of every pair, one number at a time (float64)."""
    x, y = images.tolist(), captions.tolist()
    out = torch.empty(len(x), len(y), dtype=torch.float64)
    for i, set_i in enumerate(x):
        for c, set_c in enumerate(y):
            best = -math.inf
            for v in set_i:
                for t in set_c:
                    dot = sum(a * b for a, b in zip(v, t))
                    norm = math.sqrt(sum(a * a for a in v)) * math.sqrt(sum(b * b for b in t))
                    best = max(best, dot / norm)
            out[i, c] = best
    return out


@pytest.mark.parametrize(("k_img", "k_cap"), [(2, 2), (3, 1), (1, 4), (5, 3)])
def test_max_cosine_matches_loop_for_every_block_size(k_img, k_cap):
    images, captions = point_set(13, k_img, 5, 1), point_set(11, k_cap, 5, 2)
    ref = loop_max_cosine(images.points, captions.points)
    for block_size in (1, 4, 12, 13, None):  # 4 and 12 leave a last block of 1
        torch.testing.assert_close(pairwise("max_cosine", images, captions, block_size=block_size), ref,
                                   rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(paired("max_cosine", images[:11], captions), ref[:11].diagonal(),
                               rtol=1e-12, atol=1e-12)


def test_max_cosine_autograd_path_equals_in_place_path_and_float32():
    images, captions = point_set(7, 2, 6, 3), point_set(9, 3, 6, 4)
    fast = pairwise("max_cosine", images, captions, block_size=3)
    graded = PointSet(images.points.clone().requires_grad_())
    slow = pairwise("max_cosine", graded, captions, block_size=3)
    assert slow.requires_grad
    torch.testing.assert_close(slow.detach(), fast, rtol=1e-12, atol=1e-12)
    single = pairwise("max_cosine", images.to(torch.float32), captions.to(torch.float32))
    assert single.dtype == torch.float32
    torch.testing.assert_close(single.double(), fast, rtol=1e-5, atol=1e-6)


def test_max_cosine_gradients_match_loop_and_gradcheck():
    images, captions = point_set(4, 3, 5, 5, requires_grad=True), point_set(3, 2, 5, 6, requires_grad=True)
    weights = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    (pairwise("max_cosine", images, captions, block_size=2) * weights).sum().backward()

    x = images.points.detach().clone().requires_grad_()
    y = captions.points.detach().clone().requires_grad_()
    total = 0.0
    for i in range(4):  # the loop: differentiate the chosen pair's cosine only
        for c in range(3):
            cosines = [torch.dot(x[i, k], y[c, l]) / (x[i, k].norm() * y[c, l].norm())
                       for k in range(3) for l in range(2)]
            total = total + weights[i, c] * max(cosines, key=lambda v: float(v.detach()))
    total.backward()
    torch.testing.assert_close(images.points.grad, x.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(captions.points.grad, y.grad, rtol=1e-10, atol=1e-12)

    def run(a, b):
        return pairwise("max_cosine", PointSet(a), PointSet(b), block_size=3)

    def run_paired(a, b):
        return paired("max_cosine", PointSet(a[:3]), PointSet(b))

    leaves = (images.points.detach().requires_grad_(), captions.points.detach().requires_grad_())
    assert torch.autograd.gradcheck(run, leaves, eps=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(run_paired, leaves, eps=1e-6, atol=1e-6)


def test_one_point_per_item_equals_cosine():
    gen = torch.Generator().manual_seed(7)
    images = Gaussian(torch.randn(6, 4, generator=gen, dtype=torch.float64), torch.randn(6, 4, generator=gen,
                                                                                         dtype=torch.float64))
    captions = Gaussian(torch.randn(5, 4, generator=gen, dtype=torch.float64))
    cosine = pairwise("cosine", images, captions)
    torch.testing.assert_close(pairwise("max_cosine", images, captions), cosine, rtol=0, atol=1e-15)
    as_sets = PointSet(images.mean.unsqueeze(1)), PointSet(captions.mean.unsqueeze(1))
    torch.testing.assert_close(pairwise("max_cosine", *as_sets), cosine, rtol=0, atol=1e-15)
    # a set of K copies of one point scores like that point
    copies = PointSet(images.mean.unsqueeze(1).expand(-1, 3, -1).contiguous())
    torch.testing.assert_close(pairwise("max_cosine", copies, captions), cosine, rtol=0, atol=1e-15)


def test_other_scores_refuse_point_sets():
    images, captions = point_set(3, 2, 4, 1), point_set(2, 2, 4, 2)
    for name in list_similarities():
        if name == "max_cosine":
            continue
        with pytest.raises(ValueError, match=r"PointSet of K=2 points per item; scores that accept point sets: "
                                             r"\['max_cosine'\]"):
            pairwise(name, images, captions)


def test_point_set_type_keeps_its_points():
    sets = point_set(5, 3, 4, 9)
    torch.testing.assert_close(sets.mean, sets.points.mean(dim=1))
    assert sets.is_point and sets.num == 5 and sets.dim == 4 and sets.num_points == 3
    assert isinstance(sets[1], PointSet) and sets[1].points.shape == (1, 3, 4)
    assert torch.equal(sets[torch.tensor([4, 0])].points, sets.points[[4, 0]])
    joined = Gaussian.cat([sets[2:], sets[:2]])
    assert isinstance(joined, PointSet) and torch.equal(joined.points, sets.points[[2, 3, 4, 0, 1]])
    assert isinstance(sets.to(torch.float32), PointSet) and sets.to(torch.float32).points.dtype == torch.float32
    assert isinstance(sets.detach(), PointSet)
    assert "K=3" in repr(sets)


def test_point_set_bad_input_raises():
    with pytest.raises(ValueError, match=r"shape \[N, K, D\]"):
        PointSet(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="non-finite"):
        PointSet(torch.tensor([[[float("nan")]]]))
    with pytest.raises(ValueError, match="floating"):
        PointSet(torch.zeros(2, 2, 2, dtype=torch.long))
    sets = point_set(3, 2, 4, 1)
    with pytest.raises(ValueError, match="cannot mix"):
        Gaussian.cat([sets, Gaussian(torch.zeros(1, 4))])
    with pytest.raises(ValueError, match=r"one \[K, D\]"):
        Gaussian.cat([sets, point_set(1, 3, 4, 2)])
    with pytest.raises(ValueError, match="unknown uncertainty measure 'log_det'; expected one of: spread \\(a PointSet"):
        sets.uncertainty("log_det")


def test_spread_matches_loop():
    sets = point_set(4, 3, 5, 11)
    ref = []
    for item in sets.points.tolist():
        unit = [[v / math.sqrt(sum(a * a for a in p)) for v in p] for p in item]
        pairs = [(a, b) for a in range(3) for b in range(a + 1, 3)]
        ref.append(sum(math.dist(unit[a], unit[b]) for a, b in pairs) / len(pairs))
    torch.testing.assert_close(sets.uncertainty("spread"), torch.tensor(ref, dtype=torch.float64))
    assert torch.equal(point_set(3, 1, 5, 1).spread(), torch.zeros(3, dtype=torch.float64))


def test_default_blocks_bound_the_temporaries(monkeypatch):
    from pcmr.similarity import _registry, get_similarity

    spec = get_similarity("max_cosine")
    images, captions = point_set(50, 3, 4, 1), point_set(20, 2, 4, 2)
    budget = 10 * 3 * 20 * 2 * 8  # bytes of the products of 10 image rows (float64)
    monkeypatch.setattr(_registry, "DEFAULT_BLOCK_BYTES", budget)
    rows = []
    original = type(spec).block

    def spy(self, state, rows_slice, out):
        rows.append(rows_slice.stop - rows_slice.start)
        return original(self, state, rows_slice, out)

    monkeypatch.setattr(type(spec), "block", spy)
    scores = pairwise("max_cosine", images, captions)
    assert rows == [10] * 5
    torch.testing.assert_close(scores, loop_max_cosine(images.points, captions.points), rtol=1e-12, atol=1e-12)
    rows.clear()
    pairwise("max_cosine", PointSet(images.points.clone().requires_grad_()), captions)
    assert rows == [5] * 10  # the differentiable path keeps the max indices too: half the rows
