"""What a comparison writes: verdicts in words, failure analysis per row, the self-contained
``report.html`` and the files of :func:`write_comparison` (tables, figures, failures, report)."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ragtrack.core.data import Dataset
from ragtrack.core.runs import Run
from ragtrack.evaluators.significance import ALPHA
from ragtrack.pipeline.analysis.comparison import Comparison, SystemRun, coverage_note, query_counts
from ragtrack.pipeline.analysis.comparison_plots import plot, sweep_plot
from ragtrack.pipeline.analysis.comparison_tables import render, slice_table, wide_table


def _top(run: Run, qid: str, dataset: Dataset, titles: dict[str, str], k: int = 5) -> list[str]:
    judged = dataset.qrels.get(qid, {})
    return [
        f"  {rank}. {doc} (grade {judged[doc]}) {titles.get(doc, '')}"
        if doc in judged
        else f"  {rank}. {doc} {titles.get(doc, '')}"
        for rank, (doc, _) in enumerate(run.ranking(qid)[:k], start=1)
    ] or ["  (nothing retrieved)"]


def _relevant(qid: str, dataset: Dataset, titles: dict[str, str]) -> list[str]:
    ranked = sorted(((g, d) for d, g in dataset.qrels.get(qid, {}).items() if g > 0), reverse=True)
    return [f"  - {d} (grade {g}) {titles.get(d, '')}" for g, d in ranked]


def _differences(comparison: Comparison, system: SystemRun) -> pd.Series:
    """Per paired query: ``system`` minus the baseline on the first metric, most negative first."""
    metric = comparison.metrics[0]
    rows = comparison.paired[metric]
    return (system.per_query.loc[rows, metric] - comparison.baseline.per_query.loc[rows, metric]).sort_values(
        kind="stable"
    )


def failure_report(
    comparison: Comparison, system: SystemRun, runs: dict[str, Run], dataset: Dataset, limit: int = 10
) -> str:
    """Markdown: the queries where ``system`` loses most against the baseline, with both top-5 lists."""
    metric, baseline = comparison.metrics[0], comparison.baseline
    titles = dict(zip(dataset.corpus.ids, dataset.corpus.titles))
    diff = _differences(comparison, system)
    losses = diff[diff < 0].head(limit)
    lines = [
        f"# {system.label} vs {baseline.label}: largest {metric} losses",
        "",
        f"{int((diff < 0).sum())} of {len(diff)} queries lose; the {len(losses)} largest losses follow.",
        "",
    ]
    for qid, delta in losses.items():
        lines += [
            f"## {qid}: {metric} {baseline.per_query.loc[qid, metric]:.4f} -> {system.per_query.loc[qid, metric]:.4f} ({delta:+.4f})",
            "",
            f"Query: {dataset.queries.get(qid, '?')}",
            "",
            "Relevant:",
            *_relevant(qid, dataset, titles),
            "",
            f"{baseline.label} top 5:",
            *_top(runs[baseline.run_id], qid, dataset, titles),
            "",
            f"{system.label} top 5:",
            *_top(runs[system.run_id], qid, dataset, titles),
            "",
        ]
    return "\n".join(lines)


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", label).strip("_") or "system"


# --------------------------------------------------------------------------- files


def write_comparison(
    comparison: Comparison,
    folder: Path,
    title: str,
    dataset: Dataset | None = None,
    runs: dict[str, Run] | None = None,
    failures: int = 10,
    config_text: str = "",
    sections: Sequence[tuple[str, str, str]] = (),
) -> None:
    """Write ``comparison.{md,csv,json,txt}``, ``comparison.png``, ``sweep.png`` (rows with a swept
    numeric setting), ``failures/<row>.md`` (with the dataset and the rows' runs, by run id) and
    ``report.html`` (with the extra ``sections``: anchor, heading, HTML body) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, kind in (
        ("comparison.md", "markdown"),
        ("comparison.csv", "csv"),
        ("comparison.json", "json"),
        ("comparison.txt", "table"),
    ):
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
    report = html_report(
        comparison,
        title,
        [figure.read_bytes(), *([swept.read_bytes()] if swept else [])],
        config_text,
        *((dataset, runs, failures) if cases else (None, None, failures)),
        extra_sections=sections,
    )
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
    """One sentence per metric: every row equal (``all 4 systems equal on recall@100``), else the best
    row (:func:`is_best`; the baseline where it ties, and the rows tied with it named) with its mean,
    difference to the baseline and Holm-corrected paired t-test p (for the best non-baseline row when the
    baseline is best)."""
    sentences = []
    for metric in comparison.metrics:
        rows = comparison.table[comparison.table["metric"] == metric]
        if not rows["best"].any():
            sentences.append(f"{metric}: no value, defined on none of the compared queries for every system")
            continue
        if len(rows) > 1 and rows["best"].all():
            sentences.append(f"all {len(rows)} systems equal on {metric}: {rows['mean'].iloc[0]:.4f}")
            continue
        best = rows[rows["best"]].sort_values("baseline", ascending=False, kind="stable").iloc[0]
        tied = rows[rows["best"] & (rows["system"] != best["system"])]["system"].tolist()
        with_ties = f" (tied with {', '.join(tied)})" if tied else ""
        others = rows[~rows["baseline"] & ~rows["best"]]
        if not best["baseline"]:
            sentences.append(
                f"{best['system']} best on {metric}{with_ties}: {best['mean']:.4f}, {best['delta']:+.4f} over "
                f"{comparison.baseline.label}, {_p_phrase(best['p_ttest_holm'])} (paired t-test, Holm)"
            )
        elif others.empty:
            sentences.append(f"{best['system']} on {metric}{with_ties}: {best['mean']:.4f} (no other system below it)")
        else:
            runner = others.loc[others["mean"].fillna(-np.inf).idxmax()]
            sentences.append(
                f"{best['system']} (the baseline) best on {metric}{with_ties}: {best['mean']:.4f}; next {runner['system']}, "
                f"{runner['delta']:+.4f}, {_p_phrase(runner['p_ttest_holm'])} (paired t-test, Holm)"
            )
    return sentences


def detectability(row: pd.Series) -> str:
    """Whether the query set could have seen the difference of one comparison row: significant
    (paired t-test p ≤ α, Holm-corrected as every p of the report), or underpowered (|Δ| below the minimal detectable difference at
    80% power and not significant), or neither (not significant although |Δ| ≥ MDD); no difference at
    all where the two systems tie on every query."""
    if row["n"] < 2:
        return f"cannot tell ({int(row['n'])} paired queries)"
    if row["wins"] == 0 and row["losses"] == 0:
        return "no difference: tied on every query"
    if pd.isna(row["p_ttest_holm"]) or pd.isna(row["mdd"]):
        return "cannot tell (no variance)"
    if row["p_ttest_holm"] <= ALPHA:
        return f"detected: {_p_phrase(row['p_ttest_holm'])} ≤ {ALPHA:g} (Holm)"
    if row["underpowered"]:
        return f"underpowered: |Δ| {abs(row['delta']):.4f} < MDD {row['mdd']:.4f}; this query set could miss a difference this small"
    return f"not significant, although |Δ| ≥ MDD {row['mdd']:.4f}"


def _power_table(comparison: Comparison) -> str:
    """Per metric and system against the baseline: Δ with its CI, Cohen's d_z, rank-biserial r, the
    minimal detectable difference and :func:`detectability`."""
    rows = comparison.table[~comparison.table["baseline"]]
    if rows.empty:
        return '<p class="note">no comparison: one system</p>'
    frame = pd.DataFrame(
        {
            "metric": rows["metric"].to_numpy(),
            "n": rows["n"].to_numpy(),
            "Δ [95% CI]": [
                _figure(r.delta, "+.4f")
                + (
                    f" [{_figure(r.delta_ci_low, '+.4f')}, {_figure(r.delta_ci_high, '+.4f')}]"
                    if pd.notna(r.delta_ci_low)
                    else ""
                )
                for r in rows.itertuples()
            ],
            "d_z": rows["cohens_d"].map(lambda v: _figure(v, "+.2f")).to_numpy(),
            "r (rank)": rows["rank_biserial"].map(lambda v: _figure(v, "+.2f")).to_numpy(),
            "MDD (80%)": rows["mdd"].map(lambda v: _figure(v, ".4f")).to_numpy(),
            "could this query set see it?": [detectability(r) for _, r in rows.iterrows()],
        },
        index=pd.Index(rows["system"].to_numpy(), name="system"),
    )
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
        rows.append(
            f"<tr{mark}><td>{html.escape(str(label))}</td>"
            + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells)
            + "</tr>"
        )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _metric_block(comparison: Comparison, wide: pd.DataFrame, metric: str) -> str:
    columns = {
        metric: "mean [95% CI]",
        f"Δ {metric}": "Δ",
        f"p t-test {metric}": "p t-test (Holm)",
        f"p rand. {metric}": "p rand. (Holm)",
        f"W/T/L {metric}": "W/T/L",
    }
    best = comparison.table[comparison.table["metric"] == metric]["best"].tolist()
    return f"<h3>{html.escape(metric)} (n = {len(comparison.paired[metric])})</h3>" + _html_table(
        wide[list(columns)].rename(columns=columns), best
    )


