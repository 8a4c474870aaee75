"""GalleryIndex: storage (safetensors + JSON), search against brute-force references, errors."""

from __future__ import annotations

import json

import pytest
import torch

from pcmr import Gaussian
from pcmr.search import GalleryIndex


def _gaussians(n_img: int = 11, n_cap: int = 17, dim: int = 5, seed: int = 0, spherical: bool = False):
    gen = torch.Generator().manual_seed(seed)
    width = 1 if spherical else dim
    images = Gaussian(torch.randn(n_img, dim, generator=gen), 0.3 * torch.randn(n_img, width, generator=gen))
    captions = Gaussian(torch.randn(n_cap, dim, generator=gen), 0.3 * torch.randn(n_cap, width, generator=gen))
    return images, captions


def _index(images: Gaussian, captions: Gaussian) -> GalleryIndex:
    return GalleryIndex(images, captions, image_ids=[f"img{i}" for i in range(images.num)],
                        caption_ids=list(range(100, 100 + captions.num)),
                        caption_texts=[f"caption {c}" for c in range(captions.num)],
                        image_metadata=[{"file": f"{i}.png"} for i in range(images.num)],
                        similarity_options={"match_prob": {"a": 3.0, "b": 1.0}}, meta={"dataset": "toy"})


def _cosine_reference(queries: torch.Tensor, gallery: torch.Tensor) -> torch.Tensor:
    out = torch.empty(len(queries), len(gallery), dtype=torch.float64)
    for q in range(len(queries)):
        for g in range(len(gallery)):
            a, b = queries[q].double(), gallery[g].double()
            out[q, g] = (a @ b) / (a.norm() * b.norm())
    return out


def _kl_reference(image: Gaussian, caption: Gaussian) -> float:
    """-KL(image || caption), written out per dimension (docs/similarity.md)."""
    total = 0.0
    v1, v2 = image.expanded_logvar()[0].double().exp(), caption.expanded_logvar()[0].double().exp()
    m1, m2 = image.mean[0].double(), caption.mean[0].double()
    for d in range(image.dim):
        total += 0.5 * (torch.log(v2[d] / v1[d]) + v1[d] / v2[d] + (m1[d] - m2[d]) ** 2 / v2[d] - 1)
    return -float(total)


def test_save_load_round_trip(tmp_path):
    images, captions = _gaussians(spherical=True)
    index = _index(images, captions)
    index.save(tmp_path / "idx")
    info = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert info["format"] == "pcmr-gallery-index" and info["model"] is None
    loaded = GalleryIndex.load(tmp_path / "idx")
    assert torch.equal(loaded.images.mean, images.mean) and torch.equal(loaded.captions.logvar, captions.logvar)
    assert loaded.image_ids == index.image_ids and loaded.caption_ids == index.caption_ids
    assert loaded.caption_texts == index.caption_texts and loaded.image_metadata == index.image_metadata
    assert loaded.similarity_options == {"match_prob": {"a": 3.0, "b": 1.0}}
    assert loaded.meta["dataset"] == "toy" and loaded.model is None
    point = GalleryIndex(Gaussian.point(images.mean), Gaussian.point(captions.mean), image_ids=index.image_ids,
                         caption_ids=index.caption_ids, caption_texts=index.caption_texts)
    point.save(tmp_path / "point")
    assert GalleryIndex.load(tmp_path / "point").images.is_point


def test_text_query_cosine_matches_brute_force():
    images, captions = _gaussians()
    index = _index(images, captions)
    query = captions[3:6]  # three caption queries -> images
    results = index.search(query, k=4, similarity="cosine")
    reference = _cosine_reference(query.mean, images.mean)  # [3, N_img]
    expected = torch.sort(reference, dim=1, descending=True, stable=True)
    assert torch.equal(results.indices, expected.indices[:, :4])
    torch.testing.assert_close(results.scores.double(), expected.values[:, :4], rtol=1e-5, atol=1e-6)
    unc = images.uncertainty("log_det")
    for q in range(3):
        for r, hit in enumerate(results.hits[q]):
            assert hit.rank == r + 1 and hit.id == f"img{hit.index}" and hit.metadata == {"file": f"{hit.index}.png"}
            assert hit.uncertainty == pytest.approx(float(unc[hit.index]))
    torch.testing.assert_close(results.query_uncertainty, query.uncertainty("log_det"))
    assert results.to_text(["q0", "q1", "q2"]).splitlines()[0].startswith("q0")


def test_image_query_kl_uses_caption_as_reference_distribution():
    images, captions = _gaussians(n_img=7, n_cap=13, dim=3, seed=1)
    index = _index(images, captions)
    results = index.search(images[2], k=13, similarity="kl", modality="image")
    reference = torch.tensor([_kl_reference(images[2], captions[c]) for c in range(13)], dtype=torch.float64)
    expected = torch.sort(reference, descending=True, stable=True)
    assert results.indices[0].tolist() == expected.indices.tolist()
    torch.testing.assert_close(results.scores[0].double(), expected.values, rtol=1e-5, atol=1e-5)
    assert results.hits[0][0].text == f"caption {int(expected.indices[0])}"
    assert results.hits[0][0].id == 100 + int(expected.indices[0])


