"""Systems side by side: means with CIs, differences to a baseline with paired tests, the comparison
plot, failure analysis and a self-contained HTML report. Used by every job (its own systems, at its end)
and by ``ragtrack compare`` (systems read back from MLflow); it reads nothing from MLflow itself.

Per metric, the compared queries are those on which the metric is defined for every compared row (paired;
a blank/NaN per-query value is a query the metric does not apply to: ranking metrics on queries without a
relevant judgment, as trec_eval, answer metrics on questions without gold answers, abstention_precision
where a system answered). n is their number, per metric, and every figure below is over exactly those
queries; a metric defined on no compared query is shown blank with a note, never a crash.
Per metric and row: the mean and percentile-bootstrap 95% CI over the compared queries
(``evaluators.base.aggregate``), the difference to the baseline, paired t-test and seeded
randomization-test p-values (``evaluators.significance``), both Holm-corrected across the rows compared
with the baseline, per-query win/tie/loss counts, and the effect sizes of ``significance.effect_size``:
the t-interval of the difference (``delta_ci_low``, ``delta_ci_high``), ``cohens_d`` (d_z),
``rank_biserial``, the minimal detectable difference ``mdd`` at 80% power, and ``underpowered``:
|delta| < mdd and p_ttest (uncorrected) > alpha, i.e. this query set could have missed a difference
of this size.
"""

from __future__ import annotations

import base64
import html
import json
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ragtrack.core.data import Dataset
from ragtrack.core.errors import RagtrackError, did_you_mean
from ragtrack.core.files import json_text
from ragtrack.core.runs import Run
from ragtrack.evaluators.base import aggregate
from ragtrack.evaluators.significance import ALPHA, effect_size, holm, paired_t_test, randomization_test, win_tie_loss
from ragtrack.pipeline.csv_files import csv_text
from ragtrack.pipeline.layout import LATENCY_COLUMNS, curve_key
from ragtrack.pipeline.slices import COLUMN_PREFIX as SLICE_COLUMN_PREFIX

if TYPE_CHECKING:
    from ragtrack.pipeline.reference import ReferenceCheck

DEFAULT_METRICS = ("ndcg@10", "recall@100")
FORMATS = ("table", "markdown", "csv", "json", "latex")
TEXT_WIDTH = 100  # characters of the terminal table (``ragtrack compare --wide``: one wide table)
PLOT_SUFFIXES = (".png", ".pdf", ".svg")  # ``ragtrack compare --plot FILE``: the formats written, named by the suffix
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


@dataclass
class Comparison:
    """The result of :func:`compare_systems`: a long table (one row per system and metric)."""

    table: pd.DataFrame
    systems: list[SystemRun]
    baseline: SystemRun
    metrics: list[str]
    queries: list[str]  # the candidate queries: scored by every row (and in ``queries`` when given)
    paired: dict[str, list[str]] = field(default_factory=dict)  # per metric: those of ``queries`` where every row has a value
    logged: str | None = None  # "<run id> (<run name>)" of the comparison run ``run_compare`` logged
    links: dict[str, str] = field(default_factory=dict)  # that run's page and report.html in the UI
    scope: str = ""  # what ``run_compare`` searched and compared: the experiment, the sweep and its sweeps
    reference: ReferenceCheck | None = None  # ``ragtrack compare --reference``: its rows against the reference


def find_baseline(systems: list[SystemRun], baseline: str | None) -> SystemRun:
    """A row by label, system name or run id (child or job, its own or one of the rows merged into it),
    refused when several rows match; default: the first bm25 row, else the first row."""
    if baseline is None:
        return next((s for s in systems if s.system == "bm25"), systems[0])
    for matches in ([s for s in systems if s.label == baseline], [s for s in systems if s.system == baseline],
                    [s for s in systems if baseline in (s.run_id, s.job_id, *s.merged, *s.merged.values())]):
        if len(matches) > 1:
            raise RagtrackError(f"baseline {baseline!r} matches {len(matches)} rows; pass one of: "
                                + ", ".join(repr(s.label) for s in matches))
        if matches:
            return matches[0]
    raise RagtrackError(f"baseline {baseline!r} is not a compared system or run; rows: {', '.join(s.label for s in systems)}")


