"""Nothing lost through ``pcmr search``: a faiss file cut short by a real file-size limit is an error (the old
index stays), ``--overwrite`` replaces only an index, a symlinked index path is locked and written through
its target, and a repeated ``--add`` of one file is refused. Tiny embeddings files, no trained model."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from _kill_runner import pcmr_process
from pcmr.cli import main
from pcmr.search import GalleryIndex

SRC = str(Path(__file__).resolve().parents[2] / "src")


def embeddings(path: Path, images: int, captions: int, dim: int = 16, seed: int = 0) -> Path:
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, n in (("image", images), ("caption", captions)):
        if n:
            tensors[f"{name}_mean"] = torch.randn(n, dim, generator=gen)
            tensors[f"{name}_logvar"] = torch.randn(n, dim, generator=gen) - 2
    meta = {"caption_texts": json.dumps([f"caption {seed} {i}" for i in range(captions)])} if captions else None
    save_file(tensors, str(path), metadata=meta)
    return path


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def pcmr_limited(limit: int, *args: str) -> subprocess.CompletedProcess:
    """``pcmr ARGS`` in a child process whose files may not grow beyond ``limit`` bytes (``ulimit -f``)."""
    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "pcmr", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}, preexec_fn=small_files)


HNSW = ["--backend", "faiss", "--index-type", "hnsw", "--ann-score", "wasserstein"]


@pytest.mark.parametrize("how", ["overwrite", "add"])
def test_a_file_size_limit_inside_the_faiss_write_keeps_the_old_index(tmp_path, how):
    """The limit lands in the last bytes of the faiss file, the largest of the index: faiss's own writer would
    only print ``close error`` and report success; the write is an error and the old index stays."""
    caps = embeddings(tmp_path / "caps.safetensors", 0, 600)
    index = tmp_path / "fe"
    assert main(["search", str(index), "--from-embeddings", str(caps), *HNSW]) == 0
    faiss_file = index / "ann-caption.faiss"
    largest = max(p.stat().st_size for p in index.rglob("*") if p.is_file())
    assert faiss_file.stat().st_size == largest
    before = snapshot(index)
    if how == "overwrite":
        args = ["search", str(index), "--from-embeddings", str(caps), *HNSW, "--overwrite"]
        limit = largest - 300  # the new faiss file is as large as the old one
    else:
        more = embeddings(tmp_path / "more.safetensors", 0, 20, seed=1)
        args = ["search", str(index), "--add", str(more)]
        limit = largest + 300  # the grown faiss file passes it by a little
    done = pcmr_limited(limit, *args)
    assert done.returncode == 1, done.stderr
    assert f"writing {faiss_file} failed (File too large); the previous {index} is intact" in done.stderr
    assert snapshot(index) == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "caps.safetensors", "fe", *(["more.safetensors"] if how == "add" else [])]
    loaded = GalleryIndex.load(index)
    assert loaded.ann["caption"].ntotal == 600


def test_a_write_cut_short_without_an_error_is_caught_before_the_rename(tmp_path):
    from pcmr.atomic import atomic_write

    def lying(handle):  # a library that ignores a failed write: fewer bytes on disk than it wrote
        handle.write(b"x" * 100)
        handle.flush()
        os.ftruncate(handle.fileno(), 60)

    (tmp_path / "a.bin").write_bytes(b"old")
    with pytest.raises(OSError, match="only 60 of the 100 bytes written reached the disk"):
        atomic_write(tmp_path / "a.bin", lying)
    assert (tmp_path / "a.bin").read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["a.bin"]


def test_overwrite_replaces_only_an_index(tmp_path, capsys):
    caps = embeddings(tmp_path / "caps.safetensors", 4, 6)
    victim = tmp_path / "victim"
    (victim / "docs").mkdir(parents=True)
    (victim / "docs" / "thesis.txt").write_text("years of work")
    assert main(["search", str(victim), "--from-embeddings", str(caps), "--overwrite"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"{victim} is not a pcmr gallery index (it holds docs; no index.json of a gallery index); --overwrite "
        "replaces only a whole gallery index: choose a new or empty INDEX folder, or move those files out")
    assert (victim / "docs" / "thesis.txt").read_text() == "years of work"
    run = tmp_path / "run"  # a run folder given as both the model and the index
    (run / "model").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "model" / "config.json").write_text("{}")
    assert main(["search", str(run), "--build", str(run), "--overwrite"]) == 2
    assert f"{run} is not a pcmr gallery index (it holds config.yaml, model;" in capsys.readouterr().err
    assert sorted(p.name for p in run.rglob("*")) == ["config.json", "config.yaml", "model"]
    (tmp_path / "file").write_text("not a folder")
    assert main(["search", str(tmp_path / "file"), "--from-embeddings", str(caps), "--overwrite"]) == 2
    assert f"{tmp_path / 'file'} is a file, not a pcmr gallery index" in capsys.readouterr().err
    index = tmp_path / "index"  # an index someone put a file into: the file is named, nothing replaced
    assert main(["search", str(index), "--from-embeddings", str(caps)]) == 0
    (index / "notes.txt").write_text("mine")
    before = snapshot(index)
    assert main(["search", str(index), "--from-embeddings", str(caps), "--overwrite"]) == 2
    assert (f"{index} holds files that are not part of its gallery index (notes.txt); --overwrite replaces only"
            in capsys.readouterr().err)
    assert snapshot(index) == before
    (index / "notes.txt").unlink()
    assert main(["search", str(index), "--from-embeddings", str(caps), "--overwrite"]) == 0


def test_a_symlinked_index_is_locked_and_written_through_its_target(tmp_path, capsys):
    caps, more = embeddings(tmp_path / "caps.safetensors", 4, 6), embeddings(tmp_path / "more.safetensors", 2, 3, seed=1)
    index, link = tmp_path / "idx", tmp_path / "link"
    assert main(["search", str(index), "--from-embeddings", str(caps)]) == 0
    link.symlink_to("idx")
    assert main(["search", str(link), "--add", str(more)]) == 0
    assert link.is_symlink() and os.readlink(link) == "idx"  # the link stays; its target holds the items
    assert GalleryIndex.load(index).images.num == 6
    other = embeddings(tmp_path / "other.safetensors", 1, 1, seed=2)
    first = pcmr_process("hold:1", "search", str(index), "--add", str(other), wait=False)
    try:
        assert first.stdout.readline().strip() == "holding", first.communicate()
        assert main(["search", str(link), "--add", str(more)]) == 2
        err = capsys.readouterr().err
        assert f"{link} is in use: process {first.pid} is writing this index (lock file {tmp_path / '.idx.lock'})" in err
        assert main(["search", str(link), "--from-embeddings", str(caps), "--overwrite"]) == 2
    finally:
        first.kill()
        first.communicate()
    assert main(["search", str(link), "--from-embeddings", str(caps), "--overwrite"]) == 0
    assert link.is_symlink() and GalleryIndex.load(link).images.num == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caps.safetensors", "idx", "link", "more.safetensors",
                                                          "other.safetensors"]


def test_a_repeated_add_is_refused_naming_the_file_and_sigterm_after_the_swap_says_so(tmp_path, capsys):
    caps, more = embeddings(tmp_path / "caps.safetensors", 4, 6), embeddings(tmp_path / "more.safetensors", 2, 3, seed=1)
    index = tmp_path / "idx"
    assert main(["search", str(index), "--from-embeddings", str(caps)]) == 0
    assert main(["search", str(index), "--add", str(caps)]) == 2  # the file the index was built from
    assert (f"{caps} (SHA-256 " in (err := capsys.readouterr().err)
            and f"is already in {index}: built from {caps}; adding it again would give its items twice" in err)
    stopped = pcmr_process("term-cleanup", "search", str(index), "--add", str(more))
    assert stopped.returncode == 128 + 15, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"pcmr search: stopped by SIGTERM after its write was complete: {index} holds the new content (do not run "
        "the same command again to finish it)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caps.safetensors", "idx", "more.safetensors"]
    copy = tmp_path / "copy.safetensors"  # the same bytes under another name: still refused
    copy.write_bytes(more.read_bytes())
    assert main(["search", str(index), "--add", str(copy)]) == 2
    assert f"is already in {index}: added {more}; adding it again" in capsys.readouterr().err
    loaded = GalleryIndex.load(index)
    assert (loaded.images.num, loaded.captions.num) == (6, 9)
    assert [entry["file"] for entry in loaded.meta["added"]] == [str(more)]
