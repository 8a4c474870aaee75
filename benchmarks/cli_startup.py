"""Start-up time of the commands that need no model: ``pcmr --version``, ``pcmr --help``,
``pcmr list models``, ``pcmr list recipes``, a command's ``--help`` and a refused command line
(``pcmr train --bogus``, ``pcmr evaluate RUN --batch-size 0``): wall time of a fresh
``python -m pcmr`` process.

Baselines measured in the same run: the interpreter alone (``python -c pass``), ``import torch`` (what
every command paid while the command line imported the library at start), and, with ``--before SRC``,
the same commands run from another source tree (e.g. a checkout of the previous version)::

    python benchmarks/cli_startup.py [--repeats 5] [--before /path/to/old/src]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
COMMANDS = (["--version"], ["--help"], ["list", "models"], ["list", "recipes"], ["search", "--help"],
            ["train", "--bogus"], ["evaluate", "run", "--batch-size", "0"])


def wall(argv: list[str], src: Path, repeats: int) -> float:
    """Median wall time (s) of ``repeats`` runs of ``python argv`` with ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before", type=Path, default=None, help="another src/ tree to compare with")
    args = parser.parse_args()
    floor = wall(["-c", "pass"], SRC, args.repeats)
    torch = wall(["-c", "import torch"], SRC, args.repeats)
    print(f"python -c pass: {floor:.2f} s; python -c 'import torch': {torch:.2f} s (median of {args.repeats})")
    width = max(len("pcmr " + " ".join(argv)) for argv in COMMANDS)
    header = f"{'command':<{width}} {'now (s)':>8} {'/ import torch':>15}"
    print(header + (f" {'before (s)':>11} {'speed-up':>9}" if args.before else ""))
    for argv in COMMANDS:
        now = wall(["-m", "pcmr", *argv], SRC, args.repeats)
        line = f"{'pcmr ' + ' '.join(argv):<{width}} {now:>8.2f} {now / torch:>15.2f}"
        if args.before:
            before = wall(["-m", "pcmr", *argv], args.before, args.repeats)
            line += f" {before:>11.2f} {before / now:>8.1f}x"
        print(line)


if __name__ == "__main__":
    main()
