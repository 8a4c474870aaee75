"""Write docs/probes/pcmepp_calibpe/probes.md from the probe study's results.csv (copied here as
results.csv): one line per probe with what it changes, R-Precision, the query-blind R-Precision and the
skill (R-P - QB) / (100 - QB) in both directions.

    python docs/probes/pcmepp_calibpe/summarise.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def main() -> None:
    study = yaml.safe_load((HERE / "probes.yaml").read_text())
    with (HERE / "results.csv").open(newline="") as handle:
        rows = {row["recipe"]: row for row in csv.DictReader(handle)}
    lines = ["| probe | recipe | change | R-P i2t | R-P t2i | QB i2t | QB t2i | skill i2t | skill t2i |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, entry in study["recipes"].items():
        row = rows.get(label)
        if row is None:
            continue
        change = ", ".join(f"`{key}={value}`" for key, value in (entry.get("set") or {}).items()) or "none"
        cells = [label, entry.get("recipe", label), change]
        skills = []
        for direction in ("i2t", "t2i"):
            rp, qb = float(row[f"{direction}_r_precision"]), float(row[f"{direction}_query_blind_r_precision"])
            skills.append((rp - qb) / (100.0 - qb))
        cells += [f"{float(row['i2t_r_precision']):.1f}", f"{float(row['t2i_r_precision']):.1f}",
                  f"{float(row['i2t_query_blind_r_precision']):.1f}", f"{float(row['t2i_query_blind_r_precision']):.1f}",
                  f"{skills[0]:.4f}", f"{skills[1]:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    text = "# pcmepp_csd and calibpe probes (papers study setting, one seed)\n\n" + "\n".join(lines) + "\n"
    (HERE / "probes.md").write_text(text)


if __name__ == "__main__":
    main()
