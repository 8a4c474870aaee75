"""Per-epoch training terms and validation R-Precision of probe runs, from each run's log.jsonl.

    python docs/probes/pcmepp_calibpe/terms.py RUN [RUN ...] > training_terms.csv
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

TERMS = ("loss", "csd_matching", "pseudo_positive", "kl_prior", "a", "b", "image_logvar_mean", "caption_logvar_mean")


def main() -> None:
    writer = csv.writer(sys.stdout)
    writer.writerow(["run", "epoch", *TERMS, "val_i2t_r_precision", "val_t2i_r_precision"])
    for run in map(Path, sys.argv[1:]):
        for line in (run / "log.jsonl").read_text().splitlines():
            event = json.loads(line)
            if event.get("event") != "epoch":
                continue
            train, val = event["train"], event.get("val", {})
            writer.writerow([run.name, event["epoch"], *(f"{train[t]:.4g}" if t in train else "" for t in TERMS),
                             f"{val.get('i2t_r_precision', float('nan')):.1f}",
                             f"{val.get('t2i_r_precision', float('nan')):.1f}"])


if __name__ == "__main__":
    main()
