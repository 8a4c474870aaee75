"""PMRP, hubness, uncertainty analysis and binary selection against slow references and peers."""

from __future__ import annotations

import math

import pytest
import torch

from pcmr.metrics import (
    binary_selection_accuracy,
    evaluate_retrieval,
    hubness_skewness,
    hubness_sum,
    k_occurrence,
    pmrp,
    recall_by_uncertainty,
    retrieval_metrics,
)


def reference_order(row):
    return sorted(range(len(row)), key=lambda g: (-row[g], g))


def reference_pmrp(scores, query_labels, gallery_labels, zetas=(0, 1, 2)):
    out = {}
    for zeta in zetas:
        values = []
        for q, row in enumerate(scores.double().tolist()):
            a = query_labels[q]
            if not any(a):
                continue
            positives = {g for g, b in enumerate(gallery_labels)
                         if any(b) and sum(x != y for x, y in zip(a, b)) <= zeta}
            if not positives:
                continue
            # expected over tie orders: the items above the R-th score are in, the tie group at the cut
            # fills the remaining places at random (each of its positives with the same chance)
            r = len(positives)
            cut = sorted(row, reverse=True)[r - 1]
            above = [g for g in range(len(row)) if row[g] > cut]
            tied = [g for g in range(len(row)) if row[g] == cut]
            hits = sum(g in positives for g in above) + (r - len(above)) * sum(g in positives for g in tied) / len(tied)
            values.append(hits / r)
        out[f"pmrp@{zeta}"] = 100.0 * sum(values) / len(values)
    out["pmrp"] = sum(out[f"pmrp@{z}"] for z in zetas) / len(zetas)
    out["num_skipped"] = float(sum(not any(a) for a in query_labels))
    return out


@pytest.mark.parametrize("block_size", [1, 3, None])
def test_pmrp_matches_reference(block_size):
    generator = torch.Generator().manual_seed(7)
    num_images, num_captions, num_classes = 11, 29, 6
    scores = torch.randint(0, 6, (num_images, num_captions), generator=generator).float()  # ties
    image_labels = torch.rand(num_images, num_classes, generator=generator) < 0.3
    image_labels[2] = False  # unlabelled image
    caption_labels = image_labels[torch.randint(0, num_images, (num_captions,), generator=generator)]
    caption_labels[5] = False
    caption_labels[6, 0] = ~caption_labels[6, 0]
    ours = pmrp(scores, image_labels, caption_labels, block_size=block_size)
    for direction, (s, ql, gl) in {"i2t": (scores, image_labels, caption_labels),
                                   "t2i": (scores.T, caption_labels, image_labels)}.items():
        expected = reference_pmrp(s, ql.tolist(), gl.tolist())
        assert set(ours[direction]) == set(expected)
        for key, value in expected.items():
            assert ours[direction][key] == pytest.approx(value, abs=1e-9), (direction, key)
        alone = pmrp(scores, image_labels, caption_labels, block_size=block_size, directions=(direction,))
        assert alone == {direction: ours[direction]}  # one direction computed alone: the same values


