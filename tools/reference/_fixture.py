"""Shared plumbing of the release fixture scripts: load a release checkout, stub unused imports,
write a fixture (safetensors tensors + JSON provenance sidecar).

Only plumbing lives here; every number in a fixture comes from the release's own modules.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import torch

# the fixture writers use pcmr's atomic writes, so run with PYTHONPATH=src
from pcmr.atomic import atomic_write_json, atomic_write_safetensors

__all__ = ["add_checkout", "stub_module", "checkout_commit", "release_args", "write_fixture", "AttrDict"]


def add_checkout(checkout: Path) -> None:
    """Make the release's top-level packages importable."""
    if not (checkout / ".").is_dir():
        raise SystemExit(f"release checkout {checkout} is not a directory")
    sys.path.insert(0, str(checkout))


def stub_module(name: str, **attributes: Any) -> types.ModuleType:
    """Insert an empty module ``name`` (and its parents) into ``sys.modules`` for an import the
    computation never uses; ``attributes`` are set on it."""
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        dotted = ".".join(parts[:depth])
        if dotted not in sys.modules:
            sys.modules[dotted] = types.ModuleType(dotted)
        if depth > 1:
            setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], sys.modules[dotted])
    module = sys.modules[name]
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


def checkout_commit(checkout: Path, given: str | None) -> str:
    """The commit of the checkout: ``given`` when passed (an exported tree has no .git), else git's."""
    if given:
        return given
    result = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{checkout} is not a git checkout; pass --commit HASH")
    return result.stdout.strip()


def release_args(doc: str, *, checkpoint: bool = False) -> tuple[argparse.Namespace, str]:
    """The command line every fixture script takes (``--checkout``, ``--commit``, ``--out``, and
    ``--checkpoint`` where the script also writes a release checkpoint) and the checkout's commit."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--out", type=Path, required=True)
    if checkpoint:
        parser.add_argument("--checkpoint", type=Path, required=True)
    args = parser.parse_args()
    return args, checkout_commit(args.checkout, args.commit)


class AttrDict(dict):
    """A dict with attribute access: the releases read their configs as ``config.key`` and
    ``config.get('key')`` (they use munch, which is not installed here)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as error:
            raise AttributeError(key) from error


def write_fixture(out: Path, tensors: dict[str, torch.Tensor], provenance: dict[str, Any]) -> None:
    """``out`` (.safetensors) with every tensor contiguous and detached, ``out`` with suffix .json
    holding the provenance (repository, commit, files, functions, tolerance, shapes)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    flat = {key: value.detach().contiguous().clone() for key, value in tensors.items()}
    atomic_write_safetensors(out, flat)
    provenance = dict(provenance)
    provenance["tensors"] = {key: [list(value.shape), str(value.dtype)] for key, value in sorted(flat.items())}
    atomic_write_json(out.with_suffix(".json"), provenance)
    print(f"wrote {out} ({out.stat().st_size} bytes, {len(flat)} tensors)")
