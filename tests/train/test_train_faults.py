"""Training survives what clusters do to it: each fault runs a real ``pcmr train`` process.

Faults: a corrupt newest checkpoint, a full disk while writing a checkpoint, a second run into a
folder in use (and a stale lock), a non-finite loss. The fault is injected by tests/train/fault_runner.py
(in the child process) or by editing files between processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from pcmr.train.checkpoint import load_checkpoint, load_latest_checkpoint
from pcmr.train.lock import LOCK_FILE

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).resolve().parent / "fault_runner.py"


def tiny(cache_dir: Path, *extra: str) -> list[str]:
    """A vsepp_max run on a few shapes images: 2 epochs of 2 steps (4 steps in all)."""
    items = [
        "data.options={num_train: 12, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
        f"image_size: 32, cache_dir: {cache_dir}}}",
        "data.batch_size=10", "train.epochs=2", "train.max_steps_per_epoch=2", "train.checkpoint_every_steps=1",
        "train.log_every=1", "model.embed_dim=8", "model.text_encoder={word_dim: 8, hidden_dim: 8}",
        "model.image_encoder={cnn_channels: [4, 4, 4, 4]}", *extra,
    ]
    return [arg for item in items for arg in ("--set", item)] + ["--no-progress"]


def pcmr(*args: str, fault: str = "none", wait: bool = True):
    """``python tests/train/fault_runner.py FAULT -- ARGS`` (the pcmr CLI in a child process)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(RUNNER), fault, "--", *args]
    if not wait:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, cache_dir):
    done = pcmr("train", "vsepp_max", "--out", str(tmp_path), "--name", "run", *tiny(cache_dir))
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    final = load_latest_checkpoint(checkpoints)  # the uninterrupted run's end state
    assert final.state["progress"]["global_step"] == 4
    assert not (run_dir / LOCK_FILE).exists()  # released at the end
    newest = checkpoints / "step-000000004" / "weights.safetensors"
    newest.write_bytes(newest.read_bytes()[:100])  # truncated by a crash or a full disk

    resumed = pcmr("train", "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    assert f"pcmr train: warning: checkpoint file {newest} is truncated or corrupted" in resumed.stderr
    assert f"resuming from the older checkpoint {checkpoints / 'step-000000003'}" in resumed.stderr
    resume_events = [e for e in events(run_dir) if e["event"] == "resume"]
    assert resume_events[-1]["checkpoint"] == str(checkpoints / "step-000000003")
    again = load_latest_checkpoint(checkpoints)  # the step was redone: the same weights as before
    assert again.state["progress"]["global_step"] == 4
    for key, value in final.weights.items():
        torch.testing.assert_close(again.weights[key], value, rtol=1e-5, atol=1e-6, msg=key)

    for folder in checkpoints.glob("step-*"):  # every checkpoint bad: one clear error, no training
        (folder / "state.json").write_text("{")
    failed = pcmr("train", "--resume", str(run_dir))
    assert failed.returncode == 2
    lines = failed.stderr.strip().splitlines()
    assert lines[-1].startswith(f"pcmr train: error: no valid checkpoint in {checkpoints}: ")
    assert "step-000000004/state.json is truncated or corrupted" in lines[-1]
    assert "step-000000003/state.json is truncated or corrupted" in lines[-1] and "Traceback" not in failed.stderr


def test_full_disk_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    failed = pcmr("train", "vsepp_max", "--out", str(tmp_path), "--name", "run", *tiny(cache_dir), fault="enospc:3")
    assert failed.returncode == 1
    last = failed.stderr.strip().splitlines()[-1]
    checkpoints = run_dir / "checkpoints"
    assert last.startswith(f"pcmr train: error: writing checkpoint {checkpoints / 'step-000000003'} failed "
                           "(No space left on device); the previous checkpoint ")
    assert f"{checkpoints / 'step-000000002'} is intact" in last and f"pcmr train --resume {run_dir}" in last
    assert sorted(p.name for p in checkpoints.iterdir()) == ["LATEST", "step-000000001", "step-000000002"]
    assert load_checkpoint(checkpoints / "step-000000002").state["progress"]["global_step"] == 2  # verifies
    assert not (run_dir / LOCK_FILE).exists()
    resumed = pcmr("train", "--resume", str(run_dir))  # space freed: the run continues
    assert resumed.returncode == 0, resumed.stderr
    assert load_latest_checkpoint(checkpoints).state["progress"]["global_step"] == 4


def test_a_second_run_into_a_folder_in_use_is_refused_and_a_stale_lock_taken_over(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    first = pcmr("train", "vsepp_max", "--out", str(tmp_path), "--name", "run", *tiny(cache_dir), fault="hold:2",
                 wait=False)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "log.jsonl").is_file() or '"step"' not in (run_dir / "log.jsonl").read_text():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.1)
        lock = json.loads((run_dir / LOCK_FILE).read_text())
        assert lock["pid"] == first.pid and lock["host"]
        second = pcmr("train", "--resume", str(run_dir))
        assert second.returncode == 2
        assert second.stderr.strip() == (
            f"pcmr train: error: run folder {run_dir} is in use by process {first.pid} on host {lock['host']} "
            f"(lock file {run_dir / LOCK_FILE}); wait for it to finish, or delete {run_dir / LOCK_FILE} if that "
            "run is known to be gone")
    finally:
        first.kill()  # the holder dies without releasing its lock
        first.communicate()
    assert first.returncode == -signal.SIGKILL
    assert json.loads((run_dir / LOCK_FILE).read_text())["pid"] == first.pid

    third = pcmr("train", "--resume", str(run_dir))
    assert third.returncode == 0, third.stderr
    assert f"pcmr train: warning: taking over the stale lock {run_dir / LOCK_FILE} (process {first.pid} is not " \
           "running" in third.stderr
    assert load_latest_checkpoint(run_dir / "checkpoints").state["progress"]["global_step"] == 4
    assert not (run_dir / LOCK_FILE).exists()


