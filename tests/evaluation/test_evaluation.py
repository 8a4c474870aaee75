"""pcmr.evaluation: the table equals pcmr.metrics on the same scores; skips; names; encode_split."""

from __future__ import annotations

import pytest
import torch

from pcmr import Gaussian, Model
from pcmr.data import image_loader
from pcmr.evaluation import encode_split, evaluate_embeddings, evaluate_model
from pcmr.inference import list_rerankers
from pcmr.scoring import rerank_topk

KS = (1, 5, 10)


def _data(n_img: int = 13, n_cap: int = 29, dim: int = 6, seed: int = 0, labels: bool = False):
    gen = torch.Generator().manual_seed(seed)
    images = Gaussian(torch.randn(n_img, dim, generator=gen), 0.4 * torch.randn(n_img, dim, generator=gen))
    captions = Gaussian(torch.randn(n_cap, dim, generator=gen), 0.4 * torch.randn(n_cap, dim, generator=gen))
    relevance = torch.rand(n_img, n_cap, generator=gen) < 0.15  # many-to-many
    relevance[torch.arange(n_cap) % n_img, torch.arange(n_cap)] = True  # every caption has a source image
    out = {"images": images, "captions": captions, "relevance": relevance}
    if labels:
        out["image_labels"] = torch.rand(n_img, 5, generator=gen) < 0.4
        out["caption_labels"] = out["image_labels"][torch.arange(n_cap) % n_img]
    return out


def _val(seed: int = 1):
    d = _data(n_img=11, n_cap=23, seed=seed)
    return d["images"], d["captions"], d["relevance"]


def test_table_equals_library_metrics_on_the_same_scores():
    from pcmr.inference import csls, inverted_softmax, select_lambda
    from pcmr.metrics import hubness_skewness, recall_at_k_from_topk, retrieval_metrics
    from pcmr.similarity import pairwise

    d = _data()
    val = _val()
    result = evaluate_embeddings(d["images"], d["captions"], d["relevance"], similarities=["cosine", "kl"],
                                 rerankers=["nns", "is", "csls", "csls+rgm"], val=val)
    assert [(r["similarity"], r["rerank"]) for r in result.rows] == [
        (s, r) for s in ("cosine", "kl") for r in ("nns", "is", "csls", "csls+rgm")]
    for name in ("cosine", "kl"):
        scores = pairwise(name, d["images"], d["captions"])  # [N_img, N_cap]
        val_scores = pairwise(name, val[0], val[1])
        directions = {"i2t": (scores, d["relevance"], val_scores, val[2]),
                      "t2i": (scores.T, d["relevance"].T, val_scores.T, val[2].T)}
        weightings = {"nns": lambda s: s, "is": lambda s: inverted_softmax(s, beta=30.0),
                      "csls": lambda s: csls(s, k=10)}
        for rerank in ("nns", "is", "csls"):
            row = result.row(name, rerank)
            skews = []
            for direction, (s, rel, _, _) in directions.items():
                weighted = weightings[rerank](s)
                expected = retrieval_metrics(weighted, rel, ks=KS)
                for k in KS:
                    assert row[f"{direction}_R@{k}"] == pytest.approx(expected[f"R@{k}"], abs=1e-9)
                assert row[f"{direction}_r_precision"] == pytest.approx(expected["r_precision"], abs=1e-9)
                assert row[f"{direction}_map_at_r"] == pytest.approx(expected["map_at_r"], abs=1e-9)
                skews += [hubness_skewness(weighted, k) for k in KS]
            assert row["rsum"] == pytest.approx(sum(row[f"{d_}_R@{k}"] for d_ in directions for k in KS))
            assert row["hs_sum"] == pytest.approx(sum(skews), abs=1e-9)
        row = result.row(name, "csls+rgm")
        for direction, (s, rel, vs, vrel) in directions.items():
            lam = select_lambda(vs, vrel, ks=KS, method="csls+rgm").best_lam
            assert row[f"{direction}_lambda"] == pytest.approx(float(lam))
            for k in KS:
                _, lists = rerank_topk("csls+rgm", s, k, lam=float(lam))
                assert row[f"{direction}_R@{k}"] == pytest.approx(recall_at_k_from_topk(lists, rel, k=k), abs=1e-9)
            assert row[f"{direction}_r_precision"] is None and row[f"{direction}_map_at_r"] is None
        assert result.meta["selected_lambda"][f"{name}/csls+rgm/i2t"] == row["i2t_lambda"]


