"""The training loader: the same losses with and without worker processes, its default settings per
device, and the data-wait / compute split of every step in ``log.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pcmr.config import ConfigError
from pcmr.train import Trainer, load_config, save_config
from pcmr.train.recipes import find_recipe
from pcmr.train.trainer import loader_settings


def _train(tmp_path: Path, name: str, tiny_training: list[str], extra: list[str]) -> list[dict]:
    config = load_config(find_recipe("pcme"), [*tiny_training, "train.max_steps_per_epoch=3", "train.epochs=2",
                                               "train.log_every=1", "train.progress=false",
                                               "train.validate_every=0", *extra])
    run_dir = tmp_path / name
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    Trainer(config, run_dir).fit()
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_workers_give_bit_identical_losses_and_the_log_splits_data_wait_from_compute(tmp_path, tiny_training):
    """pcme (Cutout and word dropout, J sampled embeddings): 0 and 4 workers, the same losses to the bit."""
    runs = {workers: _train(tmp_path, f"w{workers}", tiny_training, [f"data.num_workers={workers}"])
            for workers in (0, 4)}
    steps = {w: [e for e in log if e["event"] == "step"] for w, log in runs.items()}
    assert len(steps[0]) == len(steps[4]) == 6
    terms = ("loss", "soft_contrastive", "kl_prior", "uniformity")
    for a, b in zip(steps[0], steps[4]):
        assert [a[t] for t in terms] == [b[t] for t in terms]
    for log in runs.values():
        step_events = [e for e in log if e["event"] == "step"]
        for event in step_events:
            assert event["data_s"] >= 0 and event["compute_s"] > 0
            # the two parts make up the step whose throughput is logged (global batch of 10 pairs)
            assert event["pairs_per_s"] * (event["data_s"] + event["compute_s"]) == pytest.approx(10, rel=1e-6)
        for epoch in (e for e in log if e["event"] == "epoch"):
            mine = step_events[3 * (epoch["epoch"] - 1): 3 * epoch["epoch"]]  # 3 steps per epoch
            assert epoch["data_seconds"] == pytest.approx(sum(e["data_s"] for e in mine), rel=1e-9, abs=1e-12)
            assert epoch["compute_seconds"] == pytest.approx(sum(e["compute_s"] for e in mine), rel=1e-9)
            assert 0 < epoch["data_seconds"] + epoch["compute_seconds"] <= epoch["seconds"]


def test_loader_defaults_follow_the_device():
    assert loader_settings(None, torch.device("cpu")) == {"num_workers": 0, "pin_memory": False,
                                                           "prefetch_factor": None}
    assert loader_settings(3, torch.device("cpu"))["num_workers"] == 3
    gpu = loader_settings(None, torch.device("cuda", 0))
    assert 1 <= gpu["num_workers"] <= 4 and gpu["pin_memory"] and gpu["prefetch_factor"] == 4
    assert loader_settings(0, torch.device("cuda")) == {"num_workers": 0, "pin_memory": True, "prefetch_factor": None}


def test_num_workers_is_checked():
    with pytest.raises(ConfigError, match="data.num_workers must be >= 0 or null"):
        load_config(None, ["data.num_workers=-1"])
    with pytest.raises(ConfigError, match="data.loader_options may not set pin_memory"):
        load_config(None, ["data.loader_options={pin_memory: true}"])
    assert load_config(None).data.num_workers is None