def test_non_finite_loss_steps_are_skipped_counted_and_stop_the_run(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    # step 1 is NaN once (skipped, training goes on); steps 3 and 4 are NaN in a row: the limit of 2 stops it
    failed = pcmr("train", "vsepp_max", "--out", str(tmp_path), "--name", "run",
                  *tiny(cache_dir, "train.max_nonfinite_steps=2"), fault="nan:1,3,4")
    assert failed.returncode == 1
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("pcmr train: error: the training loss was nan in 2 consecutive steps (the last: epoch 2, "
                           "step 2, global step 4; train.max_nonfinite_steps=2)")
    logged = [e for e in events(run_dir) if e["event"] == "nonfinite"]
    assert [(e["global_step"], e["consecutive"], e["total"], e["what"]) for e in logged] == [
        (1, 1, 1, "loss"), (3, 1, 2, "loss"), (4, 2, 3, "loss")]
    checkpoints = run_dir / "checkpoints"
    kept = load_latest_checkpoint(checkpoints)
    assert kept.state["progress"]["global_step"] == 3  # written after step 3, which made no update
    after_two = load_checkpoint(checkpoints / "step-000000002")  # the last step with an update
    for key, value in after_two.weights.items():
        assert torch.isfinite(kept.weights[key]).all(), key
        assert torch.equal(kept.weights[key], value), key  # the skipped step 3 did not touch the weights
    step_one = [e for e in events(run_dir) if e["event"] == "step" and e["global_step"] == 1]
    assert step_one and "loss" not in step_one[0]  # no loss terms of a skipped step in the log or averages


def test_a_start_killed_before_its_config_was_written_is_started_again_by_the_same_command(tmp_path, cache_dir):
    """A kill -9 while ``config.yaml`` is renamed into place leaves a run folder with only the lock and a
    temporary file: the same ``pcmr train --name`` starts it afresh (it is not refused as existing), while
    a folder holding anything else is still refused."""
    run_dir = tmp_path / "run"
    command = ("train", "vsepp_max", "--out", str(tmp_path), "--name", "run", *tiny(cache_dir))
    killed = pcmr(*command, fault="killconfig")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert run_dir.is_dir() and not (run_dir / "config.yaml").exists()
    again = pcmr(*command)
    assert again.returncode == 0, again.stderr
    assert load_latest_checkpoint(run_dir / "checkpoints").state["progress"]["global_step"] == 4
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    refused = pcmr("train", "vsepp_max", "--out", str(tmp_path), "--name", "other", *tiny(cache_dir))
    assert refused.returncode == 2
    assert "already exists" in refused.stderr
    assert (other / "notes.txt").read_text() == "mine"
