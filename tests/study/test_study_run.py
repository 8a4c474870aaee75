"""`pcmr study` end to end on the shipped tiny study: outputs, skipping finished runs, a study
killed mid-way and resumed, child-process workers, --only and --list."""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pcmr
from pcmr.cli import main
from pcmr.study import StudyError, find_study, load_study, read_marker, run_study
from pcmr.study.backend import train_run
from pcmr.study.ledger import LEDGER_FILES, restore_ledger, save_run
from pcmr.study.steps import NULL_DIR, null_recipes, run_null
from pcmr.train.lock import LOCK_FILE, read_lock
from pcmr.train.lock import _alive as lock_owner_alive

STUDY = find_study("tiny")


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A private data cache for this module (in-process and child processes)."""
    saved = {k: os.environ.get(k) for k in ("PCMR_CACHE", "OMP_NUM_THREADS")}
    os.environ["PCMR_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    os.environ["OMP_NUM_THREADS"] = "1"
    src = str(Path(pcmr.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    yield env
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def finished(environment: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny study run without interruption, two child processes at a time."""
    out = tmp_path_factory.mktemp("uninterrupted")
    outcome = run_study(load_study(STUDY), out, workers=2, threads=1, echo=lambda line: None)
    assert not outcome.failed and len(outcome.ran) == 6
    return out


def _rows(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))


def vsepp_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [r for r in rows if r["recipe"] == "vsepp_sum"]


