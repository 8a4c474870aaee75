"""A pair's score is the same on every search path: with candidates covering the whole gallery, every
backend (faiss flat/ivf/hnsw/ivfpq, Milvus Lite, any candidate order) returns the exact backend's list
and scores, for every registered score, the sampled ones (avg_l2, match_prob) included."""

from __future__ import annotations

import pytest
import torch

from pcmr import Gaussian
from pcmr.inference import get_reranker
from pcmr.search import GalleryIndex
from pcmr.search.searcher import CandidateSearcher, Scoring
from pcmr.similarity import get_similarity, list_similarities
from pcmr.similarity.common_draws import common_draws, common_samples

DIM = 6
IMAGES, CAPTIONS, QUERIES, K = 41, 33, 5, 8
OPTIONS = {"match_prob": {"a": 3.0, "b": 1.0}}


def _gaussian(n: int, gen: torch.Generator) -> Gaussian:
    return Gaussian(torch.randn(n, DIM, generator=gen), 0.6 * torch.randn(n, DIM, generator=gen))


def _index(images: int, captions: int, seed: int) -> GalleryIndex:
    gen = torch.Generator().manual_seed(seed)
    return GalleryIndex(_gaussian(images, gen), _gaussian(captions, gen), image_ids=list(range(images)),
                        caption_ids=list(range(captions)), caption_texts=[f"c{i}" for i in range(captions)],
                        similarity_options=OPTIONS)


@pytest.fixture(scope="module")
def index() -> GalleryIndex:
    return _index(IMAGES, CAPTIONS, 11)


@pytest.fixture(scope="module")
def large_index() -> GalleryIndex:
    """Large enough for IVF-PQ's training (256 items)."""
    return _index(300, 260, 13)


@pytest.fixture(scope="module")
def queries() -> Gaussian:
    return _gaussian(QUERIES, torch.Generator().manual_seed(12))


def _assert_same(fast, exact, tolerance: float = 1e-5) -> None:
    assert torch.equal(fast.indices, exact.indices)
    torch.testing.assert_close(fast.scores, exact.scores, rtol=tolerance, atol=tolerance)


