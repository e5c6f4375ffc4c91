"""Systems side by side, computed: means with CIs, differences to a baseline with paired tests and
effect sizes. Used by every job (its own systems, at its end) and by ``ragtrack compare`` (systems
read back from MLflow); it reads nothing from MLflow itself. The renderers of a comparison are beside
it: ``comparison_tables`` (text, Markdown, LaTeX, CSV, JSON), ``comparison_plots`` (figures),
``comparison_report`` (verdicts, failure analysis, report.html and the files a comparison writes);
``benchmark`` puts comparisons of several datasets in one table.

Per metric, the compared queries are those on which the metric is defined for every compared row (paired;
a blank/NaN per-query value is a query the metric does not apply to: ranking metrics on queries without a
relevant judgment under ``without_relevant: exclude`` (trec_eval counts them), answer metrics on questions without gold answers, abstention_precision
where a system answered). n is their number, per metric, and every figure below is over exactly those
queries; a metric defined on no compared query is shown blank with a note, never a crash.
Per metric and row: the mean and percentile-bootstrap 95% CI over the compared queries
(``evaluators.base.aggregate``), the difference to the baseline, paired t-test and seeded
randomization-test p-values (``evaluators.significance``), both Holm-corrected across the rows compared
with the baseline, per-query win/tie/loss counts, and the effect sizes of ``significance.effect_size``:
the t-interval of the difference (``delta_ci_low``, ``delta_ci_high``), ``cohens_d`` (d_z),
``rank_biserial``, the minimal detectable difference ``mdd`` at 80% power, and ``underpowered``:
|delta| < mdd and p_ttest_holm > alpha (every p of a report is the Holm-corrected one), i.e. this query set could have missed a difference
of this size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ragtrack.core.errors import RagtrackError, did_you_mean
from ragtrack.evaluators.base import aggregate
from ragtrack.evaluators.significance import ALPHA, effect_size, holm, paired_t_test, randomization_test, win_tie_loss
from ragtrack.pipeline.analysis.slices import COLUMN_PREFIX as SLICE_COLUMN_PREFIX
from ragtrack.pipeline.records.layout import LATENCY_COLUMNS

if TYPE_CHECKING:
    from ragtrack.pipeline.analysis.reference import ReferenceCheck


DEFAULT_METRICS = ("ndcg@10", "recall@100")
BEST_TOLERANCE = 1e-12  # relative: means this close to the largest tie for the best mark (:func:`is_best`)


@dataclass
class SystemRun:
    """One row of the comparison: a child run with its per-query scores."""

    system: str
    run_id: str
    job_name: str
    job_id: str
    start_time: int
    per_query: pd.DataFrame
    label: str = ""
    curves: dict[str, dict[int, float]] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)  # the job's settings that differ between compared jobs
    merged: dict[str, str] = field(default_factory=dict)  # run id -> job id of the identical rows shown as this one
    alias: str | None = None  # the system's ``alias`` setting: its name in labels


def alias_of(params: Mapping[str, object]) -> str | None:
    """A system's ``alias`` setting from its (logged) parameters, if it has one."""
    alias = params.get("alias")
    return None if alias in (None, "", "None") else str(alias)


@dataclass
class Comparison:
    """The result of :func:`compare_systems`: a long table (one row per system and metric)."""

    table: pd.DataFrame
    systems: list[SystemRun]
    baseline: SystemRun
    metrics: list[str]
    queries: list[str]  # the candidate queries: scored by every row (and in ``queries`` when given)
    paired: dict[str, list[str]] = field(
        default_factory=dict
    )  # per metric: those of ``queries`` where every row has a value
    logged: str | None = None  # "<run id> (<run name>)" of the comparison run ``run_compare`` logged
    links: dict[str, str] = field(default_factory=dict)  # that run's page and report.html in the UI
    scope: str = ""  # what ``run_compare`` searched and compared: the experiment, the sweep and its sweeps
    reference: ReferenceCheck | None = None  # ``ragtrack compare --reference``: its rows against the reference


