"""`pcmr evaluate RUN` with its defaults, before and after, in one run: wall and CPU time, same report.

The workload is the default evaluation of a small shapes run: the test split (500 images, 2,500
captions) under both relevance modes (exact and source), 5 scores x 4 re-rankers (nns, is, csls,
csls+rgm with lambda selected on the validation split of the same size), PMRP, hubness, the
uncertainty figures and the PNGs. The baseline is the code of an earlier commit (``--before``,
default: the last commit before the evaluation speed-ups), exported with ``git archive``; "after"
is this checkout (or ``--after REF``, exported the same way). Each tree first evaluates once
untimed (numba compiles its loops into the tree's cache, as a user's first run after training
has), then the rounds alternate the trees (before, after, before, after, ...) so that a slow phase
of a shared machine hits both. Figures are medians over ``--rounds`` of the wall time and of the
CPU time of the command (user + system of the child process, which a loaded machine inflates
less). The script then checks that the two trees wrote the same ``results.json`` (every value,
row and figure series) and prints the per-phase lines (``scores``, each re-ranker, encoding,
figures) of each tree's last run.

With ``--profile`` each tree then evaluates once more under cProfile with a CPU-time clock
(``benchmarks/_profile_cli.py``), and the script prints where the CPU time went: the cumulative time
of the functions behind each phase (the profiler's own overhead inflates interpreted code, e.g.
matplotlib, far more than compiled loops, so these shares are indicative).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/evaluation.py [--run RUN] [--rounds 3] [--profile]``
(without ``--run`` a 2-epoch ``pcme`` run on 500 training images is trained first, into ``--work``).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
BASELINE = "5f16a6d"  # main before the evaluation speed-ups


def export_tree(ref: str, into: Path) -> Path:
    """``src/`` of commit ``ref`` extracted under ``into/<ref>`` (kept, with its numba cache); returns it."""
    folder = into / ref
    src = folder / "src"
    if src.is_dir():
        return src
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / "tree.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), ref, "src"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    archive.unlink()
    return src


def evaluate(src: Path, run: Path, out: Path) -> tuple[float, float, str]:
    """``python -m pcmr evaluate run --out out --overwrite`` with ``src`` first on the path.

    Returns the wall seconds, the CPU seconds (user + system) of the child and its stderr."""
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "pcmr", "evaluate", str(run), "--out", str(out), "--overwrite"]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"pcmr evaluate failed with {src}:\n{stderr}")
    return wall, usage.ru_utime + usage.ru_stime, stderr


#: (phase, file suffix, function): a phase's CPU time is the cumulative time of that function (nested
#: phases are contained in their parents: the metrics passes include those of the decile figure).
PHASES = (
    ("whole command", "pcmr/cli/__init__.py", "main"),
    ("encoding the test and validation splits", "pcmr/encode/inputs.py", "encode_split"),
    ("score matrices", "pcmr/scoring.py", "score_matrix"),
    ("RGM lambda selection (validation)", "pcmr/inference/lambda_selection.py", "select_lambda"),
    ("evaluate_directions (metrics of every row)", "pcmr/metrics/driver.py", "evaluate_directions"),
    ("  metrics passes (R@K, R-Precision, MAP@R, N_k)", "pcmr/metrics/scan.py", "scan"),
    ("  PMRP", "pcmr/metrics/pmrp.py", "pmrp"),
    ("  matching runs on the test split", "pcmr/metrics/driver.py", "_lists_direction"),
    ("uncertainty-decile figure data", "pcmr/evaluation/figures.py", "decile_series"),
    ("occlusion / word-erasure series", "pcmr/evaluation/figures.py", "corruption_series"),
    ("drawing and writing the PNGs", "pcmr/report/plots.py", "save_figures"),
)


def profile(src: Path, run: Path, out: Path, stats_path: Path) -> dict[str, float]:
    """CPU seconds per phase of one profiled evaluation with ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, str(BENCHMARKS / "_profile_cli.py"), str(stats_path), "evaluate", str(run),
                    "--out", str(out), "--overwrite"], env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    entries = pstats.Stats(str(stats_path)).stats
    seconds = {}
    for label, suffix, function in PHASES:
        seconds[label] = sum(values[3] for (path, _, name), values in entries.items()
                             if name == function and path.endswith(suffix))
    return seconds


