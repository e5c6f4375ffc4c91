"""Paired significance tests over per-query scores, and Holm's multiple-comparison correction.

Both tests look at the per-query differences d_i = a_i − b_i of two systems on the same queries:

- paired t-test (Student 1908): t = mean(d) / (sd(d) / √n), sd with n − 1 degrees of freedom;
  two-sided p = 2 · P(T_{n−1} ≥ |t|). Differences that are all 0 give p = 1, a constant non-zero
  difference p = 0 (scipy returns NaN for both).
- paired randomization test (Fisher 1935; for IR Smucker, Allan & Carterette, CIKM 2007): under
  H0 each d_i is as likely to have the other sign, so p = P(|Σ s_i d_i| ≥ |Σ d_i|) over random signs
  s_i ∈ {−1, +1}. Exact (all 2^n sign vectors of the non-zero d_i) when 2^n ≤ ``resamples``, else
  Monte Carlo with a seeded generator, p = (1 + hits) / (1 + resamples) (Phipson & Smyth 2010), so
  the same seed always gives the same p-value.

Undefined pairs: a NaN on either side (a metric that does not apply to that query, e.g.
abstention_precision where a system answered) is a pair the tests cannot use, so every function here
drops the pairs where a or b is NaN first and works on the rest: n is the number of defined pairs, and
a NaN never enters a sum or a comparison (``randomization_test([nan, 0], [0, nan])`` has no pair
left and returns p = NaN, not the 0 a NaN difference would give).

Holm (1979): with m p-values sorted ascending, p'_(j) = max_{i ≤ j} min(1, (m − i + 1) · p_(i)).

Effect sizes of the same differences (:func:`effect_size`):

- CI of mean(d): the t-interval mean(d) ± t_{1−α/2, n−1} · sd(d)/√n (the interval the t-test inverts);
- paired Cohen's d_z = mean(d) / sd(d) (Cohen 1988, §2.3.5; Lakens 2013, eq. 6);
- matched-pairs rank-biserial r = (T⁺ − T⁻) / (T⁺ + T⁻), T^± the sums of the ranks of |d_i| (average
  ranks for ties) over the non-zero d_i that are positive / negative (Kerby 2014; King & Minium 2008);
- minimal detectable difference MDD = δ* · sd(d), δ* the d_z at which the two-sided paired t-test at
  level α has power 1 − β: P(T' > t_c) + P(T' < −t_c) = 1 − β with T' ~ noncentral t(n − 1, δ*·√n) and
  t_c = t_{1−α/2, n−1} (Cohen 1988, ch. 2; statsmodels' ``TTestPower``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05  # significance level of the CIs, the MDD and the ``underpowered`` flag
POWER = 0.8  # power at which the minimal detectable difference is computed

# |Σ s d| counts as "at least as extreme" within this relative tolerance (float summation order).
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class PairedTest:
    statistic: float
    p_value: float


@dataclass(frozen=True)
class EffectSize:
    ci_low: float  # t-interval of mean(a − b) at level 1 − alpha
    ci_high: float
    cohens_d: float  # d_z = mean(d) / sd(d)
    rank_biserial: float  # (T⁺ − T⁻) / (T⁺ + T⁻)
    mdd: float  # minimal detectable |mean(d)| at the given power


def _differences(a, b) -> np.ndarray:
    """a − b over the defined pairs: those where neither a nor b is NaN (module docstring)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired tests need two equally long 1-d score vectors, got shapes {a.shape} and {b.shape}")
    defined = ~(np.isnan(a) | np.isnan(b))
    return a[defined] - b[defined]


def paired_t_test(a, b) -> PairedTest:
    """Two-sided paired t-test of mean(a − b) = 0 (see module docstring)."""
    d = _differences(a, b)
    n = len(d)
    if n < 2:
        return PairedTest(float("nan"), float("nan"))
    mean, sd = d.mean(), d.std(ddof=1)
    if sd == 0:
        return PairedTest(0.0, 1.0) if mean == 0 else PairedTest(float(np.copysign(np.inf, mean)), 0.0)
    t = mean / (sd / np.sqrt(n))
    return PairedTest(float(t), float(2 * stats.t.sf(abs(t), df=n - 1)))