def compare_systems(systems: list[SystemRun], metrics: Sequence[str], baseline: SystemRun, queries: Sequence[str] | None = None,
                    seed: int = 0, resamples: int = 10_000, judged: Sequence[str] | None = None) -> Comparison:
    """Mean, CI, difference, paired tests (Holm-corrected per metric and test) and win/tie/loss per row,
    each metric over its paired queries (module docstring): those of ``queries`` (default: the
    baseline's) that every row scored and where every row's value is defined; ``judged`` (the queries with
    a relevant judgment, when known) further limits the ranking metrics, for per-query tables that
    scored 0 where trec_eval leaves a query out."""
    for metric in metrics:
        lacking = [s.label for s in systems if metric not in s.per_query.columns]
        if lacking:
            logged = [m for m in logged_metrics(systems[0].per_query) if all(m in s.per_query.columns for s in systems)]
            other_cutoffs = [m for m in logged if m.partition("@")[0] == metric.partition("@")[0]]
            hint = did_you_mean(metric, logged) if not other_cutoffs else ""
            where = f" for {', '.join(lacking)}" if len(lacking) < len(systems) else ""
            raise RagtrackError(f"{metric!r} is not a logged metric{where}{hint or '; logged: ' + ', '.join(other_cutoffs or logged)}")
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
            row = {"system": s.label, "metric": metric, "mean": summary["mean"], "ci_low": summary["ci_low"],
                   "ci_high": summary["ci_high"], "n": int(summary["n"]), "baseline": s is baseline}
            if s is not baseline:
                wins, ties, losses = win_tie_loss(values, base)
                delta, p_ttest, effect = (values.mean() - base.mean() if len(values) else np.nan), paired_t_test(values, base).p_value, effect_size(values, base)
                row |= {"delta": delta, "p_ttest": p_ttest,
                        "p_randomization": randomization_test(values, base, resamples=resamples, seed=seed).p_value,
                        "wins": wins, "ties": ties, "losses": losses, "delta_ci_low": effect.ci_low, "delta_ci_high": effect.ci_high,
                        "cohens_d": effect.cohens_d, "rank_biserial": effect.rank_biserial, "mdd": effect.mdd,
                        "underpowered": bool(abs(delta) < effect.mdd and p_ttest > ALPHA)}
            rows.append(row)
    table = pd.DataFrame(rows)
    for column in ("delta", "p_ttest", "p_randomization", "wins", "ties", "losses", "delta_ci_low", "delta_ci_high", "cohens_d",
                   "rank_biserial", "mdd", "underpowered"):
        if column not in table:
            table[column] = np.nan
    for test in ("p_ttest", "p_randomization"):
        table[f"{test}_holm"] = table.groupby("metric")[test].transform(lambda p: pd.Series(holm(p.to_numpy()), index=p.index))
    table["best"] = table.groupby("metric")["mean"].transform(is_best).astype(bool)
    return Comparison(table, systems, baseline, list(metrics), list(queries), paired)


def defined_queries(systems: Sequence[SystemRun], metric: str, queries: Sequence[str], judged: Sequence[str] | None = None) -> list[str]:
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
            notes.append(f"{metric}: rows have values on different queries ({', '.join(f'{label} {n}' for label, n in own.items())}); "
                         f"compared on the {paired} where all have one, so these means differ from each row's own mean over its queries")
    return ". ".join(notes)


def query_counts(comparison: Comparison) -> str:
    """``n = 952 (ndcg@10), 1190 (abstention_rate) queries (per metric: ...)``: the paired queries per
    metric, or ``952 queries`` when every metric has the same."""
    counts = {m: len(comparison.paired.get(m, comparison.queries)) for m in comparison.metrics}
    if len(set(counts.values())) == 1:
        return f"{next(iter(counts.values()))} queries"
    return "n = " + ", ".join(f"{n} ({m})" for m, n in counts.items()) + " queries (per metric: those where every row has a value)"


def logged_metrics(per_query: pd.DataFrame) -> list[str]:
    """The metric columns of a per-query table: its numbers, less the latency (``layout.LATENCY_COLUMNS``)
    and slice columns."""
    return [c for c in per_query.columns if pd.api.types.is_numeric_dtype(per_query[c]) and c not in LATENCY_COLUMNS.values()
            and not c.startswith(SLICE_COLUMN_PREFIX)]


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
    frame = pd.DataFrame({"qid": rows, "query": [texts.get(q, "") for q in rows]})
    for metric in comparison.metrics:
        base = comparison.baseline.per_query.loc[rows, metric].to_numpy(float)
        for s in comparison.systems:
            values = s.per_query.loc[rows, metric].to_numpy(float)
            frame[f"{s.label} {metric}"] = values.round(decimals)
            if s is not comparison.baseline:
                frame[f"{s.label} Δ {metric}"] = (values - base).round(decimals)
    return frame


# --------------------------------------------------------------------------- rendering

def p_text(value: float) -> str:
    """A p-value as shown in tables: 4 decimals, ``<0.0001`` below, blank when there is none."""
    if pd.isna(value):
        return ""
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def wide_table(comparison: Comparison, bold: tuple[str, str] = ("", "*")) -> pd.DataFrame:
    """One row per system; per metric: mean [CI] (best marked), Δ, Holm-corrected p-values, W/T/L."""
    open_mark, close_mark = bold
    out = pd.DataFrame(index=pd.Index([s.label for s in comparison.systems], name="system"))
    for metric in comparison.metrics:
        rows = comparison.table[comparison.table["metric"] == metric].set_index("system")
        cell = rows.apply(lambda r: "" if pd.isna(r["mean"]) else f"{r['mean']:.4f} [{r['ci_low']:.4f}, {r['ci_high']:.4f}]", axis=1)
        out[metric] = [f"{open_mark}{c}{close_mark}" if best else c for c, best in zip(cell, rows["best"])]
        out[f"Δ {metric}"] = [("baseline" if r["baseline"] else "" if pd.isna(r["delta"]) else f"{r['delta']:+.4f}") for _, r in rows.iterrows()]
        out[f"p t-test {metric}"] = rows["p_ttest_holm"].map(p_text)
        out[f"p rand. {metric}"] = rows["p_randomization_holm"].map(p_text)
        out[f"W/T/L {metric}"] = rows.apply(lambda r: "" if pd.isna(r["wins"]) else f"{int(r['wins'])}/{int(r['ties'])}/{int(r['losses'])}", axis=1)
    return out


