"""``pcmr.atomic.write_folder`` under faults: a full disk at each step of the swap, the copies a killed
swap leaves, and a second writer of the same path (:mod:`pcmr.locking`)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _faults import full_disk_at
from pcmr.atomic import (
    FolderWriteError,
    atomic_write_text,
    folder_leftovers,
    repair_folder,
    write_folder,
    writing_folder,
)
from pcmr.locking import PathLock, PathLockedError, lock_file_for

REPO = Path(__file__).resolve().parents[1]


def fill(text):
    def write(folder):
        atomic_write_text(folder / "a.txt", text)
        atomic_write_text(folder / "b.txt", text)
    return write


def contents(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}



def test_a_full_disk_at_each_step_of_the_swap_keeps_the_old_folder(tmp_path, monkeypatch):
    target = tmp_path / "model"
    write_folder(target, fill("one"))
    with monkeypatch.context() as patch:
        calls = full_disk_at(patch, 0)
        write_folder(target, fill("two"))
    steps = calls[0]
    assert steps == 4  # a.txt, b.txt, old folder aside, new folder in
    for k in range(1, steps + 1):
        with monkeypatch.context() as patch:
            full_disk_at(patch, k)
            with pytest.raises(FolderWriteError) as caught:
                write_folder(target, fill("three"))
        assert contents(target) == {"a.txt": "two", "b.txt": "two"}, k
        assert sorted(p.name for p in tmp_path.iterdir()) == ["model"], k  # no copy, no lock file left
        message = str(caught.value)
        assert f"the previous {target} is intact" in message and "free disk space" in message
        assert caught.value.errno == errno.ENOSPC
    write_folder(target, fill("three"))
    assert contents(target) == {"a.txt": "three", "b.txt": "three"}


def test_the_error_names_the_file_being_written_not_its_temporary_copy(tmp_path):
    def write(folder):
        atomic_write_text(folder / "a.txt", "x")

        def full(handle):
            raise OSError(errno.ENOSPC, "No space left on device")
        from pcmr.atomic import atomic_write
        atomic_write(folder / "sub" / "weights.bin", full)

    with pytest.raises(FolderWriteError) as caught:
        write_folder(tmp_path / "model", write)
    assert str(caught.value) == (f"writing {tmp_path / 'model' / 'sub' / 'weights.bin'} failed (No space left on "
                                 f"device); nothing was written to {tmp_path / 'model'}; free disk space (or raise "
                                 "the quota / file-size limit) and run it again")
    assert list(tmp_path.iterdir()) == []


def test_a_swap_killed_between_its_renames_is_put_back_by_the_next_reader_or_writer(tmp_path):
    target = tmp_path / "index"
    write_folder(target, fill("old"))
    # what a writer killed after "old aside" and before "new in" leaves: no target, both copies
    os.rename(target, tmp_path / ".index.abcd1234.old")
    (tmp_path / ".index.abcd1234.tmp").mkdir()
    (tmp_path / ".index.abcd1234.tmp" / "a.txt").write_text("new, maybe partial")
    (tmp_path / ".index.json.wxyz5678.tmp").write_text("a file of another writer")  # not a copy of index/
    assert len(folder_leftovers(target)) == 2
    repair_folder(target)  # a reader
    assert contents(target) == {"a.txt": "old", "b.txt": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".index.json.wxyz5678.tmp", "index"]
    # killed after "new in": the old copy aside is removed by the next writer; so is a killed write's copy
    (tmp_path / ".index.efgh5678.old").mkdir()
    (tmp_path / ".index.ijkl9012.tmp").mkdir()
    write_folder(target, fill("new"))
    assert contents(target) == {"a.txt": "new", "b.txt": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".index.json.wxyz5678.tmp", "index"]
    with writing_folder(target):  # a command that checks, then writes: the same cleaning first
        pass


HOLD = ("import sys, time\nfrom pcmr.locking import PathLock\nPathLock(sys.argv[1], 'testing').acquire()\n"
        "print('held', flush=True)\ntime.sleep(120)\n")


def hold_lock(path: Path) -> subprocess.Popen:
    """A process holding ``path``'s lock (until killed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], env=env, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_writer_is_refused_and_a_killed_holder_frees_the_path(tmp_path):
    target = tmp_path / "report"
    write_folder(target, fill("one"))
    holder = hold_lock(target)
    try:
        with pytest.raises(PathLockedError) as caught:
            write_folder(target, fill("two"))
        assert str(caught.value) == (f"{target} is in use: process {holder.pid} is testing (lock file "
                                     f"{lock_file_for(target)}); wait for it to finish, or choose another path")
        assert isinstance(caught.value, FileExistsError)
        assert contents(target) == {"a.txt": "one", "b.txt": "one"}
        repair_folder(target)  # a reader never waits nor fails on a held lock
    finally:
        holder.kill()  # kill -9: the operating system drops the lock with the process
        holder.wait()
    write_folder(target, fill("two"))
    assert contents(target) == {"a.txt": "two", "b.txt": "two"}
    assert not lock_file_for(target).exists()


def test_the_lock_is_reentrant_within_a_process(tmp_path):
    with PathLock(tmp_path / "x"), PathLock(tmp_path / "x"):
        write_folder(tmp_path / "x", fill("one"))  # a command holding the lock writes the folder
        assert lock_file_for(tmp_path / "x").exists()
    assert not lock_file_for(tmp_path / "x").exists()


def test_a_library_writer_that_reports_a_full_disk_in_its_message_gives_an_os_error(tmp_path):
    from pcmr.atomic import atomic_write_via_path

    def faiss_like(path):  # faiss.write_index raises RuntimeError with the C library's text
        path.write_bytes(b"half")
        raise RuntimeError(f"Error: 'ret == (size * 4)' failed: write error in {path}: 4 != 512 (No space left on "
                           "device)")

    with pytest.raises(FolderWriteError) as caught:
        write_folder(tmp_path / "index", lambda folder: atomic_write_via_path(folder / "ann.faiss", faiss_like))
    assert str(caught.value).startswith(f"writing {tmp_path / 'index' / 'ann.faiss'} failed (No space left on "
                                        f"device); nothing was written to {tmp_path / 'index'}; free disk space")
    assert list(tmp_path.iterdir()) == []


def test_a_run_whose_model_swap_was_killed_loads_its_previous_model(tiny_run_factory, tmp_path):
    import pcmr

    run = tiny_run_factory(tmp_path / "run")
    # killed after the old model/ was set aside, before the new one was renamed in
    os.rename(run / "model", run / ".model.abcd1234.old")
    (run / ".model.abcd1234.tmp").mkdir()
    model = pcmr.load(run)
    assert model.source is not None and (run / "model" / "model.safetensors").is_file()
    assert not [p for p in run.iterdir() if p.name.startswith(".model.")]
