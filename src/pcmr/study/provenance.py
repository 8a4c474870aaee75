"""Where a run's numbers came from: the machine, the thread count, the library versions and the data.

Two runs of the same config give bit-identical weights on one machine and thread count, but not across
machines (CPU instruction sets, BLAS kernels) or thread counts (the order of floating-point sums).
Each run's marker (``study.json``) and summary (``run.json``) record :func:`provenance`, so a
difference between two result files can be traced to what differed.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
import PIL
import torch

__all__ = ["cpu_model", "provenance", "provenance_markdown"]

PROVENANCE_KEYS = ("cpu", "cores", "threads", "device", "python", "torch", "numpy", "pillow", "platform", "data")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``; elsewhere ``platform.processor()``)."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def provenance(threads: int, data_digest: str) -> dict[str, Any]:
    """``{"cpu", "cores", "threads", "device", "python", "torch", "numpy", "pillow", "platform", "data"}``:
    the CPU model, the logical cores, torch's thread count, the accelerator (``cpu`` or the CUDA device's
    name), the library versions and the digest of the test split (``pcmr.study.backend.split_digest``)."""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {"cpu": cpu_model(), "cores": os.cpu_count() or 0, "threads": int(threads), "device": device,
            "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "pillow": PIL.__version__, "platform": platform.platform(), "data": data_digest}


def provenance_markdown(markers: list[dict[str, Any]], *, title: str) -> list[str]:
    """Lines of a table with one row per distinct provenance among the runs' markers, and how many runs
    share it (markers without a record count as ``not recorded``)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for marker in markers:
        record = marker.get("provenance") or {}
        key = tuple(str(record.get(k, "not recorded")) for k in PROVENANCE_KEYS)
        groups.setdefault(key, []).append(str(marker.get("run")))
    lines = [f"# {title}: provenance", "",
             "Where the runs' numbers came from (each run's `study.json` and `run.json` record it): CPU, logical "
             "cores, torch threads, accelerator, library versions and the digest of the test split.", "",
             "| runs | " + " | ".join(PROVENANCE_KEYS) + " |", "|---" * (len(PROVENANCE_KEYS) + 1) + "|"]
    for key, runs in groups.items():
        lines.append(f"| {len(runs)} | " + " | ".join(key) + " |")
    if not groups:
        lines.append("| 0 | " + " | ".join("-" for _ in PROVENANCE_KEYS) + " |")
    return [*lines, ""]
