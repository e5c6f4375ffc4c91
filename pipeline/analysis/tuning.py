"""Settings tuned on other queries than the ones reported (``ragtrack compare --sweep S --folds K`` or
``--tune-on SPLIT``).

The candidates are the rows of one swept system (``hybrid k=10``, ``hybrid k=30``, ...), each with its
per-query values of the objective metric. A *choice* reads the candidates' means over some queries and
takes the highest (ties: the default row, else the first in row order); the queries it reports on are
then scored by the chosen row. Two protocols make the choice without the reported queries:

- **k-fold cross-validation** over the compared queries, PyTerrier's ``KFoldGridSearch`` protocol
  (:func:`kfold_tune`): the queries are shuffled with ``seed`` and cut into K folds of near-equal size
  (``numpy.array_split``); each fold is scored by the candidate chosen on the *other* folds, so every
  query is scored exactly once, by a setting chosen without it.
- **a split given by the dataset** (:func:`split_tune`): the choice is made on the rows of the jobs run
  on the tuning split (train or dev queries, their own qrels) and reported on the test split's rows of
  the same settings: one "fold" holding every reported query. A reported query that the tuning split
  also holds is left out of the choice.

The cross-validated (or held-out) score is the mean of the chosen rows' values; it is compared with the
default row on the same queries (paired t-test and randomization test, Δ with its 95% t-interval,
W/T/L: ``evaluators.significance``). The choice never reads the reported queries (tested by changing
them).
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import json_text
from ragtrack.core.folds import query_folds
from ragtrack.evaluators.significance import effect_size, paired_t_test, randomization_test, win_tie_loss
from ragtrack.pipeline.analysis.comparison import Comparison, SystemRun
from ragtrack.pipeline.analysis.comparison_tables import TEXT_WIDTH
from ragtrack.pipeline.records.layout import TAG_COMPARISON, TAG_PARENT, metric_key
from ragtrack.pipeline.records.tracking import log_figures

TUNING_FILE = "tuning.json"  # the comparison's artifact: each fold's choice and the tuned score against the default


@dataclass(frozen=True)
class Choice:
    """One fold's choice: the reported row it picked and what the choice read."""

    fold: str  # "fold 2", or the reported split ("dataset.split=test")
    label: str  # the reported row chosen
    settings: dict[str, str]  # its swept settings (``fusion.rrf.k: 30``)
    tuned_on: int  # how many queries the choice read
    tuned_where: str  # which: "other folds", "dataset.split=train"
    tuned_mean: float  # the chosen setting's mean over them


