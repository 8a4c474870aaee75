"""A strict command line: unknown --option keys exit 2 naming the accepted ones, an evaluation never
silently replaces an earlier report (nor leaves its figures behind), and `pcmr search --build` never
replaces an existing index without --overwrite."""

from __future__ import annotations

import json

import pytest

from pcmr.cli import main


@pytest.fixture(scope="module")
def run_dir(search_run_factory, tmp_path_factory):
    return search_run_factory(tmp_path_factory.mktemp("strict") / "run")


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize(("flags", "message"), [
    (["--option", "foo.bar=3"], "--option foo.bar=3: unknown similarity or re-ranker 'foo'; expected one of: "
                                "cosine, nns"),
    (["--similarity", "match_prob", "--option", "match_prob.q=3"],
     "similarity 'match_prob' has no option 'q'; expected one of: a, b"),
    (["--option", "cosine.a=3"], "similarity 'cosine' takes no options"),
    (["--option", "kl.x=1"], "similarity 'kl' is not evaluated (selected: cosine); add it with --similarity kl"),
    (["--option", "is.beta=30"], "re-ranker 'is' is not evaluated (selected: nns); add it with --rerank is"),
    (["--rerank", "csls", "--option", "csls.csl_k=3"], "re-ranker 'csls' has no option 'csl_k' (did you mean "
                                                       "'csls_k'?); expected one of: csls_k"),
    (["--similarity", "cosin"], "unknown similarity 'cosin' (did you mean 'cosine'?)"),
])
def test_unknown_options_exit_2_with_the_accepted_ones(run_dir, tmp_path, capsys, flags, message):
    base = ["evaluate", str(run_dir), "--out", str(tmp_path / "out"), "--similarity", "cosine", "--rerank", "nns"]
    assert main(base + flags) == 2
    assert message in _error(capsys)
    assert not (tmp_path / "out").exists()


def test_report_is_not_replaced_without_overwrite_and_no_stale_figure(run_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["evaluate", str(run_dir), "--out", str(out), "--similarity", "cosine,kl", "--rerank", "nns"]) == 0
    assert (out / "plots" / "uncertainty_r1.png").is_file()
    first = (out / "results.json").read_text()
    capsys.readouterr()
    again = ["evaluate", str(run_dir), "--out", str(out), "--similarity", "cosine", "--rerank", "nns"]
    assert main(again) == 2
    err = _error(capsys)
    assert f"{out} already holds an evaluation report; pass --overwrite" in err
    assert (out / "results.json").read_text() == first
    (out / "plots" / "old_figure.png").write_bytes(b"stale")
    assert main(again + ["--overwrite"]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert {r["similarity"] for r in rows} == {"cosine"}
    assert not (out / "plots" / "old_figure.png").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_overwrite_refuses_a_folder_that_is_not_a_report(run_dir, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["evaluate", str(run_dir), "--out", str(tmp_path), "--similarity", "cosine", "--rerank", "nns",
                 "--overwrite"]) == 2
    assert "holds files that are not an evaluation report (notes.txt)" in _error(capsys)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_search_build_refuses_an_existing_index(run_dir, tmp_path, capsys):
    index = tmp_path / "index"
    assert main(["search", str(index), "--build", str(run_dir)]) == 0
    (index / "stale.txt").write_text("x")
    capsys.readouterr()
    assert main(["search", str(index), "--build", str(run_dir)]) == 2
    assert f"{index} holds files that are not part of its gallery index (stale.txt)" in _error(capsys)
    assert main(["search", str(index), "--build", str(run_dir), "--overwrite"]) == 2  # never replaced with them
    assert "stale.txt" in _error(capsys) and (index / "stale.txt").read_text() == "x"
    (index / "stale.txt").unlink()
    assert main(["search", str(index), "--build", str(run_dir)]) == 2
    assert f"{index} already exists; pass --overwrite" in _error(capsys)
    assert main(["search", str(index), "--build", str(run_dir), "--overwrite"]) == 0
    assert (index / "index.json").is_file()


def test_search_output_merges_identical_captions_and_warns(tiny_shapes, run_dir, tmp_path, capsys):
    from PIL import Image

    from pcmr.data import load_dataset

    index = tmp_path / "index"
    assert main(["search", str(index), "--build", str(run_dir)]) == 0
    split = load_dataset("shapes", "test", **tiny_shapes)
    Image.fromarray(split.images.pixels[0]).save(tmp_path / "q.png")
    capsys.readouterr()
    assert main(["search", str(index), "--image", str(tmp_path / "q.png"), "-k", "65", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["results"]
    texts = [h["text"].lower() for h in hits]
    assert len(texts) == len(set(texts)) == len({t.lower() for t in split.caption_texts})  # 59 distinct of 65
    assert sum(h["count"] for h in hits) == 65
    merged = next(h for h in hits if h["count"] > 1)
    assert len(merged["ids"]) == merged["count"] and merged["indices"][0] == merged["index"]
    assert all(0.0 <= h["uncertainty_percentile"] <= 100.0 for h in hits)
    assert main(["search", str(index), "--text", "zzzz qqqq", "-k", "2"]) == 0
    captured = capsys.readouterr()
    assert "no word of the query 'zzzz qqqq' is in the model's vocabulary" in captured.err
    assert "uncert.: percentile of the item's uncertainty" in captured.out
