"""Reproduction studies: a grid of runs (recipes x variants x seeds), each trained and evaluated,
and the papers' claims judged from paired seeds with confidence intervals.

    from pcmr.study import load_study, run_study
    spec = load_study("studies/tiny.yaml")
    run_study(spec, "runs/tiny", workers=2)   # writes results.csv, summary.md, claims.md

This package sits on top of training and evaluation (like the command line); nothing else in
pcmr imports it. See ``docs/study.md``.
"""

from __future__ import annotations

from pcmr.study.claims import Claim, Judgement, Selector, judge_claim, judge_claims, parse_claims
from pcmr.study.runner import StudyOutcome, collect, execute_run, read_marker, run_study, threads_per_worker
from pcmr.study.spec import (
    AnalysisOptions,
    RecipeEntry,
    StudyError,
    StudyRun,
    StudySpec,
    find_study,
    list_studies,
    load_study,
    parse_study,
    select_recipes,
)
from pcmr.study.stats import Interval, mean_interval, paired_interval, t_cdf, t_quantile, verdict

__all__ = [
    "AnalysisOptions",
    "Claim",
    "Interval",
    "Judgement",
    "RecipeEntry",
    "Selector",
    "StudyError",
    "StudyOutcome",
    "StudyRun",
    "StudySpec",
    "collect",
    "execute_run",
    "find_study",
    "judge_claim",
    "judge_claims",
    "list_studies",
    "load_study",
    "mean_interval",
    "paired_interval",
    "parse_claims",
    "parse_study",
    "read_marker",
    "run_study",
    "select_recipes",
    "t_cdf",
    "t_quantile",
    "threads_per_worker",
    "verdict",
]