@dataclass
class Tuning:
    """The result of :func:`kfold_tune` or :func:`split_tune`."""

    metric: str
    title: str  # the terminal's heading
    protocol: str  # "5-fold cross-validation", "chosen on dataset.split=train, reported on dataset.split=test"
    score_name: str  # what the tuned score is called: "cross_validated", "held_out"
    folds: list[list[str]]  # per fold, the reported queries
    choices: list[Choice]  # per fold, its choice
    scores: pd.Series  # per reported query: the value of the row chosen for its fold (the tuned run)
    default: str  # the default row's label
    default_scores: pd.Series
    p_ttest: float
    p_randomization: float
    delta_ci: tuple[float, float]
    wins_ties_losses: tuple[int, int, int]

    @property
    def chosen(self) -> list[str]:
        return [choice.label for choice in self.choices]

    @property
    def delta(self) -> float:
        return float(self.scores.mean() - self.default_scores.mean())

    def fold_rows(self) -> list[dict]:
        """Per fold: its name and reported queries, what its choice read, the chosen row and settings,
        and the chosen and default rows' means over the fold's queries."""
        return [
            {
                "fold": choice.fold,
                "queries": len(fold),
                "tuned_on": choice.tuned_on,
                "tuned_where": choice.tuned_where,
                "chosen": choice.label,
                "settings": choice.settings,
                "tuned_mean": choice.tuned_mean,
                "mean": float(self.scores[fold].mean()),
                "default_mean": float(self.default_scores[fold].mean()),
            }
            for fold, choice in zip(self.folds, self.choices)
        ]

    def summary(self) -> dict:
        """``tuning.json``: the protocol, the folds' choices and the comparison with the default."""
        return {
            "metric": self.metric,
            "protocol": self.protocol,
            "folds": len(self.folds),
            "default": self.default,
            self.score_name: float(self.scores.mean()),
            "default_mean": float(self.default_scores.mean()),
            "delta": self.delta,
            "delta_ci": list(self.delta_ci),
            "p_ttest": self.p_ttest,
            "p_randomization": self.p_randomization,
            "wins_ties_losses": list(self.wins_ties_losses),
            "chosen": self.fold_rows(),
        }

    def verdict(self) -> str:
        """One sentence: the tuned score against the default's on the same queries, with the paired tests."""
        low, high = self.delta_ci
        wins, ties, losses = self.wins_ties_losses
        return (
            f"{self.score_name.replace('_', '-')} {self.metric} {self.scores.mean():.4f} vs {self.default} {self.default_scores.mean():.4f}: "
            f"Δ {self.delta:+.4f} [{low:+.4f}, {high:+.4f}], p = {self.p_ttest:.4f} (paired t-test), "
            f"{self.p_randomization:.4f} (randomization), W/T/L {wins}/{ties}/{losses}"
        )

    def text(self) -> str:
        """The terminal's section: :attr:`title`, a line per fold, then :meth:`verdict`."""
        lines = [f"{self.title}:"]
        lines += [
            f"  {row['fold']} ({row['queries']} queries): {row['chosen']}, chosen on {row['tuned_on']} queries of "
            f"{row['tuned_where']} ({row['tuned_mean']:.4f} there)"
            for row in self.fold_rows()
        ]
        lines.append(f"  {self.verdict()}")
        return "\n".join(textwrap.fill(line, TEXT_WIDTH, subsequent_indent="    ") for line in lines) + "\n"

    def figures(self) -> dict[str, float]:
        """The tuning run's metrics ``tuning/<metric>/<figure>``."""
        low, high = self.delta_ci
        return {
            f"tuning/{metric_key(self.metric)}/{key}": float(value)
            for key, value in (
                (self.score_name, self.scores.mean()),
                ("default", self.default_scores.mean()),
                ("delta", self.delta),
                ("delta_ci_low", low),
                ("delta_ci_high", high),
                ("p_ttest", self.p_ttest),
                ("p_randomization", self.p_randomization),
            )
        }

    def html(self) -> str:
        """report.html's section: a table of the folds' choices, then :meth:`verdict`."""
        head = [
            "fold",
            "reported queries",
            "chosen on",
            "chosen",
            f"{self.metric} where chosen",
            f"{self.metric} reported",
            f"{self.default} reported",
        ]
        rows = "".join(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(cell))}</td>"
                for cell in (
                    row["fold"],
                    row["queries"],
                    f"{row['tuned_on']} queries of {row['tuned_where']}",
                    row["chosen"],
                    f"{row['tuned_mean']:.4f}",
                    f"{row['mean']:.4f}",
                    f"{row['default_mean']:.4f}",
                )
            )
            + "</tr>"
            for row in self.fold_rows()
        )
        return (
            f'<p class="note">{html.escape(self.protocol)}, objective {html.escape(self.metric)}: each fold\'s queries are scored by '
            "the setting chosen without them.</p><table><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + f"</tr>{rows}</table>"
            f'<p class="verdict">{html.escape(self.verdict())}.</p>'
        )


def same_setting(given: object, other: object) -> bool:
    """Two values of a setting (logged text or config values) are equal: as numbers where both are numbers."""
    try:
        return float(given) == float(other)  # "60" and 60, "0.50" and 0.5
    except (TypeError, ValueError):
        return str(given) == str(other)


def folds_of(queries: Sequence[str], folds: int, seed: int) -> list[list[str]]:
    """The ``folds`` parts of the compared ``queries`` (:func:`ragtrack.core.folds.query_folds`)."""
    if not 2 <= folds <= len(queries):
        raise RagtrackError(f"--folds {folds}: give 2 to {len(queries)} (the compared queries)")
    return query_folds(queries, folds, seed)


