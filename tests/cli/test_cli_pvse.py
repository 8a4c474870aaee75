"""PVSE end to end on the built-in shapes data: `pcmr train pvse` (one tiny epoch), `pcmr evaluate`
under max_cosine with the spread uncertainty proxy, and a gallery index that keeps the K points."""

from __future__ import annotations

import json

import pytest
import torch

from pcmr import PointSet
from pcmr.cli import main
from pcmr.similarity import pairwise

SHAPES = ("data.options={num_train: 12, num_val: 11, num_test: 12, num_test_unseen: 1, num_binary_selection: 1, "
          "image_size: 32, cache_dir: CACHE}")
TINY = ["data.batch_size=10", "train.epochs=1", "train.max_steps_per_epoch=2", "model.embed_dim=8",
        "model.text_encoder={word_dim: 8, hidden_dim: 8}", "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
        "model.image_head.num_embeds=3"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pvse")
    argv = ["train", "pvse", "--out", str(root), "--name", "run", "--no-progress"]
    for item in [SHAPES.replace("CACHE", str(root / "cache")), *TINY]:
        argv += ["--set", item]
    assert main(argv) == 0
    return root / "run"


def test_train_pvse_records_its_terms_and_score(run_dir):
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["status"] == "finished" and summary["trained_similarity"] == "max_cosine"
    terms = summary["history"][0]["train"]
    assert {"loss", "ranking", "diversity", "mmd"} <= set(terms)
    assert all(value == value for value in terms.values())  # no NaN
    assert json.loads((run_dir / "similarity_options.json").read_text()) == {"max_cosine": {}}


def test_evaluate_pvse_run(run_dir, tmp_path, capsys):
    assert main(["evaluate", str(run_dir), "--similarity", "max_cosine,cosine", "--rerank", "nns,csls",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| max_cosine | nns |" in out and "| max_cosine | csls |" in out
    data = json.loads((tmp_path / "results.json").read_text())
    rows = [(r["similarity"], r["rerank"], r["relevance"]) for r in data["rows"]]
    assert rows == [("max_cosine", rerank, mode) for mode in ("exact", "source") for rerank in ("nns", "csls")]
    assert all(0 <= r["i2t_R@1"] <= 100 for r in data["rows"])
    assert "PointSet of K=3 points per item" in data["skipped"][0]["reason"]  # cosine needs one point per item
    deciles = data["figures"]["uncertainty_r1"]
    assert deciles["measure"] == "spread" and len(deciles["series"]["max_cosine"]["i2t"]) == 10


def test_search_index_keeps_point_sets(run_dir, tmp_path, capsys):
    from pcmr.search import GalleryIndex

    index = tmp_path / "index"
    assert main(["search", str(index), "--build", str(run_dir), "--split", "test"]) == 0
    capsys.readouterr()
    assert main(["search", str(index), "--text", "a red circle", "-k", "3", "--similarity", "max_cosine"]) == 0
    assert "[max_cosine, nns]" in capsys.readouterr().out
    loaded = GalleryIndex.load(index)
    assert isinstance(loaded.images, PointSet) and loaded.images.num_points == 3
    assert isinstance(loaded.captions, PointSet) and loaded.captions.num_points == 2
    results = loaded.search_text(["a blue square"], k=2, similarity="max_cosine")
    query = loaded.captions[:1]
    expected = torch.topk(pairwise("max_cosine", loaded.images, query)[:, 0], 2)
    direct = loaded.search(query, k=2, similarity="max_cosine")
    assert torch.equal(direct.indices[0], expected.indices) and results.indices.shape == (1, 2)