def _lines(lines: list[str]) -> str:
    return "<br>".join(html.escape(line.strip()) for line in lines)


def _cases_table(
    comparison: Comparison,
    system: SystemRun,
    qids: pd.Series,
    runs: dict[str, Run],
    dataset: Dataset,
    titles: dict[str, str],
) -> str:
    metric, base = comparison.metrics[0], comparison.baseline
    head = (
        f"<tr><th>query</th><th>{html.escape(metric)}</th><th>relevant</th><th>{html.escape(base.label)} top 3</th>"
        f"<th>{html.escape(system.label)} top 3</th></tr>"
    )
    rows = [
        f"<tr><td>{html.escape(qid)}: {html.escape(dataset.queries.get(qid, '?'))}</td>"
        f"<td>{base.per_query.loc[qid, metric]:.4f} → {system.per_query.loc[qid, metric]:.4f} ({delta:+.4f})</td>"
        f"<td>{_lines(_relevant(qid, dataset, titles))}</td><td>{_lines(_top(runs[base.run_id], qid, dataset, titles, 3))}</td>"
        f"<td>{_lines(_top(runs[system.run_id], qid, dataset, titles, 3))}</td></tr>"
        for qid, delta in qids.items()
    ]
    return f'<table class="cases">{head}{"".join(rows)}</table>' if rows else '<p class="note">none</p>'


