"""Resuming a killed run reaches the same weights as an uninterrupted run with the same seed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pcmr.train import Trainer, load_config, save_config
from pcmr.train.checkpoint import load_latest_checkpoint

REPO = Path(__file__).resolve().parents[2]


def overrides(cache_dir):
    return [
        "model.name=pcme",
        "loss.name=pcme",
        "data.options={num_train: 16, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
        f"image_size: 32, cache_dir: {cache_dir}}}",
        "data.batch_size=12",  # 80 captions -> 6 steps per epoch
        "train.epochs=2",
        "train.warmup_epochs=1",
        "train.checkpoint_every_steps=1",
        "train.log_every=1",
        "train.progress=false",
        "loss.num_samples=3",
        "model.embed_dim=8",
        "model.text_encoder={word_dim: 8, hidden_dim: 8}",
        "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache_dir):
    """An uninterrupted run: its final checkpoint weights."""
    run_dir = tmp_path_factory.mktemp("reference")
    config = load_config(None, overrides(cache_dir))
    save_config(config, run_dir / "config.yaml")
    summary = Trainer(config, run_dir).fit()
    assert summary["global_step"] == 12
    return run_dir


def final_weights(run_dir):
    checkpoint = load_latest_checkpoint(Path(run_dir) / "checkpoints")
    assert checkpoint.state["progress"]["epoch"] == 2
    return checkpoint.weights, checkpoint.state["progress"]


def assert_same_run(run_dir, reference):
    weights, progress = final_weights(run_dir)
    expected, expected_progress = final_weights(reference)
    assert weights.keys() == expected.keys()
    assert any(key.startswith("loss.") for key in weights)  # the learned a, b of the PCME loss
    for key, value in expected.items():
        torch.testing.assert_close(weights[key], value, rtol=1e-5, atol=1e-6, msg=key)
    assert progress["best_metric"] == pytest.approx(expected_progress["best_metric"])
    assert len(progress["history"]) == len(expected_progress["history"])
    for got, want in zip(progress["history"], expected_progress["history"]):
        assert got["val"] == pytest.approx(want["val"])
        assert got["train"] == pytest.approx(want["train"], rel=1e-5)


def test_resume_after_kill_9_mid_epoch(tmp_path, cache_dir, reference):
    config = load_config(None, overrides(cache_dir))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    code = "import sys; from pcmr.cli import main; sys.exit(main(sys.argv[1:]))"
    process = subprocess.Popen(
        [sys.executable, "-c", code, "train", "--resume", str(run_dir)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    log = run_dir / "log.jsonl"
    killed_at = None
    while process.poll() is None:  # kill in the middle of the first epoch (step 3 of 6)
        lines = log.read_text().splitlines() if log.is_file() else []
        steps = [line for line in lines if '"event": "step"' in line and line.endswith("}")]
        if steps and json.loads(steps[-1])["global_step"] >= 3:
            os.kill(process.pid, signal.SIGKILL)
            killed_at = json.loads(steps[-1])["global_step"]
            break
        time.sleep(0.02)
    status = process.wait()
    assert status == -signal.SIGKILL, process.stderr.read().decode()
    process.stderr.close()
    assert killed_at is not None and killed_at < 12
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"

    summary = Trainer(config, run_dir, resume=True).fit()
    assert summary["status"] == "finished" and summary["global_step"] == 12
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert "resume" in events
    assert_same_run(run_dir, reference)


@pytest.mark.parametrize("fail_on_write", [4, 7])
def test_resume_after_crash_while_writing_checkpoint(
    tmp_path, cache_dir, reference, train_until_crash, fail_on_write
):
    """A crash after a checkpoint folder was renamed into place but before LATEST moved (write 4: mid
    epoch 1; write 7: the epoch-end checkpoint, after validation and the selected-model save)."""
    config = load_config(None, overrides(cache_dir))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    train_until_crash(config, run_dir, fail_on_write)
    position = load_latest_checkpoint(run_dir / "checkpoints").state["progress"]["global_step"]
    assert position == fail_on_write - 1
    Trainer(config, run_dir, resume=True).fit()
    assert_same_run(run_dir, reference)


def test_resume_of_finished_run_changes_nothing(tmp_path, reference):
    config = load_config(reference / "config.yaml")
    before, _ = final_weights(reference)
    summary = Trainer(config, reference, resume=True).fit()
    assert summary["status"] == "finished" and summary["global_step"] == 12
    after, _ = final_weights(reference)
    for key in before:
        assert torch.equal(before[key], after[key])


def test_resume_with_edited_config_is_a_clear_error(tmp_path, reference):
    import shutil

    from pcmr.train import CheckpointError

    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    config = load_config(run_dir / "config.yaml", ["model.embed_dim=12"])
    with pytest.raises(CheckpointError, match="does not match the model, loss or optimizer"):
        Trainer(config, run_dir, resume=True).fit()
