"""`pcmr evaluate` and `pcmr search` end to end on a hand-made run folder (tiny shapes data)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pcmr.cli import main


@pytest.fixture(scope="module")
def run_dir(tiny_shapes, tmp_path_factory, tiny_run_factory):
    """A run folder as `pcmr train` writes it: config.yaml, model/, vocab.json, similarity_options.json."""
    return tiny_run_factory(tmp_path_factory.mktemp("run"), shapes=tiny_shapes,
                            eval_section={"similarities": ["cosine", "kl"], "rerankers": ["nns", "csls"]},
                            similarity_options={"match_prob": {"a": 3.0, "b": 1.0}})


def test_evaluate_run_with_defaults_and_flags(run_dir, tmp_path, capsys):
    assert main(["evaluate", str(run_dir), "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "| cosine | nns |" in out and "| kl | csls |" in out and "results.md" in out
    rows = json.loads((tmp_path / "a" / "results.json").read_text())["rows"]
    assert [(r["similarity"], r["rerank"], r["relevance"]) for r in rows] == [
        (s, r, m) for m in ("exact", "source") for s in ("cosine", "kl") for r in ("nns", "csls")]
    assert main(["evaluate", str(run_dir), "--similarity", "match_prob", "--rerank", "nns,is",
                 "--option", "is.beta=10", "--out", str(tmp_path / "b")]) == 0
    data = json.loads((tmp_path / "b" / "results.json").read_text())
    assert [r["rerank"] for r in data["rows"]] == ["nns", "is"] * 2  # exact, then source relevance
    assert data["meta"]["similarity_options"]["match_prob"] == {"a": 3.0, "b": 1.0}  # learned options used
    assert (tmp_path / "b" / "plots" / "uncertainty_r1.png").is_file()


def test_evaluate_model_folder_needs_data_only_without_a_run_config(run_dir, tmp_path, capsys):
    import shutil

    assert main(["evaluate", str(run_dir / "model"), "--similarity", "cosine", "--rerank", "nns",
                 "--out", str(tmp_path / "in-run")]) == 0  # RUN/model: the run's config beside it
    rows = json.loads((tmp_path / "in-run" / "results.json").read_text())["rows"]
    assert {(r["similarity"], r["rerank"]) for r in rows} == {("cosine", "nns")}
    alone = tmp_path / "alone"  # weights and vocabulary, no run config: the data must be named
    shutil.copytree(run_dir / "model", alone)
    shutil.copy(run_dir / "vocab.json", alone / "vocabulary.json")
    capsys.readouterr()
    assert main(["evaluate", str(alone), "--similarity", "cosine", "--rerank", "nns", "--out", str(tmp_path / "o")]) == 2
    assert "--data is required" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "message"), [
    (["--similarity", "dot"], "unknown similarity 'dot'; expected one of: cosine"),
    (["--rerank", "nns,hubless"], "unknown re-ranker 'hubless'; expected one of: nns"),
    (["--option", "oops"], "expected NAME.OPTION=VALUE"),
    (["--data", "/no/such/folder"], "neither a dataset name"),
    (["--folds", "5"], "num_folds must be a positive integer dividing the 13 images"),
])
def test_evaluate_bad_input_is_one_line(run_dir, tmp_path, capsys, flags, message):
    assert main(["evaluate", str(run_dir), "--out", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_evaluate_missing_run_folder(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nope")]) == 2
    assert "folder not found" in capsys.readouterr().err


def test_search_build_text_and_image(tiny_shapes, run_dir, tmp_path, capsys):
    from PIL import Image

    from pcmr.data import load_dataset

    index = tmp_path / "index"
    assert main(["search", str(index), "--build", str(run_dir), "--split", "test"]) == 0
    assert "13 images, 65 captions" in capsys.readouterr().out
    assert main(["search", str(index), "--text", "a red circle", "-k", "3", "--similarity", "kl"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("a red circle") and "[kl, nns]" in out[0]
    assert len(out) == 2 + 3 + 3  # header, column titles, 3 hits, blank line, notes on the uncertainty and score
    split = load_dataset("shapes", "test", **tiny_shapes)
    Image.fromarray(np.asarray(split.images.pixels[0])).save(tmp_path / "query.png")
    assert main(["search", str(index), "--image", str(tmp_path / "query.png"), "-k", "2", "--rerank", "csls",
                 "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert results[0]["rerank"] == "csls" and len(results[0]["results"]) == 2
    assert all(isinstance(hit["text"], str) and hit["uncertainty"] is not None for hit in results[0]["results"])
    assert main(["search", str(index), "--text", "x", "--similarity", "dot"]) == 2
    assert "unknown similarity 'dot'" in capsys.readouterr().err
    assert main(["search", str(tmp_path / "missing"), "--text", "x"]) == 2
    assert "index folder not found" in capsys.readouterr().err
    assert main(["search", str(index)]) == 2
    assert "nothing to do" in capsys.readouterr().err


def test_image_file_query_is_preprocessed_like_the_dataset(tiny_shapes, run_dir, tmp_path):
    from PIL import Image

    from pcmr.data import load_dataset
    from pcmr.evaluation import encode_image_files
    from pcmr.search import GalleryIndex

    assert main(["search", str(tmp_path / "index"), "--build", str(run_dir)]) == 0
    index = GalleryIndex.load(tmp_path / "index")
    split = load_dataset("shapes", "test", **tiny_shapes)
    Image.fromarray(np.asarray(split.images.pixels[4])).save(tmp_path / "q.png")
    query = encode_image_files(index.model.network, [tmp_path / "q.png"], image_size=index.model.image_size)
    torch.testing.assert_close(query.mean, index.images.mean[4:5], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(query.logvar, index.images.logvar[4:5], rtol=1e-5, atol=1e-6)
