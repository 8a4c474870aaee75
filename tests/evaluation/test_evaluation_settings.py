"""The evaluation's settings are declared once: the scoring settings in EvaluationSettings, which
RetrievalEvaluator extends with what only a model evaluation has. evaluate_embeddings, evaluate_model,
model_evaluator and pcmr.evaluate take them by keyword without declaring any of their own (so the names
and defaults cannot drift apart), and an unknown one is refused by name with its near miss."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from pcmr.data import load_dataset
from pcmr.evaluation import EvaluationSettings, RetrievalEvaluator, evaluate_embeddings, evaluate_model
from pcmr.evaluation import model as model_entry
from pcmr.evaluation.evaluator import evaluator_setting_names
from pcmr.evaluation.table import setting_names
from pcmr.gaussian import Gaussian

ENTRIES = [evaluate_embeddings, evaluate_model, model_entry.model_evaluator, model_entry.evaluate,
           model_entry.evaluate_modes]


def test_an_unknown_setting_is_refused_by_name(tiny_shapes):
    split = load_dataset("shapes", "test", **tiny_shapes)
    with pytest.raises(TypeError, match=r"unknown evaluation setting 'num_fold' \(did you mean 'num_folds'\?\)"):
        evaluate_model(None, split, num_fold=5)
    fields = {f.name for f in dataclasses.fields(RetrievalEvaluator)}
    assert {"similarities", "rerankers", "ks", "lambda_grid", "num_folds", "extra_positives", "meta"} <= fields


def test_the_evaluator_extends_the_one_declaration():
    assert issubclass(RetrievalEvaluator, EvaluationSettings)
    ours = {f.name: f for f in dataclasses.fields(EvaluationSettings)}
    theirs = {f.name: f for f in dataclasses.fields(RetrievalEvaluator)}
    for name, declared in ours.items():  # the same field objects: same default, same factory
        assert theirs[name].default == declared.default and theirs[name].default_factory == declared.default_factory
    assert set(evaluator_setting_names()) == set(theirs) - {"split"}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda f: f.__name__)
def test_no_entry_declares_a_setting_of_its_own(entry):
    """Every setting reaches an entry through ``**keywords``, checked against the dataclass fields: a
    parameter of its own would carry a second default that could drift."""
    parameters = inspect.signature(entry).parameters
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    if entry is evaluate_embeddings:  # below the evaluator: it takes the resolved positive sets, folds, metadata
        own = set(parameters) & set(setting_names())
    else:
        own = set(parameters) & set(evaluator_setting_names()) - {"val_split"}  # a split or its name
    assert not own, f"{entry.__name__} declares {sorted(own)} itself"


def test_evaluate_embeddings_takes_exactly_the_dataclass_fields():
    generator = torch.Generator().manual_seed(0)
    images = Gaussian(torch.randn(12, 4, generator=generator), torch.randn(12, 4, generator=generator))
    captions = Gaussian(torch.randn(12, 4, generator=generator), torch.randn(12, 4, generator=generator))
    relevance = torch.eye(12, dtype=torch.bool)
    chosen = {"similarities": ["cosine"], "rerankers": ["nns"], "ks": (1, 5), "figures": False}
    by_keyword = evaluate_embeddings(images, captions, relevance, hubness_ks=(), **chosen)
    by_object = evaluate_embeddings(images, captions, relevance, hubness_ks=(),
                                    settings=EvaluationSettings(**chosen))  # type: ignore[arg-type]
    assert by_keyword.rows == by_object.rows and "i2t_R@5" in by_keyword.rows[0]
    with pytest.raises(TypeError, match=r"unknown evaluation setting 'reranker' \(did you mean 'rerankers'\?\); "
                                        r"expected one of: similarities, rerankers"):
        evaluate_embeddings(images, captions, relevance, reranker=["nns"])
    with pytest.raises(TypeError, match="'batch_size'"):  # a model evaluation's setting, not an embeddings one
        evaluate_embeddings(images, captions, relevance, settings=EvaluationSettings(), batch_size=4)


class _Reached(Exception):
    """Raised where model_evaluator starts to resolve the run's defaults: its keywords were accepted."""


def test_model_evaluator_accepts_exactly_the_evaluator_fields(monkeypatch):
    def reached(model):
        raise _Reached

    monkeypatch.setattr(model_entry, "run_defaults", reached)
    for name in evaluator_setting_names():
        with pytest.raises(_Reached):
            model_entry.model_evaluator(None, **{name: None})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"unknown evaluation setting 'rerank_option' \(did you mean 'rerank_options'\?\)"):
        model_entry.model_evaluator(None, rerank_option={})  # type: ignore[arg-type]
