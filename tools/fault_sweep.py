"""A sweep of the full-disk and kill probes over every command that writes a folder: each probe runs the real
command in a child process and checks that the output afterwards is the old one or the new one, complete and
loadable, and that the next reader or writer leaves no copy behind.

    PYTHONPATH=src OMP_NUM_THREADS=1 python tools/fault_sweep.py [--only NAME ...] [--keep DIR]

Operations: ``pcmr search --build`` / ``--from-embeddings ... --overwrite`` and ``--add`` (exact, faiss, Milvus
Lite), ``pcmr evaluate --out``, ``pcmr train`` and ``Model.save_pretrained`` over an existing export.
Probes, each in a fresh child process (this file with ``--child``):

- ``enospc:K``: the K-th rename of the write (``os.replace`` of a file into the new folder, the old folder set
  aside, the new one renamed in) fails with ENOSPC, for every K the command makes;
- ``fsize:BYTES``: a real file-size limit (``RLIMIT_FSIZE``, as ``ulimit -f``): every write beyond it fails
  with EFBIG wherever it happens (a faiss file, a safetensors file, a checkpoint);
- ``kill:K``: SIGKILL just before the K-th rename; ``kill:cleanup``: SIGKILL just before the old copy is removed.

A probe passes when a failed command exits non-zero (never 0), the output loads afterwards (a reader puts
back a copy a killed swap set aside), is byte-identical to the old output whenever the command failed
without being killed, holds the old or the new sizes when it was killed, and no ``.NAME.*`` copy is left
once it has been read. ``train`` passes when ``pcmr train --resume`` then finishes the run and its model
loads. Prints one line per probe that failed and a table of the probes run; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OLD = re.compile(r"\.[a-z0-9_]{8}\.old$")
TINY = ["data.options={num_train: 12, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
        "image_size: 32, cache_dir: CACHE}", "data.batch_size=10", "train.epochs=2", "train.max_steps_per_epoch=2",
        "train.checkpoint_every_steps=1", "model.embed_dim=8", "model.text_encoder={word_dim: 8, hidden_dim: 8}",
        "model.image_encoder={cnn_channels: [4, 4, 4, 4]}"]


# ---------------------------------------------------------------------------------------------- child side
def _install(fault: str, scope: Path) -> None:
    """Patch ``os.replace`` / ``shutil.rmtree`` of this process: count the renames of ``scope`` (the output,
    its ``.NAME.X.tmp`` / ``.old`` copies and anything inside them) and fail or die at the chosen one."""
    kind, _, value = fault.partition(":")
    replace, rmtree = os.replace, shutil.rmtree
    count = [0]
    prefixes = (str(scope), str(scope.parent / f".{scope.name}."))

    def patched_replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
        if any(str(p).startswith(prefixes) for p in (src, dst)):
            count[0] += 1
            if kind == "enospc" and count[0] == int(value):
                raise OSError(errno.ENOSPC, "No space left on device")
            if kind == "kill" and value.isdigit() and count[0] == int(value):
                os.kill(os.getpid(), signal.SIGKILL)
        return replace(src, dst, *args, **kwargs)

    def patched_rmtree(path: Any, *args: Any, **kwargs: Any) -> Any:
        if fault == "kill:cleanup" and OLD.search(str(path)) and str(path).startswith(prefixes):
            os.kill(os.getpid(), signal.SIGKILL)
        return rmtree(path, *args, **kwargs)

    os.replace = patched_replace  # type: ignore[assignment]
    shutil.rmtree = patched_rmtree  # type: ignore[assignment]
    counter = os.environ.get("SWEEP_COUNT_FILE")
    if counter:
        import atexit

        atexit.register(lambda: Path(counter).write_text(str(count[0])))


def child(argv: list[str]) -> int:
    fault, scope, command = argv[0], Path(argv[1]), argv[3:]
    _install(fault, scope)
    if command[0] == "save_pretrained":  # the Python API: an exception is its error, shown as one line
        import pcmr

        model = pcmr.load(command[1])
        try:
            model.save_pretrained(command[2])
        except (OSError, ValueError) as err:
            print(f"save_pretrained: error: {err}", file=sys.stderr)
            return 1
        return 0
    from pcmr.cli import main

    return main(command)


# --------------------------------------------------------------------------------------------- parent side
def run_child(fault: str, scope: Path, command: list[str], count_file: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    if count_file is not None:
        env["SWEEP_COUNT_FILE"] = str(count_file)
    limit = int(fault.split(":")[1]) if fault.startswith("fsize:") else None

    def small_files() -> None:
        if limit is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", fault, str(scope), "--",
                           *command], env=env, capture_output=True, text=True, timeout=600, preexec_fn=small_files)


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")) \
        if out.parent.is_dir() else []


class Operation:
    """One command writing ``out``: ``prepare()`` puts the old output in place, ``read(out)`` loads it and
    returns its sizes (raises when it does not load)."""

    def __init__(self, name: str, out: Path, command: list[str], prepare: Callable[[], None],
                 read: Callable[[Path], Any]) -> None:
        self.name, self.out, self.command, self.prepare, self.read = name, out, command, prepare, read


def check(op: Operation, fault: str, done: subprocess.CompletedProcess, before: dict[str, str],
          old: Any, new: Any) -> str | None:
    """Why the probe failed, or None."""
    killed = done.returncode < 0  # SIGKILL, or a library that aborted first (Milvus Lite's gRPC thread)
    if fault.startswith("kill") and not killed:
        return f"expected SIGKILL, exit {done.returncode}: {done.stderr.strip()[-300:]}"
    if not fault.startswith("kill") and done.returncode == 0:
        return "the command failed to write but exited 0"
    last = (done.stderr.strip().splitlines() or [""])[-1]
    if not killed and ": error: " not in last:  # a library's own log may hold a traceback; pcmr's last line
        return f"no one-line error at the end: {done.stderr.strip()[-300:]}"
    try:
        sizes = op.read(op.out)
    except Exception as err:  # any failure to load is a lost output
        return f"the output does not load: {type(err).__name__}: {str(err)[:300]}"
    if not killed and snapshot(op.out) != before:
        return "the command failed but the old output changed"
    if sizes not in (old, new):
        return f"the output holds {sizes}, neither the old {old} nor the new {new}"
    if leftovers(op.out):
        return f"copies left after a read: {leftovers(op.out)}"
    return None


def sweep(op: Operation, work: Path) -> tuple[int, list[str]]:
    op.prepare()
    before, old = snapshot(op.out), op.read(op.out)
    count_file = work / "count.txt"
    done = run_child("count", op.out, op.command, count_file)
    if done.returncode != 0:
        return 0, [f"{op.name}: the command itself fails: {done.stderr.strip()[-500:]}"]
    steps, new = int(count_file.read_text()), op.read(op.out)
    largest = max(p.stat().st_size for p in op.out.rglob("*") if p.is_file())
    faults = [f"enospc:{k}" for k in range(1, steps + 1)]
    faults += [f"fsize:{size}" for size in sorted({4096, largest // 2, largest - 1}) if 0 < size < largest]
    faults += [f"kill:{k}" for k in sorted({1, max(1, steps - 2), steps - 1, steps})] + ["kill:cleanup"]
    failures = []
    for fault in faults:
        op.prepare()
        before = snapshot(op.out)
        done = run_child(fault, op.out, op.command)
        if fault == "kill:cleanup" and done.returncode == 0:
            continue  # nothing was set aside (a new folder): no cleanup step to stop at
        why = check(op, fault, done, before, old, new)
        if why is not None:
            failures.append(f"{op.name} {fault}: {why}")
            print(f"FAILED {failures[-1]}", flush=True)
    return len(faults), failures


# ------------------------------------------------------------------------------------------ the operations
def operations(work: Path) -> list[Operation]:
    import torch
    from safetensors.torch import save_file

    from pcmr.cli import main
    from pcmr.hub import Model
    from pcmr.report import Report
    from pcmr.search import GalleryIndex

    cache = work / "cache"
    sets = [arg for item in TINY for arg in ("--set", item.replace("CACHE", str(cache)))]
    assert main(["train", "vsepp_max", "--out", str(work), "--name", "run", *sets, "--no-progress"]) == 0
    run = work / "run"
    gen = torch.Generator().manual_seed(0)

    def embeddings(path: Path, images: int, captions: int) -> Path:
        tensors = {f"{m}_{part}": torch.randn(n, 8, generator=gen) for m, n in (("image", images), ("caption", captions))
                   for part in ("mean", "logvar")}
        save_file(tensors, str(path), metadata={"caption_texts": json.dumps([f"c {path.stem} {i}"
                                                                              for i in range(captions)])})
        return path

    base, more = embeddings(work / "base.safetensors", 400, 600), embeddings(work / "more.safetensors", 20, 30)

    def index_sizes(folder: Path) -> tuple[int, ...]:
        index = GalleryIndex.load(folder)
        try:
            return (index.images.num, index.captions.num, *(index.ann[m].ntotal for m in sorted(index.ann)))
        finally:
            _release_milvus()

    def pristine(name: str, make: Callable[[Path], None]) -> Callable[[], None]:
        """Build the old output once, then copy it into place before every probe."""
        kept, out = work / "pristine" / name, work / name
        make(kept)

        def prepare() -> None:
            for stale in [out, *out.parent.glob(f".{name}.*")]:
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale)
                elif os.path.lexists(stale):
                    stale.unlink()
            shutil.copytree(kept, out, symlinks=True)
        return prepare

    def built(*args: str) -> Callable[[Path], None]:
        return lambda folder: _ok(main(["search", str(folder), *args]))

    faiss = ["--backend", "faiss", "--index-type", "hnsw", "--ann-score", "wasserstein"]
    ops = []
    for name, make, command in [
        ("build-exact", built("--build", str(run)), ["--build", str(run), "--overwrite"]),
        ("build-faiss", built("--build", str(run), *faiss), ["--build", str(run), *faiss, "--overwrite"]),
        ("embeddings-faiss", built("--from-embeddings", str(base), *faiss),
         ["--from-embeddings", str(base), *faiss, "--overwrite"]),
        ("add-exact", built("--from-embeddings", str(base)), ["--add", str(more)]),
        ("add-faiss", built("--from-embeddings", str(base), *faiss), ["--add", str(more)]),
    ]:
        ops.append(Operation(f"search {name}", work / name, ["search", str(work / name), *command],
                             pristine(name, make), index_sizes))
    milvus = ["--backend", "milvus", "--uri", str(work / "milvus.db"), "--ann-score", "wasserstein"]
    for name, command in [("milvus-overwrite", ["--from-embeddings", str(base), *milvus, "--overwrite"]),
                          ("milvus-add", ["--add", str(more)])]:
        out = work / name

        def rebuild(out: Path = out) -> None:  # collections live in the database: the old index is built again
            for stale in [out, *out.parent.glob(f".{out.name}.*")]:
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale)
                elif os.path.lexists(stale):
                    stale.unlink()
            _ok(main(["search", str(out), "--from-embeddings", str(base), *milvus]))
            _release_milvus()
        ops.append(Operation(f"search {name}", out, ["search", str(out), *command], rebuild, index_sizes))

    evaluate = ["--similarity", "cosine", "--rerank", "nns"]
    ops.append(Operation("evaluate --out", work / "ev", ["evaluate", str(run), "--out", str(work / "ev"), *evaluate,
                                                         "--overwrite"],
                         pristine("ev", lambda folder: _ok(main(["evaluate", str(run), "--out", str(folder),
                                                                 *evaluate]))),
                         lambda folder: len(Report.load(folder).rows)))
    ops.append(Operation("save_pretrained", work / "export", ["save_pretrained", str(run), str(work / "export")],
                         pristine("export", lambda folder: Model.from_pretrained(run / "model").save_pretrained(folder)),
                         lambda folder: Model.from_pretrained(folder).embed_dim))
    return ops


def _ok(code: int) -> None:
    if code != 0:
        raise SystemExit("a setup command failed")


def _release_milvus() -> None:
    """Close this process's Milvus Lite servers, so that a child process can open the database."""
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:
        return
    server_manager_instance.release_all()