def test_results_summary_and_claims(finished: Path) -> None:
    rows = _rows(finished)
    # pcme: 2 seeds x 3 similarities x 3 re-rankers x 2 relevance modes; vsepp_sum: 2 variants x 2 seeds x 1 x 2 x 2
    assert len(rows) == 2 * 3 * 3 * 2 + 4 * 1 * 2 * 2
    assert list(rows[0])[:7] == ["run", "recipe", "variant", "seed", "similarity", "rerank", "relevance"]
    assert {(r["recipe"], r["variant"]) for r in rows} == {("pcme", "base"), ("vsepp_sum", "base"),
                                                          ("vsepp_sum", "augmented")}
    pcme_nns = [r for r in rows if r["recipe"] == "pcme" and r["rerank"] == "nns"]
    for column in ("i2t_r1_least_uncertain", "t2i_r1_most_uncertain", "binsel_i2t_union", "binsel_t2i_caption_ab",
                   "image_uncertainty_occlusion_slope", "caption_uncertainty_erasure_slope"):
        assert all(r[column] != "" for r in pcme_nns), column
    exact = [r for r in pcme_nns if r["relevance"] == "exact"]
    assert all(r["caption_uncertainty_relevant_rho"] != "" for r in exact)
    # every uncertainty statistic beside the same seed's untrained model's, and within wildcard strata
    for column in ("caption_uncertainty_relevant_rho_untrained", "image_uncertainty_relevant_rho_untrained",
                   "caption_uncertainty_relevant_rho_strata", "caption_uncertainty_relevant_rho_strata_untrained",
                   "image_uncertainty_occlusion_slope_untrained", "caption_uncertainty_erasure_slope_untrained"):
        assert all(r[column] != "" for r in exact), column
    # the untrained null is the run's own seed: the same value in every row of a run, different across seeds
    untrained = {r["run"]: r["caption_uncertainty_relevant_rho_untrained"] for r in exact}
    assert len(set(untrained.values())) == len(untrained) == 2
    # agreement of the per-item uncertainty across the two seeds, on every row of the recipe
    assert all(r["caption_uncertainty_agreement"] != "" and r["caption_uncertainty_agreement_untrained"] != ""
               for r in pcme_nns)
    assert (finished / "runs" / "pcme-base-s0" / "item_uncertainty.json").is_file()
    assert "| pcme | base | caption |" in (finished / "agreement.md").read_text()
    # the trained-signal gate: recorded per run; two steps of training leave the heads untrained
    for row in pcme_nns:
        assert row["image_uncertainty_signal"] in ("0.0", "1.0") and row["caption_uncertainty_signal"] == "0.0"
        assert float(row["caption_uncertainty_spread_init"]) > 0 and float(row["caption_uncertainty_floor"]) > 0
        assert float(row["match_a"]) > 0 and row["match_b"] != ""
    assert all(r["caption_uncertainty_signal"] == "" for r in vsepp_rows(rows))
    # the schedule each run used, in epochs (recipes give step periods as shares of training)
    assert {r["schedule"] for r in pcme_nns} == {"cosine: 1 epochs"}
    assert {r["schedule"] for r in vsepp_rows(rows)} == {"step: 1 epochs, lr x 0.1 every 1"}
    pcme_is = [r for r in rows if r["recipe"] == "pcme" and r["rerank"] == "is"]
    assert all(r["i2t_r1_least_uncertain"] == "" for r in pcme_is)  # analysis of raw scores: nns rows only
    vsepp = [r for r in rows if r["recipe"] == "vsepp_sum"]
    assert all(r["image_uncertainty_occlusion_slope"] == "" for r in vsepp)  # point embeddings
    assert all(r["binsel_i2t_union"] != "" for r in vsepp if r["rerank"] == "nns")
    # source relevance counts only the written pairs: never more relevant items than exact relevance
    by_key = {(r["run"], r["similarity"], r["rerank"], r["relevance"]): r for r in rows}
    for (run, sim, rerank, mode), row in by_key.items():
        if mode == "source":
            assert float(row["i2t_R@10"]) <= float(by_key[(run, sim, rerank, "exact")]["i2t_R@10"]) + 1e-9
    # the query-blind ranking's R-Precision on the test split, per relevance mode (the benchmark check)
    from pcmr.hub import load
    from pcmr.metrics.query_blind import query_blind_r_precision
    from pcmr.train.loading import run_config
    from pcmr.train.run import load_run_split

    config = run_config(load(finished / "runs" / "pcme-base-s0"))
    assert config is not None
    split = load_run_split(config, "test")
    relevant = split.relevance_matrix().bool()
    exact_rows = [r for r in rows if r["relevance"] == "exact"]
    for direction, matrix in (("i2t", relevant), ("t2i", relevant.T)):
        values = {float(r[f"{direction}_query_blind_r_precision"]) for r in exact_rows}
        assert len(values) == 1 and values.pop() == pytest.approx(query_blind_r_precision(matrix), abs=1e-9)
    assert all(r["i2t_query_blind_r_precision"] != "" for r in rows if r["relevance"] == "source")
    summary = (finished / "summary.md").read_text()
    assert "## Relevance: exact" in summary and "## Relevance: source" in summary and " ± " in summary
    claims = (finished / "claims.md").read_text()
    for claim_id in ("pcme-vs-vsepp", "decile-drop", "occlusion"):
        assert f"| {claim_id} |" in claims
    assert (finished / "runs" / "pcme-base-s0" / "eval-exact" / "results.json").is_file()
    assert "| pcme | base | match_prob | 2 |" in (finished / "recipes.md").read_text()
    times = (finished / "times.md").read_text()
    assert "| pcme | 2 |" in times and "| vsepp_sum | 4 |" in times and "All 6 runs" in times
    curves = (finished / "curves.md").read_text()  # one validation after the single epoch of each run
    assert "| pcme | base | 2 | 1 |" in curves and "| vsepp_sum | augmented | 2 | 1 |" in curves, curves
    for figure in ("claims.png", "recipes.png", "curves.png"):
        assert (finished / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", figure
    assert len(list((finished / "logs").iterdir())) == 6  # one child process per run


def test_rerun_skips_finished_runs(finished: Path) -> None:
    before = (finished / "results.csv").read_text()
    outcome = run_study(load_study(STUDY), finished, threads=1, echo=lambda line: None)
    assert outcome.ran == [] and len(outcome.skipped) == 6
    assert (finished / "results.csv").read_text() == before


def test_killed_study_resumes_to_identical_results(finished: Path, environment: dict[str, str],
                                                   tmp_path: Path) -> None:
    out = tmp_path / "killed"
    shutil.copytree(finished, out)  # the first four runs finished; the last two still to run
    for name in ("vsepp_sum-augmented-s0", "vsepp_sum-augmented-s1"):
        shutil.rmtree(out / "runs" / name)
    shutil.rmtree(out / "logs")
    (out / "results.csv").unlink()
    process = subprocess.Popen([sys.executable, "-m", "pcmr", "study", str(STUDY), "--out", str(out),
                                "--threads", "1"], env=environment, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    started = out / "runs" / "vsepp_sum-augmented-s0"
    deadline = time.monotonic() + 300
    try:
        while not (started / "config.yaml").is_file():  # its training has started
            assert process.poll() is None, "the study ended before it could be killed"
            assert time.monotonic() < deadline, "the study did not reach its fifth run"
            time.sleep(0.01)
    finally:
        process.kill()  # the study process; its child dies with it
        process.wait()
    assert process.returncode == -signal.SIGKILL
    child = read_lock(started / LOCK_FILE)  # the run's child holds the run lock while it trains
    assert child is not None
    while lock_owner_alive(child["pid"]):  # it ends with the study (dead, or a zombie nobody reaped)
        assert time.monotonic() < deadline, f"the run's child {child['pid']} outlived the killed study"
        time.sleep(0.01)
    assert read_marker(started) is None and not (out / "results.csv").exists()
    outcome = run_study(load_study(STUDY), out, workers=1, threads=1, echo=lambda line: None)
    logs = {name: (out / "logs" / f"{name}.log").read_text()[-3000:] for name in outcome.failed}
    assert not outcome.failed, logs
    assert len(outcome.skipped) == 4 and outcome.ran == ["vsepp_sum-augmented-s0", "vsepp_sum-augmented-s1"]
    assert (out / "results.csv").read_text() == (finished / "results.csv").read_text()


def test_list_and_only(finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["study", str(STUDY), "--out", str(finished), "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "0\tpcme-base-s0\tfinished" and len(lines) == 6
    assert main(["study", "tiny", "--out", str(tmp_path / "none"), "--list"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[5] == "5\tvsepp_sum-augmented-s1\tpending"
    assert main(["study", str(STUDY), "--out", str(finished), "--only", "4", "--threads", "1"]) == 0  # finished
    assert main(["study", str(STUDY), "--out", str(finished), "--only", "6"]) == 2
    assert "--only 6: the study has runs 0..5" in capsys.readouterr().err


def test_recipes_runs_and_judges_a_part_of_the_study(finished: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["study", str(STUDY), "--out", str(finished), "--recipes", "vsepp_sum", "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[1] for line in lines] == ["vsepp_sum-base-s0", "vsepp_sum-base-s1",
                                                      "vsepp_sum-augmented-s0", "vsepp_sum-augmented-s1"]
    part = tmp_path / "part"
    shutil.copytree(finished / "runs", part / "runs")
    shutil.rmtree(part / "runs" / "vsepp_sum-augmented-s1")
    shutil.rmtree(part / "runs" / "pcme-base-s1")
    assert main(["study", str(STUDY), "--out", str(part), "--recipes", "vsepp_sum", "--threads", "1"]) == 0
    assert {row["recipe"] for row in _rows(part)} == {"vsepp_sum"}
    # the child process ran the part's missing run (its --only number is the part's), nothing else
    assert [p.name for p in sorted((part / "logs").iterdir())] == ["vsepp_sum-augmented-s1.log"]
    assert read_marker(part / "runs" / "vsepp_sum-augmented-s1") is not None
    assert not (part / "runs" / "pcme-base-s1").exists()
    assert main(["study", str(STUDY), "--out", str(part), "--recipes", "vsepp_sum,nope", "--list"]) == 2
    assert "'nope' not in the study's recipes" in capsys.readouterr().err


def test_a_run_folder_with_another_config_is_refused(finished: Path) -> None:
    spec = load_study(STUDY)
    run = spec.runs()[0]
    with pytest.raises(StudyError, match="another config .*train.lr"):
        train_run(run.recipe, {**run.overrides, "train.lr": 0.5}, finished / "runs" / run.name)


def test_an_incomplete_marker_means_not_finished(finished: Path, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    assert read_marker(folder) is None
    (folder / "study.json").write_text('{"format": 1, "rows": [')
    assert read_marker(folder) is None
    shutil.copy(finished / "runs" / "pcme-base-s0" / "study.json", folder / "study.json")
    assert read_marker(folder)["run"] == "pcme-base-s0"


def test_signal_gate_does_not_depend_on_the_process_random_state(finished: Path, tmp_path: Path) -> None:
    """The gate's untrained reference model is drawn from the run's own seed: evaluating a run again,
    after any other use of the random generator, gives the same gate columns as in the study."""
    import shutil

    import torch

    from pcmr.study.backend import evaluate_run
    from pcmr.study.spec import AnalysisOptions

    run_dir = tmp_path / "pcme-base-s0"
    shutil.copytree(finished / "runs" / "pcme-base-s0", run_dir)
    options = AnalysisOptions(corruption=False, binary_selection=False, max_items=24)
    gate = ("image_uncertainty_spread_init", "caption_uncertainty_spread_init", "caption_uncertainty_signal")
    values = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        torch.rand(1000)
        rows = evaluate_run(run_dir, ["cosine"], ["nns"], ["exact"], options)
        values.append([rows[0][key] for key in gate])
    assert values[0] == values[1] and values[0][0] > 0


def test_a_study_resumes_from_its_ledger_on_a_fresh_checkout(finished: Path, tmp_path: Path) -> None:
    """The ledger keeps each finished run's result files (no weights); a fresh study folder restored from it
    skips every run and collects the same results.csv, summary and claims."""
    ledger = tmp_path / "ledger"
    for run_dir in sorted((finished / "runs").iterdir()):
        save_run(run_dir, ledger / "runs" / run_dir.name)
    kept = {path.name for path in (ledger / "runs").rglob("*") if path.is_file()}
    assert kept <= set(LEDGER_FILES) and "study.json" in kept
    assert not any(path.suffix in (".pt", ".safetensors") for path in ledger.rglob("*"))
    out = tmp_path / "fresh"
    outcome = run_study(load_study(STUDY), out, threads=1, echo=lambda line: None, ledger=ledger)
    assert outcome.ran == [] and len(outcome.skipped) == 6
    for name in ("results.csv", "summary.md", "claims.md", "agreement.md", "curves.md"):
        assert (out / name).read_text() == (finished / name).read_text(), name
    # a run with its own checkpoints in the study folder is left to resume from them, never overwritten
    (out / "runs" / "pcme-base-s0" / "study.json").unlink()
    (out / "runs" / "pcme-base-s0" / "checkpoints").mkdir()
    assert restore_ledger(ledger, out) == []
    shutil.rmtree(out / "runs" / "pcme-base-s0")
    assert restore_ledger(ledger, out) == ["runs/pcme-base-s0"]
    # a ledger run without its marker (killed while kept) is not a finished run
    (ledger / "runs" / "pcme-base-s1" / "study.json").unlink()
    shutil.rmtree(out / "runs" / "pcme-base-s1")
    assert restore_ledger(ledger, out) == []


def test_save_run_refuses_an_unfinished_run(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    with pytest.raises(FileNotFoundError, match="not a finished run"):
        save_run(tmp_path / "run", tmp_path / "ledger" / "run")


def test_a_null_kept_whole_in_the_ledger_needs_no_run_with_weights(tmp_path: Path) -> None:
    """The null of untrained models restored from a ledger with every initialisation is collected as it is;
    with initialisations missing and no run holding its model, it is left for later."""
    spec = load_study(find_study("uncertainty"))
    assert spec.design.null is not None
    recipe = null_recipes(spec)[0]
    inits = range(spec.design.null.first_seed, spec.design.null.first_seed + spec.design.null.inits)
    ledger = tmp_path / "ledger"
    (ledger / NULL_DIR).mkdir(parents=True)
    whole = "recipe,init,relevance\n" + "".join(f"{recipe},{i},exact\n" for i in inits)
    (ledger / NULL_DIR / f"{recipe}.csv").write_text(whole)
    out = tmp_path / "out"
    assert restore_ledger(ledger, out) == []
    lines: list[str] = []
    assert run_null(spec, out, {}, lines.append) == [out / NULL_DIR / f"{recipe}.csv"]
    assert not lines and (out / NULL_DIR / f"{recipe}.csv").read_text() == whole
    (out / NULL_DIR / f"{recipe}.csv").write_text("\n".join(whole.splitlines()[:-1]) + "\n")  # one short
    assert run_null(spec, out, {}, lines.append) == []
    assert lines == [f"null of {recipe}: no finished run with its model yet; left for later"]
    assert restore_ledger(ledger, out) == [] and (out / NULL_DIR / f"{recipe}.csv").read_text() == whole
