"""``Model.save_pretrained`` over an existing export is all or nothing: a full disk at each step of the
write (every file, the old folder set aside, the new one renamed in) and ``kill -9`` at each step leave
an export that loads (the old one, or the new one); a folder that is not an export is never replaced."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from _faults import full_disk_at
from pcmr.atomic import FolderWriteError
from pcmr.data import Vocabulary
from pcmr.hub import Model
from pcmr.models import create_model

TESTS = Path(__file__).resolve().parents[1]


def tiny_model(seed: int) -> Model:
    torch.manual_seed(seed)
    vocabulary = Vocabulary.build(["a red circle", "a blue square"])
    network = create_model("pcme", embed_dim=8, vocab_size=len(vocabulary),
                           text_encoder={"word_dim": 8, "hidden_dim": 8}, image_encoder={"cnn_channels": [4, 4, 4, 4]})
    return Model(network, vocabulary)


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def weights(folder: Path) -> torch.Tensor:
    return next(iter(Model.from_pretrained(folder).network.state_dict().values()))


def test_a_full_disk_at_each_step_keeps_the_previous_export(tmp_path, monkeypatch):
    export = tmp_path / "export"
    tiny_model(0).save_pretrained(export)
    before, old_weights = snapshot(export), weights(export)
    new = tiny_model(1)
    with monkeypatch.context() as patch:
        calls = full_disk_at(patch, 0, export)
        new.save_pretrained(tmp_path / "scratch")
    assert calls[0] == 0  # another folder: nothing counted
    with monkeypatch.context() as patch:
        calls = full_disk_at(patch, 0, export)
        new.save_pretrained(export)
    steps = calls[0]
    assert steps == len(before) + 2  # each file, then the old folder aside and the new one in
    tiny_model(0).save_pretrained(export)
    before = snapshot(export)
    for k in range(1, steps + 1):
        with monkeypatch.context() as patch:
            full_disk_at(patch, k, export)
            with pytest.raises(FolderWriteError) as caught:
                new.save_pretrained(export)
        assert "failed (No space left on device); the previous " f"{export} is intact; free disk space" in str(
            caught.value), k
        assert "[Errno" not in str(caught.value)
        assert snapshot(export) == before, k
        assert torch.equal(weights(export), old_weights)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "scratch"], k


KILLED = ("import sys\nsys.path[:0] = [sys.argv[1]]\nfrom _kill_runner import install\n"
          "from test_save_pretrained_faults import tiny_model\ninstall(sys.argv[2])\n"
          "tiny_model(1).save_pretrained(sys.argv[3])\n")


@pytest.mark.parametrize("step", ["file:1", "file:4", "aside", "in", "cleanup"])
def test_a_save_killed_at_each_step_leaves_an_export_that_loads(tmp_path, step):
    export = tmp_path / "export"
    tiny_model(0).save_pretrained(export)
    tiny_model(1).save_pretrained(tmp_path / "new")
    old_weights, new_weights = weights(export), weights(tmp_path / "new")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"), str(TESTS / "models")]),
           "OMP_NUM_THREADS": "1"}
    killed = subprocess.run([sys.executable, "-c", KILLED, str(TESTS), step, str(export)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    loaded = weights(export)  # a reader puts back an export set aside
    assert torch.equal(loaded, new_weights if step == "cleanup" else old_weights)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "new"]


def test_a_folder_that_is_not_an_export_is_never_replaced(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.txt").write_text("years of work")
    with pytest.raises(FileExistsError, match=r"mine holds files that are not part of a saved model \(thesis.txt\)"):
        tiny_model(0).save_pretrained(tmp_path / "mine")
    assert (tmp_path / "mine" / "thesis.txt").read_text() == "years of work"
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        tiny_model(0).save_pretrained(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    tiny_model(0).save_pretrained(tmp_path / "empty")
    assert (tmp_path / "empty" / "model.safetensors").is_file()
    card = (tmp_path / "empty" / "README.md").read_text()
    assert ".tmp" not in card  # the card names the folder, never its temporary copy
