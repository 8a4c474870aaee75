"""COCO 5K / 1K, CxC and ECCV Caption against eccv-caption on identical rankings."""

from __future__ import annotations

import operator
import warnings

import numpy as np
import pytest
import torch

from pcmr.metrics import (
    coco_5k_test_ids,
    evaluate_coco,
    evaluate_retrieval,
    fold_indices,
    load_extra_positives,
    retrieval_metrics,
)
from pcmr.metrics._relevance import as_sparse

eccv_caption = pytest.importorskip("eccv_caption")


def eccv_metrics_object():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return eccv_caption.Metrics()


def ranked_lists(scores: torch.Tensor, query_ids: list[int], gallery_ids: list[int]) -> dict[int, list[int]]:
    """eccv-caption's input: query id -> gallery ids, best first (stable sort = our tie rule)."""
    gallery = list(gallery_ids)  # shared int objects: full 5K lists stay ~1 GB
    out = {}
    for q, row in zip(query_ids, scores.double().numpy()):
        out[q] = list(operator.itemgetter(*np.argsort(-row, kind="stable").tolist())(gallery))
    return out


def restrict(gts: dict[int, list[int]], keys: set[int]) -> dict[int, list[int]]:
    """Queries limited to ``keys``; positive lists kept whole (positives outside count in R)."""
    return {k: v for k, v in gts.items() if k in keys}


def compare_with_eccv_caption(num_images: int, seed: int) -> None:
    image_ids_all, caption_ids_all = coco_5k_test_ids()
    image_ids = image_ids_all[:num_images]
    caption_ids = caption_ids_all[: 5 * num_images]  # five consecutive captions per image
    scores = torch.randn(num_images, 5 * num_images, generator=torch.Generator().manual_seed(seed),
                         dtype=torch.float64)
    metrics = eccv_metrics_object()
    images, captions = set(image_ids), set(caption_ids)
    metrics.coco_ids = np.asarray(caption_ids)
    for name in ("coco_gts", "cxc_gts", "eccv_gts"):
        gts = getattr(metrics, name)
        setattr(metrics, name, {"i2t": restrict(gts["i2t"], images), "t2i": restrict(gts["t2i"], captions)})
    i2t = ranked_lists(scores, image_ids, caption_ids)
    t2i = ranked_lists(scores.T, caption_ids, image_ids)
    theirs = metrics.compute_all_metrics(
        i2t, t2i, target_metrics=("coco_1k_recalls", "coco_5k_recalls", "cxc_recalls", "eccv_r1",
                                  "eccv_map_at_r", "eccv_rprecision"), Ks=(1, 5, 10))
    report = evaluate_coco(scores, image_ids, caption_ids, missing="count")
    rows = [row["name"] for row in report]
    full, folds = rows[0].rsplit(" ", 1)[0], rows[3].rsplit(" ", 1)[0]
    for direction in ("i2t", "t2i"):
        for k in (1, 5, 10):
            assert report[f"{full} {direction}"][f"R@{k}"] == pytest.approx(
                100 * theirs[f"coco_5k_r{k}"][direction], abs=1e-9)
            assert report[f"{folds} {direction}"][f"R@{k}"] == pytest.approx(
                100 * theirs[f"coco_1k_r{k}"][direction], abs=1e-9)
            assert report[f"CxC {direction}"][f"R@{k}"] == pytest.approx(
                100 * theirs[f"cxc_r{k}"][direction], abs=1e-9)
        eccv_row = report[f"ECCV {direction}"]
        assert eccv_row["R@1"] == pytest.approx(100 * theirs["eccv_r1"][direction], abs=1e-9)
        assert eccv_row["r_precision"] == pytest.approx(100 * theirs["eccv_rprecision"][direction], abs=1e-9)
        assert eccv_row["map_at_r"] == pytest.approx(100 * theirs["eccv_map_at_r"][direction], abs=1e-9)


@pytest.mark.filterwarnings("ignore")
def test_coco_cxc_eccv_match_eccv_caption_on_a_subset_of_the_real_ids():
    # 250 images / 1250 captions of the real COCO 5K-test structure; folds of 50 images.
    # Positives of CxC / ECCV outside the subset still count in R (eccv-caption's convention).
    compare_with_eccv_caption(250, seed=0)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_coco_cxc_eccv_match_eccv_caption_full_5k():
    compare_with_eccv_caption(5000, seed=1)


