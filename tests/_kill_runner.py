"""Run ``pcmr`` in this process and stop it at a chosen step of a folder write; used by the fault tests
of ``pcmr search`` and ``pcmr evaluate`` as a subprocess (nothing in pcmr itself has a test hook).

Usage: ``python tests/_kill_runner.py STEP -- pcmr arguments...`` (or :func:`pcmr_process` from a
test) where STEP is

- ``file:N``: SIGKILL just before the N-th file is moved into place (``os.replace`` of a file: the
  N-th file of the new folder, written inside its temporary folder);
- ``aside``: SIGKILL just before the old folder is renamed aside (``.NAME.X.old``);
- ``in``: SIGKILL just before the new folder is renamed in (the old one is already aside);
- ``cleanup``: SIGKILL just before the set-aside old folder is removed (the new one is in place);
- ``term:N``: SIGTERM to itself just before the N-th file is moved into place;
- ``term-cleanup``: SIGTERM to itself just before the set-aside old folder is removed;
- ``hold:N``: wait (up to two minutes) just before the N-th file is moved into place, after printing
  ``holding`` on stdout, so that a test can act while the command holds its lock.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

OLD = re.compile(r"\.[a-z0-9_]{8}\.old$")


def install(step: str) -> None:
    kind, _, number = step.partition(":")
    count = {"files": 0}
    replace, rmtree = os.replace, shutil.rmtree

    def patched_replace(src, dst, *args, **kwargs):
        if os.path.isdir(src):
            if (kind == "aside" and OLD.search(str(dst))) or (kind == "in" and str(src).endswith(".tmp")):
                os.kill(os.getpid(), signal.SIGKILL)
        else:
            count["files"] += 1
            if number and count["files"] == int(number):
                if kind == "file":
                    os.kill(os.getpid(), signal.SIGKILL)
                elif kind == "term":
                    os.kill(os.getpid(), signal.SIGTERM)
                elif kind == "hold":
                    print("holding", flush=True)
                    time.sleep(120)
        return replace(src, dst, *args, **kwargs)

    def patched_rmtree(path, *args, **kwargs):
        if kind in ("cleanup", "term-cleanup") and OLD.search(str(path)) and not count.get("signalled"):
            count["signalled"] = 1  # once: a second removal of the copy proceeds
            os.kill(os.getpid(), signal.SIGKILL if kind == "cleanup" else signal.SIGTERM)
        return rmtree(path, *args, **kwargs)

    os.replace = patched_replace
    shutil.rmtree = patched_rmtree


def pcmr_process(step: str, *args: str, wait: bool = True) -> subprocess.CompletedProcess | subprocess.Popen:
    """``pcmr ARGS`` in a child process stopped at ``step``; ``wait=False`` returns the running process."""
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(Path(__file__).resolve()), step, "--", *args]
    if not wait:
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        raise SystemExit(__doc__)
    install(argv[0])
    from pcmr.cli import main as pcmr_main

    return pcmr_main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