class ShuffledCandidates:
    """Every gallery item, in another random order for each query (not exact: the search re-scores)."""

    exact = False
    score = "none"

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.gen = size, torch.Generator().manual_seed(seed)

    def search(self, query: Gaussian, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.stack([torch.randperm(self.size, generator=self.gen) for _ in range(query.num)])
        return torch.zeros(query.num, self.size), rows


@pytest.mark.parametrize("similarity", list_similarities())
@pytest.mark.parametrize("modality", ["caption", "image"])
def test_any_candidate_order_gives_the_exact_list_and_scores(index, queries, similarity, modality):
    exact = index.search(queries, k=K, similarity=similarity, modality=modality, backend="exact")
    gallery_modality = "image" if modality == "caption" else "caption"
    gallery = index.gallery(gallery_modality)
    scoring = Scoring(similarity, modality, dict(OPTIONS.get(similarity, {})), get_reranker("nns"))
    for seed in (0, 1):
        search = CandidateSearcher(ShuffledCandidates(gallery.num, seed), gallery, scoring, candidates=gallery.num)
        scores, indices = search.search(queries, K)
        assert torch.equal(indices, exact.indices), (similarity, seed)
        torch.testing.assert_close(scores, exact.scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("index_type", ["flat", "ivf", "hnsw", "ivfpq"])
def test_every_faiss_index_with_the_whole_gallery_gives_the_exact_backend(large_index, queries, index_type):
    index = large_index
    params = {"ivf": {"nlist": 4, "nprobe": 4}, "ivfpq": {"nlist": 4, "nprobe": 4}, "hnsw": {"ef_search": 400}}
    index.build_ann("wasserstein", index_type=index_type, **params.get(index_type, {}))
    for modality, size in (("image", 300), ("caption", 260)):  # the candidates cover the whole gallery
        _, found = index.ann[modality].search(queries, size)
        assert torch.equal(found.sort(dim=1).values, torch.arange(size).expand(QUERIES, -1))
    for similarity in list_similarities():
        for modality in ("caption", "image"):
            exact = index.search(queries, k=K, similarity=similarity, modality=modality, backend="exact")
            gallery = index.gallery("image" if modality == "caption" else "caption")
            # the ANN source's own list (not the exact generator plan_search may pick for a full gallery)
            scoring = Scoring(similarity, modality, dict(OPTIONS.get(similarity, {})), get_reranker("nns"))
            source = index.ann["image" if modality == "caption" else "caption"]
            scores, indices = CandidateSearcher(source, gallery, scoring, candidates=gallery.num).search(queries, K)
            assert torch.equal(indices, exact.indices), (index_type, similarity, modality)
            torch.testing.assert_close(scores, exact.scores, rtol=1e-5, atol=1e-5)
            fast = index.search(queries, k=K, similarity=similarity, modality=modality, backend="faiss",
                                candidates=gallery.num)
            _assert_same(fast, exact)


def test_milvus_with_the_whole_gallery_gives_the_exact_backend(index, queries, tmp_path):
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    index.build_milvus(str(tmp_path / "g.db"), "wasserstein", index_type="flat")
    for similarity in list_similarities():
        exact = index.search(queries, k=K, similarity=similarity, backend="exact")
        fast = index.search(queries, k=K, similarity=similarity, backend="milvus", candidates=IMAGES)
        _assert_same(fast, exact)  # a gallery within the default count: Milvus's own list, re-scored
        for rerank in ("csls", "is"):  # gallery statistics from the same common draws
            exact = index.search(queries, k=K, similarity=similarity, rerank=rerank, backend="exact")
            fast = index.search(queries, k=K, similarity=similarity, rerank=rerank, backend="milvus")
            _assert_same(fast, exact, 1e-4)  # the inverted softmax multiplies a score's rounding by 30


def test_a_pair_scores_the_same_alone_and_among_other_items(index, queries):
    """The score of (query, item) from a one-item gallery equals its score in the whole gallery."""
    from pcmr.search.searcher import oriented_scores

    for similarity in [n for n in list_similarities() if get_similarity(n).sampled]:
        options = dict(OPTIONS.get(similarity, {}))
        whole = oriented_scores(similarity, queries, index.images, "caption", options)  # [Q, G]
        for g in (0, 17, IMAGES - 1):
            alone = oriented_scores(similarity, queries[2:3], index.images[g:g + 1], "caption", options)
            torch.testing.assert_close(alone[0, 0], whole[2, g], rtol=1e-5, atol=1e-5)


def test_common_draws_are_one_standard_normal_set_per_side():
    eps = common_draws(400, DIM, "image")
    flat = eps.flatten().double()
    assert abs(float(flat.mean())) < 0.1 and abs(float(flat.std()) - 1.0) < 0.1
    assert torch.equal(eps, torch.randn(400, DIM, generator=torch.Generator().manual_seed(0)))
    assert torch.equal(common_draws(7, DIM, "caption", 3),
                       torch.randn(7, DIM, generator=torch.Generator().manual_seed(7)))
    assert not torch.equal(common_draws(7, DIM, "image"), common_draws(7, DIM, "caption"))  # independent sides
    assert common_draws(2, DIM, "image", dtype=torch.float64).dtype == torch.float64
    with pytest.raises(ValueError, match="side must be one of"):
        common_draws(2, DIM, "text")
    items = _gaussian(5, torch.Generator().manual_seed(5))
    samples = common_samples(items, 4, "image")
    expected = items.mean.unsqueeze(1) + items.std.unsqueeze(1) * common_draws(4, DIM, "image").unsqueeze(0)
    torch.testing.assert_close(samples, expected)
    torch.testing.assert_close(common_samples(items[2:3], 4, "image")[0], samples[2])  # an item's alone or not
    point = Gaussian.point(items.mean[:3])
    assert torch.equal(common_samples(point, 4, "caption"), point.mean.unsqueeze(1).expand(-1, 4, -1))


def test_a_sampled_score_changes_continuously_with_the_pair(index, queries):
    """A query moved by a small amount scores every item by a small amount apart (a re-encoded upload of a
    stored image ranks as the stored image does)."""
    from pcmr.search.searcher import oriented_scores

    moved = Gaussian(queries.mean + 1e-4, queries.logvar)
    for similarity in [n for n in list_similarities() if get_similarity(n).sampled]:
        options = dict(OPTIONS.get(similarity, {}))
        before = oriented_scores(similarity, queries, index.images, "caption", options)
        after = oriented_scores(similarity, moved, index.images, "caption", options)
        assert float((after - before).abs().max()) < 1e-2


def test_stored_statistics_of_a_sampled_score_drawn_otherwise_are_recomputed(tmp_path):
    from pcmr.search.searcher import GalleryStatistics

    index = _index(IMAGES, CAPTIONS, 11)
    index.build_ann("wasserstein", index_type="flat")
    scoring = Scoring("match_prob", "caption", dict(OPTIONS["match_prob"]), get_reranker("csls"))
    index.statistics.get(index.images, index.captions, "image", scoring, 100)
    entries = index.statistics.save(tmp_path)
    assert {e["similarity"]: e.get("samples") for e in entries}["match_prob"] == "common"
    sizes = {"image": index.images.num, "caption": index.captions.num}
    fresh = GalleryStatistics()
    fresh.load(tmp_path, entries, tmp_path / "index.json", sizes)
    assert len(fresh) == len(entries)
    older = [{k: v for k, v in e.items() if k != "samples"} for e in entries]  # saved before common draws
    stale = GalleryStatistics()
    stale.load(tmp_path, older, tmp_path / "index.json", sizes)
    assert len(stale) == len([e for e in entries if e["similarity"] != "match_prob"])


def test_the_command_scores_a_pair_alike_on_faiss_and_exact(search_index_factory, tmp_path, capsys):
    """`pcmr search` with the trained match probability (the default score of a PCME index): faiss candidates
    re-scored exactly give the exact backend's list and scores."""
    import json

    from pcmr.cli import main

    index = search_index_factory(tmp_path)
    common = ["search", str(index), "--text", "a red circle", "--text", "two blue squares", "-k", "13", "--json"]
    capsys.readouterr()
    assert main([*common, "--backend", "exact"]) == 0
    exact = json.loads(capsys.readouterr().out)
    assert main([*common, "--backend", "faiss", "--candidates", "13"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert exact[0]["similarity"] == fast[0]["similarity"] == "match_prob"
    for a, b in zip(fast, exact):
        assert [h["index"] for h in a["results"]] == [h["index"] for h in b["results"]]
        assert [h["score"] for h in a["results"]] == pytest.approx([h["score"] for h in b["results"]], rel=1e-5,
                                                                   abs=1e-5)
