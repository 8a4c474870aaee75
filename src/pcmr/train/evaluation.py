"""The one evaluation of a trained model, under the names the trainer's layer gave it before it moved to
the library (:mod:`pcmr.evaluation.model`, ``pcmr.evaluate``): kept so that code importing it from here
keeps working."""

from __future__ import annotations

from pcmr.evaluation.model import evaluate as evaluate_run
from pcmr.evaluation.model import evaluate_modes as evaluate_run_modes
from pcmr.evaluation.model import model_evaluator as run_evaluator
from pcmr.run_defaults import evaluation_device

__all__ = ["evaluate_run", "evaluate_run_modes", "evaluation_device", "run_evaluator"]