def values_of(rows: Sequence[SystemRun], metric: str, queries: Sequence[str]) -> pd.DataFrame:
    """Queries × rows (by label): each row's per-query ``metric``."""
    return pd.DataFrame(
        {s.label: s.per_query.loc[list(queries), metric].to_numpy(float) for s in rows}, index=list(queries)
    )


def best_of(table: pd.DataFrame, order: Sequence[str]) -> tuple[str, float]:
    """The column of ``table`` with the highest mean and that mean; ties (and a table without values)
    go to the first in ``order`` (the default first)."""
    means = table[list(order)].mean()
    label = means.idxmax() if means.notna().any() else order[0]  # idxmax: the first of equal means
    return label, float(means[label])


def tuned(
    metric: str,
    title: str,
    protocol: str,
    score_name: str,
    folds: list[list[str]],
    choices: list[Choice],
    table: pd.DataFrame,
    default: str,
    seed: int,
    resamples: int,
) -> Tuning:
    """The :class:`Tuning` of ``choices`` (one per fold) over ``table`` (reported queries × rows): each
    fold's queries scored by its chosen row, compared with the ``default`` row."""
    scores = pd.Series(np.nan, index=table.index)
    for fold, choice in zip(folds, choices):
        scores[fold] = table.loc[fold, choice.label]
    base = table[default]
    effect = effect_size(scores.to_numpy(), base.to_numpy())
    return Tuning(
        metric,
        title,
        protocol,
        score_name,
        folds,
        choices,
        scores,
        default,
        base,
        paired_t_test(scores, base).p_value,
        randomization_test(scores, base, resamples=resamples, seed=seed).p_value,
        (effect.ci_low, effect.ci_high),
        win_tie_loss(scores.to_numpy(), base.to_numpy()),
    )


def kfold_tune(
    rows: Sequence[SystemRun],
    default: SystemRun,
    metric: str,
    queries: Sequence[str],
    folds: int,
    seed: int = 0,
    resamples: int = 10_000,
) -> Tuning:
    """K-fold cross-validated choice among ``rows`` (module docstring), compared with ``default``."""
    if len(rows) < 2:
        raise RagtrackError("--folds needs a sweep: at least two rows of one system that differ in a setting")
    table = values_of(rows, metric, queries)
    order = [default.label] + [s.label for s in rows if s is not default]  # ties go to the default, then to row order
    parts = folds_of(queries, folds, seed)
    settings = {s.label: s.params for s in rows}
    choices = []
    for number, part in enumerate(parts):
        label, mean = best_of(table.drop(index=part), order)
        choices.append(
            Choice(f"fold {number + 1}", label, settings[label], len(table) - len(part), "the other folds", mean)
        )
    protocol = f"{folds}-fold cross-validation"
    return tuned(
        metric,
        f"Tuned on other folds ({protocol} on {metric}; each fold scored by the setting chosen on the others)",
        protocol,
        "cross_validated",
        parts,
        choices,
        table,
        default.label,
        seed,
        resamples,
    )


def split_tune(
    candidates: Sequence[SystemRun],
    tuning_queries: Sequence[str],
    rows: Sequence[SystemRun],
    default: SystemRun,
    metric: str,
    queries: Sequence[str],
    counterpart: Callable[[SystemRun], SystemRun | None],
    splits: tuple[str, str],
    seed: int = 0,
    resamples: int = 10_000,
) -> Tuning:
    """The candidate with the best mean over ``tuning_queries`` (less any of the reported ``queries``),
    ties to the candidate whose ``counterpart`` is ``default``, reported by its counterpart among
    ``rows`` over ``queries`` and compared with ``default`` there (module docstring). ``splits``: the
    tuning and the reported split, as words (``dataset.split=train``, ``dataset.split=test``)."""
    if len(candidates) < 2:
        raise RagtrackError(
            f"--tune-on needs a sweep on {splits[0]}: {len(candidates)} row of {default.system} there, "
            "at least two that differ in a setting wanted"
        )
    held_out = set(queries)
    tuning_queries = [q for q in tuning_queries if q not in held_out]
    if not tuning_queries:
        raise RagtrackError(
            f"--tune-on: {splits[0]} has no query of its own (every one is among the {len(held_out)} reported)"
        )
    order = [s.label for s in candidates if counterpart(s) is default] + [
        s.label for s in candidates if counterpart(s) is not default
    ]
    label, mean = best_of(values_of(candidates, metric, tuning_queries), order)
    chosen = next(s for s in candidates if s.label == label)
    reported = counterpart(chosen)
    if reported is None:
        raise RagtrackError(
            f"{label!r}, chosen on {splits[0]}, has no row on {splits[1]}: run its setting there too "
            f"(the rows there: {', '.join(s.label for s in rows)})"
        )
    protocol = f"chosen on {splits[0]}, reported on {splits[1]}"
    return tuned(
        metric,
        f"Tuned on another split ({protocol}; objective {metric})",
        protocol,
        "held_out",
        [list(queries)],
        [Choice(splits[1], reported.label, chosen.params, len(tuning_queries), splits[0], mean)],
        values_of(rows, metric, queries),
        default.label,
        seed,
        resamples,
    )