LATEX_SPECIALS = {"\\": r"\textbackslash{}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "&": r"\&", "%": r"\%", "$": r"\$",
                  "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}", "Δ": r"$\Delta$", "†": r"$^{\dagger}$", "‡": r"$^{\ddagger}$", "±": r"$\pm$",
                  "≥": r"$\geq$", "≤": r"$\leq$", "×": r"$\times$"}
_LATEX_SPECIAL = re.compile("[" + re.escape("".join(LATEX_SPECIALS)) + "]")


def latex_escape(text: str) -> str:
    """``text`` as LaTeX source: each special character escaped, the symbols tables use as math (one pass)."""
    return _LATEX_SPECIAL.sub(lambda match: LATEX_SPECIALS[match.group()], text)


def render(comparison: Comparison, fmt: str, width: int | None = TEXT_WIDTH) -> str:
    """The comparison as ``table`` (text; wider than ``width`` characters: a block per metric, notes
    wrapped; None: one wide table), ``markdown``, ``latex``, ``csv`` or ``json`` (full precision)."""
    if fmt not in FORMATS:
        raise RagtrackError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if fmt == "csv":
        return csv_text(comparison.table, float_format="%.17g")
    if fmt == "json":
        reference = {"reference": comparison.reference.summary()} if comparison.reference else {}
        return json_text({"baseline": comparison.baseline.label, "metrics": comparison.metrics, "queries": len(comparison.queries),
                           "rows": json.loads(comparison.table.to_json(orient="records")), **reference}, indent=2)
    footer = (f"{query_counts(comparison)}; mean [95% bootstrap CI]; p: paired t-test and randomization test "
              f"against {comparison.baseline.label}, Holm-corrected; W/T/L: per-query wins/ties/losses; best marked")
    coverage = f". {coverage_note(comparison)}" if coverage_note(comparison) else ""
    if fmt == "markdown":
        wide = wide_table(comparison, ("**", "**"))
        header = "| system | " + " | ".join(wide.columns) + " |"
        lines = [header, "|" + "---|" * (len(wide.columns) + 1)]
        lines += ["| " + " | ".join([label, *row]) + " |" for label, row in zip(wide.index, wide.to_numpy())]
        return ("\n".join(lines) + f"\n\n{footer.replace('best marked', 'best in bold')}{coverage}\n" + slice_section(comparison, fmt)
                + reference_section(comparison, fmt))
    if fmt == "latex":
        wide = wide_table(comparison, (r"\textbf{", "}"))
        lines = [r"\begin{tabular}{l" + "r" * len(wide.columns) + "}", r"\toprule",
                 " & ".join(["system", *map(latex_escape, wide.columns)]) + r" \\", r"\midrule"]
        lines += [" & ".join([latex_escape(label), *(c if c.startswith(r"\textbf") else latex_escape(c) for c in row)]) + r" \\"
                  for label, row in zip(wide.index, wide.to_numpy())]
        return "\n".join([*lines, r"\bottomrule", r"\end{tabular}", f"% {footer}{coverage}"]) + "\n" + reference_section(comparison, fmt)
    wide = wide_table(comparison)
    note = f"{footer} (*){coverage}"
    text = wide.to_string()
    if width and max(map(len, text.splitlines())) > width:  # one block per metric, its figures as columns
        text = "\n\n".join(f"{metric}\n" + wide[[c for c in wide.columns if c == metric or c.endswith(f" {metric}")]]
                           .rename(columns=lambda c: c.removesuffix(f" {metric}") if c != metric else "mean [95% CI]").to_string()
                           for metric in comparison.metrics)
    return (text + "\n\n" + (textwrap.fill(note, width) if width else note) + "\n" + slice_section(comparison, fmt, width)
            + reference_section(comparison, fmt, width))


