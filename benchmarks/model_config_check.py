"""How fast `load_model` refuses a `config.json` with huge sizes (`pcmr.models.shape_check`), against
loading a matching model and against building the model a tenth as large as the hostile config says
(what loading did before the check: build first, compare shapes after). Each case runs in a fresh
process, so the first-call costs of torch are counted.

Run: ``flock /tmp/pcmr-bench.lock .venv/bin/python benchmarks/model_config_check.py``
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

CASE = r"""
import json, resource, sys, time
from pathlib import Path
from pcmr.models import load_model
from pcmr.models.config import config_from_dict
from pcmr.models.factory import build_model
folder, mode, edit = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
config = json.loads((folder / "config.json").read_text())
for key, value in edit.items():
    section, _, name = key.rpartition(".")
    (config[section] if section else config)[name] = value
(folder / "config.json").write_text(json.dumps(config))
start = time.perf_counter()
outcome = "loaded"
try:
    if mode == "build":
        build_model(config_from_dict(config), load_pretrained=False)
        outcome = "built"
    else:
        load_model(folder)
except ValueError as error:
    outcome = "refused: " + str(error).split("does not match config.json: ")[-1][:90]
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "outcome": outcome}))
"""


def run(folder: Path, mode: str, edit: dict) -> dict:
    saved = (folder / "config.json").read_text()
    try:
        out = subprocess.run([sys.executable, "-c", CASE, str(folder), mode, json.dumps(edit)], check=True,
                             capture_output=True, text=True).stdout
    finally:
        (folder / "config.json").write_text(saved)
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    from pcmr.models import create_model, save_model

    folder = Path(tempfile.mkdtemp())
    save_model(create_model("pcme", vocab_size=1000), folder)  # the PCME family's sizes, D = 128
    cases = [("matching config.json (load)", "load", {}),
             ("vocab_size = 4,000,000 (load, checked)", "load", {"vocab_size": 4_000_000}),
             ("text_encoder.num_layers = 1,000,000 (load, checked)", "load", {"text_encoder.num_layers": 1_000_000}),
             ("vocab_size = 400,000 (build only, no check)", "build", {"vocab_size": 400_000}),
             ("text_encoder.num_layers = 1,000 (build only, no check)", "build", {"text_encoder.num_layers": 1_000})]
    print(f"{'case':56s} {'seconds':>8s} {'max RSS MiB':>12s}  outcome")
    for label, mode, edit in cases:
        result = run(folder, mode, edit)
        print(f"{label:56s} {result['seconds']:8.3f} {result['rss_mib']:12.0f}  {result['outcome']}")


if __name__ == "__main__":
    main()