def find_baseline(systems: list[SystemRun], baseline: str | None) -> SystemRun:
    """A row by label, system name or run id (child or job, its own or one of the rows merged into it),
    refused when several rows match; default: the first bm25 row, else the first row."""
    if baseline is None:
        return next((s for s in systems if s.system == "bm25"), systems[0])
    for matches in (
        [s for s in systems if s.label == baseline],
        [s for s in systems if s.system == baseline],
        [s for s in systems if baseline in (s.run_id, s.job_id, *s.merged, *s.merged.values())],
    ):
        if len(matches) > 1:
            raise RagtrackError(
                f"baseline {baseline!r} matches {len(matches)} rows; pass one of: "
                + ", ".join(repr(s.label) for s in matches)
            )
        if matches:
            return matches[0]
    raise RagtrackError(
        f"baseline {baseline!r} is not a compared system or run; rows: {', '.join(s.label for s in systems)}"
    )


def compare_systems(
    systems: list[SystemRun],
    metrics: Sequence[str],
    baseline: SystemRun,
    queries: Sequence[str] | None = None,
    seed: int = 0,
    resamples: int = 10_000,
    judged: Sequence[str] | None = None,
) -> Comparison:
    """Mean, CI, difference, paired tests (Holm-corrected per metric and test) and win/tie/loss per row,
    each metric over its paired queries (module docstring): those of ``queries`` (default: the
    baseline's) that every row scored and where every row's value is defined; ``judged`` (the judged
    queries that count, ``ranking.counted_queries``, when known) further limits the ranking metrics, for
    per-query tables that scored 0 where the rule leaves a query out."""
    for metric in metrics:
        lacking = [s.label for s in systems if metric not in s.per_query.columns]
        if lacking:
            logged = [m for m in logged_metrics(systems[0].per_query) if all(m in s.per_query.columns for s in systems)]
            other_cutoffs = [m for m in logged if m.partition("@")[0] == metric.partition("@")[0]]
            hint = did_you_mean(metric, logged) if not other_cutoffs else ""
            where = f" for {', '.join(lacking)}" if len(lacking) < len(systems) else ""
            raise RagtrackError(
                f"{metric!r} is not a logged metric{where}{hint or '; logged: ' + ', '.join(other_cutoffs or logged)}"
            )
    if queries is None:
        queries = list(baseline.per_query.index)
    queries = [q for q in queries if all(q in s.per_query.index for s in systems)]
    if not queries:
        raise RagtrackError("the compared runs share no queries")
    paired = {metric: defined_queries(systems, metric, queries, judged) for metric in metrics}
    rows = []
    for metric in metrics:
        base = baseline.per_query.loc[paired[metric], metric].to_numpy(float)
        for s in systems:
            values = s.per_query.loc[paired[metric], metric].to_numpy(float)
            summary = aggregate(pd.DataFrame({metric: values}), seed=seed).loc[metric]
            row = {
                "system": s.label,
                "metric": metric,
                "mean": summary["mean"],
                "ci_low": summary["ci_low"],
                "ci_high": summary["ci_high"],
                "n": int(summary["n"]),
                "baseline": s is baseline,
            }
            if s is not baseline:
                wins, ties, losses = win_tie_loss(values, base)
                delta, p_ttest, effect = (
                    (values.mean() - base.mean() if len(values) else np.nan),
                    paired_t_test(values, base).p_value,
                    effect_size(values, base),
                )
                row |= {
                    "delta": delta,
                    "p_ttest": p_ttest,
                    "p_randomization": randomization_test(values, base, resamples=resamples, seed=seed).p_value,
                    "wins": wins,
                    "ties": ties,
                    "losses": losses,
                    "delta_ci_low": effect.ci_low,
                    "delta_ci_high": effect.ci_high,
                    "cohens_d": effect.cohens_d,
                    "rank_biserial": effect.rank_biserial,
                    "mdd": effect.mdd,
                }
            rows.append(row)
    table = pd.DataFrame(rows)
    for column in (
        "delta",
        "p_ttest",
        "p_randomization",
        "wins",
        "ties",
        "losses",
        "delta_ci_low",
        "delta_ci_high",
        "cohens_d",
        "rank_biserial",
        "mdd",
        "underpowered",
    ):
        if column not in table:
            table[column] = np.nan
    for test in ("p_ttest", "p_randomization"):
        table[f"{test}_holm"] = table.groupby("metric")[test].transform(
            lambda p: pd.Series(holm(p.to_numpy()), index=p.index)
        )
    compared = table["delta"].notna()  # underpowered: as every p of a report, the Holm-corrected one
    table["underpowered"] = (
        ((table["delta"].abs() < table["mdd"]) & (table["p_ttest_holm"] > ALPHA)).astype(object).where(compared)
    )
    table["best"] = table.groupby("metric")["mean"].transform(is_best).astype(bool)
    return Comparison(table, systems, baseline, list(metrics), list(queries), paired)


