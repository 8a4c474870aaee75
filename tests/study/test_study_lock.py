"""One study process per ``--out``: a second ``pcmr study`` into a folder in use is refused at once,
naming the process, and the folder is free again when that process dies (even by ``kill -9``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pcmr
from pcmr.cli import main
from pcmr.locking import PathLock, PathLockedError, lock_file_for
from pcmr.study import find_study, load_study, run_study

HOLD = ("import sys, time\nfrom pcmr.locking import PathLock\n"
        "PathLock(sys.argv[1], 'running a study into it').acquire()\nprint('held', flush=True)\ntime.sleep(120)\n")


def test_a_second_study_into_the_same_out_is_refused(tmp_path, capsys):
    out = tmp_path / "study"
    src = str(Path(pcmr.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "held"
        message = (f"{out} is in use: process {first.pid} is running a study into it (lock file "
                   f"{lock_file_for(out)}); wait for it to finish, or choose another path")
        with pytest.raises(PathLockedError, match="in use"):
            run_study(load_study(find_study("tiny")), out, threads=1, echo=lambda line: None)
        assert main(["study", str(find_study("tiny")), "--out", str(out), "--only", "0"]) == 2
        assert capsys.readouterr().err.strip() == f"pcmr study: error: {message}"
        assert not out.exists()  # refused before any run started
    finally:
        first.kill()
        first.wait()
    with PathLock(out, "running a study into it"):  # its process is gone: the folder is free again
        assert lock_file_for(out).read_text().split()[0] == str(os.getpid())
