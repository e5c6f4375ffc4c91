"""Settings tuned on other queries than the ones reported: k-fold cross-validation over a sweep's
topics, PyTerrier's ``KFoldGridSearch`` protocol (``ragtrack compare --sweep S --folds K``).

The candidates are the rows of one swept system (``hybrid k=10``, ``hybrid k=30``, ...), each with its
per-query values of the objective metric. The compared queries are shuffled with ``seed`` and cut into
K folds of near-equal size (``numpy.array_split``). For each fold, the candidate with the highest mean
over the queries of the *other* folds is chosen (ties: the default row, else the first in row order),
and the fold's queries take that candidate's values: every query is scored exactly once, by a setting
chosen without it. The cross-validated score is the mean of those values; it is compared with the
default row on the same queries (paired t-test and randomization test, Δ with its 95% t-interval,
W/T/L: ``evaluators.significance``). The choice of a fold reads nothing of its own queries (tested by
changing them).
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import json_text
from ragtrack.evaluators.significance import effect_size, paired_t_test, randomization_test, win_tie_loss
from ragtrack.pipeline.comparison import Comparison, SystemRun
from ragtrack.pipeline.comparison_tables import TEXT_WIDTH
from ragtrack.pipeline.layout import metric_key

TUNING_FILE = "tuning.json"  # the comparison's artifact: each fold's choice and the cross-validated score against the default


@dataclass
class Tuning:
    """The result of :func:`kfold_tune`."""

    metric: str
    folds: list[list[str]]  # query ids per fold
    chosen: list[str]  # per fold, the label of the row chosen on the other folds
    scores: pd.Series  # per query: the value of the row chosen for its fold (the cross-validated run)
    default: str  # the default row's label
    default_scores: pd.Series
    p_ttest: float
    p_randomization: float
    delta_ci: tuple[float, float]
    wins_ties_losses: tuple[int, int, int]

    @property
    def delta(self) -> float:
        return float(self.scores.mean() - self.default_scores.mean())

    def summary(self) -> dict:
        """``tuning.json``: the folds' choices and the comparison with the default."""
        return {"metric": self.metric, "folds": len(self.folds), "default": self.default, "cross_validated": float(self.scores.mean()),
                "default_mean": float(self.default_scores.mean()), "delta": self.delta, "delta_ci": list(self.delta_ci),
                "p_ttest": self.p_ttest, "p_randomization": self.p_randomization, "wins_ties_losses": list(self.wins_ties_losses),
                "chosen": [{"fold": number + 1, "queries": len(fold), "chosen": label} for number, (fold, label) in enumerate(zip(self.folds, self.chosen))]}

    def text(self) -> str:
        """The terminal's section: a line per fold, then the cross-validated score against the default."""
        lines = [f"Tuned on other folds ({len(self.folds)}-fold cross-validation on {self.metric}; each fold scored by the "
                 "setting chosen on the others):"]
        lines += [f"  fold {number + 1} ({len(fold)} queries): {label}" for number, (fold, label) in enumerate(zip(self.folds, self.chosen))]
        low, high = self.delta_ci
        wins, ties, losses = self.wins_ties_losses
        lines.append(f"  cross-validated {self.metric} {self.scores.mean():.4f} vs {self.default} {self.default_scores.mean():.4f}: "
                     f"Δ {self.delta:+.4f} [{low:+.4f}, {high:+.4f}], p = {self.p_ttest:.4f} (paired t-test), "
                     f"{self.p_randomization:.4f} (randomization), W/T/L {wins}/{ties}/{losses}")
        return "\n".join(textwrap.fill(line, TEXT_WIDTH, subsequent_indent="    ") for line in lines) + "\n"

    def figures(self) -> dict[str, float]:
        """The comparison run's metrics ``tuning/<metric>/<figure>``."""
        return {f"tuning/{metric_key(self.metric)}/{key}": float(value) for key, value in
                (("cross_validated", self.scores.mean()), ("default", self.default_scores.mean()), ("delta", self.delta), ("p_ttest", self.p_ttest))}

    def html(self) -> str:
        """report.html's section."""
        return f"<pre>{html.escape(self.text())}</pre>"


def folds_of(queries: Sequence[str], folds: int, seed: int) -> list[list[str]]:
    """``queries`` shuffled with ``seed`` (from their sorted order: the folds never depend on the order
    they came in) and cut into ``folds`` near-equal parts."""
    if not 2 <= folds <= len(queries):
        raise RagtrackError(f"--folds {folds}: give 2 to {len(queries)} (the compared queries)")
    shuffled = np.random.default_rng(seed).permutation(np.array(sorted(queries), dtype=object))
    return [part.tolist() for part in np.array_split(shuffled, folds)]


def kfold_tune(rows: Sequence[SystemRun], default: SystemRun, metric: str, queries: Sequence[str], folds: int, seed: int = 0,
               resamples: int = 10_000) -> Tuning:
    """K-fold cross-validated choice among ``rows`` (module docstring), compared with ``default``."""
    if len(rows) < 2:
        raise RagtrackError("--folds needs a sweep: at least two rows of one system that differ in a setting")
    table = pd.DataFrame({s.label: s.per_query.loc[list(queries), metric].to_numpy(float) for s in rows}, index=list(queries))
    order = [default.label] + [s.label for s in rows if s is not default]  # ties go to the default, then to row order
    parts = folds_of(queries, folds, seed)
    scores, chosen = pd.Series(np.nan, index=table.index), []
    for part in parts:
        means = table.drop(index=part)[order].mean()
        label = means.idxmax() if means.notna().any() else default.label  # idxmax: the first of equal means
        chosen.append(label)
        scores[part] = table.loc[part, label]
    base = table[default.label]
    effect = effect_size(scores.to_numpy(), base.to_numpy())
    return Tuning(metric, parts, chosen, scores, default.label, base, paired_t_test(scores, base).p_value,
                  randomization_test(scores, base, resamples=resamples, seed=seed).p_value, (effect.ci_low, effect.ci_high),
                  win_tie_loss(scores.to_numpy(), base.to_numpy()))


def tune_sweep(systems: Sequence[SystemRun], baseline: SystemRun, metric: str, queries: Sequence[str], folds: int, seed: int = 0,
               resamples: int = 10_000) -> Tuning:
    """:func:`kfold_tune` over the rows of the swept system: the baseline's system when the baseline is
    one of its settings (a sweep's ``(default)`` row, or ``--baseline`` naming one), else refused."""
    rows = [s for s in systems if s.system == baseline.system]
    if len(rows) < 2 or not baseline.params:
        swept = sorted({s.system for s in systems if s.params})
        raise RagtrackError(f"--folds tunes the settings of one swept system against its default: the baseline {baseline.label!r} is not "
                            f"one of a sweep's settings; name the default row with --baseline (swept systems: {', '.join(swept) or 'none'})")
    return kfold_tune(rows, baseline, metric, queries, folds, seed, resamples)


def tuned_comparison(comparison: Comparison, folds: int, seed: int, resamples: int, folder: Path) -> Tuning:
    """:func:`tune_sweep` on a comparison's first metric over its paired queries, written as
    :data:`TUNING_FILE` into ``folder`` (the comparison's outputs)."""
    metric = comparison.metrics[0]
    tuning = tune_sweep(comparison.systems, comparison.baseline, metric, comparison.paired.get(metric, comparison.queries), folds, seed, resamples)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TUNING_FILE).write_text(json_text(tuning.summary(), indent=2), encoding="utf-8")
    return tuning
