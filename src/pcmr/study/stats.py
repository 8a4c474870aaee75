"""Confidence intervals and claim verdicts from seeds (pure functions, float64 Python).

- :func:`t_quantile`: quantile of Student's t distribution (CDF through the regularised
  incomplete beta function, inverted by bisection).
- :func:`mean_interval`: mean of ``n`` values and its two-sided t-interval,
  ``mean ± t_{(1+level)/2, n-1} · s / sqrt(n)`` with the sample standard deviation ``s`` (n - 1
  in the denominator).
- :func:`paired_interval`: the same on paired differences ``a_i - b_i`` (the paired t-interval).
- :func:`verdict`: ``holds`` / ``reversed`` / ``equal`` / ``inconclusive`` from an interval, the
  expected direction, a margin and a minimum effect (the rule is written out in ``docs/study.md``).
- :func:`paired_p_value`: the two-sided p-value of the paired t-test behind an interval.
- :func:`claim_p_values`: the one-sided p-values of the hypothesis a claim states (superiority,
  non-inferiority at its margin, equivalence by two one-sided tests) and of its reversal.
- :func:`required_seeds`: the seeds a claim needs at a given power (t-based iteration).
- :func:`holm_rejections`: Holm's step-down procedure over a family of p-values.
- :func:`welch_interval`: the difference of two independent means (trained seeds against the null of
  many untrained models) with Welch's t-interval and its two-sided p-value.
- :func:`null_percentile`: where one value falls in a sample of the null (mid-rank percent).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Interval", "EXPECTATIONS", "VERDICTS", "claim_p_values", "holm_rejections", "mean_interval",
           "null_percentile", "one_sided_alpha", "paired_interval", "paired_p_value", "required_seeds", "t_cdf",
           "t_quantile", "verdict", "welch_interval"]

#: expected relation of condition a to condition b: a > b, a < b, a ~ b (within the margin)
EXPECTATIONS = ("greater", "less", "equal")
VERDICTS = ("holds", "reversed", "equal", "inconclusive")


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return h


def _regularised_beta(a: float, b: float, x: float) -> float:
    """``I_x(a, b)``, the regularised incomplete beta function, for ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def _check_df(df: float) -> float:
    if isinstance(df, bool) or not isinstance(df, (int, float)) or not df > 0 or math.isinf(df):
        raise ValueError(f"degrees of freedom must be a positive finite number, got {df!r}")
    return float(df)


