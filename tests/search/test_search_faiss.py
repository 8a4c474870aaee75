"""The faiss backend: exact W2 identity, flat == exact, candidates + exact re-scoring, CSLS, storage, adding."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import scipy.linalg
import torch

from pcmr import Gaussian
from pcmr.search import GalleryIndex
from pcmr.search.ann import (
    ANN_SCORES,
    AnnIndex,
    choose_index_type,
    gallery_layout,
    gallery_vectors,
    query_vectors,
)
from pcmr.similarity import get_similarity, list_similarities

DIM = 6
WIDTHS = {"diagonal": DIM, "spherical": 1, "point": None}


def _gaussian(n: int, width: int | None, gen: torch.Generator, dim: int = DIM) -> Gaussian:
    mean = torch.randn(n, dim, generator=gen)
    return Gaussian(mean, None if width is None else 0.6 * torch.randn(n, width, generator=gen))


def _index(images: Gaussian, captions: Gaussian) -> GalleryIndex:
    return GalleryIndex(images, captions, image_ids=list(range(images.num)), caption_ids=list(range(captions.num)),
                        caption_texts=[f"c{i}" for i in range(captions.num)],
                        similarity_options={"match_prob": {"a": 3.0, "b": 1.0}})


def _w2_reference(m1, v1, m2, v2) -> float:
    """Bures-Wasserstein distance between N(m1, diag v1) and N(m2, diag v2), general matrix form, float64."""
    s1, s2 = np.diag(v1), np.diag(v2)
    with warnings.catch_warnings():  # point embeddings: zero (singular) covariances, still exact here
        warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)
        root = scipy.linalg.sqrtm(s1)
        cross = scipy.linalg.sqrtm(root @ s2 @ root)
    return float(np.sqrt(np.sum((m1 - m2) ** 2) + np.trace(s1 + s2 - 2 * np.real(cross))))


@pytest.mark.parametrize("gallery_kind", list(WIDTHS))
@pytest.mark.parametrize("query_kind", list(WIDTHS))
def test_w2_is_euclidean_distance_of_the_ann_vectors(gallery_kind, query_kind):
    gen = torch.Generator().manual_seed(1)
    gallery, query = _gaussian(5, WIDTHS[gallery_kind], gen), _gaussian(4, WIDTHS[query_kind], gen)
    layout = gallery_layout("wasserstein", gallery)
    x = torch.from_numpy(gallery_vectors("wasserstein", gallery, layout)).double()
    y, constant = query_vectors("wasserstein", query, layout)
    y = torch.from_numpy(y).double()
    for q in range(query.num):
        for g in range(gallery.num):
            expected = _w2_reference(query.mean[q].double().numpy(), query.var[q].double().expand(DIM).numpy(),
                                     gallery.mean[g].double().numpy(), gallery.var[g].double().expand(DIM).numpy())
            got = float(((y[q] - x[g]) ** 2).sum() + constant[q]) ** 0.5
            assert got == pytest.approx(expected, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("score", ANN_SCORES)
@pytest.mark.parametrize("kind", list(WIDTHS))
@pytest.mark.parametrize("query_modality", ["caption", "image"])
def test_flat_faiss_equals_the_exact_backend(score, kind, query_modality):
    gen = torch.Generator().manual_seed(2)
    index = _index(_gaussian(37, WIDTHS[kind], gen), _gaussian(29, WIDTHS[kind], gen))
    query = _gaussian(7, WIDTHS[kind], gen)
    exact = index.search(query, k=9, similarity=score, modality=query_modality, backend="exact")
    index.build_ann(score, index_type="flat")
    fast = index.search(query, k=9, similarity=score, modality=query_modality, backend="faiss")
    assert torch.equal(fast.indices, exact.indices)
    torch.testing.assert_close(fast.scores, exact.scores, rtol=1e-5, atol=1e-5)
    assert fast.hits[0][0].id == exact.hits[0][0].id
    assert index.search(query, k=9, similarity=score, modality=query_modality).indices.equal(exact.indices)  # auto


RESCORED = [n for n in list_similarities() if n not in ANN_SCORES and not get_similarity(n).sampled]


@pytest.mark.parametrize("similarity", RESCORED)
def test_candidates_with_the_whole_gallery_equal_the_exact_ranking(similarity):
    gen = torch.Generator().manual_seed(3)
    index = _index(_gaussian(23, DIM, gen), _gaussian(19, DIM, gen))
    query = _gaussian(5, DIM, gen)
    exact = index.search(query, k=6, similarity=similarity, backend="exact")
    index.build_ann("wasserstein", index_type="flat")
    fast = index.search(query, k=6, similarity=similarity, backend="faiss", candidates=23)
    assert torch.equal(fast.indices, exact.indices)
    torch.testing.assert_close(fast.scores, exact.scores, rtol=1e-4, atol=1e-4)


def test_sampled_scores_rescore_candidates_with_each_items_own_samples():
    from pcmr.scoring import score_matrix

    gen = torch.Generator().manual_seed(4)
    index = _index(_gaussian(30, DIM, gen), _gaussian(10, DIM, gen))
    query = _gaussian(3, DIM, gen)
    index.build_ann("wasserstein", index_type="flat")
    fast = index.search(query, k=4, similarity="match_prob", backend="faiss", candidates=12)
    _, candidates = index.ann["image"].search(query, 12)
    for q in range(3):
        scores = score_matrix("match_prob", index.images[candidates[q]], query[q:q + 1], {"a": 3.0, "b": 1.0},
                              common=True)[:, 0]
        order = torch.sort(scores, descending=True, stable=True).indices[:4]
        assert torch.equal(fast.indices[q], candidates[q][order])
        torch.testing.assert_close(fast.scores[q], scores[order])


def test_gallery_statistics_agree_with_pcmr_inference_on_the_whole_matrix():
    """CSLS and inverted softmax on candidates, with the gallery statistic of the one function, equal
    pcmr.inference's re-weighting of the full matrix (reference rows + the query) for the query's row."""
    from pcmr.inference import csls, get_reranker, inverted_softmax
    from pcmr.search.searcher import Scoring, gallery_statistic, oriented_scores

    gen = torch.Generator().manual_seed(5)
    images, captions = _gaussian(17, DIM, gen), _gaussian(13, DIM, gen)
    query = _gaussian(1, DIM, gen)
    reference = oriented_scores("kl", captions, images, "caption", {}).double()  # [13, 17]
    row = oriented_scores("kl", query, images, "caption", {}).double()  # [1, 17]
    for name, whole in (("is", lambda m: inverted_softmax(m, beta=2.0)), ("csls", lambda m: csls(m, k=4))):
        reranker = get_reranker(name, **({"beta": 2.0} if name == "is" else {"csls_k": 4}))
        statistic = gallery_statistic(Scoring("kl", "caption", {}, reranker), captions, images, block_items=5)
        ours = reranker.weighting.rescore_candidates(row.float(), statistic[None]).double()
        if name == "is":  # the query's row of eq. 5 normalises over the reference rows only
            torch.testing.assert_close(ours, whole(torch.cat([reference, row]))[-1:], rtol=1e-4, atol=1e-4)
        else:  # r_Q over the reference rows, r_G over the query's row
            r_q = (2 * reference - csls(reference, k=4) - reference.topk(4, dim=1).values.mean(1, keepdim=True))[0]
            expected = 2 * row - row.topk(4).values.mean() - r_q
            torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-4)


def test_csls_and_is_work_on_a_default_faiss_build():
    from pcmr.search.searcher import oriented_scores

    gen = torch.Generator().manual_seed(6)
    index = _index(_gaussian(21, DIM, gen), _gaussian(15, DIM, gen))
    query = _gaussian(4, DIM, gen)
    index.build_ann("cosine", index_type="flat")
    fast = index.search(query, k=5, similarity="cosine", rerank="csls", backend="faiss", candidates=21,
                        rerank_options={"csls_k": 3})
    reference = oriented_scores("cosine", index.captions, index.images, "caption", {})  # [15, 21]
    r_q = reference.topk(3, dim=0).values.mean(0)
    scores = oriented_scores("cosine", query, index.images, "caption", {})  # [4, 21]
    expected = 2 * scores - scores.topk(3, dim=1).values.mean(1, keepdim=True) - r_q
    top = torch.sort(expected, dim=1, descending=True, stable=True)
    assert torch.equal(fast.indices, top.indices[:, :5])
    torch.testing.assert_close(fast.scores, top.values[:, :5], rtol=1e-5, atol=1e-5)
    for rerank in ("is", "csls"):  # the same answers as the exact backend
        a = index.search(query, k=5, rerank=rerank, backend="faiss", candidates=21)
        b = index.search(query, k=5, rerank=rerank, backend="exact")
        assert torch.equal(a.indices, b.indices)
        torch.testing.assert_close(a.scores, b.scores, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="matches all queries together"):
        index.search(query, k=5, rerank="rgm", backend="faiss")


@pytest.mark.parametrize("index_type", ["ivf", "hnsw"])
def test_approximate_indexes_find_the_neighbours_of_clustered_data(index_type):
    gen = torch.Generator().manual_seed(7)
    centres = 4 * torch.randn(20, 16, generator=gen)
    means = centres[torch.randint(0, 20, (2000,), generator=gen)] + torch.randn(2000, 16, generator=gen)
    gallery = Gaussian(means, 0.3 * torch.randn(2000, 16, generator=gen))
    query = Gaussian(means[:50] + 0.1 * torch.randn(50, 16, generator=gen), gallery.logvar[:50])
    from pcmr.search.ann import build_ann

    ann = build_ann(gallery, "wasserstein", index_type, nlist=20, nprobe=8, ef_search=64)
    assert ann.index_type == index_type and ann.ntotal == 2000
    _, found = ann.search(query, 10)
    exact = torch.from_numpy(np.argsort(-np.stack([  # exact W2 top-10
        -((means - query.mean[q]).square().sum(1) + (gallery.std - query.std[q]).square().sum(1)).numpy()
        for q in range(50)]), axis=1, kind="stable")[:, :10])
    recall = np.mean([len(set(found[q].tolist()) & set(exact[q].tolist())) / 10 for q in range(50)])
    assert recall >= 0.9


def test_index_type_is_chosen_by_gallery_size():
    assert [choose_index_type(n) for n in (10, 50_000, 50_001, 300_000, 300_001)] == [
        "flat", "flat", "hnsw", "hnsw", "ivf"]
    with pytest.raises(ValueError, match="index type"):
        AnnIndex.create("cosine", Gaussian.point(torch.zeros(3, 2)), "lsh")


def test_save_load_round_trip_and_corruption_errors(tmp_path):
    gen = torch.Generator().manual_seed(8)
    index = _index(_gaussian(40, 1, gen), _gaussian(30, 1, gen))
    index.build_ann("wasserstein", index_type="hnsw")
    query = _gaussian(3, 1, gen)
    before = index.search(query, k=5, similarity="kl", rerank="csls", rerank_options={"csls_k": 5})
    root = index.save(tmp_path / "idx")
    info = json.loads((root / "index.json").read_text())
    assert info["ann"]["image"]["index_type"] == "hnsw"
    kept = {(e["modality"], e["similarity"], e["reranker"], e["params"].get("csls_k")) for e in info["statistics"]}
    assert {("image", "wasserstein", "csls", 10), ("image", "wasserstein", "is", None),
            ("image", "kl", "csls", 5)} <= kept
    assert set(info["checksums"]) == {"embeddings.safetensors", "ann-image.faiss", "ann-caption.faiss",
                                      "statistics.safetensors"}
    loaded = GalleryIndex.load(root)
    assert len(loaded.statistics) == len(index.statistics)
    after = loaded.search(query, k=5, similarity="kl", rerank="csls", rerank_options={"csls_k": 5})
    assert torch.equal(after.indices, before.indices) and torch.equal(after.scores, before.scores)

    (root / "index.json").write_text(json.dumps({**info, "caption_texts": ["edited"] * 30}))
    with pytest.raises(ValueError, match="index.json: its content does not match its 'manifest_sha256'"):
        GalleryIndex.load(root)
    (root / "index.json").write_text(json.dumps(info))

    def rewrite(info):  # an edit that also updates the manifest digest (to reach the deeper checks)
        from pcmr.search.manifest import _manifest_digest

        info["manifest_sha256"] = _manifest_digest(info)
        (root / "index.json").write_text(json.dumps(info))

    good = (root / "ann-image.faiss").read_bytes()
    (root / "ann-image.faiss").write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match=r"ann-image.faiss: SHA-256 .* truncated or edited"):
        GalleryIndex.load(root)
    info["checksums"]["ann-image.faiss"] = __import__("hashlib").sha256(good[:100]).hexdigest()
    (root / "ann-image.faiss").write_bytes(good[:100])
    rewrite(info)
    with pytest.raises(ValueError, match="ann-image.faiss cannot be read by faiss"):
        GalleryIndex.load(root)
    (root / "ann-image.faiss").write_bytes(good)
    info["checksums"]["ann-image.faiss"] = __import__("hashlib").sha256(good).hexdigest()
    info["image_ids"] = info["image_ids"][:-1]
    rewrite(info)
    with pytest.raises(ValueError, match="'image_ids' has 39 entries but embeddings.safetensors holds 40"):
        GalleryIndex.load(root)
    info["image_ids"] = list(range(40))
    rewrite(info)
    GalleryIndex.load(root)  # repaired
    (root / "ann-image.faiss").unlink()
    with pytest.raises(FileNotFoundError, match="ann-image.faiss not found"):
        GalleryIndex.load(root)


def test_adding_items_equals_building_with_all_of_them():
    gen = torch.Generator().manual_seed(9)
    images, captions = _gaussian(50, DIM, gen), _gaussian(20, DIM, gen)
    query = _gaussian(4, DIM, gen)
    whole = _index(images, captions)
    whole.build_ann("wasserstein", index_type="flat")
    part = _index(images[:30], captions)
    part.build_ann("wasserstein", index_type="flat")
    part.add_images(images[30:], list(range(30, 50)), shard_size=7)
    assert part.images.num == 50 and part.ann["image"].ntotal == 50 and part.image_ids == list(range(50))
    for rerank in ("nns", "csls", "is"):
        a = whole.search(query, k=7, similarity="wasserstein", rerank=rerank)
        b = part.search(query, k=7, similarity="wasserstein", rerank=rerank)
        assert torch.equal(a.indices, b.indices)
        torch.testing.assert_close(a.scores, b.scores, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="variance shape"):
        part.add_images(Gaussian.point(torch.zeros(2, DIM)), [1, 2])


def test_saved_embeddings_are_read_in_shards(tmp_path):
    from safetensors.torch import save_file

    from pcmr.search.embeddings import read_embeddings

    gen = torch.Generator().manual_seed(10)
    images = _gaussian(23, 1, gen)
    save_file({"image_mean": images.mean, "image_logvar": images.logvar}, str(tmp_path / "e.safetensors"),
              metadata={"image_ids": json.dumps([f"x{i}" for i in range(23)])})
    saved = read_embeddings(tmp_path / "e.safetensors", shard_rows=5)
    assert torch.equal(saved.images.mean, images.mean) and torch.equal(saved.images.logvar, images.logvar)
    assert saved.captions is None and saved.image_ids[3] == "x3"
    save_file({"image_mean": torch.full((2, 3), float("nan"))}, str(tmp_path / "nan.safetensors"))
    with pytest.raises(ValueError, match="NaN or inf"):
        read_embeddings(tmp_path / "nan.safetensors")
    save_file({"weights": torch.zeros(2, 3)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="expected tensors image_mean"):
        read_embeddings(tmp_path / "other.safetensors")
    with pytest.raises(FileNotFoundError, match="embeddings file not found"):
        read_embeddings(tmp_path / "missing.safetensors")


@pytest.mark.parametrize("gallery_kind", list(WIDTHS))
@pytest.mark.parametrize("query_kind", list(WIDTHS))
def test_csd_is_squared_euclidean_distance_of_the_ann_vectors(gallery_kind, query_kind):
    from pcmr.search.ann import scores_from_distances

    gen = torch.Generator().manual_seed(11)
    gallery, query = _gaussian(5, WIDTHS[gallery_kind], gen), _gaussian(4, WIDTHS[query_kind], gen)
    layout = gallery_layout("csd", gallery)
    x = gallery_vectors("csd", gallery, layout)
    y, constant = query_vectors("csd", query, layout)
    distances = ((y[:, None, :] - x[None, :, :]) ** 2).sum(-1)  # [Q, G]
    got = scores_from_distances("csd", distances, constant)
    for q in range(query.num):
        for g in range(gallery.num):
            expected = -sum((float(query.mean[q, d]) - float(gallery.mean[g, d])) ** 2
                            + float(query.var[q].expand(DIM)[d]) * (query.logvar is not None)
                            + float(gallery.var[g].expand(DIM)[d]) * (gallery.logvar is not None)
                            for d in range(DIM))
            assert float(got[q, g]) == pytest.approx(expected, rel=1e-5, abs=1e-5)
