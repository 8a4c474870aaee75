"""What a first-time user meets, through the commands: a split too small for one batch refused with the
fix, flags named in errors, a folder given to built-in data, the image size and a tiny validation split
explained, progress lines in a log, what the loss and the search scores are, and a skippable corruption
phase."""

from __future__ import annotations

import json
import re

import pytest

from _real_layouts import write_coco_folder
from pcmr.cli import main
from pcmr.train import guards


def run_cli(capsys, argv):
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _small(tiny_training, *extra):
    """A tiny training on 4 shapes images (20 captions)."""
    data = [item.replace("num_train: 12", "num_train: 4") for item in tiny_training]
    return [*data, *extra]


def test_a_split_smaller_than_a_batch_is_refused_before_training_with_the_fix(tmp_path, tiny_training, as_set_args,
                                                                             capsys):
    status, out, err = run_cli(capsys, ["train", "vsepp_max", "--out", str(tmp_path), "--name", "run", "--no-progress",
                                        *as_set_args(_small(tiny_training, "data.batch_size=128"))])
    assert status == 2
    assert "training would run 0 steps per epoch: the training split has 20 captions" in err
    assert "data.batch_size=128" in err and "--set data.batch_size=20" in err
    assert "--set data.loader_options.drop_last=false" in err
    assert not (tmp_path / "run").exists() and "epoch 1/" not in out
    status, out, err = run_cli(capsys, ["train", "vsepp_max", "--out", str(tmp_path), "--name", "kept",
                                        "--no-progress", *as_set_args(_small(
                                            tiny_training, "data.batch_size=128",
                                            "data.loader_options={drop_last: false}"))])
    assert status == 0, err
    summary = json.loads((tmp_path / "kept" / "run.json").read_text())
    assert summary["status"] == "finished"
    start = [json.loads(line) for line in (tmp_path / "kept" / "log.jsonl").read_text().splitlines()
             if json.loads(line)["event"] == "start"]
    assert start[0]["steps_per_epoch"] == 1


def test_a_split_that_drops_a_quarter_of_its_pairs_is_warned(tmp_path, tiny_training, as_set_args, capsys):
    status, _, err = run_cli(capsys, ["train", "vsepp_max", "--out", str(tmp_path), "--name", "run", "--no-progress",
                                      *as_set_args(_small(tiny_training, "data.batch_size=12"))])
    assert status == 0, err
    assert ("warning: each epoch drops 8 of the 20 training captions (the last partial batch of "
            "data.batch_size=12); lower the batch size or keep the last partial batch") in err
    status, _, err = run_cli(capsys, ["train", "vsepp_max", "--out", str(tmp_path), "--name", "run2",
                                      "--no-progress", *as_set_args(_small(tiny_training, "data.batch_size=16"))])
    assert status == 0, err
    assert "warning: each epoch drops" not in err  # 4 of 20


def test_a_folder_given_to_the_built_in_data_asks_for_the_dataset_name(tmp_path, capsys):
    status, _, err = run_cli(capsys, ["train", "vsepp_max", "--out", str(tmp_path), "--set",
                                      f"data.root={tmp_path}"])
    assert status == 2
    assert f"data.root={tmp_path} names a dataset folder, but data.name is 'shapes'" in err
    assert "--set data.name=NAME" in err and "unknown shapes config key" not in err


def test_training_lines_explain_the_loss_and_a_tiny_validation_split(tmp_path, tiny_training, as_set_args, capsys):
    status, out, err = run_cli(capsys, ["train", "pcme", "--out", str(tmp_path), "--name", "run",
                                        *as_set_args([*tiny_training, "loss.num_samples=2", "train.epochs=2"])])
    assert status == 0, err
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert notes[0].startswith("note: loss is PCME's objective as its release scales it: the soft contrastive term "
                               "is summed (not averaged)")
    assert notes[1].startswith("note: validation has 8 images and 40 captions: rsum sums six recalls")
    assert "says little" in notes[1] and len(notes) == 2  # once, not per epoch