def test_pmrp_columns_equal_library_pmrp():
    from pcmr.metrics import pmrp
    from pcmr.similarity import pairwise

    d = _data(labels=True)
    result = evaluate_embeddings(d["images"], d["captions"], d["relevance"], similarities=["cosine"],
                                 rerankers=["nns"], image_labels=d["image_labels"],
                                 caption_labels=d["caption_labels"])
    scores = pairwise("cosine", d["images"], d["captions"])
    row = result.row("cosine", "nns")
    expected = pmrp(scores, d["image_labels"], d["caption_labels"], zetas=(0, 1, 2))
    for direction in ("i2t", "t2i"):
        for zeta in (0, 1, 2):
            assert row[f"{direction}_pmrp_{zeta}"] == pytest.approx(expected[direction][f"pmrp@{zeta}"], abs=1e-9)
        assert row[f"{direction}_pmrp_mean"] == pytest.approx(expected[direction]["pmrp"], abs=1e-9)


def test_unsupported_similarities_are_skipped_with_a_reason():
    d = _data()
    images, captions = Gaussian.point(d["images"].mean), Gaussian.point(d["captions"].mean)
    result = evaluate_embeddings(images, captions, d["relevance"], similarities=["cosine", "kl", "match_prob"],
                                 rerankers=["nns"])
    assert [r["similarity"] for r in result.rows] == ["cosine"]
    reasons = {s["similarity"]: s["reason"] for s in result.skipped}
    assert "needs image variances" in reasons["kl"]
    assert "learned parameter(s) a, b" in reasons["match_prob"]
    assert "kl / *: needs image variances" in result.to_markdown()
    assert "uncertainty_r1" not in result.figures  # no variances, no decile plot
    with_options = evaluate_embeddings(images, captions, d["relevance"], similarities=["match_prob"],
                                       rerankers=["nns"], similarity_options={"match_prob": {"a": 5.0, "b": 1.0}})
    assert with_options.rows[0]["similarity"] == "match_prob"
    assert with_options.meta["similarity_options"]["match_prob"] == {"a": 5.0, "b": 1.0}


def test_unknown_names_list_the_accepted_ones():
    d = _data()
    with pytest.raises(ValueError, match=r"unknown similarity 'dot'; expected one of: cosine"):
        evaluate_embeddings(d["images"], d["captions"], d["relevance"], similarities=["dot"])
    with pytest.raises(ValueError, match=r"unknown re-ranker 'hubless'; expected one of: nns"):
        evaluate_embeddings(d["images"], d["captions"], d["relevance"], rerankers=["hubless"])
    with pytest.raises(ValueError, match="needs a validation split"):
        evaluate_embeddings(d["images"], d["captions"], d["relevance"], similarities=["cosine"],
                            rerankers=["rgm"])
    with pytest.raises(ValueError, match="re-ranker .is.: unknown parameter .lam.; expected one of: beta"):
        evaluate_embeddings(d["images"], d["captions"], d["relevance"], similarities=["cosine"],
                            rerankers=["is"], rerank_options={"is": {"lam": 2.0}})


def test_all_expands_and_figures_are_filled():
    from pcmr.similarity import list_similarities

    d = _data(n_img=17, n_cap=31, dim=2)
    result = evaluate_embeddings(d["images"], d["captions"], d["relevance"], similarities=["all"],
                                 rerankers=["nns", "rgm"], rerank_options={"rgm": {"lam": 2.0}},
                                 similarity_options={"match_prob": {"a": 2.0, "b": 0.5}})
    evaluated = {r["similarity"] for r in result.rows} | {s["similarity"] for s in result.skipped}
    assert evaluated == set(list_similarities())
    assert all(r["i2t_lambda"] == 2.0 for r in result.rows if r["rerank"] == "rgm")
    series = result.figures["uncertainty_r1"]["series"]["cosine"]
    assert len(series["i2t"]) == 10 and len(series["t2i"]) == 10
    assert len(result.figures["embeddings_2d"]["image"]["mean"]) == 12
    # figures of one score show the model's own (the first of its trained options), listed first
    assert set(result.figures["k_occurrence"]["series"]) == {"match_prob/nns"}
    assert next(iter(result.figures["risk_coverage"]["series"])) == "match_prob"
    plain = evaluate_embeddings(d["images"], d["captions"], d["relevance"], similarities=["elk", "cosine"],
                                rerankers=["nns"])
    assert set(plain.figures["k_occurrence"]["series"]) == {"elk/nns"}  # no trained options: the first


