"""Preemption and several processes, with real processes.

SIGTERM makes ``pcmr train`` finish its step, write a checkpoint and exit non-zero with the
command that resumes it; the resumed run reaches the weights of an uninterrupted run. The same
in 2 CPU processes (gloo), launched both ways (``torchrun -m pcmr train`` and ``pcmr train
--nproc 2``). A 2-process run of the same recipe, seed and global batch starts with the loss of
the 1-process run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from pcmr.cli import main
from pcmr.train import Trainer, load_config, save_config
from pcmr.train.checkpoint import load_latest_checkpoint
from pcmr.train.trainer import TrainingInterrupted

REPO = Path(__file__).resolve().parents[2]
STEPS = 30  # 80 captions, global batch 8: 10 steps per epoch, 3 epochs
WORDS = "red blue green square circle triangle big small left right above below".split()


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    """A small precomputed-feature dataset (no BatchNorm in the model) and a PCME recipe."""
    root = tmp_path_factory.mktemp("features")
    rng = np.random.default_rng(0)
    for split, num_images in (("train", 16), ("val", 8)):
        np.save(root / f"{split}_ims.npy", rng.normal(size=(num_images, 12)).astype(np.float32))
        lines = [" ".join(rng.choice(WORDS, size=4)) for _ in range(5 * num_images)]
        (root / f"{split}_caps.txt").write_text("\n".join(lines) + "\n")
    path = root / "tiny.yaml"
    path.write_text(
        "model: {name: pcme, embed_dim: 8, image_encoder: {kind: global_features, feature_dim: 12},\n"
        "        text_encoder: {word_dim: 8, hidden_dim: 8}}\n"
        "loss: {name: pcme, num_samples: 3}\n"
        f"data: {{name: precomputed, root: {root}, batch_size: 8}}\n"
        "train: {epochs: 3, log_every: 1, progress: false, lr: 0.001}\n"
    )
    return path


def environment():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    return env


def steps(run_dir):
    log = Path(run_dir) / "log.jsonl"
    lines = log.read_text().splitlines() if log.is_file() else []
    return [json.loads(line) for line in lines if '"event": "step"' in line and line.endswith("}")]


def run_to_end(command):
    result = subprocess.run(command, cwd=REPO, env=environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result


def run_and_terminate(command, run_dir, after_step=3):
    """Start ``command``, send SIGTERM once ``run_dir``'s log shows ``after_step`` steps."""
    process = subprocess.Popen(command, cwd=REPO, env=environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    sent = False
    while process.poll() is None and not sent:
        done = steps(run_dir)
        if done and done[-1]["global_step"] >= after_step:
            process.send_signal(signal.SIGTERM)
            sent = True
        time.sleep(0.01)
    out, err = process.communicate(timeout=120)
    assert sent, f"the run ended before SIGTERM was sent: {err}"
    return process.returncode, out, err


def final_weights(run_dir):
    checkpoint = load_latest_checkpoint(Path(run_dir) / "checkpoints")
    assert checkpoint.state["progress"]["global_step"] == STEPS
    return checkpoint.weights


def assert_same_weights(run_dir, reference, rtol=1e-5, atol=1e-6):
    """The tolerance of the resume tests: the first run in a process can differ from later ones by
    ~1e-7 (CPU kernels), which 30 Adam steps amplify somewhat."""
    weights, expected = final_weights(run_dir), final_weights(reference)
    assert weights.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(weights[key], value, rtol=rtol, atol=atol, msg=key)


def assert_resumed_at(run_dir, step):
    events = [json.loads(line) for line in (Path(run_dir) / "log.jsonl").read_text().splitlines()]
    resumes = [event for event in events if event["event"] == "resume"]
    assert len(resumes) == 1 and resumes[0]["global_step"] == step
    assert [event["global_step"] for event in events if event["event"] == "step"] == list(range(1, STEPS + 1))


def assert_interrupted(run_dir, err, command):
    assert f"resume with: {command}" in err, err
    summary = json.loads((Path(run_dir) / "run.json").read_text())
    assert summary["status"] == "interrupted"
    position = load_latest_checkpoint(Path(run_dir) / "checkpoints").state["progress"]["global_step"]
    assert position == steps(run_dir)[-1]["global_step"] < STEPS  # the last complete step is saved
    return position


@pytest.fixture(scope="module")
def reference_one(recipe, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("one") / "run"
    run_dir.mkdir()
    config = load_config(recipe)
    save_config(config, run_dir / "config.yaml")
    Trainer(config, run_dir).fit()
    return run_dir


def test_sigterm_one_process_then_resume(recipe, reference_one, tmp_path):
    run_dir = tmp_path / "run"
    status, _, err = run_and_terminate(
        [sys.executable, "-m", "pcmr", "train", str(recipe), "--out", str(tmp_path), "--name", "run"], run_dir
    )
    assert status == 128 + signal.SIGTERM, err
    position = assert_interrupted(run_dir, err, f"pcmr train --resume {run_dir}")
    assert main(["train", "--resume", str(run_dir)]) == 0
    assert_resumed_at(run_dir, position)
    assert_same_weights(run_dir, reference_one)


def test_two_processes_sigterm_resume_and_match_one_process(recipe, reference_one, tmp_path):
    """Launched as ``torchrun --nproc-per-node 2 -m pcmr train RECIPE``, stopped by SIGTERM to the
    launcher (which passes it on to both processes), resumed with ``pcmr train --resume RUN --nproc 2``."""
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "pcmr", "train", str(recipe), "--out", str(tmp_path), "--name", "run"]
    status, _, err = run_and_terminate(command, run_dir)
    assert status != 0, err
    position = assert_interrupted(run_dir, err, f"pcmr train --resume {run_dir} --nproc 2")
    assert err.count(f"resume with: pcmr train --resume {run_dir} --nproc 2") == 2, err  # each process says it
    result = run_to_end([sys.executable, "-m", "pcmr", "train", "--resume", str(run_dir), "--nproc", "2"])
    assert f"run folder: {run_dir}" in result.stdout
    assert_resumed_at(run_dir, position)
    # the same recipe, seed and global batch in one process: the same first loss, model selection
    # and, up to the order of float32 sums over processes, the same weights after 30 steps
    one, two = steps(reference_one), steps(run_dir)
    assert two[0]["loss"] == pytest.approx(one[0]["loss"], rel=1e-4)
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["world_size"] == 2 and summary["status"] == "finished"
    assert summary["best_epoch"] == json.loads((reference_one / "run.json").read_text())["best_epoch"]
    assert_same_weights(run_dir, reference_one, rtol=1e-4, atol=1e-5)


def test_nproc_launch_reports_a_bad_recipe(tmp_path, capsys):
    assert main(["train", str(tmp_path / "missing.yaml"), "--nproc", "2"]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_sigint_in_process_stops_after_the_step_with_a_checkpoint(recipe, reference_one, tmp_path):
    """SIGINT (Ctrl-C) arriving inside step 3: the step completes, is saved, and the run stops."""

    class InterruptedTrainer(Trainer):
        def _step(self, batch, epoch, step_in_epoch):
            if self.progress.global_step == 2:
                os.kill(os.getpid(), signal.SIGINT)
            return super()._step(batch, epoch, step_in_epoch)

    config = load_config(recipe)
    save_config(config, tmp_path / "config.yaml")
    before = signal.getsignal(signal.SIGINT)  # the default handler, or SIG_IGN in a background job
    with pytest.raises(TrainingInterrupted, match=f"SIGINT after global step 3.*pcmr train --resume {tmp_path}$") as info:
        InterruptedTrainer(config, tmp_path).fit()
    assert info.value.exit_code == 130 and info.value.global_step == 3
    assert load_latest_checkpoint(tmp_path / "checkpoints").state["progress"]["global_step"] == 3
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored
    Trainer(config, tmp_path, resume=True).fit()
    assert_same_weights(tmp_path, reference_one)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_training(recipe, reference_one, tmp_path, precision):
    config = load_config(recipe, [f"train.precision={precision}", "train.epochs=1", "train.validate_every=0"])
    save_config(config, tmp_path / "config.yaml")
    Trainer(config, tmp_path).fit()
    first, expected = steps(tmp_path)[0]["loss"], steps(reference_one)[0]["loss"]
    assert first == pytest.approx(expected, rel=1e-2)
    assert all(np.isfinite(s["loss"]) for s in steps(tmp_path))
    state = load_latest_checkpoint(tmp_path / "checkpoints").state
    assert ("grad_scaler" in state) == (precision == "fp16")


def test_nproc_is_checked(tmp_path, capsys, monkeypatch):
    assert main(["train", "pcme", "--nproc", "0"]) == 2
    assert "--nproc must be >= 1, got 0" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train", "pcme", "--nproc", "2"]) == 2
    assert "under torchrun leave it out" in capsys.readouterr().err