def reference_section(comparison: Comparison, fmt: str, width: int | None = TEXT_WIDTH) -> str:
    """``compare --reference``'s tables (``ReferenceCheck.tables``) and notes for the ``table``,
    ``markdown`` and ``latex`` formats (csv and json carry them in their rows); "" without a reference."""
    check = comparison.reference
    if check is None or fmt not in ("table", "markdown", "latex"):
        return ""
    parts = []
    for title, frame in check.tables():
        if fmt == "markdown":
            rows = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
            parts.append(f"{title}\n\n" + "\n".join(rows + ["| " + " | ".join(map(str, row)) + " |" for row in frame.to_numpy()]))
        elif fmt == "latex":
            rows = [" & ".join(latex_escape(str(c)) for c in row) + r" \\" for row in [frame.columns, *frame.to_numpy()]]
            parts.append("\n".join([f"% {title}", r"\begin{tabular}{" + "l" * len(frame.columns) + "}", r"\toprule", rows[0], r"\midrule",
                                     *rows[1:], r"\bottomrule", r"\end{tabular}"]))
        else:
            parts.append(_fill(title, width) + "\n" + frame.to_string(index=False, line_width=width))
    notes = [f"note: {note}" for note in check.notes]
    if fmt == "markdown":
        return "\n## Reference\n\n" + "\n\n".join(parts) + "\n\n" + "".join(f"- {note}\n" for note in notes)
    if fmt == "latex":
        return "\n".join(parts) + "\n" + "".join(f"% {note}\n" for note in notes)
    return "\n" + "\n\n".join(parts) + "\n" + "".join(f"{_fill(note, width)}\n" for note in notes)


def _fill(text: str, width: int | None) -> str:
    """``text`` wrapped at ``width`` (None: one line), names with hyphens and paths kept whole."""
    return textwrap.fill(text, width, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False) if width else text


def slice_table(comparison: Comparison) -> pd.DataFrame | None:
    """Mean [95% bootstrap CI, seed 0] of each compared row per slice (rows: metric, slice, n), when
    every per-query table has the same ``slice.<attribute>`` columns (``pipeline.slices``); else None.
    Queries: each metric's paired ones (:func:`defined_queries`) in the slice."""
    shared = set.intersection(*({c for c in s.per_query.columns if c.startswith(SLICE_COLUMN_PREFIX)} for s in comparison.systems))
    if not shared:
        return None
    rows = []
    for column in sorted(shared):
        labels = comparison.baseline.per_query.loc[comparison.queries, column].astype(str)
        for value in sorted(labels.unique()):
            in_slice = set(labels.index[labels == value])
            for metric in comparison.metrics:
                qids = [q for q in comparison.paired[metric] if q in in_slice]
                row = {"metric": metric, "slice": f"{column.removeprefix(SLICE_COLUMN_PREFIX)}={value}"}
                for s in comparison.systems:
                    summary = aggregate(s.per_query.loc[qids, [metric]].astype(float)).loc[metric]
                    row["n"], row[s.label] = int(summary["n"]), f"{summary['mean']:.4f} [{summary['ci_low']:.4f}, {summary['ci_high']:.4f}]"
                rows.append(row)
    return pd.DataFrame(rows).set_index(["metric", "slice", "n"])


def slice_section(comparison: Comparison, fmt: str, width: int | None = TEXT_WIDTH) -> str:
    """:func:`slice_table` for the ``table`` and ``markdown`` formats (csv, json and latex keep their
    single table); "" without slices."""
    table = slice_table(comparison) if fmt in ("table", "markdown") else None
    if table is None:
        return ""
    if fmt == "markdown":
        lines = ["| metric | slice | n | " + " | ".join(table.columns) + " |", "|---|---|---:|" + "---|" * len(table.columns)]
        lines += ["| " + " | ".join([*map(str, index), *row]) + " |" for index, row in zip(table.index, table.to_numpy())]
        return "\n## Slices\n\n" + "\n".join(lines) + "\n\nmean [95% bootstrap CI] over each slice's queries\n"
    return "\nSlices: mean [95% bootstrap CI] over each slice's queries\n" + table.to_string(line_width=width) + "\n"


# --------------------------------------------------------------------------- plots