@pytest.fixture(scope="module")
def tiny():
    from pcmr.data import Vocabulary, load_dataset
    from pcmr.models import create_model

    opts = dict(image_size=16, num_train=24, num_val=11, num_test=13, num_test_unseen=1, num_binary_selection=1,
                cache=False)
    train, test, val = (load_dataset("shapes", s, **opts) for s in ("train", "test", "val"))
    vocab = Vocabulary.from_split(train)
    torch.manual_seed(0)
    model = create_model("pcme", vocab_size=len(vocab), embed_dim=2, image_encoder={"cnn_channels": [4, 8]},
                         text_encoder={"word_dim": 8, "hidden_dim": 8})
    return model, test, val, vocab


def test_encode_split_keeps_split_order(tiny):
    model, test, _, vocab = tiny
    images, captions = encode_split(model, test, vocab, batch_size=5)
    assert (images.num, captions.num) == (test.num_images, test.num_captions)
    assert model.training  # mode restored
    model.eval()
    with torch.no_grad():
        batch = next(iter(image_loader(test, test.num_images)))
        direct = model.encode_images(batch)
    model.train()
    order = torch.argsort(batch["image_index"])
    torch.testing.assert_close(images.mean, direct.mean[order])


def test_evaluate_model_end_to_end(tiny, tmp_path):
    model, test, val, vocab = tiny
    result = evaluate_model(Model(model, vocab), test, val_split=val, similarities=["cosine", "kl", "match_prob"],
                            rerankers=["nns", "csls+rgm"], out_dir=tmp_path, device="cpu")
    assert {(r["similarity"], r["rerank"], r["relevance"]) for r in result.rows} == {
        (s, r, m) for s in ("cosine", "kl") for r in ("nns", "csls+rgm") for m in ("exact", "source")}
    assert result.row("cosine", "nns")["i2t_pmrp_mean"] is not None  # shapes has class labels
    # PMRP depends on the class labels, not on the relevance mode: the same under both
    assert result.row("cosine", "nns", "source")["i2t_pmrp_mean"] == result.row("cosine", "nns")["i2t_pmrp_mean"]
    assert result.meta["dataset"] == "shapes" and result.meta["split"] == "test"
    for name in ("uncertainty_r1", "k_occurrence", "uncertainty_vs_corruption", "embeddings_2d"):
        assert (tmp_path / "plots" / f"{name}.png").stat().st_size > 0, name
    text = (tmp_path / "results.md").read_text()
    assert text.count("| cosine | nns | exact |") == 2  # recall and precision tables
    assert text.count("| cosine | csls+rgm | source |") == 1  # recall table only (top-k lists)


def test_evaluation_reports_exact_and_source_relevance(tiny):
    """Where the dataset knows its relation (shapes), rows are reported under it (exact) and under the
    COCO-style relation (source: only the written caption counts); a split whose relation is the
    written pairs has the source mode only."""
    import copy

    from pcmr.evaluation.evaluator import relevance_modes
    from pcmr.models import create_model

    _, test, val, vocab = tiny
    torch.manual_seed(1)
    model = create_model("vsepp", vocab_size=len(vocab), embed_dim=16, image_encoder={"cnn_channels": [4, 8]},
                         text_encoder={"word_dim": 8, "hidden_dim": 16})
    images, captions = encode_split(model, test, vocab)
    val_images, val_captions = encode_split(model, val, vocab)
    result = evaluate_model(Model(model, vocab), test, val_split=val, similarities=["cosine"], rerankers=["nns", "rgm"],
                            device="cpu")
    assert result.meta["relevance_modes"] == ["exact", "source"]
    for mode in ("exact", "source"):
        matrix = test.relevance_by_mode(mode).matrix()
        want = evaluate_embeddings(images, captions, matrix, similarities=["cosine"], rerankers=["nns", "rgm"],
                                   val=(val_images, val_captions, val.relevance_by_mode(mode).matrix()))
        for rerank in ("nns", "rgm"):
            got = result.row("cosine", rerank, mode)
            for key in ("i2t_R@1", "t2i_R@5", "rsum", "i2t_lambda"):
                assert got.get(key) == pytest.approx(want.row("cosine", rerank).get(key)), (mode, rerank, key)
    exact, source = result.row("cosine", "nns", "exact"), result.row("cosine", "nns", "source")
    assert exact["i2t_R@1"] >= source["i2t_R@1"]  # the written captions are a subset of the relevant ones
    written_only = copy.copy(test)
    written_only.relevance = test.source_relevance()  # a COCO-like split: the relation is the written pairs
    assert list(relevance_modes(written_only)) == ["source"]
    only = evaluate_model(Model(model, vocab), written_only, similarities=["cosine"], rerankers=["nns"], device="cpu")
    assert [r["relevance"] for r in only.rows] == ["source"]
    with pytest.raises(ValueError, match="knows only the written pairs"):
        relevance_modes(written_only, ["exact"])
    assert list(relevance_modes(test, ["source"])) == ["source"]


