"""Crash-safe training checkpoints: safetensors for tensors, JSON for everything else. Never pickle.

Layout of ``RUN/checkpoints/``::

    step-000000120/
        weights.safetensors     # "model.<name>" and "loss.<name>" tensors (the PCME loss learns a, b)
        optimizer.safetensors   # optimizer state tensors, "state.<param index>.<name>"
        state.json              # progress, scheduler, RNG states, optimizer param groups and
                                # scalars, config, the size + sha256 of both .safetensors files,
                                # and the sha256 of its own content ("state_sha256")
    LATEST                      # one line: the name of the newest complete checkpoint folder

A checkpoint is written into a temporary folder (every file fsync'ed), renamed
into place (``pcmr.atomic.move_into_place``), and only then is ``LATEST`` replaced
atomically (``pcmr.atomic.atomic_write_text``). A process killed at any moment therefore leaves ``LATEST``
naming a complete checkpoint (or no ``LATEST`` at all). Reading verifies the
recorded sizes and hashes, so a truncated or corrupted file gives a
:class:`CheckpointError` naming it; older checkpoints are kept (``keep``) and are
never touched by a failed write. :func:`load_newest_valid_checkpoint` (used by
``--resume``) warns about a bad newest checkpoint and falls back to the newest
valid older one. A write that fails (a full disk) removes its partial files,
leaves ``LATEST`` and the previous checkpoint as they were and raises
:class:`CheckpointWriteError`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as safetensors_load
from safetensors.torch import save as safetensors_save
from torch import Tensor

from pcmr.atomic import atomic_write_bytes, atomic_write_text, fsync_dir, move_into_place

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CheckpointWriteError",
    "atomic_write_bytes",
    "atomic_write_text",
    "capture_rng_state",
    "list_checkpoints",
    "load_latest_checkpoint",
    "load_newest_valid_checkpoint",
    "optimizer_state_from_parts",
    "optimizer_state_to_parts",
    "restore_rng_state",
    "save_checkpoint",
]

LATEST = "LATEST"
WEIGHTS = "weights.safetensors"
OPTIMIZER = "optimizer.safetensors"
STATE = "state.json"
STATE_DIGEST = "state_sha256"  # key of state.json holding the digest of the rest of the file
FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated or corrupted (the message names the file)."""


class CheckpointWriteError(OSError):
    """Writing a checkpoint failed (e.g. the disk is full); the previous checkpoint is intact."""


# --------------------------------------------------------------------------- synced file writes


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _b64(tensor: Tensor) -> str:
    return base64.b64encode(tensor.cpu().numpy().tobytes()).decode("ascii")


def _unb64(text: str) -> Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()


