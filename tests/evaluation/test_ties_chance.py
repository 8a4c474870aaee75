"""No metric or re-ranker rewards the order in which a dataset stores its items.

A constant score matrix (a model that learned nothing) must give chance-level R@K, R-Precision and
MAP@R under every re-ranker, whether the captions are stored in image order, reversed or shuffled;
block-constant matrices must give the average over every order of the tied items.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from _tie_orders import expected_metrics
from pcmr.inference import get_reranker, relaxed_greedy_matching
from pcmr.metrics import evaluate_directions, retrieval_metrics

RERANKERS = ("nns", "is", "csls", "gm", "rgm", "csls+rgm", "is+rgm")
NUM_IMAGES, PER_IMAGE = 100, 5


def storage_orders(num_captions: int) -> dict[str, torch.Tensor]:
    """Which image each stored caption belongs to, in three storage orders."""
    in_image_order = torch.arange(num_captions) // PER_IMAGE
    shuffled = in_image_order[torch.randperm(num_captions, generator=torch.Generator().manual_seed(4))]
    return {"image order": in_image_order, "reversed": in_image_order.flip(0), "shuffled": shuffled}


def chance_recall(gallery: int, positives: int, k: int) -> float:
    """P(one of `positives` items among the first k of a uniformly random order of `gallery`), percent."""
    return 100.0 * (1.0 - math.comb(gallery - positives, k) / math.comb(gallery, k))


def chance_map_at_r(gallery: int, positives: int, draws: int = 4000) -> float:
    """MAP@R (percent) of uniformly random orders, by simulation."""
    rng = random.Random(0)
    total = 0.0
    for _ in range(draws):
        order = rng.sample(range(gallery), positives)  # the first R places
        hits, average = 0, 0.0
        for position, g in enumerate(order, start=1):
            if g < positives:
                hits += 1
                average += hits / position
        total += average / positives
    return 100.0 * total / draws


def _reranker(name: str):
    method = get_reranker(name)
    return method.with_parameters(lam=float(PER_IMAGE)) if method.tuned_parameter else method  # the artefact's lambda


@pytest.mark.parametrize("order", ["image order", "reversed", "shuffled"])
@pytest.mark.parametrize("name", RERANKERS)
def test_constant_scores_give_chance_for_every_reranker(name, order):
    num_captions = NUM_IMAGES * PER_IMAGE
    owner = storage_orders(num_captions)[order]
    relevance = owner[None, :] == torch.arange(NUM_IMAGES)[:, None]  # [N_img, N_cap]
    scores = torch.zeros(NUM_IMAGES, num_captions)
    report = evaluate_directions(scores, relevance, reranker=_reranker(name), hubness_ks=()).report
    i2t, t2i = report["i2t"], report["t2i"]
    method = get_reranker(name)
    for k in (1, 5, 10):
        chance_i2t, chance_t2i = chance_recall(num_captions, PER_IMAGE, k), chance_recall(NUM_IMAGES, 1, k)
        if method.returns_scores:  # exact expectations
            assert i2t[f"R@{k}"] == pytest.approx(chance_i2t, abs=1e-9)
            assert t2i[f"R@{k}"] == pytest.approx(chance_t2i, abs=1e-9)
        else:  # one seeded random order: within 5 standard errors of chance (the artefact is 100)
            for value, chance, queries in ((i2t[f"R@{k}"], chance_i2t, NUM_IMAGES),
                                           (t2i[f"R@{k}"], chance_t2i, num_captions)):
                error = 100.0 * math.sqrt(chance / 100 * (1 - chance / 100) / queries)
                assert abs(value - chance) <= 5 * error + 1e-9, (k, value, chance)
    if method.returns_scores:
        assert i2t["r_precision"] == pytest.approx(100.0 * PER_IMAGE / num_captions, abs=1e-9)
        assert t2i["r_precision"] == pytest.approx(100.0 / NUM_IMAGES, abs=1e-9)
        assert t2i["map_at_r"] == pytest.approx(100.0 / NUM_IMAGES, abs=1e-9)
        assert i2t["map_at_r"] == pytest.approx(chance_map_at_r(num_captions, PER_IMAGE), abs=0.1)
        assert i2t["median_rank"] == pytest.approx((num_captions + 1) / (PER_IMAGE + 1))


def block_constant(num_images: int, per_image: int, owner: torch.Tensor) -> torch.Tensor:
    """Scores that only know groups of images: image i and a caption of image j score 1 + (i//2 == j//2)
    (plus 0.5 for one extra pair), so most items tie within blocks."""
    images = torch.arange(num_images)
    scores = 1.0 + ((images[:, None] // 2) == (owner[None, :] // 2)).float()
    scores[0, -1] += 0.5
    return scores


@pytest.mark.parametrize("name", ["nns", "is", "csls"])
def test_block_constant_scores_equal_the_average_over_all_tie_orders(name):
    num_images, per_image = 4, 2
    num_captions = num_images * per_image
    owner = torch.arange(num_captions) // per_image
    canonical = block_constant(num_images, per_image, owner).double()
    results = []
    for perm in (torch.arange(num_captions), torch.arange(num_captions).flip(0), torch.tensor([3, 6, 0, 7, 1, 5, 2, 4])):
        stored = owner[perm]  # the same captions and scores, stored in another order
        scores = canonical[:, perm]
        relevance = stored[None, :] == torch.arange(num_images)[:, None]
        method = get_reranker(name)
        for matrix, rel in ((scores, relevance), (scores.T, relevance.T)):
            rescored = method.fitted(tuple(matrix.shape)).rescore(matrix)
            ours = retrieval_metrics(rescored, rel, ks=(1, 2, 3))
            theirs = expected_metrics(rescored.tolist(), rel.tolist(), ks=(1, 2, 3))  # all G! orders
            for key, value in theirs.items():
                assert ours[key] == pytest.approx(value, abs=1e-9), (key, name)
            results.append(ours)
    for key in results[0]:  # the same numbers whatever the storage order
        assert results[0][key] == pytest.approx(results[2][key], abs=1e-9)
        assert results[1][key] == pytest.approx(results[3][key], abs=1e-9)


def test_matching_over_seeds_averages_to_the_brute_force_over_all_orders():
    """RGM on a block-constant matrix: the mean R@1 over many tie seeds equals the average of the
    storage-order scan over every order of queries and gallery (3 x 6: 3! x 6! orders)."""
    import itertools

    owner = torch.tensor([0, 0, 1, 1, 2, 2])
    scores = block_constant(3, 2, owner)  # [3, 6]
    relevant = owner[None, :] == torch.arange(3)[:, None]

    def recall_at_1(lists: torch.Tensor) -> float:
        return float(relevant.gather(1, lists[:, :1]).any(1).double().mean())

    total, count = 0.0, 0
    for rows in itertools.permutations(range(3)):
        for cols in itertools.permutations(range(6)):
            r, c = torch.tensor(rows), torch.tensor(cols)
            lists = relaxed_greedy_matching(scores[r][:, c], 1, 1.0, seed=None)  # storage order of the permuted
            restored = torch.empty_like(lists)
            restored[r] = c[lists]
            total += recall_at_1(restored)
            count += 1
    brute = total / count
    seeds = [recall_at_1(relaxed_greedy_matching(scores, 1, 1.0, seed=s)) for s in range(3000)]
    assert sum(seeds) / len(seeds) == pytest.approx(brute, abs=0.02)
