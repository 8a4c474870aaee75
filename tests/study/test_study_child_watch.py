"""A study's child process ends when the study process dies, even where the kernel's parent-death
signal is unavailable: the watchdog thread of ``_die_with_parent`` alone is tested here (the child
clears its ``PR_SET_PDEATHSIG`` again)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import pcmr
from pcmr.study.runner import PARENT_ENV, _parent_alive

CHILD = textwrap.dedent("""
    import ctypes, sys, time
    from pathlib import Path
    from pcmr.study.runner import _die_with_parent
    _die_with_parent()
    ctypes.CDLL(None, use_errno=True).prctl(1, 0)  # no parent-death signal: the watchdog must do it
    Path(sys.argv[1]).write_text("started")
    time.sleep(3)
    Path(sys.argv[2]).write_text("outlived its parent")
""")

PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    env = {**os.environ, sys.argv[1]: str(os.getpid())}
    subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[3], sys.argv[4]], env=env)
    time.sleep(60)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux-only")
def test_child_ends_when_the_study_process_is_killed(tmp_path: Path) -> None:
    started, outlived = tmp_path / "started", tmp_path / "outlived"
    src = str(Path(pcmr.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, PARENT_ENV, CHILD, str(started), str(outlived)],
                              env=env)
    deadline = time.monotonic() + 120
    try:
        while not started.exists():
            assert parent.poll() is None and time.monotonic() < deadline, "the child never started"
            time.sleep(0.02)
    finally:
        parent.kill()
        parent.wait()
    time.sleep(4)  # the child would have written `outlived` after 3 s
    assert not outlived.exists()


def test_parent_alive_outside_a_study(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PARENT_ENV, raising=False)
    assert _parent_alive()
    monkeypatch.setenv(PARENT_ENV, str(os.getppid()))
    assert _parent_alive()
    monkeypatch.setenv(PARENT_ENV, str(os.getppid() + 100000))
    assert not _parent_alive()