def t_cdf(t: float, df: float) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom:
    ``1 - I_{df/(df+t^2)}(df/2, 1/2) / 2`` for ``t >= 0``, symmetric for ``t < 0``."""
    df = _check_df(df)
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _regularised_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p``-quantile of Student's t with ``df`` degrees of freedom (``0 < p < 1``)."""
    df = _check_df(df)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p < 1.0:
        raise ValueError(f"p must be a probability strictly between 0 and 1, got {p!r}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, 2.0 * high
    for _ in range(200):
        mid = 0.5 * (low + high)
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low <= 1e-13 * max(1.0, high):
            break
    return 0.5 * (low + high)


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` values with its two-sided t-interval ``[low, high]`` at ``level``.

    ``low``/``high``/``half_width`` are NaN when ``n < 2`` (no spread can be estimated). ``df``: the
    degrees of freedom of the t-distribution behind it (NaN: ``n - 1``; Welch's interval sets its own).
    """

    n: int
    mean: float
    std: float
    half_width: float
    level: float
    df: float = math.nan

    @property
    def degrees(self) -> float:
        """The degrees of freedom of the interval's t-distribution (``n - 1`` unless set)."""
        return float(self.n - 1) if math.isnan(self.df) else self.df

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width


def _clean(values: Sequence[float], name: str) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{name} must hold numbers, got {v!r}")
        if math.isnan(v) or math.isinf(v):
            raise ValueError(f"{name} must hold finite numbers, got {v!r}")
        out.append(float(v))
    return out


def mean_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """Mean and t-interval of ``values`` (one number per seed)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1, got {level!r}")
    data = _clean(values, "values")
    n = len(data)
    if n == 0:
        return Interval(0, math.nan, math.nan, math.nan, level)
    mean = math.fsum(data) / n
    if n < 2:
        return Interval(1, mean, math.nan, math.nan, level)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in data) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * std / math.sqrt(n)
    return Interval(n, mean, std, half, level)


def paired_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """Paired t-interval of the mean difference ``a_i - b_i`` (``a``, ``b``: one value per seed,
    in the same seed order)."""
    a_values, b_values = _clean(a, "a"), _clean(b, "b")
    if len(a_values) != len(b_values):
        raise ValueError(f"paired samples need the same length, got {len(a_values)} and {len(b_values)}")
    return mean_interval([x - y for x, y in zip(a_values, b_values)], level)


def paired_p_value(interval: Interval) -> float:
    """Two-sided p-value of the t-test of ``mean = 0`` behind ``interval``:
    ``2 P(T_{n-1} >= |mean| / (std / sqrt(n)))``; 1.0 when the spread is zero with a zero mean, 0.0
    when it is zero with a non-zero mean, NaN with fewer than two values."""
    if interval.n < 2 or math.isnan(interval.std):
        return math.nan
    if interval.std == 0:
        return 1.0 if interval.mean == 0 else 0.0
    t = abs(interval.mean) / (interval.std / math.sqrt(interval.n))
    return min(1.0, 2.0 * (1.0 - t_cdf(t, interval.n - 1)))


def holm_rejections(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure (Holm 1979): sort the ``m`` p-values ascending and reject the
    ``k``-th smallest while ``p_(k) <= alpha / (m - k + 1)``; stop at the first that fails. Controls
    the family-wise error rate at ``alpha``. NaN p-values are never rejected but count in ``m``.
    Returns one flag per input, in input order."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha!r}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (math.isnan(p_values[i]), p_values[i] if not math.isnan(p_values[i])
                                            else 0.0))
    rejected = [False] * m
    for k, i in enumerate(order):
        p = p_values[i]
        if math.isnan(p) or p > alpha / (m - k):
            break
        rejected[i] = True
    return rejected


def verdict(interval: Interval, expect: str, margin: float = 0.0, min_effect: float = 0.0) -> str:
    """``holds``, ``reversed``, ``equal`` or ``inconclusive`` for the difference ``a - b`` (see docs/study.md).

    - ``greater`` (a > b; with ``margin > 0``: a >= b - margin): holds when ``low > -margin``,
      reversed when ``high < -margin``.
    - ``less`` (a < b; with a margin: a <= b + margin): holds when ``high < margin``, reversed when
      ``low > margin``.
    - ``equal`` (a ~ b, ``margin > 0`` required): holds when ``-margin < low`` and ``high < margin``;
      reversed when the interval lies entirely outside ``[-margin, margin]``.
    - Otherwise, and whenever the interval is undefined (fewer than two pairs): inconclusive.

    With a minimum effect ``e > 0`` (directional claims only; the smallest difference that matters, which
    sets the seeds the claim needs, :func:`required_seeds`): an interval inside ``(-e, e)`` reads ``equal``
    (the difference is shown smaller than what matters, by two one-sided tests at ``e``); otherwise
    ``holds`` when the interval excludes zero on the expected side, ``reversed`` when it excludes zero on
    the other; anything else is ``inconclusive``. Each verdict is the rejection of the hypothesis
    :func:`claim_p_values` tests, at the one-sided level ``(1 - level) / 2``.
    """
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {', '.join(EXPECTATIONS)}, got {expect!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin >= 0 or math.isinf(margin):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    if expect == "equal" and margin == 0:
        raise ValueError("an 'equal' claim needs a margin > 0 (equivalence within +-margin)")
    if isinstance(min_effect, bool) or not isinstance(min_effect, (int, float)) or not min_effect >= 0 \
            or math.isinf(min_effect):
        raise ValueError(f"min_effect must be a finite number >= 0, got {min_effect!r}")
    low, high = interval.low, interval.high
    if interval.n < 2 or math.isnan(low) or math.isnan(high):
        return "inconclusive"
    if min_effect > 0 and expect != "equal":
        if -min_effect < low and high < min_effect:
            return "equal"
        sign = 1.0 if expect == "greater" else -1.0
        lo, hi = sorted((sign * low, sign * high))
        return "holds" if lo > 0 else ("reversed" if hi < 0 else "inconclusive")
    if expect == "greater":
        return "holds" if low > -margin else ("reversed" if high < -margin else "inconclusive")
    if expect == "less":
        return "holds" if high < margin else ("reversed" if low > margin else "inconclusive")
    if -margin < low and high < margin:
        return "holds"
    return "reversed" if (low > margin or high < -margin) else "inconclusive"


def one_sided_alpha(level: float) -> float:
    """The one-sided level of each test behind a two-sided ``level`` interval: ``(1 - level) / 2``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1, got {level!r}")
    return (1.0 - level) / 2.0


def _upper_tail(interval: Interval, bound: float) -> float:
    """``P(T >= (mean - bound) / se)``: the p-value of ``H0: mean <= bound`` against ``mean > bound``."""
    if interval.n < 2 or math.isnan(interval.std) or math.isnan(interval.mean):
        return math.nan
    if interval.std == 0:
        return 0.0 if interval.mean > bound else 1.0
    t = (interval.mean - bound) / (interval.std / math.sqrt(interval.n))
    return 1.0 - t_cdf(t, interval.degrees)


def _lower_tail(interval: Interval, bound: float) -> float:
    """``P(T <= (mean - bound) / se)``: the p-value of ``H0: mean >= bound`` against ``mean < bound``."""
    if interval.n < 2 or math.isnan(interval.std) or math.isnan(interval.mean):
        return math.nan
    if interval.std == 0:
        return 0.0 if interval.mean < bound else 1.0
    t = (interval.mean - bound) / (interval.std / math.sqrt(interval.n))
    return t_cdf(t, interval.degrees)


def claim_p_values(interval: Interval, expect: str, margin: float = 0.0) -> tuple[float, float]:
    """``(p, p_reversed)``: one-sided p-values of the hypothesis a claim states and of its reversal, from
    the t-distribution behind ``interval`` (the difference ``a - b``):

    - ``greater`` (with a margin ``m``: non-inferiority, ``a >= b - m``): ``p`` tests ``H0: a - b <= -m``,
      ``p_reversed`` tests ``H0: a - b >= -m``;
    - ``less`` (``a <= b + m``): ``p`` tests ``H0: a - b >= m``, ``p_reversed`` ``H0: a - b <= m``;
    - ``equal`` (margin ``m > 0``): ``p`` is the larger of the two one-sided tests of ``H0: a - b <= -m``
      and ``H0: a - b >= m`` (TOST, Schuirmann 1987); ``p_reversed`` the smaller of the tests that the
      difference lies beyond ``-m`` or beyond ``m``.

    A minimum effect does not enter: it sets the power (:func:`required_seeds`), the test is against zero.
    A verdict ``holds`` at ``level`` is ``p <= (1 - level) / 2``, exactly the interval's rule in
    :func:`verdict`. NaN with fewer than two values."""
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {', '.join(EXPECTATIONS)}, got {expect!r}")
    if expect == "greater":
        return _upper_tail(interval, -margin), _lower_tail(interval, -margin)
    if expect == "less":
        return _lower_tail(interval, margin), _upper_tail(interval, margin)
    tost = max(_upper_tail(interval, -margin), _lower_tail(interval, margin))
    outside = min(_lower_tail(interval, -margin), _upper_tail(interval, margin))
    return tost, outside


def required_seeds(sd: float, effect: float, expect: str, alpha: float, power: float = 0.8,
                   max_seeds: int = 10_000) -> int:
    """The fewest seeds ``n`` (at least 2) whose one-sided paired t-test at level ``alpha`` reaches
    ``power`` when the true difference lies ``effect`` from the tested bound and the seeds' differences
    have standard deviation ``sd``:

        ``n >= ((t_{1-alpha, n-1} + t_{q, n-1}) sd / effect)^2``,

    with ``q = power`` for a superiority or non-inferiority test and ``q = (1 + power) / 2`` for an
    equivalence test at a true difference of zero (both one-sided tests must reject), iterated from
    ``n = 2`` because the t-quantiles depend on ``n``. ``max_seeds + 1`` where even ``max_seeds`` do not
    suffice."""
    for name, value in (("sd", sd), ("effect", effect)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0 \
                or math.isinf(value):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if not effect > 0:
        raise ValueError(f"effect must be > 0 (the minimum effect or margin), got {effect!r}")
    if not 0.0 < alpha < 0.5 or not 0.0 < power < 1.0:
        raise ValueError(f"expected 0 < alpha < 0.5 and 0 < power < 1, got {alpha!r} and {power!r}")
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {', '.join(EXPECTATIONS)}, got {expect!r}")
    quantile = (1.0 + power) / 2.0 if expect == "equal" else power
    for n in range(2, max_seeds + 1):
        needed = ((t_quantile(1.0 - alpha, n - 1) + t_quantile(quantile, n - 1)) * sd / effect) ** 2
        if n >= needed:
            return n
    return max_seeds + 1


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> tuple[Interval, float]:
    """``(interval, p)``: the difference ``mean(a) - mean(b)`` of two independent samples with Welch's
    t-interval, ``d ± t_{(1+level)/2, nu} · se``, ``se² = s_a²/n_a + s_b²/n_b`` and the
    Welch-Satterthwaite degrees of freedom ``nu = se⁴ / ((s_a²/n_a)²/(n_a-1) + (s_b²/n_b)²/(n_b-1))``,
    and the two-sided p-value ``2 P(T_nu >= |d| / se)`` (Welch 1947).

    The interval's ``n`` is ``len(a)`` (the trained seeds) and its ``std`` is ``se · sqrt(n)``; with
    fewer than two values on a side the interval is undefined and ``p`` NaN; with ``se = 0``, ``p`` is
    0 for a non-zero difference and 1 for none."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1, got {level!r}")
    a_values, b_values = _clean(a, "a"), _clean(b, "b")
    n_a, n_b = len(a_values), len(b_values)
    if n_a == 0 or n_b == 0:
        return Interval(n_a, math.nan, math.nan, math.nan, level), math.nan
    mean = math.fsum(a_values) / n_a - math.fsum(b_values) / n_b
    if n_a < 2 or n_b < 2:
        return Interval(n_a, mean, math.nan, math.nan, level), math.nan
    var_a = math.fsum((v - math.fsum(a_values) / n_a) ** 2 for v in a_values) / (n_a - 1) / n_a
    var_b = math.fsum((v - math.fsum(b_values) / n_b) ** 2 for v in b_values) / (n_b - 1) / n_b
    se = math.sqrt(var_a + var_b)
    if se == 0:
        return Interval(n_a, mean, 0.0, 0.0, level), (1.0 if mean == 0 else 0.0)
    df = se ** 4 / ((var_a ** 2 / (n_a - 1) if var_a else 0.0) + (var_b ** 2 / (n_b - 1) if var_b else 0.0))
    half = t_quantile(0.5 + level / 2.0, df) * se
    p = min(1.0, 2.0 * (1.0 - t_cdf(abs(mean) / se, df)))
    return Interval(n_a, mean, se * math.sqrt(n_a), half, level, df), p


def null_percentile(value: float, null: Sequence[float]) -> float:
    """Percent of the ``null`` sample below ``value``, ties counted half (the mid-rank percentile):
    ``100 (#{x < v} + #{x = v} / 2) / N``; NaN for an empty sample or a non-finite value."""
    data = _clean(null, "null")
    if not data or math.isnan(value) or math.isinf(value):
        return math.nan
    below = sum(x < value for x in data)
    tied = sum(x == value for x in data)
    return 100.0 * (below + 0.5 * tied) / len(data)
