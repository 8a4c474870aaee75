"""The evaluation package stays small pieces: no function over 80 lines, and a figure is one registered
producer (adding one touches no other module)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from pcmr import Gaussian
from pcmr.evaluation import evaluate_embeddings
from pcmr.evaluation.producers import PRODUCERS, EvaluationContext, register_producer

EVALUATION = Path(__file__).resolve().parents[2] / "src" / "pcmr" / "evaluation"
#: the longest a function of pcmr.evaluation may be, in lines (its decorators and docstring included)
MAX_FUNCTION_LINES = 80


def _long_functions(folder: Path, limit: int) -> list[str]:
    """``file:line name (N lines)`` of every function or method in ``folder`` longer than ``limit`` lines."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - first + 1
                if length > limit:
                    found.append(f"{path.name}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_the_check_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(90))
    (tmp_path / "sample.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert _long_functions(tmp_path, MAX_FUNCTION_LINES) == ["sample.py:5 long (91 lines)"]


def test_no_function_of_the_evaluation_is_over_80_lines():
    assert _long_functions(EVALUATION, MAX_FUNCTION_LINES) == []


def test_a_registered_figure_producer_adds_its_figure_and_sees_the_cached_scores():
    seen: list[list[str]] = []

    def mean_score(context: EvaluationContext) -> None:
        seen.append(list(context.scores))
        context.report.figures["throwaway_mean_score"] = {
            name: float(scores.mean()) for name, scores in context.scores.items()}

    register_producer("throwaway_mean_score")(mean_score)
    try:
        gen = torch.Generator().manual_seed(0)
        images = Gaussian(torch.randn(12, 4, generator=gen), torch.randn(12, 4, generator=gen))
        captions = Gaussian(torch.randn(12, 4, generator=gen), torch.randn(12, 4, generator=gen))
        report = evaluate_embeddings(images, captions, torch.eye(12, dtype=torch.bool),
                                     similarities=["cosine", "l2"], rerankers=["nns"])
    finally:
        PRODUCERS.unregister("throwaway_mean_score")
    assert seen == [["cosine", "l2"]]
    expected = float((images.mean / images.mean.norm(dim=1, keepdim=True)
                      @ (captions.mean / captions.mean.norm(dim=1, keepdim=True)).T).mean())
    assert report.figures["throwaway_mean_score"]["cosine"] == pytest.approx(expected, abs=1e-6)
    assert "throwaway_mean_score" not in PRODUCERS
