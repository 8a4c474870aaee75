"""Answering "uncertain" instead of a list: the coverage for a chosen risk from an evaluation's
risk-coverage curve, and `pcmr search --answer-coverage / --max-risk` through the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pcmr.cli import main
from pcmr.encode.fingerprint import gallery_fingerprint
from pcmr.search import GalleryIndex
from pcmr.search.abstain import AbstentionError, abstains, coverage_for_risk, read_risk_curve


def _evaluation(tmp_path: Path, curve: dict, fingerprint: dict | None = None) -> Path:
    folder = tmp_path / "eval"
    folder.mkdir()
    figure = {"series": curve, **({"fingerprint": fingerprint} if fingerprint is not None else {})}
    (folder / "results.json").write_text(json.dumps({"figures": {"risk_coverage": figure}}))
    return folder


def _fingerprint(index_dir: Path) -> dict:
    index = GalleryIndex.load(index_dir)
    return gallery_fingerprint(index.model.network, index.meta.get("dataset"), index.meta.get("split"), index.images.num,
                               index.captions.num)


def test_coverage_for_a_risk_is_the_largest_share_within_it() -> None:
    coverage = [0.25, 0.5, 0.75, 1.0]
    risk = [0.1, 0.3, 0.2, 0.5]  # a curve need not be monotone: the largest share within the risk counts
    assert coverage_for_risk(coverage, risk, 0.2) == 0.75
    with pytest.raises(AbstentionError, match=r"cannot be reached \(here\): the lowest risk of the curve is 0.1, "
                                              r"answering 25% of the queries; give --max-risk 0.1 or more"):
        coverage_for_risk(coverage, risk, 0.05, where="here")
    assert coverage_for_risk(coverage, risk, 1.0) == 1.0
    with pytest.raises(AbstentionError, match=r"\[0, 1\]"):
        coverage_for_risk(coverage, risk, 1.5)


def test_abstains_above_the_answered_share() -> None:
    assert abstains(81.0, 0.8) and not abstains(80.0, 0.8) and not abstains(None, 0.1)


def test_read_risk_curve_names_what_is_missing(tmp_path: Path) -> None:
    folder = _evaluation(tmp_path, {"match_prob": {"t2i": {"coverage": [0.5, 1.0], "risk": [0.2, 0.4]}}})
    assert read_risk_curve(folder, "match_prob", "t2i") == ([0.5, 1.0], [0.2, 0.4])
    with pytest.raises(AbstentionError, match="no risk-coverage curve for similarity 'cosine'; it has match_prob"):
        read_risk_curve(folder, "cosine", "t2i")
    with pytest.raises(AbstentionError, match="no i2t direction"):
        read_risk_curve(folder, "match_prob", "i2t")
    with pytest.raises(AbstentionError, match="not found"):
        read_risk_curve(tmp_path / "nope", "match_prob", "t2i")
    (folder / "results.json").write_text("{")
    with pytest.raises(AbstentionError, match="not valid JSON"):
        read_risk_curve(folder, "match_prob", "t2i")


def test_options_are_checked_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", str(tmp_path / "idx"), "--text", "x", "--answer-coverage", "1.5"]) == 2
    assert "--answer-coverage must be a share in (0, 1]" in capsys.readouterr().err
    assert main(["search", str(tmp_path / "idx"), "--text", "x", "--max-risk", "0.3"]) == 2
    assert "--max-risk needs --risk-curve" in capsys.readouterr().err
    assert main(["search", str(tmp_path / "idx"), "--text", "x", "--max-risk", "0.3", "--answer-coverage", "0.5"]) == 2
    assert "not both" in capsys.readouterr().err


@pytest.fixture(scope="module")
def index_dir(search_index_factory, tmp_path_factory) -> Path:
    return search_index_factory(tmp_path_factory.mktemp("abstain"), backend="exact")


def _answers(index_dir: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict]:
    texts = ["a red circle", "a small blue square at the top", "a shape", "a big green triangle"]
    args = ["search", str(index_dir), "--similarity", "cosine", "-k", "3", "--json"]
    for text in texts:
        args += ["--text", text]
    assert main(args + list(extra)) == 0
    return json.loads(capsys.readouterr().out)


def test_search_answers_uncertain_above_the_chosen_share(index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    everything = _answers(index_dir, capsys)
    percentiles = [entry["query_uncertainty_percentile"] for entry in everything]
    assert all(p is not None for p in percentiles) and all(entry["results"] for entry in everything)
    share = sorted(percentiles)[1] / 100.0  # answer the two least uncertain queries
    answered = _answers(index_dir, capsys, "--answer-coverage", f"{share:.6f}")
    assert 1 <= sum(bool(entry.get("abstained")) for entry in answered) <= 2
    for entry, full, percentile in zip(answered, everything, percentiles):
        if percentile > 100 * share:
            assert entry["abstained"] and entry["results"] == [] and "above the answered share" in entry["reason"]
        else:
            assert not entry["abstained"] and entry["results"] == full["results"]
            assert entry["coverage"] == pytest.approx(share) and "within the answered share" in entry["reason"]
    assert main(["search", str(index_dir), "--text", "a shape", "--similarity", "cosine",
                 "--answer-coverage", "0.000001"]) == 0
    assert "uncertain: query uncertainty at the" in capsys.readouterr().out


def test_search_abstains_above_a_risk_read_from_an_evaluation(index_dir: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    curve = {"cosine": {"t2i": {"coverage": [0.25, 0.5, 0.75, 1.0], "risk": [0.1, 0.2, 0.5, 0.6]},
                        "i2t": {"coverage": [0.5, 1.0], "risk": [0.1, 0.1]}}}
    folder = _evaluation(tmp_path, curve, _fingerprint(index_dir))
    percentiles = [e["query_uncertainty_percentile"] for e in _answers(index_dir, capsys)]
    answered = _answers(index_dir, capsys, "--max-risk", "0.2", "--risk-curve", str(folder))
    assert [bool(e.get("abstained")) for e in answered] == [p > 50.0 for p in percentiles]
    assert all("risk <= 0.2" in e["reason"] for e in answered if e.get("abstained"))
    assert main(["search", str(index_dir), "--text", "x", "--similarity", "kl", "--max-risk", "0.2",
                 "--risk-curve", str(folder)]) == 2
    assert "no risk-coverage curve for similarity 'kl'" in capsys.readouterr().err


def test_answered_queries_show_the_share_and_an_unreachable_risk_names_the_lowest(
        index_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = index_dir.parent / "run"
    evaluation = tmp_path / "eval"
    assert main(["evaluate", str(run), "--similarity", "cosine", "--rerank", "nns", "--out", str(evaluation)]) == 0
    capsys.readouterr()
    query = ["search", str(index_dir), "--text", "a red circle", "--similarity", "cosine", "--risk-curve",
             str(evaluation)]
    assert main([*query, "--max-risk", "1"]) == 0
    out = capsys.readouterr().out
    assert "answered: query uncertainty at the" in out and "within the answered share 100% (risk <= 1 on" in out
    side = json.loads((evaluation / "results.json").read_text())["figures"]["risk_coverage"]["series"]["cosine"]["t2i"]
    lowest = min(side["risk"])
    assert main([*query, "--max-risk", f"{lowest / 2:.6f}"]) == 2
    err = capsys.readouterr().err
    assert f"cannot be reached ({evaluation}, cosine, t2i): the lowest risk of the curve is {lowest:.4g}" in err
    assert "give --max-risk" in err


def test_a_risk_curve_of_another_gallery_or_model_is_refused(index_dir: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    run = index_dir.parent / "run"
    other = tmp_path / "eval-val"
    assert main(["evaluate", str(run), "--split", "val", "--similarity", "cosine", "--rerank", "nns",
                 "--out", str(other)]) == 0
    capsys.readouterr()
    query = ["search", str(index_dir), "--text", "a red circle", "--similarity", "cosine", "--max-risk", "1",
             "--risk-curve", str(other)]
    assert main(query) == 2
    err = capsys.readouterr().err
    assert "belongs to another model or gallery than this index (split: val there, test here" in err
    results = other / "results.json"
    data = json.loads(results.read_text())
    data["figures"]["risk_coverage"]["fingerprint"] = {**_fingerprint(index_dir), "model_sha256": "0" * 64}
    results.write_text(json.dumps(data))
    assert main(query) == 2
    assert "model weights (SHA-256): 000000000000 there" in capsys.readouterr().err
    del data["figures"]["risk_coverage"]["fingerprint"]
    results.write_text(json.dumps(data))
    assert main(query) == 2
    assert "records no model and gallery fingerprint" in capsys.readouterr().err