def test_extra_positive_columns_equal_library_evaluate_retrieval():
    from pcmr.metrics import ExtraPositives, evaluate_retrieval
    from pcmr.metrics._relevance import as_sparse
    from pcmr.similarity import pairwise

    d = _data()
    extra_rel = d["relevance"] | (torch.rand(d["relevance"].shape, generator=torch.Generator().manual_seed(3)) < 0.1)
    i2t = as_sparse(extra_rel, *extra_rel.shape)
    extra = ExtraPositives("CxC", i2t, i2t.transpose(), torch.zeros(extra_rel.shape[0], dtype=torch.long),
                           torch.zeros(extra_rel.shape[1], dtype=torch.long))
    result = evaluate_embeddings(d["images"], d["captions"], d["relevance"], similarities=["cosine"],
                                 rerankers=["nns"], extra_positives=[extra])
    row = result.row("cosine", "nns")
    scores = pairwise("cosine", d["images"], d["captions"])
    report = evaluate_retrieval(scores, d["relevance"], extra_positives=[extra], hubness_ks=())
    for direction in ("i2t", "t2i"):
        expected = report[f"CxC {direction}"]
        for key in ("R@1", "R@5", "R@10", "r_precision", "map_at_r"):
            assert row[f"{direction}_cxc_{key}"] == pytest.approx(expected[key], abs=1e-9)
    assert "i2t RPC²" in result.to_markdown()


def test_fold_columns_equal_library_folds_and_a_per_fold_loop():
    """``num_folds``: for ``nns`` the fold means equal ``evaluate_retrieval(num_folds=...)``; for
    ``is``/``csls`` each fold's submatrix is re-scored on its own (checked by a loop here); matching
    re-rankers get None; the Markdown report has the fold table."""
    from pcmr.inference import csls, inverted_softmax
    from pcmr.metrics import evaluate_retrieval, retrieval_metrics
    from pcmr.similarity import pairwise

    gen = torch.Generator().manual_seed(5)
    n_img, per, folds = 12, 5, 3  # COCO-like: 5 captions per image, consecutive
    images = Gaussian(torch.randn(n_img, 6, generator=gen), 0.3 * torch.randn(n_img, 6, generator=gen))
    captions = Gaussian(images.mean.repeat_interleave(per, 0) + 0.8 * torch.randn(n_img * per, 6, generator=gen),
                        0.3 * torch.randn(n_img * per, 6, generator=gen))
    relevance = torch.zeros(n_img, n_img * per, dtype=torch.bool)
    relevance[torch.arange(n_img * per) // per, torch.arange(n_img * per)] = True
    result = evaluate_embeddings(images, captions, relevance, similarities=["cosine"],
                                 rerankers=["nns", "is", "csls", "csls+rgm"], num_folds=folds,
                                 rerank_options={"csls+rgm": {"lam": 2.0}})
    scores = pairwise("cosine", images, captions)
    library = evaluate_retrieval(scores, relevance, num_folds=folds, hubness_ks=())
    row = result.row("cosine", "nns")
    for direction in ("i2t", "t2i"):
        for k in KS:
            assert row[f"folds_{direction}_R@{k}"] == pytest.approx(library[f"folds {direction}"][f"R@{k}"], abs=1e-9)
    assert row["folds_rsum"] == pytest.approx(library["folds total"]["rsum"], abs=1e-9)
    size = n_img // folds
    weightings = {"is": lambda s: inverted_softmax(s, beta=30.0),
                  "csls": lambda s: csls(s, k=min(10, *s.shape))}  # the table clamps k to the fold
    for rerank, weigh in weightings.items():
        expected = {f"folds_{d}_R@{k}": 0.0 for d in ("i2t", "t2i") for k in KS}
        for f in range(folds):
            img = torch.arange(f * size, (f + 1) * size)
            cap = torch.arange(f * size * per, (f + 1) * size * per)
            sub, rel = scores[img][:, cap], relevance[img][:, cap]
            for direction, s, r in (("i2t", sub, rel), ("t2i", sub.T, rel.T)):
                metrics = retrieval_metrics(weigh(s), r, ks=KS)
                for k in KS:
                    expected[f"folds_{direction}_R@{k}"] += metrics[f"R@{k}"] / folds
        row = result.row("cosine", rerank)
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, abs=1e-9)
        assert row["folds_rsum"] == pytest.approx(sum(expected.values()), abs=1e-9)
    assert result.row("cosine", "csls+rgm")["folds_rsum"] is None
    assert result.meta["num_folds"] == folds
    markdown = result.to_markdown()
    assert f"averaged over {folds} folds of {size} images" in markdown
    with pytest.raises(ValueError, match="num_folds must be a positive integer dividing the 12 images"):
        evaluate_embeddings(images, captions, relevance, similarities=["cosine"], rerankers=["nns"], num_folds=5)


