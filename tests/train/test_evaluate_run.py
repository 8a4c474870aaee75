"""One way to evaluate a model, in the library: ``pcmr.evaluate`` (``pcmr.evaluation.model``) takes what
``pcmr.load`` returns and a split; ``pcmr evaluate``, ``pcmr demo`` and the study call it, with the run's
defaults (``pcmr.run_defaults``). ``pcmr.train.evaluation`` keeps the old names. The evaluator names its
primary metric and training's model selection reads that name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import pcmr
import pcmr.evaluation.model as evaluation
import pcmr.train.evaluation as train_evaluation
from pcmr.data import load_dataset
from pcmr.evaluation import RetrievalEvaluator
from pcmr.evaluation.evaluator import PRIMARY_METRIC, selection_value
from pcmr.run_defaults import evaluation_device, run_defaults
from pcmr.train.config import TrainConfig
from pcmr.train.loading import run_config

SRC = Path(__file__).resolve().parents[2] / "src" / "pcmr"


@pytest.fixture(scope="module")
def run_dir(tiny_shapes, tmp_path_factory, tiny_run_factory):
    return tiny_run_factory(tmp_path_factory.mktemp("run"), shapes=tiny_shapes,
                            eval_section={"similarities": ["kl"], "rerankers": ["nns", "csls"], "batch_size": 7},
                            similarity_options={"match_prob": {"a": 3.0, "b": 1.0}})


def test_settings_come_from_the_run_config_then_the_arguments(run_dir):
    model = pcmr.load(run_dir)
    evaluator = evaluation.model_evaluator(model)
    assert list(evaluator.similarities) == ["kl"] and list(evaluator.rerankers) == ["nns", "csls"]
    assert evaluator.batch_size == 7 and evaluator.split.split == "test" and evaluator.val_split is None
    assert evaluator.meta == {"run": str(run_dir)} and evaluator.primary_metric == PRIMARY_METRIC
    given = evaluation.model_evaluator(model, "val", similarities=["cosine"], rerankers=["rgm"], batch_size=3)
    assert (list(given.similarities), given.batch_size, given.split.split) == (["cosine"], 3, "val")
    assert given.val_split is not None and given.val_split.split == "val"  # RGM tunes its lambda on it


def test_the_device_is_the_runs_train_device(run_dir):
    model = pcmr.load(run_dir)
    model.run_config = {**model.run_config, "train": {**model.run_config["train"], "device": "cpu:0"}}
    assert evaluation_device(model) == torch.device("cpu:0")
    assert evaluation.model_evaluator(model).device == torch.device("cpu:0")
    assert evaluation.model_evaluator(model, device="cpu").device == torch.device("cpu")
    bare = pcmr.load(run_dir)
    bare.run_config = None
    assert evaluation_device(bare) == bare.device


def test_evaluate_run_equals_the_evaluator_on_the_parts(tiny_shapes, run_dir):
    model = pcmr.load(run_dir)
    report = pcmr.evaluate(model, similarities=["cosine", "match_prob"], rerankers=["nns"], figures=False,
                                     corruption=False)
    split = load_dataset("shapes", "test", **tiny_shapes)
    direct = RetrievalEvaluator(split, similarities=["cosine", "match_prob"], rerankers=["nns"], figures=False,
                                corruption=False, batch_size=7).evaluate(
        pcmr.Model(model.network, model.vocabulary, similarity_options={"match_prob": {"a": 3.0, "b": 1.0}}))
    assert report.rows == direct.rows


def test_every_caller_evaluates_through_the_model_evaluator(run_dir, tmp_path, monkeypatch):
    from pcmr.cli import main
    from pcmr.study.backend import evaluate_run as study_evaluate_run
    from pcmr.study.spec import AnalysisOptions

    calls = []
    original = evaluation.model_evaluator

    def recording(model, split=None, **settings):
        calls.append(model)
        return original(model, split, **settings)

    monkeypatch.setattr(evaluation, "model_evaluator", recording)
    assert main(["evaluate", str(run_dir), "--rerank", "nns", "--out", str(tmp_path / "eval")]) == 0
    assert len(calls) == 1 and isinstance(calls[0], pcmr.Model)
    run = tmp_path / "run"
    import shutil

    shutil.copytree(run_dir, run)
    study_evaluate_run(run, ["cosine"], ["nns"], ["exact"], AnalysisOptions(corruption=False, signal=False,
                                                                              binary_selection=False, max_items=8))
    assert len(calls) == 2 and calls[1].run_dir == run


def _constructs_evaluator(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
               == "RetrievalEvaluator" for node in ast.walk(tree))


def test_no_command_builds_its_own_evaluator():
    """The CLI and the study never build a RetrievalEvaluator from a run config themselves (the demo did,
    ignoring train.device); only the one evaluation of a run and training's validation do."""
    builders = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if _constructs_evaluator(p))
    assert builders == ["evaluation/evaluator.py", "evaluation/model.py", "train/validation.py"]
    demo = (SRC / "cli" / "demo.py").read_text()
    assert "evaluate(load(run_dir)" in demo


def test_the_trainers_old_names_are_the_library_functions():
    assert train_evaluation.run_evaluator is evaluation.model_evaluator
    assert train_evaluation.evaluate_run is evaluation.evaluate is pcmr.evaluate
    assert train_evaluation.evaluate_run_modes is evaluation.evaluate_modes


