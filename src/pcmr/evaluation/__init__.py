"""Evaluation of a trained model on a retrieval split: the table of SPEC §6 metrics for every
requested similarity x re-ranker, saved as Markdown, CSV, JSON and PNG plots.

The library part of pcmr: it never imports ``pcmr.train`` or ``pcmr.cli``.
"""

from __future__ import annotations

from pcmr.evaluation.report import EvaluationResult, format_table, merge_rows

__all__ = ["EvaluationResult", "format_table", "merge_rows"]
