"""The pieces behind the training fault handling, in process: checkpoint fallback and write failures,
the run-folder lock, the non-finite step guard."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pcmr.atomic import atomic_write
from pcmr.train import checkpoint as checkpoint_module
from pcmr.train.checkpoint import (
    CheckpointError,
    CheckpointWriteError,
    atomic_write_text,
    load_newest_valid_checkpoint,
    save_checkpoint,
)
from pcmr.train.config import ConfigError, load_config
from pcmr.train.faults import NonFiniteGuard, NonFiniteLossError
from pcmr.train.lock import LOCK_FILE, RunLock, RunLockedError


def save(directory, step, keep=3):
    model = torch.nn.Linear(3, 2)
    torch.nn.init.constant_(model.weight, float(step))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return save_checkpoint(directory, step, weights={f"model.{k}": v for k, v in model.state_dict().items()},
                           optimizer_state=optimizer.state_dict(), state={"progress": {"global_step": step}},
                           keep=keep)


def step_of(checkpoint):
    return checkpoint.state["progress"]["global_step"]


def test_newest_valid_checkpoint_skips_a_flipped_byte_with_a_warning(tmp_path):
    for step in (1, 2, 3):
        save(tmp_path, step)
    assert step_of(load_newest_valid_checkpoint(tmp_path)) == 3
    weights = tmp_path / "step-000000003" / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, wrong sha256
    weights.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=f"{weights} is truncated or corrupted.*older checkpoint .*step-000000002"):
        checkpoint = load_newest_valid_checkpoint(tmp_path)
    assert step_of(checkpoint) == 2 and float(checkpoint.weights["model.weight"][0, 0]) == 2.0


def test_an_edit_of_state_json_that_keeps_it_valid_json_is_detected(tmp_path):
    save(tmp_path, 1)
    save(tmp_path, 2)
    state_path = tmp_path / "step-000000002" / "state.json"
    state = json.loads(state_path.read_text())
    assert len(state["state_sha256"]) == 64
    state["progress"]["global_step"] = 7
    state_path.write_text(json.dumps(state))
    with pytest.warns(UserWarning, match=f"{state_path} is truncated or corrupted .its content does not match"):
        assert step_of(load_newest_valid_checkpoint(tmp_path)) == 1


def test_newest_valid_checkpoint_with_a_bad_pointer_or_none_valid(tmp_path):
    assert load_newest_valid_checkpoint(tmp_path / "none") is None
    save(tmp_path, 1)
    save(tmp_path, 2)
    (tmp_path / "step-000000003").mkdir()  # renamed into place, but LATEST never moved to it: ignored
    assert step_of(load_newest_valid_checkpoint(tmp_path)) == 2
    atomic_write_text(tmp_path / "LATEST", "garbage\n")
    with pytest.warns(UserWarning, match="LATEST is missing or corrupted"):
        assert step_of(load_newest_valid_checkpoint(tmp_path)) == 2  # every folder is a candidate then
    (tmp_path / "step-000000003").rmdir()
    atomic_write_text(tmp_path / "LATEST", "step-000000002\n")
    for step in (1, 2):
        (tmp_path / f"step-00000000{step}" / "optimizer.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no valid checkpoint in .*step-000000002/optimizer.safetensors is "
                                              r"missing.*step-000000001/optimizer.safetensors is missing.*new run"):
        load_newest_valid_checkpoint(tmp_path)


@pytest.mark.parametrize("failing", ["weights.safetensors", "state.json", "LATEST"])
def test_failed_checkpoint_write_leaves_the_previous_one(tmp_path, monkeypatch, failing):
    save(tmp_path, 1)
    original = checkpoint_module._write_synced

    def full_disk(path, data):
        if path.name == failing or path.name.startswith(f".{failing}.tmp"):
            path.write_bytes(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        original(path, data)

    def full_disk_atomic(path, text):  # LATEST goes through pcmr.atomic: fail inside its temp-file write
        def write(handle):
            handle.write(text.encode()[:1])
            raise OSError(errno.ENOSPC, "No space left on device")

        if Path(path).name != failing:
            return original_atomic(path, text)
        return atomic_write(path, write)

    original_atomic = checkpoint_module.atomic_write_text
    monkeypatch.setattr(checkpoint_module, "_write_synced", full_disk)
    monkeypatch.setattr(checkpoint_module, "atomic_write_text", full_disk_atomic)
    with pytest.raises(CheckpointWriteError, match=r"writing checkpoint .*step-000000002 failed \(No space left on "
                                                   r"device\); the previous checkpoint .*step-000000001 is intact") as info:
        save(tmp_path, 2)
    assert info.value.errno == errno.ENOSPC
    assert (tmp_path / "LATEST").read_text() == "step-000000001\n"
    assert not list(tmp_path.glob(".*tmp*"))  # partial files removed
    assert step_of(load_newest_valid_checkpoint(tmp_path)) == 1


def test_lock_refuses_a_live_owner_and_takes_over_a_dead_one(tmp_path):
    with RunLock(tmp_path) as lock:
        owner = json.loads((tmp_path / LOCK_FILE).read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        assert lock.held
    assert not (tmp_path / LOCK_FILE).exists()

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": sleeper.pid, "host": socket.gethostname()}))
        with pytest.raises(RunLockedError, match=f"in use by process {sleeper.pid} on host"):
            RunLock(tmp_path).acquire()
    finally:
        sleeper.kill()
        sleeper.wait()
    with pytest.warns(UserWarning, match=f"taking over the stale lock .*process {sleeper.pid} is not running"):
        lock = RunLock(tmp_path).acquire()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_lock_of_an_exited_unreaped_owner_is_stale(tmp_path):
    # a killed run whose process nobody has reaped yet (a zombie) still holds its PID: the lock is stale
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": owner.pid, "host": socket.gethostname()}))
        owner.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{owner.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the killed process did not become a zombie"
            time.sleep(0.01)
        os.kill(owner.pid, 0)  # the PID still answers
        with pytest.warns(UserWarning, match=f"taking over the stale lock .*process {owner.pid} is not running"):
            RunLock(tmp_path).acquire().release()
    finally:
        owner.kill()
        owner.wait()


def test_lock_of_another_host_is_refused_and_a_reused_pid_is_stale(tmp_path):
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": 1, "host": "elsewhere"}))
    with pytest.raises(RunLockedError, match="in use by process 1 on host elsewhere.*delete"):
        RunLock(tmp_path).acquire()
    assert issubclass(RunLockedError, FileExistsError)  # the CLI reports it as bad input (exit 2)
    # our parent process is alive, but the recorded start time says the PID belonged to another process
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(),
                                                  "start_time": "0"}))
    with pytest.warns(UserWarning, match="now belongs to another process"):
        RunLock(tmp_path).acquire().release()
    (tmp_path / LOCK_FILE).write_text("{not json")
    with pytest.warns(UserWarning, match="it is unreadable"):
        RunLock(tmp_path).acquire().release()


def test_only_rank_zero_of_a_distributed_run_takes_the_lock(tmp_path, monkeypatch):
    with RunLock(tmp_path):
        monkeypatch.setenv("RANK", "1")  # another rank of the same run, as torchrun starts it
        with RunLock(tmp_path) as other:
            assert not other.held
        assert (tmp_path / LOCK_FILE).is_file()  # still the rank 0 lock
        monkeypatch.setenv("RANK", "0")
        with pytest.raises(RunLockedError):
            RunLock(tmp_path).acquire()


class ListLog:
    def __init__(self):
        self.lines = []

    def write(self, event, **fields):
        self.lines.append({"event": event, **fields})


def test_guard_counts_consecutive_skips_and_restores_buffers():
    bn = torch.nn.BatchNorm1d(2)
    guard = NonFiniteGuard(2, "RUN")
    log = ListLog()
    position = {"epoch": 1, "step_in_epoch": 1, "global_step": 1}
    guard.snapshot([bn])
    bn.train()(torch.randn(4, 2) * float("nan"))  # a forward pass that poisons the running statistics
    assert torch.isnan(bn.running_mean).all()
    assert guard.skip("loss", torch.tensor(float("nan")), log, position) == {}
    assert torch.equal(bn.running_mean, torch.zeros(2)) and int(bn.num_batches_tracked) == 0
    guard.good_step()
    guard.skip("gradient norm", torch.tensor(float("inf")), log, position)
    with pytest.raises(NonFiniteLossError, match=r"training loss was nan in 2 consecutive steps .*RUN/checkpoints"):
        guard.skip("loss", torch.tensor(float("nan")), log, position)
    assert [(line["consecutive"], line["total"], line["what"]) for line in log.lines] == [
        (1, 1, "loss"), (1, 2, "gradient norm"), (2, 3, "loss")]


def test_max_nonfinite_steps_config_key():
    assert load_config(None, []).train.max_nonfinite_steps == 5
    with pytest.raises(ConfigError, match="train.max_nonfinite_steps must be >= 1"):
        load_config(None, ["train.max_nonfinite_steps=0"])