def test_the_evaluator_names_its_primary_metric_and_selection_uses_it(tiny_shapes, run_dir):
    row = {"rsum": 250.0, "i2t_r_precision": 30.0, "t2i_r_precision": 40.0}
    assert selection_value(row, "rsum") == 250.0 and selection_value(row, "r_precision") == 35.0
    split = load_dataset("shapes", "val", **tiny_shapes)
    evaluator = RetrievalEvaluator(split, primary_metric="r_precision")
    assert evaluator.primary_value(row) == 35.0
    with pytest.raises(ValueError, match="primary_metric 'map': expected one of rsum, r_precision"):
        RetrievalEvaluator(split, primary_metric="map")
    # the trainer's choices are the evaluator's selection metrics, its default the primary one
    from pcmr.train import check_config
    from pcmr.train.config import RunConfig

    with pytest.raises(ValueError, match=r"config key 'train.select_on': unknown name 'map'.*expected one of: rsum, r_precision"):
        check_config(RunConfig.from_dict({"train": {"select_on": "map"}}))
    assert TrainConfig().select_on == PRIMARY_METRIC
    from pcmr.train.validation import validate

    model = pcmr.load(run_dir)
    metrics = validate(model.network, split, model.vocabulary, similarity="cosine", primary_metric="r_precision")
    assert metrics["r_precision"] == pytest.approx(0.5 * (metrics["i2t_r_precision"] + metrics["t2i_r_precision"]))
    with pytest.raises(ValueError, match="primary_metric"):
        validate(model.network, split, model.vocabulary, similarity="cosine", primary_metric="map")
    assert evaluator.greater_is_better and evaluator.improves(36.0, 35.0) and not evaluator.improves(35.0, 35.0)


#: scripted validation metrics of three epochs: rsum peaks at epoch 1, the mean R-Precision at epoch 2
_SCRIPT = [{"rsum": 300.0, "r_precision": 10.0}, {"rsum": 200.0, "r_precision": 30.0},
           {"rsum": 250.0, "r_precision": 20.0}]


class _LowerIsBetter(RetrievalEvaluator):
    """An evaluator whose primary metric ranks lower values first."""

    @property
    def greater_is_better(self) -> bool:
        return False


@pytest.mark.parametrize(("select_on", "lower", "epoch"), [("rsum", False, 1), ("r_precision", False, 2),
                                                            ("rsum", True, 2), ("r_precision", True, 1)])
def test_model_selection_follows_the_evaluators_primary_metric_and_direction(
        tmp_path, monkeypatch, tiny_training, as_set_args, select_on, lower, epoch):
    """The epoch training selects is the one the evaluator ranks first: its primary metric, its direction."""
    import json

    import pcmr.train.trainer as trainer
    from pcmr.cli import main
    from pcmr.train.validation import validation_evaluator

    rows = iter([{**row, "i2t_r_precision": row["r_precision"], "t2i_r_precision": row["r_precision"],
                  "fallback": 0.0} for row in _SCRIPT])  # the mean R-Precision is read from both directions
    monkeypatch.setattr(trainer, "validate_with", lambda *args: next(rows))
    if lower:
        def lower_is_better(*args, **kwargs):
            base = validation_evaluator(*args, **kwargs)
            return _LowerIsBetter(base.split, primary_metric=base.primary_metric)
        monkeypatch.setattr(trainer, "validation_evaluator", lower_is_better)
    items = [*tiny_training, "train.epochs=3", "train.max_steps_per_epoch=1", f"train.select_on={select_on}"]
    assert main(["train", "vsepp_max", "--out", str(tmp_path), "--name", "run", *as_set_args(items),
                 "--no-progress"]) == 0
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["best_epoch"] == epoch


def test_run_config_errors_name_the_file(run_dir):
    model = pcmr.load(run_dir)
    model.run_config = {**model.run_config, "train": {"epochs": "many"}}
    with pytest.raises(ValueError, match=f"{run_dir / 'config.yaml'}: .*train.epochs"):
        run_config(model)
    model.run_config = {**model.run_config, "eval": {"batch_size": "many"}}
    with pytest.raises(ValueError, match=f"{run_dir / 'config.yaml'}: .*eval.batch_size"):
        run_defaults(model)


def test_run_defaults_without_a_run_config_are_the_librarys(run_dir):
    bare = pcmr.load(run_dir)
    bare.run_config = None
    defaults = run_defaults(bare)
    assert defaults.data is None and defaults.device is None
    assert (defaults.split, defaults.val_split) == ("test", "val")
    from pcmr.metrics.defaults import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES

    assert (defaults.eval.similarities, defaults.eval.rerankers) == (list(DEFAULT_SIMILARITIES), list(DEFAULT_RERANKERS))
    with pytest.raises(ValueError, match="--data is required"):
        evaluation.model_evaluator(bare)


def test_one_pcmr_evaluate_parses_the_run_config_once(run_dir, tmp_path, monkeypatch):
    """The run's defaults are parsed once per model: ``pcmr evaluate`` asks for them three times (the
    selection, the split, the evaluator); a replaced run config is parsed again."""
    import pcmr.run_defaults as defaults_module
    from pcmr.cli import main

    parsed = []
    original = defaults_module._parse_run_defaults
    monkeypatch.setattr(defaults_module, "_parse_run_defaults", lambda model, raw: parsed.append(raw) or original(model, raw))
    assert main(["evaluate", str(run_dir), "--similarity", "cosine", "--rerank", "nns", "--out", str(tmp_path / "ev")]) == 0
    assert len(parsed) == 1
    model = pcmr.load(run_dir)
    first = run_defaults(model)
    assert run_defaults(model) is first and len(parsed) == 2
    model.run_config = {**model.run_config, "eval": {"batch_size": 7}}
    assert run_defaults(model).eval.batch_size == 7 and len(parsed) == 3
