"""The evaluation's settings are the fields of RetrievalEvaluator, declared once: evaluate_model and
pcmr.evaluate pass them through, and an unknown one is refused by name."""

from __future__ import annotations

import dataclasses

import pytest

from pcmr.data import Vocabulary, load_dataset
from pcmr.evaluation import RetrievalEvaluator, evaluate_model


def test_an_unknown_setting_is_refused_by_name(tiny_shapes):
    split = load_dataset("shapes", "test", **tiny_shapes)
    with pytest.raises(TypeError, match="num_fold"):
        evaluate_model(None, split, Vocabulary([]), num_fold=5)
    fields = {f.name for f in dataclasses.fields(RetrievalEvaluator)}
    assert {"similarities", "rerankers", "ks", "lambda_grid", "num_folds", "extra_positives", "meta"} <= fields
