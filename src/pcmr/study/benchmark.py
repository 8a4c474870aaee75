"""The benchmark check: a study judges claims only on data its deterministic baseline has learned.

A comparison between methods says little where none of them learned the task. Before judging any
claim, a study with a ``benchmark`` section reads the baseline's rows of ``results.csv`` (one recipe,
variant, re-ranker and relevance mode) and requires, on the mean over seeds:

- text->image R-Precision of at least ``min_t2i_r_precision`` (percent);
- image->text *skill* ``(R-P - QB) / (100 - QB)`` of at least ``min_i2t_skill``, where ``QB`` is the
  query-blind ranking's R-Precision on the same split (:mod:`pcmr.metrics.query_blind`; the column
  ``i2t_query_blind_r_precision`` of every study row).

When either fails, or the rows to decide it are missing, every verdict reads
:data:`BENCHMARK_NOT_LEARNED` (the intervals are still shown), unless the check is not ``blocking``:
then it is only reported, as the line that says whether the data can be learned at all (a study whose
claims carry their own skill gate). See ``docs/study.md``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pcmr.config import ConfigError, build_dataclass
from pcmr.evaluation import columns
from pcmr.metrics.query_blind import retrieval_skill
from pcmr.relevance import I2T, T2I
from pcmr.study.claims import Judgement

__all__ = ["BENCHMARK_NOT_LEARNED", "BenchmarkCheck", "BenchmarkResult", "apply_benchmark", "benchmark_markdown",
           "check_benchmark", "parse_benchmark"]

#: the verdict of every claim of a study whose benchmark check fails
BENCHMARK_NOT_LEARNED = "benchmark not learned"
QUERY_BLIND_COLUMN = columns.query_blind_r_precision(I2T)
_T2I_RP, _I2T_RP = columns.r_precision(T2I), columns.r_precision(I2T)
_SELECTED = ("recipe", "variant", "similarity", "rerank", "relevance")


@dataclass(frozen=True)
class BenchmarkCheck:
    """The ``benchmark`` section of a study file: which rows are the baseline and the thresholds."""

    recipe: str = "pcme_mu_only"
    variant: str | None = None  # None: any (then one variant must be present)
    similarity: str | None = None  # None: any (one similarity must be present)
    rerank: str = "nns"
    relevance: str = "exact"
    min_t2i_r_precision: float = 60.0  # percent
    min_i2t_skill: float = 0.5  # (R-P - QB) / (100 - QB)
    #: True: a failed check withholds every verdict; False: the check is a reported "data learnable" line
    #: (for a study whose claims carry their own skill gate)
    blocking: bool = True

    def describe(self) -> str:
        """``recipe/variant/similarity/re-ranker/relevance`` of the pinned fields."""
        return "/".join(str(getattr(self, f)) for f in _SELECTED if getattr(self, f) is not None)


@dataclass(frozen=True)
class BenchmarkResult:
    """The outcome of :func:`check_benchmark` (means over ``seeds``; NaN where not measured)."""

    check: BenchmarkCheck
    passed: bool
    reason: str  # why it failed ("" when it passed)
    seeds: tuple[int, ...] = ()
    t2i_r_precision: float = math.nan
    i2t_r_precision: float = math.nan
    i2t_query_blind: float = math.nan
    i2t_skill: float = math.nan


def parse_benchmark(raw: Any, where: str = "benchmark") -> BenchmarkCheck | None:
    """The :class:`BenchmarkCheck` of a study file's ``benchmark`` mapping (None when absent);
    unknown keys and values of the wrong type raise ``ValueError`` naming the key."""
    if raw is None:
        return None
    try:
        check: BenchmarkCheck = build_dataclass(BenchmarkCheck, raw, where="benchmark", label="study file")
    except ConfigError as exc:
        raise ValueError(f"{where}: {exc}") from None
    for key in ("recipe", "rerank", "relevance"):
        if not getattr(check, key):
            raise ValueError(f"{where}.{key}: expected a name, got {getattr(check, key)!r}")
    if not 0.0 <= check.min_t2i_r_precision <= 100.0:
        raise ValueError(f"{where}.min_t2i_r_precision: expected a percentage in [0, 100], "
                         f"got {check.min_t2i_r_precision!r}")
    if not -math.inf < check.min_i2t_skill <= 1.0:
        raise ValueError(f"{where}.min_i2t_skill: expected a number <= 1, got {check.min_i2t_skill!r}")
    return check


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) or math.isinf(value) else float(value)


def check_benchmark(check: BenchmarkCheck, rows: Sequence[dict[str, Any]]) -> BenchmarkResult:
    """Decide whether the baseline of ``check`` learned the benchmark, from result rows (dicts with
    ``seed``, the selector fields, ``t2i_r_precision``, ``i2t_r_precision`` and
    ``i2t_query_blind_r_precision``): the seed means of both R-Precisions and of the query-blind
    R-Precision, then the two thresholds of the module docstring."""
    chosen = [r for r in rows if all(getattr(check, f) is None or str(r.get(f)) == getattr(check, f)
                                     for f in _SELECTED)]
    if not chosen:
        return BenchmarkResult(check, False, f"no result rows of the baseline {check.describe()}")
    for field in ("variant", "similarity"):
        found = sorted({str(r.get(field)) for r in chosen})
        if len(found) > 1:
            return BenchmarkResult(check, False, f"the baseline {check.describe()} matches several values of "
                                                 f"{field} ({', '.join(found)}); pin benchmark.{field}")
    means: dict[str, float] = {}
    seeds: set[int] = set()
    for column in (_T2I_RP, _I2T_RP, QUERY_BLIND_COLUMN):
        by_seed = {int(r["seed"]): v for r in chosen if (v := _number(r.get(column))) is not None}
        if not by_seed:
            return BenchmarkResult(check, False, f"the baseline {check.describe()} has no {column} column")
        means[column] = statistics.fmean(by_seed.values())
        seeds |= set(by_seed)
    skill = retrieval_skill(means[_I2T_RP], means[QUERY_BLIND_COLUMN])
    failed = []
    if not means[_T2I_RP] >= check.min_t2i_r_precision:
        failed.append(f"t2i R-Precision {means[_T2I_RP]:.1f} < {check.min_t2i_r_precision:g}")
    if not skill >= check.min_i2t_skill:
        failed.append(f"i2t skill {skill:.2f} < {check.min_i2t_skill:g}")
    return BenchmarkResult(check, not failed, "; ".join(failed), tuple(sorted(seeds)), means[_T2I_RP],
                           means[_I2T_RP], means[QUERY_BLIND_COLUMN], skill)


def benchmark_markdown(result: BenchmarkResult) -> list[str]:
    """Lines of ``claims.md`` that state the check and its outcome."""
    check = result.check
    heading = "## Benchmark check" if check.blocking else "## Data learnable (benchmark check, reported)"
    lines = [heading, "",
             f"Baseline {check.describe()}, mean over seeds {', '.join(map(str, result.seeds)) or '-'}: "
             f"t2i R-Precision {result.t2i_r_precision:.1f} (needs >= {check.min_t2i_r_precision:g}); "
             f"i2t R-Precision {result.i2t_r_precision:.1f} against the query-blind ranking's "
             f"{result.i2t_query_blind:.1f}, skill (R-P - QB) / (100 - QB) = {result.i2t_skill:.2f} "
             f"(needs >= {check.min_i2t_skill:g}).", ""]
    if not check.blocking:
        lines += [("Passed" if result.passed else f"Not passed ({result.reason})")
                  + ": reported only; each claim is gated on the skill of the models it reads.", ""]
    elif result.passed:
        lines += ["Passed: the claims below are judged.", ""]
    else:
        lines += [f"**Benchmark not learned** ({result.reason}): no claim is judged; every verdict reads "
                  f"`{BENCHMARK_NOT_LEARNED}` and the intervals are shown for reference only.", ""]
    return lines


def apply_benchmark(judgements: Sequence[Judgement], result: BenchmarkResult | None) -> list[Judgement]:
    """``judgements`` as judged when the check passed (or there is none); otherwise each, and each of its
    sweep cells, with the verdict and the Holm verdict :data:`BENCHMARK_NOT_LEARNED` (its interval and
    p-value kept, the gate's reading dropped)."""
    if result is None or result.passed or not result.check.blocking:
        return list(judgements)

    def withheld(j: Judgement) -> Judgement:
        return replace(j, verdict=BENCHMARK_NOT_LEARNED, holm=BENCHMARK_NOT_LEARNED, ungated="",
                       cells=tuple(withheld(c) for c in j.cells))

    return [withheld(j) for j in judgements]