def test_point_gallery_has_no_uncertainty_and_refuses_variance_scores():
    images, captions = _gaussians()
    index = GalleryIndex(Gaussian.point(images.mean), Gaussian.point(captions.mean),
                         image_ids=list(range(images.num)), caption_ids=list(range(captions.num)),
                         caption_texts=["x"] * captions.num)
    results = index.search(Gaussian.point(captions.mean[:2]), k=3)
    assert results.uncertainty is None and results.query_uncertainty is None
    assert results.hits[0][0].uncertainty is None
    with pytest.raises(ValueError, match="needs image variances"):
        index.search(Gaussian.point(captions.mean[:1]), similarity="kl")


def test_search_argument_errors():
    images, captions = _gaussians()
    index = _index(images, captions)
    with pytest.raises(ValueError, match=r"k must be in \[1, 11\]"):
        index.search(captions[0], k=12)
    with pytest.raises(ValueError, match="modality"):
        index.search(captions[0], modality="audio")
    with pytest.raises(ValueError, match="query has D=2"):
        index.search(Gaussian.point(torch.zeros(1, 2)))
    with pytest.raises(ValueError, match="unknown re-ranker 'hubless'"):
        index.search(captions[0], rerank="hubless")
    with pytest.raises(ValueError, match="unknown similarity"):
        index.search(captions[0], similarity="dot")
    with pytest.raises(ValueError, match="no model"):
        index.search_text("a red circle")
    with pytest.raises(ValueError, match="caption_texts has 3 entries"):
        GalleryIndex(images, captions, image_ids=list(range(11)), caption_ids=list(range(17)),
                     caption_texts=["a"] * 3)


def test_load_errors_name_the_file(tmp_path):
    images, captions = _gaussians()
    with pytest.raises(FileNotFoundError, match="index folder not found"):
        GalleryIndex.load(tmp_path / "missing")
    root = _index(images, captions).save(tmp_path / "idx")
    (root / "embeddings.safetensors").write_bytes((root / "embeddings.safetensors").read_bytes()[:50])
    with pytest.raises(ValueError, match="embeddings.safetensors: SHA-256 .* truncated or edited"):
        GalleryIndex.load(root)
    (root / "index.json").write_text("{")
    with pytest.raises(ValueError, match="index.json is not valid JSON"):
        GalleryIndex.load(root)
    (root / "index.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="field 'format'"):
        GalleryIndex.load(root)
    (root / "index.json").unlink()
    with pytest.raises(FileNotFoundError, match="not a pcmr gallery index"):
        GalleryIndex.load(root)


@pytest.mark.parametrize("rerank", ["is", "csls", "csls+rgm"])
def test_rerankers_use_the_stored_items_as_reference_queries(rerank):
    """IS and CSLS: each new query is re-weighted against the stored captions alone (the query itself
    outside the reference set, the other queries of the call not in it); a matching (csls+rgm) runs on
    the stored captions' rows with the new queries appended."""
    from pcmr.inference import csls, inverted_softmax, relaxed_greedy_matching

    images, captions = _gaussians(n_img=11, n_cap=17, seed=2)
    index = _index(images, captions)
    gen = torch.Generator().manual_seed(5)
    query = Gaussian(torch.randn(2, 5, generator=gen), 0.3 * torch.randn(2, 5, generator=gen))
    options = {"lam": 2.0} if rerank == "csls+rgm" else {}
    results = index.search(query, k=4, similarity="cosine", rerank=rerank, rerank_options=options)
    reference = _cosine_reference(captions.mean, images.mean).double()  # [17, 11]
    rows = _cosine_reference(query.mean, images.mean).double()  # [2, 11]
    if rerank == "is":  # eq. 5 with the query as one more row: its normaliser is over the other rows
        weighted = torch.stack([inverted_softmax(torch.cat([reference, rows[q:q + 1]]), beta=30.0)[-1]
                                for q in range(2)])
    elif rerank == "csls":  # eq. 6 by hand: 2 S - mean of the row's 10 best - mean of the column's 10 best
        r_q = reference.topk(10, dim=0).values.mean(0)
        r_g = rows.topk(10, dim=1).values.mean(1, keepdim=True)
        weighted = 2 * rows - r_g - r_q
    else:
        weighted = csls(torch.cat([reference, rows]), k=10)[-2:]
    if rerank == "csls+rgm":
        expected = relaxed_greedy_matching(csls(torch.cat([reference, rows]).float(), k=10), 4, 2.0)[-2:]
    else:
        expected = torch.sort(weighted, dim=1, descending=True, stable=True).indices[:, :4]
    assert torch.equal(results.indices, expected)
    torch.testing.assert_close(results.scores.double(), weighted.gather(1, expected), rtol=1e-4, atol=1e-4)
