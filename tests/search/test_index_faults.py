"""A gallery index is never lost: ``pcmr search INDEX --add/--build/--from-embeddings`` under a full disk
at each step, ``kill -9`` or SIGTERM at chosen steps (tests/_kill_runner.py), and two writers at once.
After each fault the old or the new index loads with nothing lost, and the next run cleans the leftovers."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from _faults import full_disk_at
from _kill_runner import pcmr_process
from pcmr.cli import main
from pcmr.search import GalleryIndex


@pytest.fixture(scope="module")
def built(search_index_factory, tmp_path_factory):
    """An index with a model and faiss indexes (13 images, 65 captions) and a file of 3 images and 5
    captions to add."""
    root = tmp_path_factory.mktemp("faults")
    index_dir = search_index_factory(root)
    index = GalleryIndex.load(index_dir)
    gen = torch.Generator().manual_seed(0)

    def more(gallery, n):
        logvar = None if gallery.logvar is None else torch.randn(n, gallery.logvar.shape[1], generator=gen)
        return torch.randn(n, gallery.dim, generator=gen), logvar

    tensors = {}
    for name, gallery, n in (("image", index.images, 3), ("caption", index.captions, 5)):
        mean, logvar = more(gallery, n)
        tensors[f"{name}_mean"] = mean
        if logvar is not None:
            tensors[f"{name}_logvar"] = logvar
    save_file(tensors, str(root / "more.safetensors"),
              metadata={"caption_texts": json.dumps([f"added {i}" for i in range(5)])})
    return index_dir, root / "more.safetensors"


def fresh(built, tmp_path) -> tuple[Path, Path]:
    index_dir, more = built
    shutil.copytree(index_dir, tmp_path / "index")
    return tmp_path / "index", more


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def sizes(folder: Path) -> tuple[int, int]:
    index = GalleryIndex.load(folder)
    assert index.ann["image"].ntotal == index.images.num and index.ann["caption"].ntotal == index.captions.num
    return index.images.num, index.captions.num



def test_add_under_a_full_disk_at_each_step_keeps_the_old_index(built, tmp_path, monkeypatch, capsys):
    index_dir, more = fresh(built, tmp_path)
    before = snapshot(index_dir)
    scratch = tmp_path / "scratch"
    shutil.copytree(index_dir, scratch)
    with monkeypatch.context() as patch:
        calls = full_disk_at(patch, 0)
        assert main(["search", str(scratch), "--add", str(more)]) == 0
    steps = calls[0]
    assert steps == len(snapshot(scratch)) + 2  # every file of the new folder (model files included), then the two renames
    for k in range(1, steps + 1):
        with monkeypatch.context() as patch:
            full_disk_at(patch, k)
            assert main(["search", str(index_dir), "--add", str(more)]) == 1
        err = capsys.readouterr().err
        assert "failed (No space left on device); the previous " f"{index_dir} is intact; free disk space" in err, k
        assert ".tmp" not in err.split(" failed")[0], err  # the file named is the index's, not a temporary copy
        assert snapshot(index_dir) == before, k
        assert sorted(p.name for p in tmp_path.iterdir()) == ["index", "scratch"], k
    assert sizes(index_dir) == (13, 65)
    assert main(["search", str(index_dir), "--add", str(more)]) == 0
    assert sizes(index_dir) == (16, 70)


@pytest.mark.parametrize("step", ["file:2", "in", "cleanup"])
def test_add_killed_at_a_step_leaves_the_old_or_the_new_index_and_the_next_add_cleans_up(built, tmp_path, step):
    index_dir, more = fresh(built, tmp_path)
    before = snapshot(index_dir)
    killed = pcmr_process(step, "search", str(index_dir), "--add", str(more))
    assert killed.returncode == -9, killed.stderr
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "index")
    assert left and all(name.startswith(".index.") for name in left)  # the killed write's copies
    if step == "cleanup":  # killed after the new folder was in place
        assert sizes(index_dir) == (16, 70)
    else:  # the old index loads, byte for byte (put back from its copy when killed between the renames)
        assert sizes(index_dir) == (13, 65) and snapshot(index_dir) == before
    # the next --add of the file cleans up; once the file is in (killed after the new folder was in place)
    # it is refused, naming the file, instead of adding its items twice
    assert main(["search", str(index_dir), "--add", str(more)]) == (2 if step == "cleanup" else 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    assert sizes(index_dir) == (16, 70)


def test_add_beyond_a_real_file_size_limit_keeps_the_old_index(built, tmp_path):
    """No injection: the child process may write files of at most half the size of the index's largest
    file (``ulimit -f``), so writing the new index fails with EFBIG as on a full disk."""
    import resource
    import subprocess
    import sys

    index_dir, more = fresh(built, tmp_path)
    before = snapshot(index_dir)
    src = str(Path(__file__).resolve().parents[2] / "src")
    limit = max(p.stat().st_size for p in index_dir.rglob("*") if p.is_file()) // 2

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run([sys.executable, "-m", "pcmr", "search", str(index_dir), "--add", str(more)],
                          env={**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300, preexec_fn=small_files)
    assert done.returncode == 1
    assert f"failed (File too large); the previous {index_dir} is intact; free disk space" in done.stderr
    assert snapshot(index_dir) == before and sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_two_adds_at_once_the_second_is_refused_and_nothing_is_lost(built, tmp_path, capsys):
    index_dir, more = fresh(built, tmp_path)
    first = pcmr_process("hold:3", "search", str(index_dir), "--add", str(more), wait=False)
    try:
        assert first.stdout.readline().strip() == "holding", first.communicate()
        assert main(["search", str(index_dir), "--add", str(more)]) == 2
        err = capsys.readouterr().err
        assert f"{index_dir} is in use: process {first.pid} is writing this index (lock file " in err
        assert sizes(index_dir) == (13, 65)  # a reader is not blocked
    finally:
        first.kill()
        first.communicate()
    assert main(["search", str(index_dir), "--add", str(more)]) == 0
    assert sizes(index_dir) == (16, 70) and sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_overwrite_under_a_full_disk_or_sigterm_keeps_the_old_index(built, tmp_path, monkeypatch, capsys):
    index_dir, more = fresh(built, tmp_path)
    before = snapshot(index_dir)
    shutil.copytree(index_dir, tmp_path / "scratch")
    with monkeypatch.context() as patch:
        calls = full_disk_at(patch, 0)
        assert main(["search", str(tmp_path / "scratch"), "--from-embeddings", str(more), "--overwrite"]) == 0
    shutil.rmtree(tmp_path / "scratch")
    assert calls[0] == 4  # embeddings.safetensors, index.json, the old index aside, the new one in
    for k in range(1, calls[0] + 1):
        with monkeypatch.context() as patch:
            full_disk_at(patch, k)
            code = main(["search", str(index_dir), "--from-embeddings", str(more), "--overwrite"])
        err = capsys.readouterr().err
        assert code == 1 and f"the previous {index_dir} is intact" in err, (k, err)
        assert snapshot(index_dir) == before and sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    stopped = pcmr_process("term:2", "search", str(index_dir), "--from-embeddings", str(more), "--overwrite")
    assert stopped.returncode == 128 + 15, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"pcmr search: stopped by SIGTERM; its temporary files were removed and an unfinished write left "
        f"{index_dir} as it was")
    assert snapshot(index_dir) == before and sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    # SIGTERM while the old copy is removed: the new index is in place, and the line says so
    stopped = pcmr_process("term-cleanup", "search", str(index_dir), "--from-embeddings", str(more), "--overwrite")
    assert stopped.returncode == 128 + 15, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"pcmr search: stopped by SIGTERM after its write was complete: {index_dir} holds the new content (do "
        "not run the same command again to finish it)")
    assert sizes_without_ann(index_dir) == (3, 5) and sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_two_builds_into_one_new_path_the_second_is_refused_and_a_killed_build_is_cleaned(built, tmp_path, capsys):
    _, more = built
    target = tmp_path / "new"
    first = pcmr_process("hold:1", "search", str(target), "--from-embeddings", str(more), wait=False)
    try:
        assert first.stdout.readline().strip() == "holding", first.communicate()
        assert main(["search", str(target), "--from-embeddings", str(more)]) == 2
        assert f"{target} is in use: process {first.pid} is writing this index" in capsys.readouterr().err
    finally:
        first.kill()  # killed while writing: its temporary folder stays behind
        first.communicate()
    assert not target.exists() and any(p.name.startswith(".new.") for p in tmp_path.iterdir())
    assert main(["search", str(target), "--from-embeddings", str(more)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]
    assert sizes_without_ann(target) == (3, 5)


def sizes_without_ann(folder: Path) -> tuple[int, int]:
    index = GalleryIndex.load(folder)
    return index.images.num, index.captions.num