def _loop_recall(lists, relevant, k):
    """R@K (percent) by loops over the queries that have a positive."""
    hits = [any(bool(relevant[q, g]) for g in lists[q][:k]) for q in range(len(lists)) if bool(relevant[q].any())]
    return 100.0 * sum(hits) / len(hits)


def _registered_rerankers():
    from pcmr.inference import list_rerankers

    return list_rerankers()


@pytest.mark.parametrize("rerank", _registered_rerankers())
def test_every_registered_reranker_row_equals_a_loop_over_its_own_lists(rerank):
    """Each table row of any registered re-ranker (or composition): R@K equals a loop over the lists
    of that re-ranker's run with k = K, in both directions; full rankings also give R-Precision."""
    from pcmr.inference import get_reranker
    from pcmr.scoring import score_matrix

    d = _data()
    tuned = get_reranker(rerank).tuned_parameter
    options = {tuned: 1.5} if tuned else {}
    result = evaluate_embeddings(d["images"], d["captions"], d["relevance"], similarities=["cosine"],
                                 rerankers=[rerank], rerank_options={rerank: options})
    row = result.row("cosine", rerank)
    scores = score_matrix("cosine", d["images"], d["captions"])
    for direction, matrix, relevant in (("i2t", scores, d["relevance"]), ("t2i", scores.T, d["relevance"].T)):
        method = get_reranker(rerank, **options).fitted(tuple(matrix.shape))
        for k in KS:
            expected = _loop_recall(method.topk(matrix, k).tolist(), relevant, k)
            assert row[f"{direction}_R@{k}"] == pytest.approx(expected, abs=1e-9), (direction, k)
        assert (row[f"{direction}_r_precision"] is not None) == method.returns_scores
    assert row["rsum"] == pytest.approx(sum(row[f"{d}_R@{k}"] for d in ("i2t", "t2i") for k in KS))


@pytest.mark.parametrize("rerank", list_rerankers())
def test_a_gallery_smaller_than_k_is_evaluated_by_every_reranker(rerank):
    """6 images x 12 captions: text->image has 6 gallery items, fewer than K = 10. R@10 then lists the
    whole gallery (100 % when every query has a positive), for full rankings and matchings alike;
    the uncertainty-decile figure (10 queries needed per direction) is left out with a note."""
    gen = torch.Generator().manual_seed(3)

    def gaussians(n: int) -> Gaussian:
        return Gaussian(torch.randn(n, 8, generator=gen), 0.1 * torch.randn(n, 8, generator=gen))

    relevance = torch.zeros(6, 12, dtype=torch.bool)
    relevance[torch.arange(12) // 2, torch.arange(12)] = True
    result = evaluate_embeddings(gaussians(6), gaussians(12), relevance, similarities=["cosine"],
                                 rerankers=[rerank], val=(gaussians(6), gaussians(12), relevance))
    row = result.row("cosine", rerank)
    assert row["t2i_R@10"] == 100.0 and row["t2i_R@5"] <= 100.0
    assert row["rsum"] == pytest.approx(sum(row[f"{d}_R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)))
    assert "uncertainty_r1" not in result.figures
    assert any("uncertainty-decile" in note for note in result.meta["notes"])