def randomization_test(a, b, resamples: int = 10_000, seed: int = 0) -> PairedTest:
    """Two-sided paired sign-flip randomization test; statistic = mean(a − b)."""
    d = _differences(a, b)
    if len(d) == 0:
        return PairedTest(float("nan"), float("nan"))
    nonzero = d[d != 0]
    observed = abs(nonzero.sum())
    threshold = observed - _TOLERANCE * max(1.0, observed)
    n = len(nonzero)
    if n == 0:
        return PairedTest(0.0, 1.0)
    if 2**n <= resamples:  # exact: every sign vector once
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
        return PairedTest(float(d.mean()), float(np.mean(np.abs(signs @ nonzero) >= threshold)))
    rng = np.random.default_rng(seed)
    hits, chunk = 0, max(1, 2_000_000 // n)
    for start in range(0, resamples, chunk):
        signs = 1 - 2 * rng.integers(0, 2, size=(min(chunk, resamples - start), n))
        hits += int(np.count_nonzero(np.abs(signs @ nonzero) >= threshold))
    return PairedTest(float(d.mean()), (1 + hits) / (1 + resamples))


def detectable_effect(n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """δ* such that the two-sided paired t-test of n pairs at level ``alpha`` has ``power`` at d_z = δ*
    (see module docstring); NaN for n < 2."""
    if n < 2:
        return float("nan")
    df = n - 1
    critical = stats.t.isf(alpha / 2, df)

    def shortfall(effect: float) -> float:
        nc = effect * np.sqrt(n)
        lower = stats.nct.cdf(-critical, df, nc)  # NaN where it underflows (scipy), i.e. 0
        return stats.nct.sf(critical, df, nc) + np.nan_to_num(lower) - power

    upper = 1.0
    while shortfall(upper) < 0:
        upper *= 2
    return float(optimize.brentq(shortfall, 0.0, upper, xtol=1e-12))


def effect_size(a, b, alpha: float = ALPHA, power: float = POWER) -> EffectSize:
    """CI of mean(a − b), Cohen's d_z, rank-biserial r and the minimal detectable difference (see
    module docstring). All-zero differences give d_z = r = 0; a constant non-zero one d_z = ±inf."""
    d = _differences(a, b)
    n = len(d)
    if n < 2:
        return EffectSize(*[float("nan")] * 5)
    mean, sd = d.mean(), d.std(ddof=1)
    half = stats.t.isf(alpha / 2, n - 1) * sd / np.sqrt(n)
    cohens_d = mean / sd if sd else 0.0 if mean == 0 else float(np.copysign(np.inf, mean))
    nonzero = d[d != 0]
    ranks = stats.rankdata(np.abs(nonzero))
    rank_biserial = (ranks[nonzero > 0].sum() - ranks[nonzero < 0].sum()) / ranks.sum() if len(nonzero) else 0.0
    return EffectSize(
        float(mean - half),
        float(mean + half),
        float(cohens_d),
        float(rank_biserial),
        detectable_effect(n, alpha, power) * float(sd),
    )


def holm(p_values) -> np.ndarray:
    """Holm-adjusted p-values in the input order; NaN entries stay NaN and do not count in m."""
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    order = valid[np.argsort(p[valid], kind="stable")]
    m = len(order)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return adjusted


def win_tie_loss(a, b, tolerance: float = 1e-12) -> tuple[int, int, int]:
    """Defined pairs (no NaN) where a beats b, ties with it (|a − b| ≤ tolerance) and loses to it."""
    d = _differences(a, b)
    return int(np.sum(d > tolerance)), int(np.sum(np.abs(d) <= tolerance)), int(np.sum(d < -tolerance))
