"""Load a release fixture (tests/fixtures/reference/NAME.safetensors + NAME.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "reference"


def load_fixture(name: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors and the provenance sidecar of fixture ``name``."""
    tensors = load_file(str(FIXTURES / f"{name}.safetensors"))
    provenance = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return tensors, provenance


def part(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors under ``prefix/`` with the prefix removed."""
    start = prefix.rstrip("/") + "/"
    return {key[len(start):]: value for key, value in tensors.items() if key.startswith(start)}


def assert_close(got: torch.Tensor, want: torch.Tensor, tolerance: dict[str, float], name: str) -> None:
    torch.testing.assert_close(got, want, rtol=tolerance["rtol"], atol=tolerance["atol"], msg=lambda m: f"{name}: {m}")
