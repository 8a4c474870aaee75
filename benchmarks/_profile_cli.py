"""Run ``pcmr ARGS...`` under cProfile with a CPU-time clock and save the statistics (helper of
``benchmarks/evaluation.py --profile``): ``python benchmarks/_profile_cli.py OUT.prof evaluate RUN ...``."""

from __future__ import annotations

import cProfile
import sys
import time

from pcmr.cli import main

if __name__ == "__main__":
    profile = cProfile.Profile(time.process_time)  # CPU time: other jobs on the machine do not count
    status = profile.runcall(main, sys.argv[2:])
    profile.dump_stats(sys.argv[1])
    sys.exit(status)