def swept_rows(systems: Sequence[SystemRun], baseline: SystemRun, option: str) -> list[SystemRun]:
    """The rows of the swept system whose settings are tuned: the baseline's system's, when the baseline
    is one of its settings (a sweep's ``(default)`` row, or ``--baseline`` naming one), else refused."""
    rows = [s for s in systems if s.system == baseline.system]
    if len(rows) < 2 or not baseline.params:
        swept = sorted({s.system for s in systems if s.params})
        raise RagtrackError(
            f"{option} tunes the settings of one swept system against its default: the baseline {baseline.label!r} is not "
            f"one of a sweep's settings; name the default row with --baseline (swept systems: {', '.join(swept) or 'none'})"
        )
    return rows


def tune_sweep(comparison: Comparison, folds: int, seed: int = 0, resamples: int = 10_000) -> Tuning:
    """:func:`kfold_tune` of a comparison's swept rows (:func:`swept_rows`) on its first metric, over
    that metric's paired queries."""
    metric = comparison.metrics[0]
    rows = swept_rows(comparison.systems, comparison.baseline, "--folds")
    return kfold_tune(
        rows, comparison.baseline, metric, comparison.paired.get(metric, comparison.queries), folds, seed, resamples
    )


def write_tuning(tuning: Tuning, folder: Path) -> None:
    """:data:`TUNING_FILE` into ``folder`` (the comparison's outputs)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TUNING_FILE).write_text(json_text(tuning.summary(), indent=2), encoding="utf-8")


def log_tuning(client, experiment_id: str, run_id: str, tuning: Tuning) -> None:
    """The tuning on its MLflow run (the comparison run ``ragtrack compare`` logged): params
    ``tuning_protocol``, ``tuning_metric``, ``tuning_default``, the metrics of :meth:`Tuning.figures`, and
    one child run per fold, ``fold N: <chosen>`` (tagged a comparison's, as its parent: never read as a job
    or a system), with params ``fold``, ``queries``, ``tuned_on``,
    ``chosen`` and the chosen settings, and metrics ``<metric>`` (the chosen row over the fold's queries),
    ``default/<metric>`` (the default's there) and ``where_chosen/<metric>`` (the chosen setting's mean
    over the queries its choice read)."""
    for key, value in (
        ("tuning_protocol", tuning.protocol),
        ("tuning_metric", tuning.metric),
        ("tuning_default", tuning.default),
    ):
        client.log_param(run_id, key, value)
    log_figures(client, run_id, tuning.figures())
    key = metric_key(tuning.metric)
    for row in tuning.fold_rows():
        child = client.create_run(
            experiment_id, run_name=f"{row['fold']}: {row['chosen']}", tags={TAG_PARENT: run_id, TAG_COMPARISON: "true"}
        )
        for name, value in {
            "fold": row["fold"],
            "queries": row["queries"],
            "tuned_on": row["tuned_on"],
            "chosen": row["chosen"],
            **row["settings"],
        }.items():
            client.log_param(child.info.run_id, name, value)
        log_figures(
            client,
            child.info.run_id,
            {key: row["mean"], f"default/{key}": row["default_mean"], f"where_chosen/{key}": row["tuned_mean"]},
        )
        client.set_terminated(child.info.run_id, "FINISHED")
