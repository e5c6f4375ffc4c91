"""Significance tests against scipy and an independent randomization test; Holm by hand."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from scipy.stats import ttest_rel

from ragtrack.evaluators.significance import (
    EffectSize,
    PairedTest,
    detectable_effect,
    effect_size,
    holm,
    paired_t_test,
    randomization_test,
    win_tie_loss,
)


def reference_randomization_exact(a, b) -> float:
    """Every sign vector once, in plain Python."""
    d = [x - y for x, y in zip(a, b)]
    observed = abs(sum(d))
    extreme = total = 0
    for signs in itertools.product((1, -1), repeat=len(d)):
        total += 1
        extreme += abs(sum(s * x for s, x in zip(signs, d))) >= observed - 1e-9
    return extreme / total


def reference_randomization_sampled(a, b, resamples: int, seed: int) -> float:
    rng = random.Random(seed)
    d = [x - y for x, y in zip(a, b)]
    observed = abs(sum(d))
    hits = sum(abs(sum(x if rng.random() < 0.5 else -x for x in d)) >= observed - 1e-9 for _ in range(resamples))
    return (1 + hits) / (1 + resamples)


def paired_scores(seed: int, low: int, high: int, shift: float, spread: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-query scores of two systems on n ∈ [low, high) queries: a uniform, b = a − N(shift, spread)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(low, high))
    a = rng.uniform(0, 1, n)
    return a, a - rng.normal(shift, spread, n)


@pytest.mark.parametrize("seed", range(20))
def test_t_test_equals_scipy(seed: int) -> None:
    a, b = paired_scores(seed, 3, 300, 0.02 * (seed % 4), 0.3)
    ours, reference = paired_t_test(a, b), ttest_rel(a, b)
    assert ours.statistic == pytest.approx(reference.statistic, rel=1e-12)
    assert ours.p_value == pytest.approx(reference.pvalue, rel=1e-9, abs=1e-300)


def test_t_test_degenerate_differences() -> None:
    assert paired_t_test([0.5, 0.2, 0.1], [0.5, 0.2, 0.1]) == PairedTest(0.0, 1.0)
    assert paired_t_test([0.75, 0.5, 0.25], [0.5, 0.25, 0.0]).p_value == 0.0
    assert math.isnan(paired_t_test([0.5], [0.1]).p_value)


@pytest.mark.parametrize("seed", range(6))
def test_randomization_exact_equals_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(0, 1, 12), rng.uniform(0, 1, 12)
    b[:3] = a[:3]  # zero differences do not change the test
    assert randomization_test(a, b, resamples=4096).p_value == pytest.approx(
        reference_randomization_exact(a, b), abs=1e-15
    )


@pytest.mark.parametrize("seed", range(2))
def test_randomization_sampled_agrees_with_independent_implementation(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = 60
    a = rng.uniform(0, 1, n)
    b = a - rng.normal(0.04, 0.25, n)
    ours = randomization_test(a, b, resamples=20_000, seed=seed).p_value
    reference = reference_randomization_sampled(list(a), list(b), 20_000, seed)
    # two Monte Carlo estimates of one p: within 4.5 standard errors of their difference
    assert abs(ours - reference) <= 4.5 * math.sqrt(2 * reference * (1 - reference) / 20_000) + 1e-4
    # and near the t-test, which it approximates for n = 60
    assert ours == pytest.approx(paired_t_test(a, b).p_value, abs=0.03)


def test_same_seed_same_p_value() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.uniform(0, 1, 100), rng.uniform(0, 1, 100)
    first = randomization_test(a, b, resamples=5000, seed=3).p_value
    assert randomization_test(a, b, resamples=5000, seed=3).p_value == first
    others = {randomization_test(a, b, resamples=5000, seed=s).p_value for s in range(4, 10)}
    assert others != {first}, "the seed must drive the sampling"


def test_randomization_identical_systems() -> None:
    assert randomization_test([0.1, 0.4], [0.1, 0.4]) == PairedTest(0.0, 1.0)


def test_holm_by_hand() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4·0.005, 3·0.01, 2·0.03, max(1·0.04, 0.06)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    adjusted = holm([0.02, float("nan"), 0.04])
    assert math.isnan(adjusted[1]) and adjusted[[0, 2]] == pytest.approx([0.04, 0.04])


def test_win_tie_loss() -> None:
    assert win_tie_loss([0.5, 0.2, 0.3, 0.0], [0.4, 0.2, 0.6, 0.0]) == (1, 2, 1)


def rank_biserial_walsh(d) -> float:
    """r from the Walsh averages (d_i + d_j)/2, i ≤ j: (#positive − #negative) / (n(n+1)/2); equal to
    (T⁺ − T⁻)/(T⁺ + T⁻) when the |d_i| are distinct and non-zero."""
    walsh = [(d[i] + d[j]) / 2 for i in range(len(d)) for j in range(i, len(d))]
    return (sum(w > 0 for w in walsh) - sum(w < 0 for w in walsh)) / len(walsh)


@pytest.mark.parametrize("seed", range(12))
def test_effect_size_equals_statsmodels_scipy_and_the_formulas(seed: int) -> None:
    from statsmodels.stats.power import TTestPower

    a, b = paired_scores(seed, 2, 400, 0.03 * (seed % 3), 0.25)
    effect, d = effect_size(a, b), a - b
    assert effect.cohens_d == pytest.approx(d.mean() / d.std(ddof=1), rel=1e-12)
    assert effect.rank_biserial == pytest.approx(rank_biserial_walsh(d), abs=1e-12)
    interval = ttest_rel(a, b).confidence_interval(0.95)
    assert (effect.ci_low, effect.ci_high) == pytest.approx((interval.low, interval.high), rel=1e-10)
    power = TTestPower()
    assert power.power(effect.mdd / d.std(ddof=1), nobs=len(d), alpha=0.05) == pytest.approx(0.8, abs=1e-9)
    assert effect.mdd / d.std(ddof=1) == pytest.approx(
        power.solve_power(effect_size=None, nobs=len(d), alpha=0.05, power=0.8), rel=1e-4
    )


def test_effect_size_worked_example() -> None:
    # d = 0.1, 0.3, −0.2, 0.4, 0 (docs/metrics.md): zero dropped; |d| ranks 1, 3, 2, 4; T⁺ = 8, T⁻ = 2
    effect = effect_size([0.6, 0.8, 0.3, 0.9, 0.5], [0.5, 0.5, 0.5, 0.5, 0.5])
    assert effect.rank_biserial == pytest.approx(0.6)
    assert effect.cohens_d == pytest.approx(0.12 / np.sqrt(0.057), rel=1e-9)  # mean 0.12, var 0.057
    assert effect.mdd == pytest.approx(detectable_effect(5) * np.sqrt(0.057), rel=1e-12)
    assert detectable_effect(5) == pytest.approx(1.682, abs=5e-4)


def test_effect_size_degenerate_differences() -> None:
    assert effect_size([0.5, 0.2], [0.5, 0.2]) == EffectSize(0.0, 0.0, 0.0, 0.0, 0.0)
    constant = effect_size([0.75, 0.5, 0.25], [0.5, 0.25, 0.0])
    assert (constant.cohens_d, constant.rank_biserial, constant.mdd) == (np.inf, 1.0, 0.0)
    assert all(math.isnan(v) for v in vars(effect_size([0.5], [0.1])).values())


def _same(x: float, y: float) -> bool:
    return (math.isnan(x) and math.isnan(y)) or x == y


@pytest.mark.parametrize("seed", range(40))
def test_undefined_pairs_are_dropped_never_a_p_value(seed: int) -> None:
    """NaN on either side of a pair (a metric undefined on that query) drops the pair: every test on
    vectors with NaNs equals the same test on the NaN-free pairs, so a NaN never yields a p-value."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 14))
    a, b = rng.choice([0.0, 0.5, 1.0], n), rng.choice([0.0, 0.5, 1.0], n)
    if seed % 2:
        a, b = a + rng.normal(0, 0.1, n), b + rng.normal(0, 0.1, n)
    a[rng.random(n) < 0.3] = np.nan
    b[rng.random(n) < 0.3] = np.nan
    kept = ~(np.isnan(a) | np.isnan(b))
    for test in (paired_t_test, lambda x, y: randomization_test(x, y, resamples=64), randomization_test):
        got, clean = test(a, b), test(a[kept], b[kept])
        assert _same(got.p_value, clean.p_value) and _same(got.statistic, clean.statistic)
        if not kept.any():
            assert math.isnan(got.p_value)
    assert all(
        _same(x, y) for x, y in zip(vars(effect_size(a, b)).values(), vars(effect_size(a[kept], b[kept])).values())
    )
    assert win_tie_loss(a, b) == win_tie_loss(a[kept], b[kept]) and sum(win_tie_loss(a, b)) == kept.sum()


def test_randomization_of_undefined_pairs_reported_by_the_trial() -> None:
    """The user trial's case: two NaNs, the rest ties — no difference, p = 1 (was 0.0)."""
    assert randomization_test([np.nan, 0, 0, 0], [0, 0, 0, np.nan]) == PairedTest(0.0, 1.0)
    assert math.isnan(randomization_test([np.nan], [0.0]).p_value)
