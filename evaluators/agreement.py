"""Agreement between a judge and people, and the prediction-powered (PPI) judge mean: pure functions, no I/O.

Every agreement figure is computed from the K × K confusion matrix O of the n items both rated
(rows: the judge's category, columns: the person's; categories in scale order, positions 0..K−1):

- **Cohen's kappa** (Cohen 1960; weighted: Cohen 1968): with p = O/n, row and column margins r and c,
  E = r cᵀ the matrix chance would give and weights w_ij (0 on the diagonal),
  κ_w = 1 − Σ w_ij p_ij / Σ w_ij E_ij. Unweighted: w_ij = [i ≠ j]; linear: |i − j|; quadratic:
  (i − j)² (positions on the scale, as scikit-learn's ``cohen_kappa_score(labels=scale)``). NaN when
  chance agreement is perfect (Σ w E = 0: both raters used one and the same category).
- **Krippendorff's alpha** (Krippendorff 2004, *Content Analysis*, ch. 11; 2011, "Computing
  Krippendorff's Alpha-Reliability"): two coders and no missing values make the coincidence matrix
  o = O + Oᵀ, with n_c = Σ_k o_ck and n·· = 2n pairable values;
  α = 1 − (n·· − 1) Σ o_ck δ_ck / Σ n_c n_k δ_ck, with δ nominal [c ≠ k], interval (v_c − v_k)²
  (v the scale's values) or ordinal (Σ_{g=c}^{k} n_g − (n_c + n_k)/2)² (the ``krippendorff`` package's
  metrics). NaN when every value is the same (no expected disagreement).
- **Accuracy**: Σ_i O_ii / n, the share of items both put in the same category.

Each has a percentile bootstrap CI: ``resamples`` samples of the n items drawn with replacement
(seeded: :func:`ragtrack.evaluators.base.bootstrap_means` on the items' one-hot confusion cells, so the
draws are those of every other CI in ragtrack), the figure recomputed on each, the 2.5 and 97.5
percentiles of the resamples where it is defined.

**PPI mean** (prediction-powered inference, Angelopoulos, Bates, Fannjiang, Jordan & Zrnic, "Prediction-
powered inference", Science 382, 2023): N items have a judge score f, a random n of them also a
person's label y. θ̂ = mean_N(f) + mean_n(y − f): the judge's mean corrected by the rectifier (the
mean human − judge difference on the labelled items). Splitting the N items into the n labelled and
N_u = N − n unlabelled ones, θ̂ = λ·mean_u(f) + mean_n(y − λf) with λ = N_u/N, the PPI mean with a fixed
power-tuning weight (Angelopoulos, Duchi & Zrnic, "PPI++", 2023; λ = 1 is the Science paper's
estimator, which leaves the labelled items' scores out of the first mean). Its CI is the paper's normal
interval with the two variance terms, θ̂ ± z_{1−a/2} · √(λ² σ̂²_u(f)/N_u + σ̂²_n(y − λf)/n), variances
with divisor N_u and n as in the paper and ``ppi_py.ppi_mean_ci(..., lam=λ)``. All items labelled
(N_u = 0, λ = 0) gives the labels' mean with its CLT interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from ragtrack.evaluators.base import bootstrap_means

Weights = Literal["none", "linear", "quadratic"]
Level = Literal["nominal", "ordinal", "interval"]
FIGURES = ("kappa", "alpha", "accuracy")
CONFIDENCE = 0.95  # level of the bootstrap and PPI intervals, as every other CI of ragtrack


def confusion(judge, human, categories: int) -> np.ndarray:
    """K × K counts of (judge category, human category); both given as positions 0..K−1."""
    judge, human = np.asarray(judge, dtype=int), np.asarray(human, dtype=int)
    if judge.shape != human.shape or judge.ndim != 1:
        raise ValueError(
            f"agreement needs two equally long 1-d label vectors, got shapes {judge.shape} and {human.shape}"
        )
    if len(judge) and (min(judge.min(), human.min()) < 0 or max(judge.max(), human.max()) >= categories):
        raise ValueError(f"labels must be category positions 0..{categories - 1}")
    return np.bincount(judge * categories + human, minlength=categories * categories).reshape(categories, categories)


def _weights(categories: int, weights: Weights) -> np.ndarray:
    i, j = np.indices((categories, categories))
    return {"none": (i != j).astype(float), "linear": np.abs(i - j).astype(float), "quadratic": (i - j) ** 2.0}[weights]


def kappa(counts: np.ndarray, weights: Weights = "none") -> np.ndarray:
    """Cohen's (weighted) kappa of confusion matrices ``counts`` (..., K, K) (module docstring)."""
    counts = np.asarray(counts, dtype=float)
    w = _weights(counts.shape[-1], weights)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = counts / counts.sum(axis=(-2, -1), keepdims=True)
        expected = p.sum(axis=-1)[..., :, None] * p.sum(axis=-2)[..., None, :]
        return 1 - (w * p).sum(axis=(-2, -1)) / (w * expected).sum(axis=(-2, -1))


def _distances(totals: np.ndarray, level: Level, values: np.ndarray) -> np.ndarray:
    """δ_ck (..., K, K) of Krippendorff's alpha given the value totals n_c (..., K)."""
    k = totals.shape[-1]
    if level == "nominal":
        return np.broadcast_to(_weights(k, "none"), (*totals.shape[:-1], k, k))
    if level == "interval":
        return np.broadcast_to((values[:, None] - values[None, :]) ** 2.0, (*totals.shape[:-1], k, k))
    lo, hi = np.minimum.outer(np.arange(k), np.arange(k)), np.maximum.outer(np.arange(k), np.arange(k))
    cumulative = np.cumsum(totals, axis=-1)
    between = cumulative[..., hi] - cumulative[..., lo] + totals[..., lo]  # Σ_{g=lo}^{hi} n_g
    return (between - (totals[..., :, None] + totals[..., None, :]) / 2) ** 2