def test_coco_5k_test_ids_structure():
    image_ids, caption_ids = coco_5k_test_ids()
    assert len(image_ids) == 5000 == len(set(image_ids))
    assert len(caption_ids) == 25000 == len(set(caption_ids))
    coco = load_extra_positives("coco", image_ids, caption_ids)
    assert coco.i2t.counts().tolist() == [5] * 5000
    assert coco.i2t.dense()[torch.arange(25000) // 5, torch.arange(25000)].all()
    assert torch.equal(coco.t2i.dense(), coco.i2t.dense().T)
    eccv = load_extra_positives("eccv", image_ids, caption_ids)
    assert int(eccv.i2t_missing.sum()) == 2  # two ECCV positives are not 5K-test captions
    assert int(load_extra_positives("eccv", image_ids, caption_ids, missing="drop").i2t_missing.sum()) == 0


def test_extra_positives_follow_the_user_id_order():
    image_ids, caption_ids = coco_5k_test_ids()
    images = image_ids[:40][::-1]
    captions = caption_ids[:200]
    permutation = torch.randperm(200, generator=torch.Generator().manual_seed(0))
    shuffled = [captions[i] for i in permutation]
    base = load_extra_positives("cxc", images, captions).i2t.dense()  # [40, 200]
    moved = load_extra_positives("cxc", images, shuffled).i2t.dense()
    assert torch.equal(moved, base[:, permutation])
    with pytest.raises(ValueError, match="more than once"):
        load_extra_positives("cxc", images, captions[:2] + captions[:2])
    with pytest.raises(ValueError, match="unknown positive set"):
        load_extra_positives("pm", images, captions)


def test_evaluate_retrieval_both_directions_and_folds_against_direct_calls():
    generator = torch.Generator().manual_seed(4)
    num_images, per_image, num_folds = 15, 3, 3
    scores = torch.randn(num_images, num_images * per_image, generator=generator)
    image_to_captions = [[per_image * i + j for j in range(per_image)] for i in range(num_images)]
    report = evaluate_retrieval(scores, image_to_captions, num_folds=num_folds, block_size=4)
    dense = as_sparse(image_to_captions, num_images, num_images * per_image).dense()
    i2t = retrieval_metrics(scores, dense)
    t2i = retrieval_metrics(scores.T.contiguous(), dense.T.contiguous())
    for key, value in i2t.items():
        assert report["i2t"][key] == pytest.approx(value, abs=1e-9)
        assert report["t2i"][key] == pytest.approx(t2i[key], abs=1e-9)
    assert report["total"]["rsum"] == pytest.approx(sum(i2t[f"R@{k}"] + t2i[f"R@{k}"] for k in (1, 5, 10)))
    fold_i2t, fold_t2i = [], []
    for f in range(num_folds):
        rows = slice(5 * f, 5 * f + 5)
        cols = slice(15 * f, 15 * f + 15)
        fold_i2t.append(retrieval_metrics(scores[rows, cols], dense[rows, cols]))
        fold_t2i.append(retrieval_metrics(scores[rows, cols].T, dense[rows, cols].T))
    for key in ("R@1", "R@5", "median_rank", "mean_rank", "r_precision", "map_at_r"):
        assert report["folds i2t"][key] == pytest.approx(sum(r[key] for r in fold_i2t) / num_folds, abs=1e-9)
        assert report["folds t2i"][key] == pytest.approx(sum(r[key] for r in fold_t2i) / num_folds, abs=1e-9)


def test_fold_errors():
    relevance = as_sparse([[0], [1], [1]], 3, 2)
    with pytest.raises(ValueError, match="several folds"):
        fold_indices(relevance, 3)
    with pytest.raises(ValueError, match="dividing"):
        fold_indices(relevance, 2)
    folds = fold_indices(relevance, 3, caption_folds=torch.tensor([0, 2]))
    assert [c.tolist() for _, c in folds] == [[0], [], [1]]


def test_evaluate_coco_shape_error():
    with pytest.raises(ValueError, match=r"\[5000, 25000\]"):
        evaluate_coco(torch.randn(10, 50))