def test_progress_lines_inside_an_epoch_when_output_is_a_log(tmp_path, tiny_training, as_set_args, capsys,
                                                              monkeypatch):
    monkeypatch.setattr(guards, "PROGRESS_LINE_SECONDS", 0.0)  # a line after every step (default: a minute)
    status, out, err = run_cli(capsys, ["train", "vsepp_max", "--out", str(tmp_path), "--name", "run",
                                        *as_set_args(tiny_training)])
    assert status == 0, err
    lines = [line for line in out.splitlines() if re.match(r"epoch 1/1: step \d/2 \(\d+ %\), ", line)]
    assert [line.split(":")[1].split("(")[0].strip() for line in lines] == ["step 1/2", "step 2/2"], out
    assert all("pairs/s" in line and "s into the epoch" in line for line in lines)
    status, out, err = run_cli(capsys, ["train", "vsepp_max", "--out", str(tmp_path), "--name", "quiet",
                                        "--no-progress", *as_set_args(tiny_training)])
    assert status == 0 and "step 1/2" not in out  # --no-progress: quiet


def test_image_files_say_their_size(tmp_path, capsys):
    root = write_coco_folder(tmp_path / "coco", {"train": 4, "val": 2, "test": 2})
    common = ["train", "vsepp_max", "--out", str(tmp_path), "--no-progress", "--set", "data.name=coco", "--set",
              f"data.root={root}", "--set", "data.batch_size=4", "--set", "train.epochs=1", "--set",
              "train.max_steps_per_epoch=1", "--set", "model.embed_dim=8", "--set",
              "model.text_encoder={word_dim: 8, hidden_dim: 8}", "--set", "model.image_encoder={cnn_channels: [4, 4, 4, 4]}"]
    status, _, err = run_cli(capsys, [*common, "--name", "small", "--set", "data.options.image_size=32"])
    assert status == 0, err
    assert "note: image files are made" not in err
    status, _, err = run_cli(capsys, [*common, "--name", "default"])
    assert status == 0, err
    assert "note: image files are made 224 x 224 pixels" in err and "data.options.image_size=N" in err


@pytest.fixture(scope="module")
def index(search_index_factory, tmp_path_factory):
    return search_index_factory(tmp_path_factory.mktemp("new-user"))


@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--similarity", "cosinee", "--similarity: unknown similarity 'cosinee' (did you mean 'cosine'?)"),
    ("--rerank", "foo", "--rerank: unknown re-ranker 'foo'"),
])
def test_search_errors_name_the_flag(index, capsys, flag, value, expected):
    status, _, err = run_cli(capsys, ["search", str(index), "--text", "a red circle", flag, value])
    assert status == 2 and expected in err and "--option" not in err
    status, _, err = run_cli(capsys, ["serve", str(index), flag, value])
    assert status == 2 and expected in err


def test_search_says_what_the_score_is(index, capsys):
    status, out, _ = run_cli(capsys, ["search", str(index), "--text", "a red circle", "-k", "2"])
    assert status == 0
    assert "score: the log of the match probability (PCME eqs. 2-3)" in out and "higher is closer" in out
    status, out, _ = run_cli(capsys, ["search", str(index), "--text", "a red circle", "-k", "2", "--similarity",
                                      "kl", "--rerank", "csls"])
    assert status == 0
    assert "score: minus the KL divergence" in out and "after the csls re-ranking" in out


def test_evaluate_can_skip_the_corruption_phase(search_run_factory, tmp_path, capsys):
    run = search_run_factory(tmp_path / "run")
    common = ["evaluate", str(run), "--similarity", "cosine", "--rerank", "nns"]
    status, _, err = run_cli(capsys, [*common, "--out", str(tmp_path / "with")])
    assert status == 0, err
    assert re.search(r"uncertainty under occlusion and word erasure \(9 ratios x up to \d+ items; skip with", err)
    assert (tmp_path / "with" / "plots" / "uncertainty_vs_corruption.png").exists()
    status, _, err = run_cli(capsys, [*common, "--out", str(tmp_path / "without"), "--no-corruption"])
    assert status == 0, err
    assert "occlusion" not in err
    assert not (tmp_path / "without" / "plots" / "uncertainty_vs_corruption.png").exists()
    assert (tmp_path / "without" / "results.md").exists()
