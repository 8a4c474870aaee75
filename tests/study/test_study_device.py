"""The study's evaluation follows ``train.device``: every module it runs (the trained model, the untrained
model of the same configuration, the corruption and uncertainty analyses) sits on that device.

Run with ``train.device: cuda`` where a GPU exists (``cuda`` marker). No second device exists on a
CPU-only machine, so there the run asks for ``cpu:0``: a device other than the
one a module is built on (``cpu``), to which every module must be moved explicitly. ``nn.Module.to``
is wrapped to record where each module was placed, and a global forward hook checks, during the
study's evaluation only, that every module holding parameters was placed on ``cpu:0`` and that
every encoding moves its batches there. A module built and left on its default device (the way a
CUDA run failed with "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor)")
fails the hook.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from pcmr.cli import main
from pcmr.study import backend
from pcmr.study.runner import PARENT_ENV

PLACED = "_pcmr_test_placed_on"

STUDY = """\
name: device
description: the study's evaluation on train.device
seeds: [0]
set:
  train.device: "{device}"
  train.epochs: 1
  train.max_steps_per_epoch: 2
  data.batch_size: 16
  data.eval_batch_size: 64
  data.options.image_size: 32
  data.options.num_train: 32
  data.options.num_val: 16
  data.options.num_test: 20
  data.options.num_test_unseen: 0
  data.options.num_binary_selection: 12
  model.embed_dim: 8
  model.text_encoder.hidden_dim: 8
relevance: [exact]
analysis: {max_items: 16}
recipes:
  pcme:
    similarities: [cosine, match_prob]
    rerankers: [nns]
"""


@pytest.fixture(params=["cpu:0", pytest.param("cuda", marks=pytest.mark.cuda)])
def placement_probe(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Record the device each ``nn.Module.to`` places a module on; during ``backend.evaluate_run`` check
    every forward and every encoding against the study's ``train.device`` (``seen["device"]``)."""
    evaluation_device = torch.device(request.param)
    seen: dict[str, Any] = {"device": evaluation_device, "forwards": 0, "encodings": [], "wrong": [], "evaluating": False}
    original_to = nn.Module.to

    def recording_to(self: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        result = original_to(self, *args, **kwargs)
        if device is not None:
            for module in self.modules():
                object.__setattr__(module, PLACED, torch.device(device))
        return result

    def check_forward(module: nn.Module, inputs: Any) -> None:
        if any(True for _ in module.parameters(recurse=False)):
            seen["forwards"] += 1
            placed = getattr(module, PLACED, None)
            if placed != evaluation_device:
                seen["wrong"].append(f"{type(module).__name__} placed on {placed}")

    import pcmr.encode.inputs as encode

    original_batches = encode._encoded_batches

    def recording_batches(model: Any, loader: Any, method: str, index_key: str, device: torch.device,
                          *args: Any) -> Any:
        if seen["evaluating"]:
            seen["encodings"].append(torch.device(device))
        return original_batches(model, loader, method, index_key, device, *args)

    original_evaluate = backend.evaluate_run

    def checked_evaluate(*args: Any, **kwargs: Any) -> Any:
        handle = nn.modules.module.register_module_forward_pre_hook(check_forward)
        seen["evaluating"] = True
        try:
            return original_evaluate(*args, **kwargs)
        finally:
            seen["evaluating"] = False
            handle.remove()

    monkeypatch.setattr(nn.Module, "to", recording_to)
    monkeypatch.setattr(encode, "_encoded_batches", recording_batches)
    monkeypatch.setattr(backend, "evaluate_run", checked_evaluate)
    yield seen


def test_study_evaluation_runs_every_module_on_train_device(tmp_path: Path, placement_probe: dict[str, Any],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PCMR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(PARENT_ENV, raising=False)  # this process is no study's child
    study = tmp_path / "device.yaml"
    study.write_text(STUDY.replace("{device}", str(placement_probe["device"])))
    assert main(["study", str(study), "--out", str(tmp_path / "out"), "--only", "0", "--threads", "1"]) == 0
    assert placement_probe["forwards"] > 0
    assert placement_probe["wrong"] == []
    # the trained and the untrained model encode the test split, the corruption analysis its captions
    assert len(placement_probe["encodings"]) >= 4
    assert set(placement_probe["encodings"]) == {placement_probe["device"]}
    assert (tmp_path / "out" / "runs" / "pcme-base-s0" / "item_uncertainty.json").is_file()