def defined_queries(
    systems: Sequence[SystemRun], metric: str, queries: Sequence[str], judged: Sequence[str] | None = None
) -> list[str]:
    """Those of ``queries`` where every row's ``metric`` has a value (not NaN), limited to ``judged``
    for a ranking metric when ``judged`` is given: the paired queries of one metric."""
    from ragtrack.evaluators.ranking import RankingEvaluator

    index = pd.Index(queries)
    keep = np.logical_and.reduce([s.per_query.loc[index, metric].notna().to_numpy() for s in systems])
    if judged is not None and RankingEvaluator.handles(metric):
        keep &= index.isin(list(judged))
    return list(index[keep])


def coverage_note(comparison: Comparison) -> str:
    """Sentences ("" when none) for the metrics whose paired queries are not every row's own: a metric
    defined on no compared query (shown blank), and one whose rows have values on different queries
    (abstention_precision: where each system abstained; a judge request that failed), compared on the
    queries where all have one, so its means there differ from each row's own (results.json)."""
    notes = []
    for metric in comparison.metrics:
        paired = len(comparison.paired.get(metric, ()))
        own = {s.label: int(s.per_query.loc[comparison.queries, metric].notna().sum()) for s in comparison.systems}
        if not paired:
            notes.append(f"{metric}: no query has a value for every row; shown blank")
        elif any(n != paired for n in own.values()):
            notes.append(
                f"{metric}: rows have values on different queries ({', '.join(f'{label} {n}' for label, n in own.items())}); "
                f"compared on the {paired} where all have one, so these means differ from each row's own mean over its queries"
            )
    return ". ".join(notes)


def query_counts(comparison: Comparison) -> str:
    """``n = 952 (ndcg@10), 1190 (abstention_rate) queries (per metric: ...)``: the paired queries per
    metric, or ``952 queries`` when every metric has the same."""
    counts = {m: len(comparison.paired.get(m, comparison.queries)) for m in comparison.metrics}
    if len(set(counts.values())) == 1:
        return f"{next(iter(counts.values()))} queries"
    return (
        "n = "
        + ", ".join(f"{n} ({m})" for m, n in counts.items())
        + " queries (per metric: those where every row has a value)"
    )


def logged_metrics(per_query: pd.DataFrame) -> list[str]:
    """The metric columns of a per-query table: its numbers, less the latency (``layout.LATENCY_COLUMNS``)
    and slice columns."""
    return [
        c
        for c in per_query.columns
        if pd.api.types.is_numeric_dtype(per_query[c])
        and c not in LATENCY_COLUMNS.values()
        and not c.startswith(SLICE_COLUMN_PREFIX)
    ]


def is_best(means: pd.Series) -> pd.Series:
    """Which of one metric's ``means`` get the best mark (``*``, bold, highlighted): those within a relative
    :data:`BEST_TOLERANCE` of the largest, ``mean >= max - 1e-12·|max|``, so that equal means a float sum
    left a last bit apart (34/150 as 0.2266666666666667 and 0.22666666666666668) tie; NaN never."""
    top = means.max()
    return means >= top - BEST_TOLERANCE * abs(top)


def per_query_differences(comparison: Comparison, texts: dict[str, str], decimals: int = 4) -> pd.DataFrame:
    """One row per compared query: qid, its text (``texts``), each row's metrics and, for every row but
    the baseline, the difference to it (``<row> Δ <metric>``), rounded to ``decimals``."""
    rows = [q for q in comparison.queries if any(q in set(comparison.paired.get(m, ())) for m in comparison.metrics)]
    columns: dict[str, object] = {"qid": rows, "query": [texts.get(q, "") for q in rows]}
    for metric in comparison.metrics:
        base = comparison.baseline.per_query.loc[rows, metric].to_numpy(float)
        for s in comparison.systems:
            values = s.per_query.loc[rows, metric].to_numpy(float)
            columns[f"{s.label} {metric}"] = values.round(decimals)
            if s is not comparison.baseline:
                columns[f"{s.label} Δ {metric}"] = (values - base).round(decimals)
    return pd.DataFrame(columns)  # built at once: a frame grown column by column warns past 100 columns


# --------------------------------------------------------------------------- rendering
