"""Progress bars only on a terminal: a training run writing to a file logs plain per-epoch lines."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcmr.progress import progress_bar, progress_enabled, write_line

SRC = Path(__file__).resolve().parents[1] / "src"
TINY = [
    "data.options={num_train: 12, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
    "image_size: 32, cache_dir: CACHE}",
    "data.batch_size=4",
    "train.epochs=2",
    "train.max_steps_per_epoch=3",
    "train.validate_every=0",
    "model.embed_dim=8",
    "model.text_encoder={word_dim: 8, hidden_dim: 8}",
    "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
]


class _Stream(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize("terminal", [False, True])
def test_automatic_setting_follows_stderr(monkeypatch, terminal):
    monkeypatch.setattr(sys, "stderr", _Stream(terminal))
    assert progress_enabled(None) is terminal
    assert progress_enabled(True) is True and progress_enabled(False) is False
    bar = progress_bar(3, "x")
    assert (bar is not None) is terminal
    if bar is not None:
        bar.close()
    forced = progress_bar(3, "x", enabled=True)
    assert forced is not None
    forced.update(1)
    forced.close()
    assert "1/3" in sys.stderr.getvalue()


def test_write_line_prints_plain_lines(capsys):
    write_line("epoch 1/2: loss 0.5")
    assert capsys.readouterr().out == "epoch 1/2: loss 0.5\n"


def _train(tmp_path: Path, name: str, *extra: str) -> str:
    cache = tmp_path / "cache"
    argv = [sys.executable, "-m", "pcmr", "train", "vsepp_max", "--out", str(tmp_path), "--name", name, *extra]
    for item in TINY:
        argv += ["--set", item.replace("CACHE", str(cache))]
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    log = tmp_path / f"{name}.log"
    with open(log, "w") as handle:  # stdout and stderr both to a file: not a terminal
        done = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, timeout=300)
    text = log.read_text()
    assert done.returncode == 0, text
    return text


def test_train_into_a_file_holds_epoch_lines_and_no_bar_frames(tmp_path):
    text = _train(tmp_path, "plain")
    assert "\r" not in text and "it/s" not in text and "s/it" not in text and "%|" not in text
    lines = [line for line in text.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in lines] == ["epoch 1/2", "epoch 2/2"]
    forced = _train(tmp_path, "bars", "--progress")
    assert "%|" in forced  # --progress draws bars even into a file
