"""Search past memory: the on-disk gallery store, the compressed IVF-PQ index and the one searcher
interface, against exact search on small clustered data for every ANN score and re-ranker."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pcmr import Gaussian
from pcmr.inference import get_reranker
from pcmr.search.ann import AnnIndex, ann_score_for, build_ann, compressed_params, parse_memory
from pcmr.search.searcher import CandidateSearcher, ExactSearcher, Scoring, gallery_statistic, oriented_scores
from pcmr.search.store import GalleryStore, write_store

pytest.importorskip("faiss")

DIM = 16


def _clustered(num: int, seed: int, spherical: bool = False) -> Gaussian:
    gen = torch.Generator().manual_seed(seed)
    centres = 3 * torch.randn(12, DIM, generator=torch.Generator().manual_seed(99))
    mean = centres[torch.randint(0, 12, (num,), generator=gen)] + torch.randn(num, DIM, generator=gen)
    logvar = -1 + 0.5 * torch.randn(num, 1 if spherical else DIM, generator=gen)
    return Gaussian(mean, logvar)


def _store(tmp_path, gallery: Gaussian, dtype: str = "float32") -> GalleryStore:
    chunks = [gallery[i:i + 700] for i in range(0, gallery.num, 700)]
    return write_store(tmp_path / f"store-{dtype}", iter(chunks), gallery.num, DIM, gallery.logvar.shape[1], dtype)


def test_store_round_trip_rows_and_chunks(tmp_path):
    gallery = _clustered(2001, 0)
    store = _store(tmp_path, gallery)
    rows = torch.tensor([[5, 2000, 5], [0, 17, 3]])
    got = store.rows(rows)
    assert torch.equal(got.mean, gallery.mean[rows.reshape(-1)])
    assert torch.equal(got.logvar, gallery.logvar[rows.reshape(-1)])
    assert store.rows(rows, need_logvar=False).logvar is None
    starts = [start for start, _ in store.chunks(500)]
    assert starts == [0, 500, 1000, 1500, 2000]
    assert torch.equal(torch.cat([c.mean for _, c in store.chunks(500)]), gallery.mean)
    with pytest.raises(IndexError, match=r"\[0, 2001\)"):
        store.rows(torch.tensor([2001]))


def test_store_reads_many_rows_with_parallel_reads(tmp_path, monkeypatch):
    import pcmr.search.store as store_module

    monkeypatch.setattr(store_module, "PARALLEL_READ_ROWS", 10)
    gallery = _clustered(777, 13)
    store = _store(tmp_path, gallery)
    rows = torch.randint(0, 777, (40, 25), generator=torch.Generator().manual_seed(0))
    got = store.rows(rows)
    assert torch.equal(got.mean, gallery.mean[rows.reshape(-1)])
    assert torch.equal(got.logvar, gallery.logvar[rows.reshape(-1)])


def test_store_float16_error_is_within_half_precision(tmp_path):
    gallery = _clustered(300, 1)
    store = _store(tmp_path, gallery, "float16")
    got = store.load()
    assert (store.path / "mean.npy").stat().st_size < 300 * DIM * 2 + 200  # two bytes per entry + header
    relative = ((got.mean - gallery.mean).abs() / gallery.mean.abs().clamp_min(1e-3)).max()
    assert relative <= 2.0**-11
    query = _clustered(5, 2)
    exact = oriented_scores("cosine", query, gallery, "caption", {})
    approx = oriented_scores("cosine", query, got, "caption", {})
    assert (exact - approx).abs().max() < 2e-3


def test_store_refuses_damaged_or_incomplete_folders(tmp_path):
    store = _store(tmp_path, _clustered(40, 3))
    info = json.loads((store.path / "store.json").read_text())
    (store.path / "store.json").write_text(json.dumps({**info, "num": 41}))
    with pytest.raises(ValueError, match="do not match store.json"):
        GalleryStore.open(store.path)
    (store.path / "store.json").unlink()
    with pytest.raises(FileNotFoundError, match="not a complete gallery store"):
        GalleryStore.open(store.path)
    with pytest.raises(ValueError, match="rows, expected 50"):
        write_store(tmp_path / "short", iter([_clustered(40, 3)]), 50, DIM, DIM)
    assert not (tmp_path / "short").exists()


def test_memory_budget_picks_the_code_and_lists():
    assert compressed_params(10_000_000, 256) == {"nlist": 4096, "pq_m": 64}
    assert compressed_params(10_000_000, 256, 500 * 2**20) == {"nlist": 4096, "pq_m": 32}
    assert compressed_params(1_000_000, 17)["pq_m"] == 16
    with pytest.raises(ValueError, match="no IVF-PQ code fits"):
        compressed_params(10_000_000, 256, 2**20)
    assert parse_memory("8G") == 8 * 2**30 and parse_memory("512MiB") == 512 * 2**20 and parse_memory(1000) == 1000
    with pytest.raises(ValueError, match="memory size"):
        parse_memory("lots")


def _recall(found: torch.Tensor, truth: torch.Tensor) -> float:
    return float(np.mean([len(set(found[q].tolist()) & set(truth[q].tolist())) / truth.shape[1]
                          for q in range(truth.shape[0])]))


CASES = [(s, r) for s in ("cosine", "l2", "wasserstein", "csd", "kl") for r in ("nns", "is", "csls")]


@pytest.mark.parametrize(("similarity", "rerank"), CASES)
def test_ivfpq_candidates_refined_from_disk_match_exact_search(tmp_path, similarity, rerank):
    """Recall@10 of IVF-PQ candidates re-scored exactly from a store on disk against the exact searcher,
    and every returned item's score equal to its exact (re-weighted) score."""
    gallery, reference, query = _clustered(3000, 4), _clustered(200, 5), _clustered(30, 6)
    store = _store(tmp_path, gallery)
    score = ann_score_for(similarity, gallery)
    ann = AnnIndex.create(score, gallery, "ivfpq", nlist=16, nprobe=8, pq_m=8)
    for _, chunk in store.chunks(1000):
        ann.add(chunk)
    assert not ann.exact and ann.ntotal == 3000
    reranker = get_reranker(rerank, **({"beta": 5.0} if rerank == "is" else {}))
    scoring = Scoring(similarity, "caption", {}, reranker)
    statistic = gallery_statistic(scoring, reference, store, block_items=1000)
    fast_scores, fast_idx = CandidateSearcher(ann, store, scoring, statistic, candidates=150).search(query, 10)
    exact_scores, exact_idx = ExactSearcher(gallery, scoring, statistic, chunk=999).search(query, 10)
    assert _recall(fast_idx, exact_idx) >= 0.95
    raw = oriented_scores(similarity, query, gallery, "caption", {}).double()  # [Q, G]
    if rerank == "nns":
        expected = raw
    elif rerank == "is":
        expected = 5.0 * raw - statistic.double()
    else:
        expected = 2 * raw - raw.topk(10, dim=1).values.mean(1, keepdim=True) - statistic.double()
    torch.testing.assert_close(fast_scores.double(), expected.gather(1, fast_idx), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(exact_scores.double(), expected.gather(1, exact_idx), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("refine", ["SQ8", "SQfp16"])
def test_refine_codes_reorder_candidates_and_survive_a_round_trip(tmp_path, refine):
    gallery, query = _clustered(3000, 14), _clustered(20, 15)
    ann = build_ann(gallery, "wasserstein", "ivfpq", nlist=16, nprobe=16, pq_m=4, refine=refine, refine_factor=10)
    assert ann.params["refine"] == refine and ann.params["refine_factor"] == 10
    _, exact_idx = ExactSearcher(gallery, Scoring("wasserstein")).search(query, 10)
    _, refined_idx = CandidateSearcher(ann, gallery, Scoring("wasserstein"), candidates=20).search(query, 10)
    ann.set_search_params(refine_factor=1)
    _, coarse_idx = CandidateSearcher(ann, gallery, Scoring("wasserstein"), candidates=20).search(query, 10)
    assert _recall(refined_idx, exact_idx) >= 0.95 and _recall(refined_idx, exact_idx) >= _recall(coarse_idx, exact_idx)
    ann.set_search_params(refine_factor=10)
    with open(tmp_path / "a.faiss", "wb") as handle:
        ann.write(handle)
    again = AnnIndex.read(str(tmp_path / "a.faiss"), "wasserstein", "ivfpq", ann.layout, DIM, ann.params)
    assert torch.equal(again.search(query, 20)[1], ann.search(query, 20)[1])
    with pytest.raises(ValueError, match="refine must be"):
        build_ann(gallery, "cosine", "ivfpq", nlist=16, refine="SQ4")
    with pytest.raises(ValueError, match="needs at least 256 training items"):
        build_ann(gallery[:100], "cosine", "ivfpq")


def test_exact_searcher_streams_a_store_like_the_whole_matrix(tmp_path):
    gallery, query = _clustered(1000, 7, spherical=True), _clustered(9, 8)
    store = _store(tmp_path, gallery)
    for similarity in ("cosine", "wasserstein"):
        scores, idx = ExactSearcher(store, Scoring(similarity), chunk=97).search(query, 7)
        full = oriented_scores(similarity, query, gallery, "caption", {})
        top = torch.sort(full, dim=1, descending=True, stable=True)
        assert torch.equal(idx, top.indices[:, :7])
        torch.testing.assert_close(scores, top.values[:, :7])


def test_ties_go_to_the_lower_gallery_index_on_both_searchers(tmp_path):
    mean = torch.tensor([[1.0, 0.0]] * 6 + [[0.0, 1.0]] * 4)
    gallery = Gaussian.point(mean)
    query = Gaussian.point(torch.tensor([[1.0, 0.1]]))
    _, exact_idx = ExactSearcher(gallery, Scoring("cosine"), chunk=4).search(query, 3)
    ann = build_ann(gallery, "cosine", "flat")
    _, fast_idx = CandidateSearcher(ann, gallery, Scoring("cosine"), candidates=10).search(query, 3)
    assert exact_idx.tolist() == fast_idx.tolist() == [[0, 1, 2]]


def test_matchings_are_refused_on_candidate_lists():
    gallery = _clustered(50, 9)
    ann = build_ann(gallery, "cosine", "flat")
    with pytest.raises(ValueError, match="matches all queries together"):
        CandidateSearcher(ann, gallery, Scoring("cosine", reranker=get_reranker("rgm")))
    with pytest.raises(ValueError, match="needs its gallery statistic"):
        CandidateSearcher(ann, gallery, Scoring("cosine", reranker=get_reranker("csls")))
    with pytest.raises(ValueError, match="candidates must be a positive integer"):
        CandidateSearcher(ann, gallery, Scoring("cosine"), candidates=0)


def test_gallery_index_builds_ivfpq_with_a_memory_budget(tmp_path):
    from pcmr.search import GalleryIndex

    images, captions = _clustered(2000, 10), _clustered(300, 11)
    index = GalleryIndex(images, captions, image_ids=range(2000), caption_ids=range(300),
                         caption_texts=[f"c{i}" for i in range(300)])
    index.build_ann("wasserstein", ("image",), "ivfpq", nlist=16, memory_budget=100_000)  # m = 32 needs 119 kB
    assert index.ann["image"].params["pq_m"] == 16
    query = _clustered(8, 12)
    for rerank in ("nns", "csls"):
        fast = index.search(query, k=5, similarity="wasserstein", rerank=rerank, candidates=200)
        exact = index.search(query, k=5, similarity="wasserstein", rerank=rerank, backend="exact")
        assert _recall(fast.indices, exact.indices) >= 0.9
    loaded = GalleryIndex.load(index.save(tmp_path / "idx"))
    again = loaded.search(query, k=5, similarity="wasserstein", candidates=200)
    assert torch.equal(again.indices, index.search(query, k=5, similarity="wasserstein", candidates=200).indices)
