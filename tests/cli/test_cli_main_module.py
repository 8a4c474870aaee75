"""``python -m pcmr`` runs the command line (src/pcmr/__main__.py)."""

from __future__ import annotations

import subprocess
import sys

from pcmr.models import list_models


def run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pcmr", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_python_m_pcmr_runs_the_cli():
    done = run_module("list", "models")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == list_models()


def test_python_m_pcmr_reports_bad_input_with_the_cli_name():
    done = run_module("list", "nosuch")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: pcmr list")
    assert "invalid choice: 'nosuch'" in done.stderr