def plot(comparison: Comparison, path: Path, title: str = "") -> Path:
    """Metric by system with CIs, recall@k and ndcg@k against k, and sorted per-query differences;
    ``title`` (the dataset, the experiment) above the three panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = comparison.metrics[0]
    rows = comparison.table[comparison.table["metric"] == metric]
    figure, axes = plt.subplots(1, 3, figsize=(17, max(4.5, 0.35 * len(rows) + 1.5)))
    palette = plt.get_cmap("tab10" if len(comparison.systems) <= 10 else "tab20")  # one distinct color per row
    colors = [palette(i % palette.N) for i in range(len(comparison.systems))]
    swept = numeric_params(comparison.systems)
    if swept:
        against_param(axes[0], comparison, metric, swept[0])
    else:
        positions = np.arange(len(rows))[::-1]
        errors = [rows["mean"] - rows["ci_low"], rows["ci_high"] - rows["mean"]]
        for position, mean, low, high, color in zip(positions, rows["mean"], *errors, colors):
            if pd.notna(mean):  # a metric defined on no compared query has no point
                axes[0].errorbar(mean, position, xerr=[[low], [high]], fmt="o", color=color, capsize=4)
        baseline_mean = rows[rows["baseline"]]["mean"].iloc[0]
        if pd.notna(baseline_mean):
            axes[0].axvline(baseline_mean, color="gray", linestyle=":", linewidth=1)
        axes[0].set_yticks(positions, rows["system"])
        axes[0].set_xlabel(f"{metric}: mean and 95% CI (dotted: baseline)")
        axes[0].set_title(f"{metric} by system")
    for s, color in zip(comparison.systems, colors):
        for key, style in ((curve_key("recall"), "-"), (curve_key("ndcg"), "--")):
            curve = s.curves.get(key)
            if curve:
                ks = sorted(curve)
                axes[1].plot(ks, [curve[k] for k in ks], style, marker=".", color=color, label=s.label if style == "-" else None)
    axes[1].set_xscale("log")
    axes[1].set_xlabel("k (log)")
    axes[1].set_title("recall@k (solid) and ndcg@k (dashed)")
    if axes[1].lines:
        axes[1].legend(fontsize=7)
    paired = comparison.paired[metric]
    base = comparison.baseline.per_query.loc[paired, metric].to_numpy(float)
    for s, color in zip(comparison.systems, colors):
        if s is not comparison.baseline:
            diff = np.sort(s.per_query.loc[paired, metric].to_numpy(float) - base)[::-1]
            axes[2].plot(np.arange(1, len(diff) + 1), diff, label=s.label, color=color)
    axes[2].axhline(0, color="black", linewidth=0.8)
    axes[2].set_xlabel("queries, sorted")
    axes[2].set_title(f"per-query {metric} − {comparison.baseline.label}")
    if len(comparison.systems) > 1:  # a line per system against the baseline
        axes[2].legend(fontsize=7)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def numeric_params(systems: Sequence[SystemRun]) -> list[str]:
    """The parameters that take at least two numeric values among the rows (swept numeric settings)."""
    names = dict.fromkeys(name for s in systems for name in s.params)
    return [name for name in names if len({_number(s.params[name]) for s in systems if name in s.params} - {None}) >= 2
            and all(_number(s.params[name]) is not None for s in systems if name in s.params)]


def against_param(axis, comparison: Comparison, metric: str, param: str) -> None:
    """``metric`` (mean, 95% CI) against the numeric ``param`` on a numeric axis (log when it spans
    two decades), a line per system; rows without the parameter as dotted horizontal lines."""
    rows = comparison.table[comparison.table["metric"] == metric].set_index("system")
    by_system: dict[str, list[tuple[float, pd.Series]]] = {}
    for s in comparison.systems:
        row = rows.loc[s.label]
        if param in s.params:
            by_system.setdefault(s.system, []).append((float(s.params[param]), row))
        else:
            axis.axhline(row["mean"], linestyle=":", linewidth=1, color="gray")
            axis.annotate(s.label, (0, row["mean"]), xycoords=("axes fraction", "data"), fontsize=7, color="gray")
    values = []
    for system, points in by_system.items():
        points.sort(key=lambda point: point[0])
        xs, means = [x for x, _ in points], np.array([r["mean"] for _, r in points])
        errors = [means - [r["ci_low"] for _, r in points], [r["ci_high"] for _, r in points] - means]
        axis.errorbar(xs, means, yerr=errors, marker="o", capsize=4, label=system)
        values += xs
    if min(values) > 0 and max(values) / min(values) >= 100:
        axis.set_xscale("log")
    axis.set_xlabel(param)
    axis.set_ylabel(f"{metric}: mean and 95% CI")
    axis.set_title(f"{metric} against {param}")
    axis.legend(fontsize=7)


def sweep_plot(comparison: Comparison, path: Path, title: str = "") -> Path | None:
    """Each metric against each swept numeric setting (:func:`against_param`), one panel each; None
    (nothing written) without such a setting."""
    params = numeric_params(comparison.systems)
    if not params:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(comparison.metrics), len(params), figsize=(6 * len(params), 4 * len(comparison.metrics)),
                                squeeze=False)
    for row, metric in zip(axes, comparison.metrics):
        for axis, param in zip(row, params):
            against_param(axis, comparison, metric, param)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return Path(path)


# --------------------------------------------------------------------------- failure analysis

def _top(run: Run, qid: str, dataset: Dataset, titles: dict[str, str], k: int = 5) -> list[str]:
    judged = dataset.qrels.get(qid, {})
    return [f"  {rank}. {doc} (grade {judged[doc]}) {titles.get(doc, '')}" if doc in judged else f"  {rank}. {doc} {titles.get(doc, '')}"
            for rank, (doc, _) in enumerate(run.ranking(qid)[:k], start=1)] or ["  (nothing retrieved)"]


def _relevant(qid: str, dataset: Dataset, titles: dict[str, str]) -> list[str]:
    ranked = sorted(((g, d) for d, g in dataset.qrels.get(qid, {}).items() if g > 0), reverse=True)
    return [f"  - {d} (grade {g}) {titles.get(d, '')}" for g, d in ranked]


def _differences(comparison: Comparison, system: SystemRun) -> pd.Series:
    """Per paired query: ``system`` minus the baseline on the first metric, most negative first."""
    metric = comparison.metrics[0]
    rows = comparison.paired[metric]
    return (system.per_query.loc[rows, metric] - comparison.baseline.per_query.loc[rows, metric]).sort_values(kind="stable")


def failure_report(comparison: Comparison, system: SystemRun, runs: dict[str, Run], dataset: Dataset, limit: int = 10) -> str:
    """Markdown: the queries where ``system`` loses most against the baseline, with both top-5 lists."""
    metric, baseline = comparison.metrics[0], comparison.baseline
    titles = dict(zip(dataset.corpus.ids, dataset.corpus.titles))
    diff = _differences(comparison, system)
    losses = diff[diff < 0].head(limit)
    lines = [f"# {system.label} vs {baseline.label}: largest {metric} losses", "",
             f"{int((diff < 0).sum())} of {len(diff)} queries lose; the {len(losses)} largest losses follow.", ""]
    for qid, delta in losses.items():
        lines += [f"## {qid}: {metric} {baseline.per_query.loc[qid, metric]:.4f} -> {system.per_query.loc[qid, metric]:.4f} ({delta:+.4f})",
                  "", f"Query: {dataset.queries.get(qid, '?')}", "", "Relevant:", *_relevant(qid, dataset, titles), "",
                  f"{baseline.label} top 5:", *_top(runs[baseline.run_id], qid, dataset, titles), "",
                  f"{system.label} top 5:", *_top(runs[system.run_id], qid, dataset, titles), ""]
    return "\n".join(lines)


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", label).strip("_") or "system"




# --------------------------------------------------------------------------- files

def write_comparison(comparison: Comparison, folder: Path, title: str, dataset: Dataset | None = None,
                     runs: dict[str, Run] | None = None, failures: int = 10, config_text: str = "",
                     sections: Sequence[tuple[str, str, str]] = ()) -> None:
    """Write ``comparison.{md,csv,json,txt}``, ``comparison.png``, ``sweep.png`` (rows with a swept
    numeric setting), ``failures/<row>.md`` (with the dataset and the rows' runs, by run id) and
    ``report.html`` (with the extra ``sections``: anchor, heading, HTML body) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, kind in (("comparison.md", "markdown"), ("comparison.csv", "csv"), ("comparison.json", "json"), ("comparison.txt", "table")):
        (folder / name).write_text(render(comparison, kind), encoding="utf-8")
    figure = plot(comparison, folder / "comparison.png", title)
    swept = sweep_plot(comparison, folder / SWEEP_PLOT_FILE, title)
    cases = dataset is not None and bool(runs) and failures > 0
    if cases:
        (folder / "failures").mkdir(exist_ok=True)
        for s in comparison.systems:
            if s is not comparison.baseline:
                text = failure_report(comparison, s, runs, dataset, failures)
                (folder / "failures" / f"{_slug(s.label)}.md").write_text(text, encoding="utf-8")
    report = html_report(comparison, title, [figure.read_bytes(), *([swept.read_bytes()] if swept else [])], config_text,
                         *((dataset, runs, failures) if cases else (None, None, failures)), extra_sections=sections)
    (folder / REPORT_FILE).write_text(report, encoding="utf-8")


REPORT_FILE = "report.html"
SWEEP_PLOT_FILE = "sweep.png"  # the metrics against each swept numeric setting (rows of several jobs only)
_REPORT_STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:14px}th,td{border:1px solid #ccc;padding:4px 8px;text-align:right;
vertical-align:top}th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}.best{font-weight:bold;background:#e8f5e9}
table.cases{width:100%;table-layout:fixed;font-size:13px}table.cases th,table.cases td{text-align:left;overflow-wrap:anywhere}
.verdict{font-size:16px;margin:.3em 0}img{max-width:100%}summary{cursor:pointer;font-weight:bold;margin:.5em 0}
pre{background:#f7f7f7;padding:1em;white-space:pre-wrap;overflow-wrap:anywhere;font-size:13px}.note{color:#555}
nav ul{margin:.3em 0;padding-left:1.2em}"""


def _p_phrase(p: float) -> str:
    if pd.isna(p):
        return "no p-value"
    return "p < 0.001" if p < 1e-3 else f"p = {p:.3f}"


def verdicts(comparison: Comparison) -> list[str]:
    """One sentence per metric: the best row (:func:`is_best`; the baseline where it ties) with its mean,
    difference to the baseline and Holm-corrected paired t-test p (for the best non-baseline row when the
    baseline is best)."""
    sentences = []
    for metric in comparison.metrics:
        rows = comparison.table[comparison.table["metric"] == metric]
        if not rows["best"].any():
            sentences.append(f"{metric}: no value, defined on none of the compared queries for every system")
            continue
        best = rows[rows["best"]].sort_values("baseline", ascending=False, kind="stable").iloc[0]
        others = rows[~rows["baseline"]]
        if not best["baseline"]:
            sentences.append(f"{best['system']} best on {metric}: {best['mean']:.4f}, {best['delta']:+.4f} over "
                             f"{comparison.baseline.label}, {_p_phrase(best['p_ttest_holm'])} (paired t-test, Holm)")
        elif others.empty:
            sentences.append(f"{best['system']} on {metric}: {best['mean']:.4f} (no other system)")
        else:
            runner = others.loc[others["mean"].fillna(-np.inf).idxmax()]
            sentences.append(f"{best['system']} (the baseline) best on {metric}: {best['mean']:.4f}; next {runner['system']}, "
                             f"{runner['delta']:+.4f}, {_p_phrase(runner['p_ttest_holm'])} (paired t-test, Holm)")
    return sentences


def detectability(row: pd.Series) -> str:
    """Whether the query set could have seen the difference of one comparison row: significant
    (uncorrected paired t-test p ≤ α), or underpowered (|Δ| below the minimal detectable difference at
    80% power and not significant), or neither (not significant although |Δ| ≥ MDD); no difference at
    all where the two systems tie on every query."""
    if row["n"] < 2:
        return f"cannot tell ({int(row['n'])} paired queries)"
    if row["wins"] == 0 and row["losses"] == 0:
        return "no difference: tied on every query"
    if pd.isna(row["p_ttest"]) or pd.isna(row["mdd"]):
        return "cannot tell (no variance)"
    if row["p_ttest"] <= ALPHA:
        return f"detected: p = {row['p_ttest']:.3g} ≤ {ALPHA:g}"
    if row["underpowered"]:
        return f"underpowered: |Δ| {abs(row['delta']):.4f} < MDD {row['mdd']:.4f}; this query set could miss a difference this small"
    return f"not significant, although |Δ| ≥ MDD {row['mdd']:.4f}"


def _power_table(comparison: Comparison) -> str:
    """Per metric and system against the baseline: Δ with its CI, Cohen's d_z, rank-biserial r, the
    minimal detectable difference and :func:`detectability`."""
    rows = comparison.table[~comparison.table["baseline"]]
    if rows.empty:
        return '<p class="note">no comparison: one system</p>'
    frame = pd.DataFrame({"metric": rows["metric"].to_numpy(),
                          "n": rows["n"].to_numpy(),
                          "Δ [95% CI]": [_figure(r.delta, "+.4f") + (f" [{_figure(r.delta_ci_low, '+.4f')}, {_figure(r.delta_ci_high, '+.4f')}]"
                                                                    if pd.notna(r.delta_ci_low) else "") for r in rows.itertuples()],
                          "d_z": rows["cohens_d"].map(lambda v: _figure(v, "+.2f")).to_numpy(),
                          "r (rank)": rows["rank_biserial"].map(lambda v: _figure(v, "+.2f")).to_numpy(),
                          "MDD (80%)": rows["mdd"].map(lambda v: _figure(v, ".4f")).to_numpy(),
                          "could this query set see it?": [detectability(r) for _, r in rows.iterrows()]},
                         index=pd.Index(rows["system"].to_numpy(), name="system"))
    return _html_table(frame)


def _figure(value: float, spec: str) -> str:
    """A number in the report's tables, blank where it is undefined (NaN)."""
    return "" if pd.isna(value) else format(value, spec)


def _html_table(frame: pd.DataFrame, best: Sequence[bool] = ()) -> str:
    """A frame as an HTML table, the index as the first column; rows flagged in ``best`` highlighted."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in [frame.index.name or "", *frame.columns])
    rows = []
    for i, (label, cells) in enumerate(zip(frame.index, frame.to_numpy())):
        mark = ' class="best"' if i < len(best) and best[i] else ""
        rows.append(f"<tr{mark}><td>{html.escape(str(label))}</td>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _metric_block(comparison: Comparison, wide: pd.DataFrame, metric: str) -> str:
    columns = {metric: "mean [95% CI]", f"Δ {metric}": "Δ", f"p t-test {metric}": "p t-test (Holm)",
               f"p rand. {metric}": "p rand. (Holm)", f"W/T/L {metric}": "W/T/L"}
    best = comparison.table[comparison.table["metric"] == metric]["best"].tolist()
    return f"<h3>{html.escape(metric)} (n = {len(comparison.paired[metric])})</h3>" + _html_table(wide[list(columns)].rename(columns=columns), best)


def _lines(lines: list[str]) -> str:
    return "<br>".join(html.escape(line.strip()) for line in lines)


def _cases_table(comparison: Comparison, system: SystemRun, qids: pd.Series, runs: dict[str, Run], dataset: Dataset,
                 titles: dict[str, str]) -> str:
    metric, base = comparison.metrics[0], comparison.baseline
    head = (f"<tr><th>query</th><th>{html.escape(metric)}</th><th>relevant</th><th>{html.escape(base.label)} top 3</th>"
            f"<th>{html.escape(system.label)} top 3</th></tr>")
    rows = [f"<tr><td>{html.escape(qid)}: {html.escape(dataset.queries.get(qid, '?'))}</td>"
            f"<td>{base.per_query.loc[qid, metric]:.4f} → {system.per_query.loc[qid, metric]:.4f} ({delta:+.4f})</td>"
            f"<td>{_lines(_relevant(qid, dataset, titles))}</td><td>{_lines(_top(runs[base.run_id], qid, dataset, titles, 3))}</td>"
            f"<td>{_lines(_top(runs[system.run_id], qid, dataset, titles, 3))}</td></tr>" for qid, delta in qids.items()]
    return f'<table class="cases">{head}{"".join(rows)}</table>' if rows else "<p class=\"note\">none</p>"


def _wins_and_losses(comparison: Comparison, runs: dict[str, Run], dataset: Dataset, limit: int) -> list[str]:
    """Per system, a collapsible block with its largest wins and losses against the baseline."""
    titles = dict(zip(dataset.corpus.ids, dataset.corpus.titles))
    parts = []
    for s in comparison.systems:
        if s is comparison.baseline:
            continue
        diff = _differences(comparison, s)
        wins, losses = diff[diff > 0].iloc[::-1].head(limit), diff[diff < 0].head(limit)
        parts.append(f"<details><summary>{html.escape(s.label)}: {int((diff > 0).sum())} wins, {int((diff == 0).sum())} ties, "
                     f"{int((diff < 0).sum())} losses against {html.escape(comparison.baseline.label)}</summary>"
                     f"<h4>Largest wins</h4>{_cases_table(comparison, s, wins, runs, dataset, titles)}"
                     f"<h4>Largest losses</h4>{_cases_table(comparison, s, losses, runs, dataset, titles)}</details>")
    return parts


def html_report(comparison: Comparison, title: str, plots: list[bytes], config_text: str = "", dataset: Dataset | None = None,
                runs: dict[str, Run] | None = None, limit: int = 10, extra_sections: Sequence[tuple[str, str, str]] = ()) -> str:
    """One self-contained HTML page (inline CSS, the plot as a data URI) that fits 1,280 px: a verdict
    per metric, contents, a table per metric (CIs, Δ and Holm-corrected tests against the baseline),
    effect sizes with whether the query set could detect each difference (:func:`detectability`), the
    ``plots`` (PNG), slices, each system's largest wins and losses (with ``dataset`` and the rows' ``runs``),
    the ``extra_sections`` (anchor, heading, HTML body: the judges' agreement, a job's cost and tokens) and
    the (redacted) config."""
    wide = wide_table(comparison, ("", ""))
    sections = [("verdict", "Verdict", "".join(f'<p class="verdict">{html.escape(v)}.</p>' for v in verdicts(comparison))),
                ("metrics", "Systems and metrics",
                 f'<p class="note">{query_counts(comparison)}; '
                 f'{html.escape(coverage_note(comparison) + "; " if coverage_note(comparison) else "")}mean [95% bootstrap CI]; Δ and p-values (paired t-test, '
                 f"randomization test, Holm-corrected) against <b>{html.escape(comparison.baseline.label)}</b>; W/T/L: "
                 "per-query wins/ties/losses; best value highlighted.</p>"
                 + "".join(_metric_block(comparison, wide, m) for m in comparison.metrics)),
                ("power", "Effect size and power",
                 f'<p class="note">Against <b>{html.escape(comparison.baseline.label)}</b> on {query_counts(comparison)}: '
                 "mean difference with its 95% CI, paired Cohen's d_z, rank-biserial r, and the minimal detectable difference "
                 f"(MDD) of a two-sided paired t-test at α = {ALPHA:g} and 80% power (docs/metrics.md).</p>" + _power_table(comparison)),
                ("plot", "Plots", "".join(f'<img alt="comparison plot" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
                                          for png in plots))]
    slices = slice_table(comparison)
    sections.append(("slices", "Slices", '<p class="note">no slices in this dataset</p>' if slices is None else
                     slices.to_html() + '<p class="note">mean [95% bootstrap CI] over each slice\'s queries</p>'))
    sections += list(extra_sections)
    if comparison.reference is not None:
        tables = "".join(f"<h3>{html.escape(title)}</h3>" + _html_table(frame.set_index(frame.columns[0]))
                         for title, frame in comparison.reference.tables())
        sections.append(("reference", f"Against the reference {comparison.reference.source}",
                         tables + "".join(f'<p class="note">{html.escape(note)}</p>' for note in comparison.reference.notes)))
    if dataset is not None and runs:
        sections.append(("queries", f"Wins and losses against {comparison.baseline.label} ({comparison.metrics[0]})",
                         "".join(_wins_and_losses(comparison, runs, dataset, limit))))
    if config_text:
        sections.append(("config", "Config", f"<pre>{html.escape(config_text)}</pre>"))
    contents = "".join(f'<li><a href="#{anchor}">{html.escape(heading)}</a></li>' for anchor, heading, _ in sections)
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title><style>{_REPORT_STYLE}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>", f"<nav><b>Contents</b><ul>{contents}</ul></nav>",
             *(f'<h2 id="{anchor}">{html.escape(heading)}</h2>{body}' for anchor, heading, body in sections)]
    return "\n".join([*parts, "</body></html>"]) + "\n"
