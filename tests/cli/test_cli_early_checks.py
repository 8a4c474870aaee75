"""Bad command-line values are refused when the command line is read, before a model is loaded or a
gallery encoded, with one line naming the flag and what is accepted."""

from __future__ import annotations

import pytest

import pcmr
from pcmr.cli import main


@pytest.fixture(scope="module")
def run_dir(search_run_factory, tmp_path_factory):
    return search_run_factory(tmp_path_factory.mktemp("early") / "run")


@pytest.fixture
def no_model_loading(monkeypatch):
    """Fail the test if a command gets as far as opening the model (the check came too late)."""
    import pcmr.search.indexing

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the bad value was refused")

    monkeypatch.setattr(pcmr.search.indexing, "load", never)


def _parse_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_milvus_uri_in_a_missing_folder_fails_before_encoding(run_dir, tmp_path, capsys, no_model_loading):
    uri = tmp_path / "sub" / "dir" / "y.db"
    status = main(["search", str(tmp_path / "idx"), "--build", str(run_dir), "--backend", "milvus", "--uri", str(uri)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert f"the folder {uri.parent} does not exist" in err and "mkdir -p" in err
    assert not (tmp_path / "idx").exists()


def test_milvus_without_uri_fails_before_encoding(run_dir, tmp_path, capsys, no_model_loading):
    assert main(["search", str(tmp_path / "idx"), "--build", str(run_dir), "--backend", "milvus"]) == 2
    assert "--backend milvus needs --uri" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["search", "evaluate"])
@pytest.mark.parametrize("value", ["0", "-5", "abc"])
def test_batch_size_must_be_positive_at_parse_time(run_dir, tmp_path, capsys, command, value):
    argv = ["search", str(tmp_path / "idx"), "--build", str(run_dir)] if command == "search" else [
        "evaluate", str(run_dir), "--out", str(tmp_path / "out")]
    err = _parse_error(capsys, [*argv, "--batch-size", value])
    assert "argument --batch-size: expected a positive integer" in err and repr(value).strip("'") in err
    assert not (tmp_path / "idx").exists() and not (tmp_path / "out").exists()


def test_top_k_must_be_positive_at_parse_time(tmp_path, capsys):
    err = _parse_error(capsys, ["search", str(tmp_path / "idx"), "--text", "a circle", "-k", "0"])
    assert "argument -k/--top-k: expected a positive integer (1 or more), got 0" in err


@pytest.mark.parametrize(("option", "message"), [
    ("is.beta=", "--option is.beta=: VALUE is empty; give a value after '='"),
    ("match_prob.a=nan", "--option match_prob.a=nan: VALUE must be a finite number, got nan"),
    ("match_prob.a=inf", "--option match_prob.a=inf: match_prob: a must be finite, got inf"),
])
def test_evaluate_option_values_empty_or_nan_are_refused(run_dir, tmp_path, capsys, option, message):
    argv = ["evaluate", str(run_dir), "--out", str(tmp_path / "out"), "--similarity", "match_prob", "--rerank",
            "nns,is", "--option", option]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("option", "message"), [
    ("beta=", "--option beta=: VALUE is empty"),
    ("beta=nan", "--option beta=nan: VALUE must be a finite number, got nan"),
])
def test_search_option_values_empty_or_nan_are_refused(tmp_path, capsys, option, message, search_index_factory):
    index = search_index_factory(tmp_path, backend="exact")
    capsys.readouterr()
    assert main(["search", str(index), "--text", "a red circle", "--rerank", "is", "--option", option]) == 2
    assert message in capsys.readouterr().err


def test_rgm_lam_inf_is_still_accepted(run_dir, tmp_path, capsys):
    """inf is meaningful for RGM's lambda (plain top-k): only NaN and empty values are refused."""
    assert main(["evaluate", str(run_dir), "--out", str(tmp_path / "out"), "--similarity", "cosine", "--rerank",
                 "rgm", "--option", "rgm.lam=inf"]) == 0


def test_evaluate_on_a_file_says_it_is_a_file(tmp_path, capsys):
    file = tmp_path / "results.json"
    file.write_text("{}")
    assert main(["evaluate", str(file)]) == 2
    err = capsys.readouterr().err
    assert f"'{file}' is a file, not a run or model folder" in err and "folder not found" not in err


def test_load_names_the_accepted_which(run_dir):
    with pytest.raises(ValueError, match=r"which='bogus': expected one of 'model', 'model_last'"):
        pcmr.load(run_dir, which="bogus")
