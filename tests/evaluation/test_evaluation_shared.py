"""Work shared between relevance modes: done once, and the tables equal those of separate evaluations."""

from __future__ import annotations

import pytest
import torch

import pcmr.evaluation.table as table_module
import pcmr.inference.rerankers as rerankers_module
import pcmr.metrics.driver as driver_module
from pcmr import Gaussian
from pcmr.evaluation import evaluate_embeddings
from pcmr.evaluation.table import ScoreCache
from pcmr.inference import select_lambda


def _problem(n_img: int, n_cap: int, seed: int) -> dict[str, object]:
    gen = torch.Generator().manual_seed(seed)
    images = Gaussian(torch.randn(n_img, 6, generator=gen), 0.4 * torch.randn(n_img, 6, generator=gen))
    captions = Gaussian(torch.randn(n_cap, 6, generator=gen), 0.4 * torch.randn(n_cap, 6, generator=gen))
    source = torch.zeros(n_img, n_cap, dtype=torch.bool)
    source[torch.arange(n_cap) % n_img, torch.arange(n_cap)] = True  # the written pairs
    exact = source | (torch.rand(n_img, n_cap, generator=gen) < 0.2)  # a wider relation
    labels = torch.rand(n_img, 5, generator=gen) < 0.4
    return {"images": images, "captions": captions, "modes": {"exact": exact, "source": source},
            "image_labels": labels, "caption_labels": labels[torch.arange(n_cap) % n_img]}


class _Counter:
    """Wraps a function and counts its calls."""

    def __init__(self, function):
        self.function, self.calls = function, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.function(*args, **kwargs)


def test_select_lambda_reuses_the_runs_under_another_relevance(monkeypatch):
    data = _problem(17, 41, seed=2)
    scores = data["images"].mean @ data["captions"].mean.T  # [17, 41]
    matching = _Counter(rerankers_module.relaxed_greedy_matching)
    monkeypatch.setattr(rerankers_module, "relaxed_greedy_matching", matching)
    runs: dict[tuple[float, int], torch.Tensor] = {}
    grid, ks = (1.0, 1.5, 2.0, float("inf")), (1, 5)
    for mode, relevance in data["modes"].items():
        fresh = select_lambda(scores, relevance, ks=ks, grid=grid, method="csls+rgm")
        calls = matching.calls
        shared = select_lambda(scores, relevance, ks=ks, grid=grid, method="csls+rgm", runs=runs)
        assert shared == fresh, mode
        if mode == "exact":  # the first relevance fills the runs: one matching per (lambda, K)
            assert matching.calls - calls == len(grid) * len(ks) and set(runs) == {(lam, k) for lam in grid for k in ks}
        else:  # the second matches nothing
            assert matching.calls == calls


@pytest.mark.parametrize("rerankers", [["nns", "csls", "csls+rgm"]])
def test_modes_share_scores_lambda_runs_and_pmrp_with_the_same_tables(monkeypatch, rerankers):
    data = _problem(13, 29, seed=0)
    val = _problem(11, 23, seed=1)
    similarities = ["cosine", "kl"]

    def tables(shared: ScoreCache | None) -> dict[str, list[dict[str, object]]]:
        out = {}
        for mode, relevance in data["modes"].items():
            report = evaluate_embeddings(
                data["images"], data["captions"], relevance, similarities=similarities, rerankers=rerankers,
                image_labels=data["image_labels"], caption_labels=data["caption_labels"],
                val=(val["images"], val["captions"], val["modes"][mode]), shared=shared)
            out[mode] = report.rows
        return out

    separate = tables(None)
    scoring = _Counter(table_module.score_matrix)
    pmrp = _Counter(driver_module.pmrp)
    matching = _Counter(rerankers_module.relaxed_greedy_matching)
    monkeypatch.setattr(table_module, "score_matrix", scoring)
    monkeypatch.setattr(driver_module, "pmrp", pmrp)
    monkeypatch.setattr(rerankers_module, "relaxed_greedy_matching", matching)
    shared = ScoreCache()
    together = tables(shared)
    assert together == separate  # every value, column and row order
    assert scoring.calls == 2 * len(similarities)  # test and validation scores, once for both modes
    scored_rerankers = [r for r in rerankers if "+" not in r]
    # labels only: once for both modes, and each direction's queries only
    assert pmrp.calls == len(similarities) * len(scored_rerankers) * 2
    assert set(shared.runs) == {(s, r, d) for s in similarities for r in rerankers for d in ("i2t", "t2i")}
    matchings = [r for r in rerankers if "+" in r]
    assert set(shared.test_runs) == {(s, r, d) for s in similarities for r in matchings for d in ("i2t", "t2i")}
    lambdas = {(s, d): {key[0] for key in shared.test_runs[(s, r, d)]} for s in similarities for r in matchings
               for d in ("i2t", "t2i")}  # the lambdas the modes selected (a lambda shared by both: one run)
    per_selection = 10 * 3  # the default grid x K = 1, 5, 10
    test_runs = sum(3 * len(found) for found in lambdas.values())  # every K once per selected lambda
    assert matching.calls <= len(similarities) * 2 * per_selection + test_runs


def test_the_modes_are_evaluated_on_one_torch_thread_and_the_setting_is_restored():
    from pcmr.evaluation.evaluator import _one_torch_thread

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with _one_torch_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), _one_torch_thread():
            raise RuntimeError("fails inside")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)
