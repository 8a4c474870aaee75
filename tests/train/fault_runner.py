"""Run ``pcmr`` in this process with one fault injected; used by tests/train/test_train_faults.py as a subprocess.

Usage: ``python tests/train/fault_runner.py FAULT -- pcmr arguments...`` where FAULT is

- ``none``: no fault;
- ``enospc:K``: the K-th checkpoint write runs out of disk space half way through its weights file;
- ``nan:S1,S2,...``: the training loss is NaN at the given 1-based training steps;
- ``killconfig``: the process is killed (SIGKILL) as the run's ``config.yaml`` is renamed into place, i.e.
  the state a start killed before its config was written leaves;
- ``hold:S``: training step S waits (up to two minutes) so that the test can act while the run holds its
  lock, e.g. kill it.
"""

from __future__ import annotations

import errno
import sys
import time


def enospc(which: int) -> None:
    from pcmr.train import checkpoint

    original = checkpoint._write_synced
    count = {"weights": 0}

    def write(path, data):
        if path.name == checkpoint.WEIGHTS:
            count["weights"] += 1
            if count["weights"] == which:
                with open(path, "wb") as handle:
                    handle.write(data[: len(data) // 2])
                raise OSError(errno.ENOSPC, "No space left on device")
        original(path, data)

    checkpoint._write_synced = write


def _wrap_loss(on_step) -> None:
    """Call ``on_step(step, terms)`` after every training-mode call of the run's loss (steps from 1)."""
    from pcmr import losses

    original = losses.create_loss
    calls = {"step": 0}

    def create_loss(*args, **kwargs):
        loss = original(*args, **kwargs)
        forward = loss.forward

        def patched(*a, **k):
            terms = forward(*a, **k)
            if loss.training:
                calls["step"] += 1
                terms = on_step(calls["step"], terms)
            return terms

        loss.forward = patched
        return loss

    losses.create_loss = create_loss  # pcmr.train.run imports it from pcmr.losses when building a run


def nan_at(steps: set[int]) -> None:
    def on_step(step, terms):
        if step in steps:
            terms = dict(terms)
            terms["loss"] = terms["loss"] * float("nan")
        return terms

    _wrap_loss(on_step)


def hold_at(step_to_hold: int) -> None:
    def on_step(step, terms):
        if step == step_to_hold:
            time.sleep(120)
        return terms

    _wrap_loss(on_step)


def kill_at_config() -> None:
    import os
    import signal

    replace = os.replace

    def patched(src, dst, *args, **kwargs):
        if str(dst).endswith("config.yaml"):
            os.kill(os.getpid(), signal.SIGKILL)
        return replace(src, dst, *args, **kwargs)

    os.replace = patched


def main(argv: list[str]) -> int:
    fault, separator, *args = argv
    assert separator == "--", "usage: fault_runner.py FAULT -- pcmr arguments..."
    kind, _, value = fault.partition(":")
    if kind == "enospc":
        enospc(int(value))
    elif kind == "nan":
        nan_at({int(step) for step in value.split(",")})
    elif kind == "hold":
        hold_at(int(value))
    elif kind == "killconfig":
        kill_at_config()
    elif kind != "none":
        raise SystemExit(f"unknown fault {fault!r}")
    from pcmr.cli import main as pcmr_main

    return pcmr_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