def capture_rng_state() -> dict[str, Any]:
    """The torch (CPU and CUDA), numpy and Python RNG states as JSON-serialisable values."""
    np_state: tuple[Any, ...] = tuple(np.random.get_state())
    py_state = random.getstate()
    state: dict[str, Any] = {
        "torch": _b64(torch.get_rng_state()),
        "numpy": {
            "kind": str(np_state[0]),
            "keys": np_state[1].tolist(),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {"version": py_state[0], "internal": list(py_state[1]), "gauss_next": py_state[2]},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    torch.set_rng_state(_unb64(state["torch"]))
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np.asarray(np_state["keys"], dtype=np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    py_state = state["python"]
    random.setstate((py_state["version"], tuple(py_state["internal"]), py_state["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_unb64(s) for s in state["cuda"]])


# --------------------------------------------------------------------------- optimizer state


def _jsonable(value: Any, where: str) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, where) for k, v in value.items()}
    raise CheckpointError(
        f"optimizer state {where} holds a {type(value).__name__}; expected tensors or numbers"
    )


def optimizer_state_to_parts(state_dict: dict[str, Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Split ``optimizer.state_dict()`` into safetensors-ready tensors and a JSON-ready rest."""
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entries in state_dict["state"].items():
        for name, value in entries.items():
            if isinstance(value, Tensor):
                tensors[f"state.{index}.{name}"] = value.detach().cpu().contiguous().clone()
            else:
                scalars.setdefault(str(index), {})[name] = _jsonable(value, f"{index}.{name}")
    groups = [_jsonable(group, "param_groups") for group in state_dict["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars}


def optimizer_state_from_parts(tensors: dict[str, Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`optimizer_state_to_parts` (loadable by ``optimizer.load_state_dict``)."""
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    for index, entries in meta["scalars"].items():
        state.setdefault(int(index), {}).update(entries)
    groups = []
    for group in meta["param_groups"]:
        group = dict(group)
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
        groups.append(group)
    return {"state": state, "param_groups": groups}


# --------------------------------------------------------------------------- save / load


@dataclass
class Checkpoint:
    """A loaded checkpoint: ``weights`` ("model.*" / "loss.*"), optimizer state dict, JSON state."""

    path: Path
    weights: dict[str, Tensor]
    optimizer: dict[str, Any]
    state: dict[str, Any]


def _digest(data: bytes) -> dict[str, Any]:
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _state_digest(document: dict[str, Any]) -> str:
    """SHA-256 of ``state.json``'s content (without this digest), in a canonical JSON form, so an edit
    that keeps the file valid JSON is still detected."""
    rest = {k: v for k, v in document.items() if k != STATE_DIGEST}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode("utf-8")).hexdigest()


def list_checkpoints(checkpoint_dir: Path) -> list[Path]:
    """Complete checkpoint folders (``step-*``), oldest first."""
    if not checkpoint_dir.is_dir():
        return []
    return sorted(p for p in checkpoint_dir.iterdir() if p.is_dir() and p.name.startswith("step-"))


def save_checkpoint(
    checkpoint_dir: Path,
    global_step: int,
    *,
    weights: dict[str, Tensor],
    optimizer_state: dict[str, Any],
    state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write checkpoint ``step-<global_step>`` atomically, point ``LATEST`` at it, prune to ``keep``.

    Args:
        checkpoint_dir: ``RUN/checkpoints``.
        global_step: optimisation steps done so far (names the folder).
        weights: tensors to restore (``"model.*"``, ``"loss.*"``).
        optimizer_state: ``optimizer.state_dict()``.
        state: JSON-serialisable progress, scheduler, RNG and config.
        keep: number of complete checkpoints kept (the newest ones).
    """
    checkpoint_dir = Path(checkpoint_dir)
    name = f"step-{global_step:09d}"
    tmp = checkpoint_dir / f".tmp-{name}-{os.getpid()}"
    try:
        final = _write_checkpoint(checkpoint_dir, name, tmp, weights=weights, optimizer_state=optimizer_state,
                                  state=state)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # the partial files of this write; nothing else is touched
        kept = _latest_name(checkpoint_dir)
        previous = f"the previous checkpoint {checkpoint_dir / kept} is intact" if kept else "no checkpoint was kept"
        error = CheckpointWriteError(
            f"writing checkpoint {checkpoint_dir / name} failed ({exc.strerror or exc}); {previous}; "
            f"free disk space and continue with: pcmr train --resume {checkpoint_dir.parent}"
        )
        error.errno = exc.errno
        raise error from exc
    complete = [p for p in list_checkpoints(checkpoint_dir) if p.name <= name]
    for old in complete[: max(0, len(complete) - keep)]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in checkpoint_dir.glob(".tmp-*"):  # temp folders of killed writers
        shutil.rmtree(stale, ignore_errors=True)
    return final


def _latest_name(checkpoint_dir: Path) -> str | None:
    try:
        name = (checkpoint_dir / LATEST).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if name.startswith("step-") and "/" not in name else None


def _write_checkpoint(checkpoint_dir: Path, name: str, tmp: Path, *, weights: dict[str, Tensor],
                      optimizer_state: dict[str, Any], state: dict[str, Any]) -> Path:
    """The files of one checkpoint into ``tmp``, renamed to ``name``, then ``LATEST`` moved to it."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir / name
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()

    weight_bytes = safetensors_save({k: v.detach().cpu().contiguous().clone() for k, v in weights.items()})
    opt_tensors, opt_meta = optimizer_state_to_parts(optimizer_state)
    opt_bytes = safetensors_save(opt_tensors)
    document = dict(state)
    document["format_version"] = FORMAT_VERSION
    document["optimizer"] = opt_meta
    document["files"] = {WEIGHTS: _digest(weight_bytes), OPTIMIZER: _digest(opt_bytes)}
    document[STATE_DIGEST] = _state_digest(json.loads(json.dumps(document)))  # as it will read back
    _write_synced(tmp / WEIGHTS, weight_bytes)
    _write_synced(tmp / OPTIMIZER, opt_bytes)
    _write_synced(tmp / STATE, json.dumps(document).encode("utf-8"))
    fsync_dir(tmp)

    if final.exists():  # left by a run killed between the rename and the LATEST update
        shutil.rmtree(final)
    move_into_place(tmp, final)
    atomic_write_text(checkpoint_dir / LATEST, name + "\n")
    return final


def _previous_hint(path: Path) -> str:
    older = [p for p in list_checkpoints(path.parent) if p.name < path.name]
    if not older:
        return "no older checkpoint is kept; start a new run"
    return f"the previous checkpoint {older[-1]} is kept (--resume falls back to it)"


def _read_verified(path: Path, digest: dict[str, Any] | None) -> bytes:
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing; {_previous_hint(path.parent)}")
    data = path.read_bytes()
    if digest is not None and (
        len(data) != digest["bytes"] or hashlib.sha256(data).hexdigest() != digest["sha256"]
    ):
        raise CheckpointError(
            f"checkpoint file {path} is truncated or corrupted ({len(data)} bytes, expected {digest['bytes']} "
            f"with a matching sha256); {_previous_hint(path.parent)}"
        )
    return data


def load_checkpoint(path: Path) -> Checkpoint:
    """Read and verify one checkpoint folder; raise :class:`CheckpointError` naming any bad file."""
    path = Path(path)
    state_path = path / STATE
    raw = _read_verified(state_path, None)
    try:
        state = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(
            f"checkpoint file {state_path} is truncated or corrupted (not valid JSON: {exc}); "
            f"{_previous_hint(path)}"
        ) from exc
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION or "files" not in state:
        raise CheckpointError(
            f"checkpoint file {state_path} is not a pcmr checkpoint (format_version {FORMAT_VERSION} expected); "
            f"{_previous_hint(path)}"
        )
    if STATE_DIGEST in state and state[STATE_DIGEST] != _state_digest(state):  # absent: written by an older pcmr
        raise CheckpointError(
            f"checkpoint file {state_path} is truncated or corrupted (its content does not match its recorded "
            f"sha256); {_previous_hint(path)}"
        )
    tensors = {}
    for name in (WEIGHTS, OPTIMIZER):
        data = _read_verified(path / name, state["files"].get(name))
        try:
            tensors[name] = safetensors_load(data)
        except Exception as exc:  # safetensors raises its own error types
            raise CheckpointError(f"checkpoint file {path / name} cannot be read: {exc}") from exc
    optimizer = optimizer_state_from_parts(tensors[OPTIMIZER], state["optimizer"])
    return Checkpoint(path=path, weights=tensors[WEIGHTS], optimizer=optimizer, state=state)


def load_latest_checkpoint(checkpoint_dir: Path) -> Checkpoint | None:
    """The checkpoint named by ``LATEST``; ``None`` when no checkpoint was completed yet."""
    checkpoint_dir = Path(checkpoint_dir)
    pointer = checkpoint_dir / LATEST
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    if not name.startswith("step-") or "/" in name:
        raise CheckpointError(
            f"checkpoint pointer {pointer} is corrupted (holds {name[:40]!r}); expected step-N"
        )
    target = checkpoint_dir / name
    if not target.is_dir():
        raise CheckpointError(f"checkpoint pointer {pointer} names {target}, which does not exist")
    return load_checkpoint(target)


def load_newest_valid_checkpoint(checkpoint_dir: Path) -> Checkpoint | None:
    """The newest checkpoint that reads back and verifies, for resuming.

    Starts at the one named by ``LATEST`` (folders newer than it were never completed) and goes
    back through the older ones; each unusable one gives a warning naming it and why. Returns
    ``None`` when no checkpoint was completed yet; raises :class:`CheckpointError` listing every
    problem when checkpoints exist but none is valid.
    """
    checkpoint_dir = Path(checkpoint_dir)
    folders = list_checkpoints(checkpoint_dir)
    pointer = checkpoint_dir / LATEST
    if not pointer.is_file() and not folders:
        return None
    newest = _latest_name(checkpoint_dir)
    problems: list[str] = []
    if newest is None:
        problems.append(f"checkpoint pointer {pointer} is missing or corrupted")
    elif not (checkpoint_dir / newest).is_dir():
        problems.append(f"checkpoint pointer {pointer} names {checkpoint_dir / newest}, which does not exist")
    candidates = [p for p in reversed(folders) if newest is None or p.name <= newest]
    for folder in candidates:
        try:
            checkpoint = load_checkpoint(folder)
        except CheckpointError as exc:
            problems.append(str(exc).split("; ")[0])
            continue
        if problems:
            warnings.warn(f"{'; '.join(problems)}; resuming from the older checkpoint {folder}", UserWarning,
                          stacklevel=2)
        return checkpoint
    if not problems:
        return None
    raise CheckpointError(f"no valid checkpoint in {checkpoint_dir}: {'; '.join(problems)}; start a new run")
