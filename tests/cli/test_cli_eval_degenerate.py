"""`pcmr evaluate` on models that learned nothing useful: no perfect-score artefact, a warning for a
degenerate score, and option values checked before any work."""

from __future__ import annotations

import json
import math

import pytest
import torch

from pcmr.cli import main
from pcmr.inference import get_reranker

#: the model of the tiny run folder (its config.yaml), rebuilt here with other variance heads
TINY_MODEL = {"embed_dim": 4, "image_encoder": {"cnn_channels": [4, 8]}, "text_encoder": {"word_dim": 8, "hidden_dim": 8}}
SHAPES = dict(image_size=16, num_train=24, num_val=40, num_test=80, num_test_unseen=1, num_binary_selection=1,
              cache=False)


def _replace_model(run, **heads) -> None:
    from pcmr.data import Vocabulary
    from pcmr.models import create_model, save_model

    vocab = Vocabulary.load(run / "vocab.json")
    torch.manual_seed(0)
    model = create_model("pcme", vocab_size=len(vocab), **TINY_MODEL, **heads)
    if not heads:  # every parameter zero: every embedding the same, every score a constant
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.zero_()
    save_model(model, run / "model")


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory, tiny_run_factory):
    """Untrained PCME with log-variance 8 (sigma about 55 per dimension): every match probability is
    far below float32's smallest number (sigmoid(10 - 10 d) with d in the hundreds)."""
    run = tiny_run_factory(tmp_path_factory.mktemp("wide"), shapes=SHAPES,
                        similarity_options={"match_prob": {"a": 10.0, "b": 10.0}})
    _replace_model(run, image_head={"logvar_init": 8.0}, caption_head={"logvar_init": 8.0})
    return run


def test_underflowing_match_prob_shows_no_perfect_score_artefact(wide_run, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["evaluate", str(wide_run), "--similarity", "match_prob", "--rerank", "nns,csls+rgm",
                 "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert rows and all(row["similarity"] == "match_prob" for row in rows)
    for row in rows:
        assert "warning" not in row  # log-space scores do not tie
        for direction in ("i2t", "t2i"):
            assert row[f"{direction}_R@1"] < 50.0, row  # a model that learned nothing: far from 100
    assert "degenerate" not in capsys.readouterr().err


def test_a_degenerate_score_is_flagged_in_the_report_and_on_the_command_line(tmp_path, capsys, tiny_run_factory):
    run = tiny_run_factory(tmp_path / "run", shapes=SHAPES)
    _replace_model(run)  # constant embeddings
    out = tmp_path / "eval"
    assert main(["evaluate", str(run), "--similarity", "cosine", "--rerank", "nns,rgm", "--option", "rgm.lam=5",
                 "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert rows and all("degenerate score" in row["warning"] for row in rows)
    for row in rows:  # ties count at chance, whatever the re-ranker (the storage-order artefact gave 100)
        assert row["t2i_R@1"] < 50.0 and row["i2t_R@1"] < 50.0
    markdown = (out / "results.md").read_text()
    assert "Warnings:" in markdown and "cosine: degenerate score" in markdown
    assert "warning: cosine: degenerate score" in capsys.readouterr().err


def test_a_bad_option_value_fails_before_any_encoding(wide_run, tmp_path, capsys, monkeypatch):
    import pcmr.evaluation.evaluator as evaluator

    def never(*args, **kwargs):
        raise AssertionError("encoding started")

    monkeypatch.setattr(evaluator, "encode_split", never)
    assert main(["evaluate", str(wide_run), "--option", "is.beta=abc", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--option is.beta=abc" in err and "beta must be a finite number > 0" in err
    assert main(["evaluate", str(wide_run), "--option", "match_prob.a=-1", "--out", str(tmp_path / "y")]) == 2
    assert "--option match_prob.a=-1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def _chance_bound(chance: float, queries: int) -> float:
    """Five standard errors (percent) of one seeded random order's R@K around the chance ``chance`` (percent)."""
    return 5 * 100.0 * math.sqrt(chance / 100 * (1 - chance / 100) / queries) + 1e-9


def test_a_constant_score_reads_chance_under_every_reranker_and_recall_grows_with_k(tmp_path, capsys,
                                                                                    tiny_run_factory):
    """Constant embeddings score a constant -5.062 under ELK (not a power of two, whose float sums are
    exact): CSLS's neighbourhood means must tie exactly, or csls+rgm ranks by storage position."""
    run = tiny_run_factory(tmp_path / "run", shapes=SHAPES)
    _replace_model(run)  # constant embeddings
    out = tmp_path / "eval"
    assert main(["evaluate", str(run), "--similarity", "elk", "--rerank", "all", "--option", "csls+rgm.lam=5",
                 "--option", "rgm.lam=5", "--option", "is+rgm.lam=5", "--out", str(out)]) == 0
    assert "degenerate score" in capsys.readouterr().err
    rows = json.loads((out / "results.json").read_text())["rows"]
    queries = {"i2t": SHAPES["num_test"], "t2i": 5 * SHAPES["num_test"]}
    for relevance in ("exact", "source"):
        chance = next(row for row in rows if row["relevance"] == relevance and row["rerank"] == "nns")
        for row in (r for r in rows if r["relevance"] == relevance):
            for direction in ("i2t", "t2i"):
                recall = [row[f"{direction}_R@{k}"] for k in (1, 5, 10)]
                assert recall == sorted(recall), (row["rerank"], relevance, direction, recall)
                exact = get_reranker(row["rerank"]).returns_scores  # expectations over ties: chance exactly
                for k, value in zip((1, 5, 10), recall):
                    expected = chance[f"{direction}_R@{k}"]
                    bound = 1e-9 if exact else _chance_bound(expected, queries[direction])  # one seeded order
                    assert abs(value - expected) <= bound, (row["rerank"], relevance, direction, k, value, expected)