def _wins_and_losses(comparison: Comparison, runs: dict[str, Run], dataset: Dataset, limit: int) -> list[str]:
    """Per system, a collapsible block with its largest wins and losses against the baseline."""
    titles = dict(zip(dataset.corpus.ids, dataset.corpus.titles))
    parts = []
    for s in comparison.systems:
        if s is comparison.baseline:
            continue
        diff = _differences(comparison, s)
        wins, losses = diff[diff > 0].iloc[::-1].head(limit), diff[diff < 0].head(limit)
        parts.append(
            f"<details><summary>{html.escape(s.label)}: {int((diff > 0).sum())} wins, {int((diff == 0).sum())} ties, "
            f"{int((diff < 0).sum())} losses against {html.escape(comparison.baseline.label)}</summary>"
            f"<h4>Largest wins</h4>{_cases_table(comparison, s, wins, runs, dataset, titles)}"
            f"<h4>Largest losses</h4>{_cases_table(comparison, s, losses, runs, dataset, titles)}</details>"
        )
    return parts


def html_report(
    comparison: Comparison,
    title: str,
    plots: list[bytes],
    config_text: str = "",
    dataset: Dataset | None = None,
    runs: dict[str, Run] | None = None,
    limit: int = 10,
    extra_sections: Sequence[tuple[str, str, str]] = (),
) -> str:
    """One self-contained HTML page (inline CSS, the plot as a data URI) that fits 1,280 px: a verdict
    per metric, contents, a table per metric (CIs, Δ and Holm-corrected tests against the baseline),
    effect sizes with whether the query set could detect each difference (:func:`detectability`), the
    ``plots`` (PNG), slices, each system's largest wins and losses (with ``dataset`` and the rows' ``runs``),
    the ``extra_sections`` (anchor, heading, HTML body: the judges' agreement, a job's cost and tokens) and
    the (redacted) config."""
    wide = wide_table(comparison, ("", ""))
    sections = [
        ("verdict", "Verdict", "".join(f'<p class="verdict">{html.escape(v)}.</p>' for v in verdicts(comparison))),
        (
            "metrics",
            "Systems and metrics",
            f'<p class="note">{query_counts(comparison)}; '
            f"{html.escape(coverage_note(comparison) + '; ' if coverage_note(comparison) else '')}mean [95% bootstrap CI]; Δ [95% t-interval of the paired difference] and p-values (paired t-test, "
            f"randomization test, Holm-corrected; every p in this report) against <b>{html.escape(comparison.baseline.label)}</b>; W/T/L: "
            "per-query wins/ties/losses; best value highlighted.</p>"
            + "".join(_metric_block(comparison, wide, m) for m in comparison.metrics),
        ),
        (
            "power",
            "Effect size and power",
            f'<p class="note">Against <b>{html.escape(comparison.baseline.label)}</b> on {query_counts(comparison)}: '
            "mean difference with its 95% CI, paired Cohen's d_z, rank-biserial r, and the minimal detectable difference "
            f"(MDD) of a two-sided paired t-test at α = {ALPHA:g} and 80% power (docs/metrics.md).</p>"
            + _power_table(comparison),
        ),
        (
            "plot",
            "Plots",
            "".join(
                f'<img alt="comparison plot" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
                for png in plots
            ),
        ),
    ]
    slices = slice_table(comparison)
    sections.append(
        (
            "slices",
            "Slices",
            '<p class="note">no slices in this dataset</p>'
            if slices is None
            else slices.to_html() + '<p class="note">mean [95% bootstrap CI] over each slice\'s queries</p>',
        )
    )
    sections += list(extra_sections)
    if comparison.reference is not None:
        tables = "".join(
            f"<h3>{html.escape(title)}</h3>" + _html_table(frame.set_index(frame.columns[0]))
            for title, frame in comparison.reference.tables()
        )
        sections.append(
            (
                "reference",
                f"Against the reference {comparison.reference.source}",
                tables + "".join(f'<p class="note">{html.escape(note)}</p>' for note in comparison.reference.notes),
            )
        )
    if dataset is not None and runs:
        sections.append(
            (
                "queries",
                f"Wins and losses against {comparison.baseline.label} ({comparison.metrics[0]})",
                "".join(_wins_and_losses(comparison, runs, dataset, limit)),
            )
        )
    if config_text:
        sections.append(("config", "Config", f"<pre>{html.escape(config_text)}</pre>"))
    contents = "".join(f'<li><a href="#{anchor}">{html.escape(heading)}</a></li>' for anchor, heading, _ in sections)
    parts = [
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{_REPORT_STYLE}</style></head><body>',
        f"<h1>{html.escape(title)}</h1>",
        f"<nav><b>Contents</b><ul>{contents}</ul></nav>",
        *(f'<h2 id="{anchor}">{html.escape(heading)}</h2>{body}' for anchor, heading, body in sections),
    ]
    return "\n".join([*parts, "</body></html>"]) + "\n"