def sweep_train(work: Path) -> tuple[int, list[str]]:
    """``pcmr train`` with every probe: afterwards ``pcmr train --resume`` finishes the run (or, when the fault
    came before the run folder held a config, a fresh start does) and its model loads."""
    from pcmr import load
    from pcmr.train.checkpoint import load_latest_checkpoint

    cache = work / "cache"
    sets = [arg for item in TINY for arg in ("--set", item.replace("CACHE", str(cache)))]
    out = work / "train"
    command = ["train", "vsepp_max", "--out", str(work), "--name", "train", *sets, "--no-progress"]
    count_file = work / "count.txt"
    shutil.rmtree(out, ignore_errors=True)
    done = run_child("count", out, command, count_file)
    if done.returncode != 0:
        raise SystemExit(f"train: {done.stderr.strip()[-2000:]}")
    steps = int(count_file.read_text())
    largest = max(p.stat().st_size for p in out.rglob("*") if p.is_file())
    faults = ([f"enospc:{k}" for k in range(1, steps + 1)] + [f"fsize:{s}" for s in sorted({4096, largest // 2, largest - 1}) if 0 < s < largest]
              + [f"kill:{k}" for k in range(1, steps + 1, max(1, steps // 8))])
    failures = []
    for fault in faults:
        shutil.rmtree(out, ignore_errors=True)
        done = run_child(fault, out, command)
        if done.returncode == 0:
            failures.append(f"train {fault}: the command failed to write but exited 0")
            print(f"FAILED {failures[-1]}", flush=True)
            continue
        started = (out / "config.yaml").is_file()
        again = run_child("none", out, ["train", "--resume", str(out), "--no-progress"] if started else command)
        try:
            if again.returncode != 0:
                raise RuntimeError(again.stderr.strip()[-300:])
            step = load_latest_checkpoint(out / "checkpoints").state["progress"]["global_step"]
            load(out)
            if step != 4:
                raise RuntimeError(f"the run ended at step {step}, not 4")
        except Exception as err:
            failures.append(f"train {fault}: not finished after the fault: {type(err).__name__}: {str(err)[:300]}")
            print(f"FAILED {failures[-1]}", flush=True)
    return len(faults), failures


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        return child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="operations whose name contains one of these words")
    parser.add_argument("--keep", default=None, help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="pcmr-sweep-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    table, failures = [], []
    try:
        for op in operations(work):
            if args.only and not any(word in op.name for word in args.only):
                continue
            probes, failed = sweep(op, work)
            table.append((op.name, probes, len(failed)))
            failures += failed
            print(f"{op.name}: {probes} probes, {len(failed)} failed", flush=True)
        if not args.only or any("train" in word for word in args.only):
            probes, failed = sweep_train(work)
            table.append(("train", probes, len(failed)))
            failures += failed
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print("\n| operation | probes | failed |\n| --- | --- | --- |")
    for name, probes, failed in table:
        print(f"| {name} | {probes} | {failed} |")
    print(f"\n{sum(p for _, p, _ in table)} probes, {len(failures)} failed, {time.time() - started:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
