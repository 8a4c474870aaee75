"""A full disk while the selected model is written: one line naming the file, saying the previous model
folder is intact and giving the resume command; ``run.json`` says ``failed`` with the reason (never
``running``); ``--resume`` finishes the run."""

from __future__ import annotations

import errno
import json

import pcmr.hub as hub_module
from pcmr.cli import main


def test_full_disk_while_writing_the_selected_model(tmp_path, monkeypatch, capsys, tiny_training, as_set_args):
    original = hub_module.save_model

    def full_disk(model, folder, **kwargs):
        original(model, folder, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "model.safetensors"))

    run_dir = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(hub_module, "save_model", full_disk)
        assert main(["train", "vsepp_max", "--out", str(tmp_path), "--name", "run", *as_set_args(tiny_training),
                     "--no-progress"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"pcmr train: error: writing {run_dir / 'model' / 'model.safetensors'} failed (No space "
                           f"left on device); nothing was written to {run_dir / 'model'}; free disk space and "
                           f"continue with: pcmr train --resume {run_dir}"), last
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["status"] == "failed" and "No space left on device" in summary["error"]
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".model.")]  # no temporary copy left
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"
    assert (run_dir / "model" / "model.safetensors").is_file()
