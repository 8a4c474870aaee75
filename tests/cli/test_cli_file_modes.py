"""Files pcmr writes get the usual permissions (0666/0777 less the umask), not the 0600/0700 of a
temporary file: an exported model, a run's files, an index and a report are readable by others."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pcmr.atomic import atomic_write_text, write_folder
from pcmr.cli import main


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _private(root: Path) -> list[str]:
    """Paths under ``root`` (and root) not readable by group and others (files) or not listable (folders)."""
    bad = []
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        need = 0o055 if path.is_dir() else 0o044
        if mode & need != need:
            bad.append(f"{path.relative_to(root.parent)} {oct(mode)}")
    return bad


def test_atomic_writers_honour_the_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        file = atomic_write_text(tmp_path / "a.txt", "x")
        folder = write_folder(tmp_path / "folder", lambda tmp: (tmp / "f").write_text("y"))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(file.stat().st_mode) == 0o640
    assert stat.S_IMODE(folder.stat().st_mode) == 0o750


def test_run_model_index_and_report_are_readable_by_others(tmp_path, umask_022, tiny_training, as_set_args,
                                                             capsys):
    status = main(["train", "vsepp_max", "--out", str(tmp_path), "--name", "run", *as_set_args(tiny_training),
                   "--no-progress"])
    assert status == 0, capsys.readouterr().err
    run = tmp_path / "run"
    assert main(["search", str(tmp_path / "index"), "--build", str(run), "--backend", "faiss",
                 "--index-type", "flat"]) == 0
    assert main(["evaluate", str(run), "--out", str(tmp_path / "report"), "--similarity", "cosine",
                 "--rerank", "nns"]) == 0
    import pcmr

    pcmr.load(run).save_pretrained(tmp_path / "exported")
    capsys.readouterr()
    for name in ("run", "index", "report", "exported"):
        assert _private(tmp_path / name) == [], name
    for name in ("config.yaml", "run.json", "log.jsonl", "model/config.json"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o644, name
