"""Significance tests against scipy and an independent randomization test; Holm by hand."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from scipy.stats import ttest_rel

from ragtrack.evaluators.significance import PairedTest, holm, paired_t_test, randomization_test, win_tie_loss


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


@pytest.mark.parametrize("seed", range(20))
def test_t_test_equals_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 300))
    a = rng.uniform(0, 1, n)
    b = a - rng.normal(0.02 * (seed % 4), 0.3, n)
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
    assert randomization_test(a, b, resamples=4096).p_value == pytest.approx(reference_randomization_exact(a, b), abs=1e-15)


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
