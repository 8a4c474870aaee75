"""The pieces of ``tools/gpu_check.sh`` (``make gpu-check``) on the CPU: the script's answer on a machine
without CUDA, its study file, and smoke runs of its two benchmarks (their figures are not checked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests._tools import ROOT, load_script


def test_without_cuda_the_check_says_so_in_one_line_and_fails(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable,
           "GPU_CHECK_LOG": str(tmp_path / "log.txt")}
    done = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("gpu-check: CUDA is not available on this machine") and done.stderr.count("\n") == 1
    assert not (tmp_path / "log.txt").exists()


def test_the_check_study_is_the_uncertainty_study_on_the_device(tmp_path: Path) -> None:
    from pcmr.study import find_study, load_study

    tool = load_script("tools/gpu_check_study.py")
    assert tool.main([str(tmp_path / "check.yaml"), "--device", "cpu", "--epochs", "1", "--max-steps", "3"]) == 0
    spec = load_study(tmp_path / "check.yaml")
    shipped = load_study(find_study("uncertainty"))
    assert spec.seeds == (0,) and spec.overrides["train.device"] == "cpu" and spec.overrides["train.epochs"] == 1
    assert spec.overrides["train.max_steps_per_epoch"] == 3
    assert {r.label for r in spec.recipes} == {r.label for r in shipped.recipes}
    first = [run for run in spec.runs() if run.label == "pcme"][0]
    assert first.variant == "source" and first.overrides["train.device"] == "cpu"
    assert yaml.safe_load((tmp_path / "check.yaml").read_text())["name"] == "uncertainty_cpu_check"


def test_training_throughput_smoke_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PCMR_CACHE", str(tmp_path / "cache"))
    bench = load_script("benchmarks/training_throughput.py")
    result = bench.measure("cpu", steps=3, warmup=1, quick=True, out=tmp_path)
    assert result["steps"] == 3 and result["timed_steps"] == 2 and result["pairs_per_s"] > 0
    from pcmr.study import find_study, load_study

    shipped = load_study(find_study("uncertainty"))  # the study's image size, whatever its file fixes
    assert result["image_size"] == shipped.overrides["data.options.image_size"] and result["gpu"]["samples"] >= 0
    assert "pairs/s over 2 steps after warm-up" in bench.format_result(result)


def test_match_prob_benchmark_smoke_run() -> None:
    bench = load_script("benchmarks/match_prob_device.py")
    row = bench.measure("cpu", 30, 70, 16, j=3, repeats=1, fused=False)
    assert row["product_s"] > 0 and row["eager_ratio"] > 0 and "fused_s" not in row
    assert bench.format_row(row).startswith("match_prob on cpu at 30x70x16, J=3: product ")
