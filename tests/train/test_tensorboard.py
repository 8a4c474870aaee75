"""train.loggers: [jsonl, tensorboard] writes TensorBoard scalars (read back with TensorBoard's EventAccumulator)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pcmr.cli import main
from pcmr.train.config import ConfigError, load_config
from pcmr.train.loggers import RunLog, check_loggers
from pcmr.train.run import check_config

TINY = [
    "data.options={num_train: 30, num_val: 10, num_test: 4, num_test_unseen: 1, num_binary_selection: 1, "
    "image_size: 32, cache: false}",
    "data.batch_size=10", "train.epochs=2", "train.log_every=1", "model.embed_dim=8",
    "model.text_encoder={word_dim: 8, hidden_dim: 8}", "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
]


def _train(tmp_path, loggers: str) -> object:
    argv = ["train", "pcme", "--out", str(tmp_path), "--name", "run", "--no-progress"]
    for item in [*TINY, f"train.loggers={loggers}"]:
        argv += ["--set", item]
    assert main(argv) == 0
    return tmp_path / "run"


def test_tensorboard_logger_writes_the_expected_scalars(tmp_path):
    run = _train(tmp_path, "[jsonl, tensorboard]")
    events = list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    accumulator = EventAccumulator(str(run / "tensorboard"))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    expected = {"loss/loss", "loss/soft_contrastive", "loss/kl_prior", "loss/uniformity", "train/lr",
                "train/pairs_per_s", "match_prob/a", "match_prob/b", "uncertainty/image_logvar_mean",
                "uncertainty/caption_logvar_mean", "val/rsum", "val/r_precision", "epoch/loss", "epoch/seconds"}
    assert expected <= tags, sorted(expected - tags)
    # the same values as the JSON-lines log, at the same steps
    steps = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    steps = [s for s in steps if s["event"] == "step"]
    a_curve = accumulator.Scalars("match_prob/a")
    assert [e.step for e in a_curve] == [s["global_step"] for s in steps]
    assert [e.value for e in a_curve] == pytest.approx([s["a"] for s in steps], rel=1e-6)
    logvar = accumulator.Scalars("uncertainty/image_logvar_mean")
    assert [e.value for e in logvar] == pytest.approx([s["image_logvar_mean"] for s in steps], rel=1e-6)
    summary = json.loads((run / "run.json").read_text())
    rsum = accumulator.Scalars("val/rsum")
    assert [e.step for e in rsum] == [1, 2]
    assert [e.value for e in rsum] == pytest.approx([h["val"]["rsum"] for h in summary["history"]], rel=1e-6)


def test_default_writes_no_tensorboard_folder_and_tensorboard_alone_no_jsonl(tmp_path):
    default = _train(tmp_path / "a", "[jsonl]")
    assert (default / "log.jsonl").is_file() and not (default / "tensorboard").exists()
    assert load_config(None).train.loggers == ["jsonl"]
    only = _train(tmp_path / "b", "[tensorboard]")
    assert not (only / "log.jsonl").exists() and list((only / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("loggers, words", [(["wandb"], "unknown logger"), (["jsonl", "jsonl"], "twice")])
def test_bad_logger_names_are_refused_before_a_run_starts(loggers, words):
    with pytest.raises(ConfigError, match=words):
        check_loggers(loggers)
    config = load_config(None, [f"train.loggers=[{', '.join(loggers)}]"])
    with pytest.raises(ConfigError, match="train.loggers"):
        check_config(config)


def test_run_log_closes_every_logger_even_when_one_fails():
    closed = []

    class Failing:
        def write(self, event, **fields):
            pass

        def close(self):
            closed.append("failing")
            raise OSError("disk full")

    class Fine:
        def write(self, event, **fields):
            closed.append(event)

        def close(self):
            closed.append("fine")

    log = RunLog([Failing(), Fine()])
    log.write("step")
    with pytest.raises(OSError, match="disk full"):
        log.close()
    assert closed == ["step", "failing", "fine"]


def test_two_processes_write_one_event_file(tmp_path):
    """Under DDP (2 gloo processes through torchrun) only rank 0 writes TensorBoard scalars. The command runs
    in a child process: the torchrun launcher installs its own signal handlers in the process that calls it."""
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "pcmr", "train", "pcme", "--out", str(tmp_path), "--name", "run", "--no-progress",
            "--nproc", "2"]
    for item in [*TINY, "train.epochs=1", "train.loggers=[jsonl, tensorboard]"]:
        argv += ["--set", item]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    events = list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    accumulator = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    accumulator.Reload()
    steps = [e.step for e in accumulator.Scalars("loss/loss")]
    assert steps == sorted(set(steps)) and steps  # one value per logged step, not one per process
