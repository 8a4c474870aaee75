"""A search as a composition (candidate generator + exact re-scorer + re-ranker): each stage against a
brute-force reference on the whole score matrix, the similarity attributes the search reads, and the
candidate count under re-weightings with a gallery statistic (is, csls)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from pcmr import Gaussian
from pcmr.cli import main
from pcmr.inference import get_reranker
from pcmr.scoring import rerank_topk, score_matrix
from pcmr.search import GalleryIndex
from pcmr.search.ann import ANN_SCORES, AnnIndex, ann_score_for, build_ann
from pcmr.search.compose import RESCORE_ALL_MAX, candidate_count
from pcmr.search.searcher import (
    ExactCandidates,
    ExactRescorer,
    MatchingRanker,
    ReweightingRanker,
    Scoring,
    Search,
    oriented_scores,
)
from pcmr.similarity import get_similarity, list_similarities


def _gaussians(n: int, dim: int, seed: int) -> Gaussian:
    gen = torch.Generator().manual_seed(seed)
    return Gaussian(torch.randn(n, dim, generator=gen), 0.4 * torch.randn(n, dim, generator=gen))


def _index(images: Gaussian, captions: Gaussian) -> GalleryIndex:
    return GalleryIndex(images, captions, image_ids=list(range(images.num)), caption_ids=list(range(captions.num)),
                        caption_texts=[f"c{i}" for i in range(captions.num)])


# ----------------------------------------------------------------- similarity attributes
def test_every_similarity_names_an_ann_score_and_the_mean_only_ones_ignore_variances():
    gen = torch.Generator().manual_seed(0)
    images, captions = _gaussians(7, 5, 1), _gaussians(9, 5, 2)
    other = Gaussian(images.mean, torch.randn(7, 5, generator=gen))
    for name in list_similarities():
        spec = get_similarity(name)
        assert spec.ann_score in ANN_SCORES, name
        assert spec.ann_exact == (name in ANN_SCORES), name
        if spec.means_only and not spec.accepts_point_sets:
            assert torch.equal(score_matrix(name, images, captions), score_matrix(name, other, captions)), name
    assert {n for n in list_similarities() if get_similarity(n).means_only} == {"cosine", "l2"}


def test_ann_score_for_follows_the_similarity_attributes():
    gaussians, points = _gaussians(3, 4, 3), Gaussian.point(torch.randn(3, 4))
    expected = {"cosine": "cosine", "l2": "l2", "wasserstein": "wasserstein", "csd": "csd", "match_prob": "csd",
                "avg_l2": "csd", "kl": "wasserstein", "elk": "wasserstein", "max_cosine": "cosine"}
    for name, score in expected.items():
        assert ann_score_for(name, gaussians) == score
    for name in ("cosine", "l2", "wasserstein", "csd"):  # served exactly: itself on a point gallery too
        assert ann_score_for(name, points) == name
    assert ann_score_for("match_prob", points) == ann_score_for("kl", points) == "cosine"
    with pytest.raises(ValueError, match="unknown similarity"):
        ann_score_for("cosinus", gaussians)


def test_an_ann_index_of_the_similarity_itself_gives_exact_scores():
    gallery, query = _gaussians(40, 6, 4), _gaussians(3, 6, 5)
    for name in (n for n in list_similarities() if get_similarity(n).ann_exact):
        scores, indices = build_ann(gallery, name, "flat").search(query, 40)
        exact = oriented_scores(name, query, gallery, "caption", {})
        torch.testing.assert_close(scores, exact.gather(1, indices), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- the stages against the whole matrix
@pytest.mark.parametrize("rerank", ["gm", "rgm", "is+rgm", "csls+gm"])
@pytest.mark.parametrize("query_modality", ["caption", "image"])
def test_matching_ranker_equals_the_reranker_on_the_reference_plus_query_rows(rerank, query_modality):
    images, captions, query = _gaussians(11, 4, 6), _gaussians(17, 4, 7), _gaussians(5, 4, 8)
    gallery, stored = (images, captions) if query_modality == "caption" else (captions, images)
    scoring = Scoring("kl", query_modality)
    reference = oriented_scores("kl", stored, gallery, query_modality, {}).double()  # [R, G]
    search = Search(ExactCandidates(gallery, scoring), ExactRescorer(gallery, scoring),
                    MatchingRanker(get_reranker(rerank), reference), gallery.num)
    _, indices = search.search(query, 4)
    rows = torch.cat([reference, oriented_scores("kl", query, gallery, query_modality, {}).double()])
    _, expected = rerank_topk(rerank, rows, 4)
    assert torch.equal(indices, expected[stored.num:])
    index = _index(images, captions)
    results = index.search(query, k=4, similarity="kl", rerank=rerank, modality=query_modality)
    assert torch.equal(results.indices, expected[stored.num:])


@pytest.mark.parametrize("rerank", ["nns", "is", "csls"])
def test_reweighting_ranker_over_every_candidate_equals_the_whole_matrix(rerank):
    gallery, reference, query = _gaussians(30, 5, 9), _gaussians(25, 5, 10), _gaussians(6, 5, 11)
    reranker = get_reranker(rerank, **({"beta": 4.0} if rerank == "is" else {}))
    raw = oriented_scores("wasserstein", query, gallery, "caption", {}).double()  # [Q, G]
    ref = oriented_scores("wasserstein", reference, gallery, "caption", {}).double()  # [R, G]
    if rerank == "nns":
        statistic, expected = None, raw
    elif rerank == "is":
        statistic = torch.logsumexp(4.0 * ref, dim=0)  # HAL/RGM eq. 5's normaliser over the reference queries
        expected = 4.0 * raw - statistic
    else:
        statistic = ref.topk(10, dim=0).values.mean(0)  # r_Q of HAL/RGM eq. 6
        expected = 2 * raw - raw.topk(10, dim=1).values.mean(1, keepdim=True) - statistic
    scoring = Scoring("wasserstein", "caption", {}, reranker)
    ranker = ReweightingRanker(reranker, None if statistic is None else statistic.float())
    ann = AnnIndex.create("wasserstein", gallery, "flat")
    ann.add(gallery)
    for generator in (ExactCandidates(gallery, scoring, chunk=7), ann):
        scores, indices = Search(generator, ExactRescorer(gallery, scoring), ranker, 30, 30).search(query, 5)
        top = torch.sort(expected, dim=1, descending=True, stable=True)
        assert torch.equal(indices, top.indices[:, :5])
        torch.testing.assert_close(scores.double(), top.values[:, :5], rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- is / csls over ANN candidates
def _hub_gallery(hubs: int = 150, others: int = 150, references: int = 200, dim: int = 8) -> GalleryIndex:
    """Images whose cosine to the query direction e1 is highest (``hubs``, along e1) are also close to every
    stored caption ((e1 + e3) / sqrt 2); the ``others`` (0.8 e1 - 0.6 e3) are farther from the query
    but far from the captions, so the inverted softmax and CSLS rank them first."""
    gen = torch.Generator().manual_seed(12)
    e1, e3 = torch.eye(dim)[0], torch.eye(dim)[2]
    images = torch.cat([e1.expand(hubs, dim), (0.8 * e1 - 0.6 * e3).expand(others, dim)])
    captions = ((e1 + e3) / math.sqrt(2)).expand(references, dim)
    noisy = [x + 0.01 * torch.randn(x.shape, generator=gen) for x in (images, captions)]
    return _index(Gaussian.point(noisy[0]), Gaussian.point(noisy[1]))


@pytest.mark.parametrize("rerank", ["is", "csls"])
@pytest.mark.parametrize("index_type", ["flat", "hnsw", "ivf"])
def test_is_and_csls_over_ann_candidates_equal_the_exact_search_by_default(rerank, index_type):
    index = _hub_gallery()
    index.build_ann("cosine", ("image",), index_type, nlist=4, nprobe=1)
    query = Gaussian.point(torch.eye(8)[:1])
    exact = index.search(query, k=5, rerank=rerank, backend="exact")
    assert min(exact.indices[0].tolist()) >= 150  # the re-weighting prefers the non-hubs
    fast = index.search(query, k=5, rerank=rerank, backend="faiss")
    assert torch.equal(fast.indices, exact.indices) and fast.notes == []
    torch.testing.assert_close(fast.scores, exact.scores, rtol=1e-5, atol=1e-5)
    few = index.search(query, k=5, rerank=rerank, backend="faiss", candidates=100)  # hubs only: not exact
    assert max(few.indices[0].tolist()) < 150
    assert len(few.notes) == 1 and "--candidates 300" in few.notes[0] and "may differ" in few.notes[0]


def test_candidate_count_rescores_small_galleries_whole_and_notes_large_ones():
    assert candidate_count(get_reranker("nns"), 10**6, None) == (None, None)
    assert candidate_count(get_reranker("is"), RESCORE_ALL_MAX, None) == (RESCORE_ALL_MAX, None)
    width, note = candidate_count(get_reranker("csls"), RESCORE_ALL_MAX + 1, None)
    assert width == 100 and note is not None and f"--candidates {RESCORE_ALL_MAX + 1}" in note
    assert candidate_count(get_reranker("is"), 500, 800) == (800, None)


@pytest.fixture(scope="module")
def larger_index(tiny_run_factory, tmp_path_factory):
    """An index over 150 test images and 750 captions (more than the 100 default candidates)."""
    root = tmp_path_factory.mktemp("larger")
    shapes = dict(image_size=16, num_train=24, num_val=11, num_test=150, num_test_unseen=1, num_binary_selection=1,
                  cache=False)
    run = tiny_run_factory(root / "run", shapes=shapes)
    assert main(["search", str(root / "index"), "--build", str(run), "--backend", "faiss", "--index-type", "hnsw",
                 "--similarity", "wasserstein"]) == 0
    assert main(["search", str(root / "disk"), "--build", str(run), "--on-disk", "--store-dtype", "float32",
                 "--index-type", "ivf", "--nlist", "3", "--nprobe", "1"]) == 0
    return root / "index"


def test_an_on_disk_index_answers_is_and_csls_like_the_exact_backend(larger_index):
    memory, disk = GalleryIndex.load(larger_index), GalleryIndex.load(larger_index.parent / "disk")
    for modality in ("caption", "image"):
        query = (memory.captions if modality == "caption" else memory.images)[:6]
        for rerank in ("is", "csls"):
            exact = memory.search(query, k=5, similarity="kl", rerank=rerank, modality=modality, backend="exact")
            found = disk.search(query, k=5, similarity="kl", rerank=rerank, modality=modality)
            assert torch.equal(found.indices, exact.indices) and found.notes == []
            torch.testing.assert_close(found.scores, exact.scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rerank", ["is", "csls"])
def test_cli_is_and_csls_over_faiss_equal_the_exact_backend(larger_index, tmp_path, capsys, rerank):
    from PIL import Image

    Image.new("RGB", (16, 16), (200, 30, 30)).save(tmp_path / "q.png")
    capsys.readouterr()
    common = ["search", str(larger_index), "--text", "a red circle", "--text", "two blue squares", "--image",
              str(tmp_path / "q.png"), "-k", "5", "--similarity", "kl", "--rerank", rerank, "--json"]
    assert main([*common, "--backend", "faiss"]) == 0
    captured = capsys.readouterr()
    fast = json.loads(captured.out)
    assert "may differ" not in captured.err
    assert main([*common, "--backend", "exact"]) == 0
    exact = json.loads(capsys.readouterr().out)
    for a, b in zip(fast, exact, strict=True):
        assert [h["index"] for h in a["results"]] == [h["index"] for h in b["results"]]
        assert [h["score"] for h in a["results"]] == pytest.approx([h["score"] for h in b["results"]], rel=1e-4)
    assert main([*common, "--backend", "faiss", "--candidates", "20"]) == 0
    assert "may differ from the exact search" in capsys.readouterr().err


def test_serve_prints_the_note_once_at_start(tmp_path, capsys, monkeypatch):
    """`pcmr serve` with csls over a gallery larger than the candidates asked for warns at start."""
    import pcmr.cli.serve as serve

    root = tmp_path
    index = _index(_gaussians(120, 4, 13), _gaussians(40, 4, 14))
    index.build_ann("cosine", index_type="flat")
    index.save(root / "index")
    started = {}

    class _Server:
        def __init__(self, config):
            started["app"] = config.app

        def run(self, sockets):
            started["ran"] = True

    import uvicorn

    monkeypatch.setattr(uvicorn, "Server", _Server)
    monkeypatch.setattr(serve, "bind_socket", lambda host, port: type("S", (), {"close": lambda self: None})())
    assert main(["serve", str(root / "index"), "--rerank", "csls", "--candidates", "30"]) == 0
    err = capsys.readouterr().err
    assert started["ran"] and err.count("may differ from the exact search") == 2  # image and caption galleries
    assert "image gallery:" in err and "--candidates 120" in err
    from fastapi.testclient import TestClient

    warnings = TestClient(started["app"]).get("/api/images/0", params={"k": 3}).json()["warnings"]
    assert any("may differ from the exact search" in w and "--candidates 40" in w for w in warnings)
    assert main(["serve", str(root / "index"), "--rerank", "csls"]) == 0
    assert "may differ" not in capsys.readouterr().err


def test_a_partial_ivf_index_answers_is_and_csls_with_every_item_rescored(tiny_run_factory, tmp_path):
    index_dir = tmp_path / "index"
    run = tiny_run_factory(tmp_path / "run")
    assert main(["search", str(index_dir), "--build", str(run), "--backend", "faiss", "--index-type", "ivf",
                 "--nlist", "2", "--nprobe", "1", "--ann-score", "cosine"]) == 0
    index = GalleryIndex.load(index_dir)
    assert not index.ann["image"].exhaustive  # one of two lists visited: the exact generator answers
    query = index.captions[:4]
    for rerank in ("is", "csls"):
        fast = index.search(query, k=5, rerank=rerank, modality="caption")
        exact = index.search(query, k=5, rerank=rerank, modality="caption", backend="exact")
        assert torch.equal(fast.indices, exact.indices)


def test_batched_candidate_scores_equal_the_pairwise_score() -> None:
    """The re-scorer's batched form (a property of the similarity, not a name check) gives the same
    scores as the similarity's own pairwise matrix."""
    import torch

    from pcmr import Gaussian
    from pcmr.search.searcher import rescore_candidates
    from pcmr.similarity import get_similarity, pairwise

    generator = torch.Generator().manual_seed(0)
    gallery = Gaussian(torch.randn(40, 6, generator=generator), torch.randn(40, 6, generator=generator))
    query = Gaussian(torch.randn(3, 6, generator=generator), torch.randn(3, 6, generator=generator))
    candidates = torch.randint(0, 40, (3, 7), generator=generator)
    candidates[0, -1] = -1
    assert [name for name in ("cosine", "l2", "kl") if get_similarity(name).batched_candidates] == ["cosine"]
    for name in ("cosine", "l2"):
        full = pairwise(name, gallery, query).T  # [Q, G]
        got = rescore_candidates(name, query, gallery, candidates, "caption", {})
        expected = torch.gather(full, 1, candidates.clamp_min(0))
        torch.testing.assert_close(got[candidates >= 0], expected[candidates >= 0])
        assert torch.isinf(got[0, -1])