def phase_lines(stderr: str) -> list[str]:
    """The timed lines of the command's progress output (``... done in X s``)."""
    return [line.strip() for line in stderr.splitlines() if "done in" in line]


def train_run(work: Path) -> Path:
    """A 2-epoch ``pcme`` run on 500 shapes training images (the run a new user evaluates first)."""
    run = work / "pcme-2-epochs"
    if (run / "model").is_dir():  # the selected model is written when training ends
        return run
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "pcmr", "train", "pcme", "--set", "train.epochs=2", "--set",
                    "data.options.num_train=500", "--out", str(work), "--name", run.name, "--no-progress"],
                   env=env, check=True)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=None, help="run folder to evaluate (default: train one)")
    parser.add_argument("--before", default=BASELINE, help=f"baseline commit (default {BASELINE})")
    parser.add_argument("--after", default=None, help="commit to time as 'after' (default: this checkout)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="also print the CPU time per phase of each tree")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "benchmark-evaluation",
                        help="folder for the trees, the trained run and the reports")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    run = args.run or train_run(args.work)
    trees = {"before": export_tree(args.before, args.work / "trees"),
             "after": ROOT / "src" if args.after is None else export_tree(args.after, args.work / "trees")}
    outs = {name: args.work / f"eval-{name}" for name in trees}
    for name, src in trees.items():  # untimed: numba's cache of this tree, the OS file cache
        evaluate(src, run, outs[name])
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    logs: dict[str, str] = {}
    for _ in range(args.rounds):
        for name, src in trees.items():
            wall, cpu, logs[name] = evaluate(src, run, outs[name])
            times[name].append((wall, cpu))
    results = {name: json.loads((outs[name] / "results.json").read_text()) for name in trees}
    same = results["before"] == results["after"]
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    threads = os.environ.get("OMP_NUM_THREADS", "all cores")
    print(f"pcmr evaluate {run} (defaults), {args.rounds} rounds, OMP_NUM_THREADS={threads}; {load}")
    print(f"before: {args.before}; after: {args.after or 'this checkout'}\n")
    print("| tree | wall (s), median | CPU (s), median | wall, every round | CPU, every round |")
    print("|---|---:|---:|---|---|")
    medians = {}
    for name, pairs in times.items():
        walls, cpus = [p[0] for p in pairs], [p[1] for p in pairs]
        medians[name] = (statistics.median(walls), statistics.median(cpus))
        print(f"| {name} | {medians[name][0]:.1f} | {medians[name][1]:.1f} | "
              f"{', '.join(f'{w:.1f}' for w in walls)} | {', '.join(f'{c:.1f}' for c in cpus)} |")
    wall_ratio = medians["before"][0] / medians["after"][0]
    cpu_ratio = medians["before"][1] / medians["after"][1]
    print(f"\nspeed-up: {wall_ratio:.1f}x wall, {cpu_ratio:.1f}x CPU; identical results.json: {'yes' if same else 'NO'}")
    for name in trees:
        print(f"\nphases of the last '{name}' run (wall):")
        for line in phase_lines(logs[name]):
            print(f"  {line}")
    if args.profile:
        shares = {name: profile(src, run, outs[name], args.work / f"{name}.prof") for name, src in trees.items()}
        print("\n| phase (CPU s under cProfile) | before | after |")
        print("|---|---:|---:|")
        for label, _, _ in PHASES:
            print(f"| {label} | {shares['before'][label]:.2f} | {shares['after'][label]:.2f} |")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