def test_pmrp_errors():
    with pytest.raises(ValueError, match="directions"):
        pmrp(torch.randn(3, 4), torch.zeros(3, 5, dtype=torch.bool), torch.zeros(4, 5, dtype=torch.bool),
             directions=("i2c",))
    scores = torch.randn(3, 4)
    with pytest.raises(ValueError, match="image_labels"):
        pmrp(scores, torch.zeros(2, 5, dtype=torch.bool), torch.zeros(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="classes"):
        pmrp(scores, torch.zeros(3, 5, dtype=torch.bool), torch.zeros(4, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        pmrp(scores, torch.zeros(3, 5), torch.zeros(4, 5))


def reference_k_occurrence(scores, k):
    counts = [0] * scores.shape[1]
    for row in scores.double().tolist():
        for g in reference_order(row)[:k]:
            counts[g] += 1
    return counts


@pytest.mark.parametrize("k", [1, 5, 10])
def test_hubness_matches_scipy_skew_of_bincount(k):
    scipy_stats = pytest.importorskip("scipy.stats")
    generator = torch.Generator().manual_seed(k)
    scores = torch.randn(37, 53, generator=generator)
    scores[:, 7] += 1.5  # a hub
    scores[3] = 0.0  # a row of ties
    counts = k_occurrence(scores, k, block_size=4)
    assert counts.tolist() == reference_k_occurrence(scores, k)
    top = [reference_order(row)[:k] for row in scores.tolist()]
    bincount = torch.bincount(torch.tensor(top).flatten(), minlength=53).numpy()  # never retrieved: 0
    expected = float(scipy_stats.skew(bincount, bias=True))
    assert hubness_skewness(scores, k) == pytest.approx(expected, abs=1e-9)


def test_hubness_sum_both_directions_and_in_evaluate_retrieval():
    generator = torch.Generator().manual_seed(1)
    scores = torch.randn(19, 41, generator=generator)
    out = hubness_sum(scores)
    expected = sum(hubness_skewness(scores, k) + hubness_skewness(scores.T, k) for k in (1, 5, 10))
    assert out["hs_sum"] == pytest.approx(expected, abs=1e-9)
    report = evaluate_retrieval(scores, [[i, i + 19] for i in range(19)])
    assert report["total"]["hs_sum"] == pytest.approx(expected, abs=1e-9)
    assert report["t2i"]["skew@5"] == pytest.approx(hubness_skewness(scores.T, 5), abs=1e-9)
    assert math.isnan(hubness_skewness(torch.eye(4), 1))  # every item retrieved once: no spread


def test_pytorch_metric_learning_r_precision_and_map_at_r():
    pml = pytest.importorskip("pytorch_metric_learning.utils.accuracy_calculator")
    from pytorch_metric_learning.distances import DotProductSimilarity
    from pytorch_metric_learning.utils.inference import CustomKNN

    generator = torch.Generator().manual_seed(0)
    num_classes = 7
    query_labels = torch.randint(0, num_classes, (41,), generator=generator)
    reference_labels = torch.randint(0, num_classes, (131,), generator=generator)
    centres = torch.randn(num_classes, 8, generator=generator)
    query = centres[query_labels] + torch.randn(41, 8, generator=generator)
    reference = centres[reference_labels] + torch.randn(131, 8, generator=generator)
    calculator = pml.AccuracyCalculator(include=("r_precision", "mean_average_precision_at_r"),
                                        k="max_bin_count", knn_func=CustomKNN(DotProductSimilarity()))  # cosine
    theirs = calculator.get_accuracy(query, query_labels, reference, reference_labels, False)
    cosine = torch.nn.functional.normalize(query, dim=1) @ torch.nn.functional.normalize(reference, dim=1).T
    ours = retrieval_metrics(cosine, query_labels[:, None] == reference_labels[None, :])
    assert ours["r_precision"] / 100 == pytest.approx(theirs["r_precision"], abs=1e-6)
    assert ours["map_at_r"] / 100 == pytest.approx(theirs["mean_average_precision_at_r"], abs=1e-6)


def test_recall_by_uncertainty_bins():
    generator = torch.Generator().manual_seed(2)
    scores = torch.randn(23, 30, generator=generator)
    relevant = [[q % 30] for q in range(22)] + [[]]
    uncertainty = torch.rand(23, generator=generator)
    report = recall_by_uncertainty(scores, relevant, uncertainty, num_bins=4)
    ranks = [reference_order(row).index(relevant[q][0]) + 1 for q, row in enumerate(scores.tolist()[:22])]
    order = sorted(range(22), key=lambda q: (float(uncertainty[q]), q))
    sizes = [6, 6, 5, 5]
    start = 0
    for b, size in enumerate(sizes, start=1):
        chunk = order[start:start + size]
        start += size
        row = report[f"bin {b}"]
        assert row["num_queries"] == size
        assert row["R@1"] == pytest.approx(100.0 * sum(ranks[q] == 1 for q in chunk) / size, abs=1e-9)
        assert row["uncertainty_mean"] == pytest.approx(sum(float(uncertainty[q]) for q in chunk) / size)
    with pytest.raises(ValueError, match="uncertainty"):
        recall_by_uncertainty(scores, relevant, torch.rand(5))


def test_binary_selection_accuracy():
    positive = torch.tensor([1.0, 2.0, 0.5, 3.0])
    negative = torch.tensor([0.0, 2.0, 1.0, 1.0])
    assert binary_selection_accuracy(positive, negative) == pytest.approx(100 * (1 + 0.5 + 0 + 1) / 4)
    with pytest.raises(ValueError, match="same non-empty shape"):
        binary_selection_accuracy(positive, negative[:3])
    with pytest.raises(ValueError, match="NaN"):
        binary_selection_accuracy(positive, torch.tensor([0.0, float("nan"), 0.0, 0.0]))


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_device_follows_inputs(device):
    generator = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (37, 101), generator=generator).float()
    relevant = torch.rand(37, 101, generator=generator) < 0.05
    labels = torch.rand(37, 5, generator=generator) < 0.4
    caption_labels = torch.rand(101, 5, generator=generator) < 0.4
    cpu = evaluate_retrieval(scores, relevant)
    moved = evaluate_retrieval(scores.to(device), relevant.to(device))
    assert cpu == moved
    assert pmrp(scores, labels, caption_labels) == pmrp(scores.to(device), labels.to(device),
                                                        caption_labels.to(device))