def alpha(counts: np.ndarray, level: Level = "nominal", values=None) -> np.ndarray:
    """Krippendorff's alpha of two coders from confusion matrices ``counts`` (..., K, K); ``values``:
    the categories' numbers (interval level; default 0..K−1)."""
    counts = np.asarray(counts, dtype=float)
    k = counts.shape[-1]
    values = np.arange(k, dtype=float) if values is None else np.asarray(values, dtype=float)
    coincidences = counts + np.swapaxes(counts, -1, -2)
    totals = coincidences.sum(axis=-1)
    pairable = totals.sum(axis=-1)
    delta = _distances(totals, level, values)
    observed = (coincidences * delta).sum(axis=(-2, -1))
    expected = (totals[..., :, None] * totals[..., None, :] * delta).sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1 - (pairable - 1) * observed / expected


def accuracy(counts: np.ndarray) -> np.ndarray:
    """Share of the items on the diagonal of confusion matrices ``counts`` (..., K, K)."""
    counts = np.asarray(counts, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.trace(counts, axis1=-2, axis2=-1) / counts.sum(axis=(-2, -1))


@dataclass(frozen=True)
class Agreement:
    """The figures of :func:`agreement`: each with its bootstrap CI, and the confusion matrix."""

    n: int
    confusion: np.ndarray  # K × K, rows judge, columns human
    figures: dict[str, float]  # kappa, alpha, accuracy and <figure>_ci_low / _ci_high


def _figures(counts: np.ndarray, weights: Weights, level: Level, values) -> dict[str, np.ndarray]:
    return {"kappa": kappa(counts, weights), "alpha": alpha(counts, level, values), "accuracy": accuracy(counts)}


def agreement(
    judge,
    human,
    categories: int,
    weights: Weights = "none",
    level: Level = "nominal",
    values=None,
    resamples: int = 1000,
    seed: int = 0,
) -> Agreement:
    """Kappa (``weights``), alpha (``level``; ``values`` for interval) and accuracy of the judge's and the
    people's categories (positions 0..K−1 of the same items), with percentile bootstrap CIs (module docstring)."""
    counts = confusion(judge, human, categories)
    n = int(counts.sum())
    point = _figures(counts, weights, level, values)
    if n == 0:
        nan = float("nan")
        return Agreement(
            0, counts, {**{f: nan for f in FIGURES}, **{f"{f}_ci_{s}": nan for f in FIGURES for s in ("low", "high")}}
        )
    cells = np.asarray(judge, dtype=int) * categories + np.asarray(human, dtype=int)
    one_hot = np.zeros((n, categories * categories))
    one_hot[np.arange(n), cells] = 1.0
    drawn = np.rint(bootstrap_means(one_hot, resamples, seed) * n).reshape(resamples, categories, categories)
    tail = (1 - CONFIDENCE) / 2 * 100
    figures: dict[str, float] = {}
    for name, values_ in _figures(drawn, weights, level, values).items():
        defined = values_[~np.isnan(values_)]
        low, high = np.percentile(defined, [tail, 100 - tail]) if len(defined) else (np.nan, np.nan)
        figures |= {name: float(point[name]), f"{name}_ci_low": float(low), f"{name}_ci_high": float(high)}
    return Agreement(n, counts, figures)


@dataclass(frozen=True)
class PPIMean:
    """The prediction-powered mean (module docstring) and what it is made of."""

    estimate: float
    ci_low: float
    ci_high: float
    judge_mean: float  # mean_N(f)
    rectifier: float  # mean_n(y − f)
    labelled: int  # n
    judged: int  # N


def ppi_mean(judge_labelled, human_labelled, judge_unlabelled, confidence: float = CONFIDENCE) -> PPIMean:
    """θ̂ = mean_N(f) + mean_n(y − f) over the N = n + N_u judged items, with its normal CI (module
    docstring); the CI is NaN with fewer than two labelled items."""
    f, y = np.asarray(judge_labelled, dtype=float), np.asarray(human_labelled, dtype=float)
    unlabelled = np.asarray(judge_unlabelled, dtype=float)
    if f.shape != y.shape or f.ndim != 1 or unlabelled.ndim != 1:
        raise ValueError(f"ppi_mean needs equally long 1-d judge and human vectors, got shapes {f.shape} and {y.shape}")
    n, n_unlabelled = len(f), len(unlabelled)
    total = n + n_unlabelled
    if n == 0:
        nan = float("nan")
        return PPIMean(nan, nan, nan, float(unlabelled.mean()) if n_unlabelled else nan, nan, 0, total)
    share = n_unlabelled / total  # λ
    estimate = (share * unlabelled.mean() if n_unlabelled else 0.0) + (y - share * f).mean()
    variance = (share**2 * unlabelled.var() / n_unlabelled if n_unlabelled else 0.0) + (y - share * f).var() / n
    half = stats.norm.isf((1 - confidence) / 2) * np.sqrt(variance) if n >= 2 else float("nan")
    judge_mean = (f.sum() + unlabelled.sum()) / total
    return PPIMean(
        float(estimate),
        float(estimate - half),
        float(estimate + half),
        float(judge_mean),
        float((y - f).mean()),
        n,
        total,
    )
