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

Holm (1979): with m p-values sorted ascending, p'_(j) = max_{i ≤ j} min(1, (m − i + 1) · p_(i)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

# |Σ s d| counts as "at least as extreme" within this relative tolerance (float summation order).
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class PairedTest:
    statistic: float
    p_value: float


def _differences(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired tests need two equally long 1-d score vectors, got shapes {a.shape} and {b.shape}")
    return a - b


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
    if 2 ** n <= resamples:  # exact: every sign vector once
        signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
        return PairedTest(float(d.mean()), float(np.mean(np.abs(signs @ nonzero) >= threshold)))
    rng = np.random.default_rng(seed)
    hits, chunk = 0, max(1, 2_000_000 // n)
    for start in range(0, resamples, chunk):
        signs = 1 - 2 * rng.integers(0, 2, size=(min(chunk, resamples - start), n))
        hits += int(np.count_nonzero(np.abs(signs @ nonzero) >= threshold))
    return PairedTest(float(d.mean()), (1 + hits) / (1 + resamples))


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
    """Queries where a beats b, ties with it (|a − b| ≤ tolerance) and loses to it."""
    d = _differences(a, b)
    return int(np.sum(d > tolerance)), int(np.sum(np.abs(d) <= tolerance)), int(np.sum(d < -tolerance))
