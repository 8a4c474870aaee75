"""Checkpoint I/O: round trip of weights, optimizer state and RNG; atomicity; corruption errors."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from pcmr.train.checkpoint import (
    CheckpointError,
    atomic_write_text,
    capture_rng_state,
    list_checkpoints,
    load_latest_checkpoint,
    restore_rng_state,
    save_checkpoint,
)


def trained_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Linear(3, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(7, 5)).square().sum().backward()
        optimizer.step()
    return model, optimizer


def save(tmp_path, step, model, optimizer, keep=2, **state):
    weights = {f"model.{k}": v for k, v in model.state_dict().items()}
    return save_checkpoint(
        tmp_path,
        step,
        weights=weights,
        optimizer_state=optimizer.state_dict(),
        state={"progress": {"global_step": step}, **state},
        keep=keep,
    )


def test_round_trip_restores_identical_training(tmp_path):
    model, optimizer = trained_optimizer()
    save(tmp_path, 3, model, optimizer, rng=capture_rng_state())
    loaded = load_latest_checkpoint(tmp_path)
    assert loaded.state["progress"] == {"global_step": 3}
    clone = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Linear(3, 2))
    clone.load_state_dict({k.removeprefix("model."): v for k, v in loaded.weights.items()})
    clone_opt = torch.optim.AdamW(clone.parameters(), lr=0.5)
    clone_opt.load_state_dict(loaded.optimizer)
    assert clone_opt.param_groups[0]["lr"] == 0.01 and clone_opt.param_groups[0]["betas"] == (0.9, 0.999)
    data = torch.randn(4, 5)
    for net, opt in ((model, optimizer), (clone, clone_opt)):
        opt.zero_grad()
        net(data).square().sum().backward()
        opt.step()
    for a, b in zip(model.parameters(), clone.parameters()):
        assert torch.equal(a, b)


def test_rng_state_round_trip_through_json():
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    np.random.standard_normal()  # leaves a cached gaussian in numpy's state
    state = json.loads(json.dumps(capture_rng_state()))
    expected = (torch.rand(3), np.random.rand(3), random.random(), random.gauss(0, 1))
    torch.manual_seed(9)
    np.random.seed(9)
    random.seed(9)
    restore_rng_state(state)
    got = (torch.rand(3), np.random.rand(3), random.random(), random.gauss(0, 1))
    assert torch.equal(expected[0], got[0])
    assert np.array_equal(expected[1], got[1])
    assert expected[2:] == got[2:]


def test_keeps_newest_and_points_latest(tmp_path):
    model, optimizer = trained_optimizer()
    for step in (1, 2, 3):
        save(tmp_path, step, model, optimizer, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000000002", "step-000000003"]
    assert (tmp_path / "LATEST").read_text().strip() == "step-000000003"
    assert load_latest_checkpoint(tmp_path).state["progress"]["global_step"] == 3


def test_no_checkpoint_yet(tmp_path):
    assert load_latest_checkpoint(tmp_path / "missing") is None


def test_killed_writer_leaves_previous_checkpoint(tmp_path):
    model, optimizer = trained_optimizer()
    save(tmp_path, 1, model, optimizer)
    # a writer killed after renaming its folder but before moving LATEST, and one killed mid-write
    (tmp_path / "step-000000002").mkdir()
    (tmp_path / "step-000000002" / "weights.safetensors").write_bytes(b"partial")
    (tmp_path / ".tmp-step-000000002-1").mkdir()
    assert load_latest_checkpoint(tmp_path).state["progress"]["global_step"] == 1
    save(tmp_path, 2, model, optimizer)  # rewriting the same step replaces the stale folder
    assert load_latest_checkpoint(tmp_path).state["progress"]["global_step"] == 2
    assert not list(tmp_path.glob(".tmp-*"))


@pytest.mark.parametrize("victim", ["weights.safetensors", "optimizer.safetensors", "state.json"])
def test_corrupted_file_is_named_and_previous_kept(tmp_path, victim):
    model, optimizer = trained_optimizer()
    save(tmp_path, 1, model, optimizer)
    latest = save(tmp_path, 2, model, optimizer)
    path = latest / victim
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(CheckpointError) as info:
        load_latest_checkpoint(tmp_path)
    message = str(info.value)
    assert str(path) in message and "truncated or corrupted" in message
    assert "step-000000001 is kept" in message
    assert (tmp_path / "step-000000001" / "weights.safetensors").is_file()


def test_flipped_byte_detected(tmp_path):
    model, optimizer = trained_optimizer()
    latest = save(tmp_path, 1, model, optimizer)
    path = latest / "weights.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="weights.safetensors is truncated or corrupted"):
        load_latest_checkpoint(tmp_path)


def test_bad_pointer(tmp_path):
    atomic_write_text(tmp_path / "LATEST", "../../etc\n")
    with pytest.raises(CheckpointError, match="LATEST is corrupted"):
        load_latest_checkpoint(tmp_path)
    atomic_write_text(tmp_path / "LATEST", "step-000000009\n")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_latest_checkpoint(tmp_path)
