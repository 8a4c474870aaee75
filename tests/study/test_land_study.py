"""``tools/land_study.py``: a finished study's report replaces its results folder, the previous folder goes
to the archive with a README built from its own study file, and a study that has not finished (or holds
runs of another design) is refused with nothing moved."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from pcmr.study import find_study, load_study

TOOL = Path(__file__).resolve().parents[2] / "tools" / "land_study.py"


def _tool():
    spec = importlib.util.spec_from_file_location("land_study", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(folder: Path, runs: list[str], marker: str) -> None:
    (folder / "null").mkdir(parents=True)
    (folder / "results.csv").write_text("run,recipe\n" + "".join(f"{run},x\n" for run in runs))
    (folder / "claims.md").write_text(f"# claims {marker}\n")
    (folder / "summary.md").write_text(f"# summary {marker}\n")
    (folder / "claims.png").write_bytes(b"png " + marker.encode())
    (folder / "null" / "pcme.csv").write_text("init\n0\n")
    (folder / "runs").mkdir()  # run folders (weights) never land
    (folder / "runs" / "weights.safetensors").write_bytes(b"w")


def test_land_archives_the_previous_results_and_copies_the_report(tmp_path: Path) -> None:
    tool = _tool()
    runs = [run.name for run in load_study(find_study("tiny")).runs()]
    previous = tmp_path / "docs" / "tiny_results"
    _report(previous, runs, "old")
    shutil.copy2(find_study("tiny"), previous / "study.yaml")
    out = tmp_path / "out"
    _report(out, runs[:-1], "new")
    with pytest.raises(ValueError, match="1 runs of studies/tiny.yaml missing"):
        tool.land("tiny", out, "older design", root=tmp_path)
    assert (previous / "claims.md").read_text() == "# claims old\n"  # nothing moved
    (out / "results.csv").write_text("run,recipe\n" + "".join(f"{run},x\n" for run in [*runs, "stray-s9"]))
    with pytest.raises(ValueError, match="1 runs not of studies/tiny.yaml"):
        tool.land("tiny", out, "older design", root=tmp_path)
    (out / "results.csv").write_text("run,recipe\n" + "".join(f"{run},x\n" for run in runs))

    archived = tool.land("tiny", out, "older design", root=tmp_path)
    assert archived.parent == tmp_path / "docs" / "archive" and archived.name.startswith("tiny_results_seeds_")
    assert (archived / "claims.md").read_text() == "# claims old\n"
    readme = (archived / "README.md").read_text()
    assert "Not the current evidence" in readme and "older design" in readme and f"{len(runs)} runs" in readme
    landed = tmp_path / "docs" / "tiny_results"
    assert (landed / "claims.md").read_text() == "# claims new\n" and (landed / "claims.png").read_bytes() == b"png new"
    assert (landed / "null" / "pcme.csv").is_file() and not (landed / "runs").exists()
    assert (landed / "study.yaml").read_text() == find_study("tiny").read_text()
    assert tool.main(["tiny", str(tmp_path / "missing"), "--why", "x"]) == 1
