"""A benchmark: the same systems over several datasets, as the table BEIR, MTEB and TREC papers print.

Rows are the systems (matched across datasets by label), columns the datasets and ``average``, the mean
of a row's dataset means (BEIR's and MTEB's convention; shown only for a row present on every dataset).
Each dataset's systems are compared as one job's are (``pipeline.analysis.comparison``: each metric over its
paired queries, paired tests against the baseline, Holm-corrected across the rows of that dataset); a
cell is marked † where the row is significantly better than the baseline on that dataset, ‡ where it is
significantly worse (randomization test, Holm within the dataset, p < 0.05), and the best mean of each
column is marked (bold in Markdown and LaTeX). ``W/T/L``: per row, the datasets where it is
significantly better / neither / significantly worse than the baseline; the ``W/T/L`` row: per dataset,
the rows significantly better / neither / worse. ``pooled``: per row present on every dataset, paired
tests against the baseline over the queries of all datasets together (query ids kept apart per
dataset; the mean weighs every query alike), Holm-corrected across the rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import json_text
from ragtrack.evaluators.significance import ALPHA
from ragtrack.pipeline.analysis.comparison import Comparison, SystemRun, compare_systems, is_best
from ragtrack.pipeline.analysis.comparison_tables import latex_escape
from ragtrack.pipeline.records.csv_files import csv_text

AVERAGE = "average"
MARKS = {1: "†", -1: "‡"}  # significantly better / worse than the baseline on that dataset
LATEX_MARKS = {1: r"$^{\dagger}$", -1: r"$^{\ddagger}$"}
REPRODUCED = {True: "=", False: "≠"}  # with --reference: the published figure reproduced within the tolerance, or not
LATEX_REPRODUCED = {True: r"$^{=}$", False: r"$^{\neq}$"}
FORMATS = ("table", "markdown", "latex", "csv", "json")


@dataclass
class Benchmark:
    """Per dataset its :class:`Comparison`; ``rows``: the row labels in order of first appearance;
    ``pooled``: the pooled tests (one row per system and metric), when asked for."""

    comparisons: dict[str, Comparison]
    metrics: list[str]
    baseline: str
    rows: list[str]
    pooled: pd.DataFrame | None = None
    scope: str = ""  # what ``ragtrack compare`` searched and compared
    logged: str | None = None  # "<run id> (<run name>)" of the benchmark run it logged
    links: dict[str, str] = field(default_factory=dict)
    reference = None  # the references are each dataset's (``comparisons[dataset].reference``)

    def render(self, fmt: str = "table") -> str:
        """:func:`render_benchmark`: ``table``, ``markdown``, ``latex``, ``csv`` or ``json``."""
        return render_benchmark(self, fmt)

    def __repr__(self) -> str:
        return render_benchmark(self, "table")

    def _repr_html_(self) -> str:
        import html

        parts = []
        for metric in self.metrics:
            cells = _cells(self, metric, ("<b>", "</b>"), MARKS)
            head = "".join(f"<th>{html.escape(c)}</th>" for c in [metric, *cells.columns])
            body = "".join(
                "<tr><th>"
                + html.escape(row)
                + "</th>"
                + "".join(f"<td>{cell}</td>" for cell in cells.loc[row])
                + "</tr>"
                for row in cells.index
            )
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        return "".join(parts) + f"<p>{html.escape(legend(self))}</p>"

    def means(self, metric: str) -> pd.DataFrame:
        """Rows × datasets (and ``average``): the mean over each dataset's paired queries."""
        table = pd.DataFrame(index=pd.Index(self.rows, name="system"), columns=list(self.comparisons), dtype=float)
        for dataset, comparison in self.comparisons.items():
            rows = comparison.table[comparison.table["metric"] == metric].set_index("system")
            table[dataset] = rows["mean"].reindex(table.index)
        table[AVERAGE] = table[list(self.comparisons)].mean(axis=1, skipna=False)
        return table

    def marks(self, metric: str) -> pd.DataFrame:
        """Rows × datasets: 1 significantly better than the baseline, -1 worse, 0 neither (or no test)."""
        table = pd.DataFrame(0, index=pd.Index(self.rows, name="system"), columns=list(self.comparisons))
        for dataset, comparison in self.comparisons.items():
            rows = comparison.table[comparison.table["metric"] == metric].set_index("system")
            significant = rows["p_randomization_holm"] < ALPHA
            table[dataset] = (np.sign(rows["delta"]).where(significant, 0)).reindex(table.index).fillna(0).astype(int)
        return table

    def reproduced(self, metric: str) -> pd.DataFrame:
        """Rows × datasets: True / False where the dataset's reference (``--reference``) gives the
        row's figure and it is reproduced within the tolerance or not; None where none is given."""
        table = pd.DataFrame(
            None, index=pd.Index(self.rows, name="system"), columns=list(self.comparisons), dtype=object
        )
        for dataset, comparison in self.comparisons.items():
            if comparison.reference is not None:
                found = comparison.reference.differences
                for _, row in found[found["metric"] == metric].iterrows():
                    table.at[row["system"], dataset] = bool(row["within_tolerance"])
        return table

    def wins_ties_losses(self, metric: str) -> tuple[pd.Series, pd.Series]:
        """``W/T/L`` per row (across datasets; blank for the baseline) and per dataset (across rows)."""
        marks, present = self.marks(metric), self.means(metric).drop(columns=AVERAGE).notna()

        def counted(signs: pd.Series, shown: pd.Series) -> str:
            signs = signs[shown]
            return f"{(signs > 0).sum()}/{(signs == 0).sum()}/{(signs < 0).sum()}"

        others = [row for row in self.rows if row != self.baseline]
        per_row = pd.Series(
            {row: counted(marks.loc[row], present.loc[row]) if row != self.baseline else "" for row in self.rows}
        )
        per_dataset = pd.Series(
            {dataset: counted(marks.loc[others, dataset], present.loc[others, dataset]) for dataset in self.comparisons}
        )
        return per_row, per_dataset


def benchmark(
    comparisons: Mapping[str, Comparison], pooled: bool = False, seed: int = 0, resamples: int = 10_000
) -> Benchmark:
    """The benchmark of per-dataset comparisons (module docstring); every dataset's baseline must carry
    the same label."""
    if len(comparisons) < 1:
        raise RagtrackError("a benchmark needs at least one dataset")
    baselines = {dataset: c.baseline.label for dataset, c in comparisons.items()}
    if len(set(baselines.values())) > 1:
        shown = ", ".join(f"{label!r} on {dataset}" for dataset, label in baselines.items())
        raise RagtrackError(
            f"the datasets' baselines differ ({shown}); name one present on every dataset with --baseline, or rename rows with --label"
        )
    first = next(iter(comparisons.values()))
    rows = list(dict.fromkeys(s.label for c in comparisons.values() for s in c.systems))
    result = Benchmark(dict(comparisons), list(first.metrics), first.baseline.label, rows)
    if pooled:
        result.pooled = pooled_tests(comparisons, result, seed, resamples)
    return result


def pooled_tests(comparisons: Mapping[str, Comparison], result: Benchmark, seed: int, resamples: int) -> pd.DataFrame:
    """:func:`compare_systems` over the queries of every dataset together (``dataset/qid``), for the
    rows present on every dataset, each metric over the union of the datasets' paired queries."""
    everywhere = [row for row in result.rows if all(row in {s.label for s in c.systems} for c in comparisons.values())]
    systems = []
    for row in everywhere:
        frames = []
        for dataset, comparison in comparisons.items():
            system = next(s for s in comparison.systems if s.label == row)
            frame = pd.DataFrame(
                {metric: system.per_query[metric].reindex(comparison.paired[metric]) for metric in result.metrics}
            )
            frames.append(frame.set_axis([f"{dataset}/{qid}" for qid in frame.index]))
        merged = pd.concat(frames)
        systems.append(SystemRun(row, row, row, row, 0, merged, label=row))
    baseline = next(s for s in systems if s.label == result.baseline)
    return compare_systems(systems, result.metrics, baseline, list(systems[0].per_query.index), seed, resamples).table


def _cells(
    result: Benchmark,
    metric: str,
    bold: tuple[str, str],
    marks: Mapping[int, str],
    reproduced: Mapping[bool, str] = REPRODUCED,
) -> pd.DataFrame:
    """The table of one metric as text cells: means to 4 decimals with the significance mark (and the
    reference's mark, where a reference gives the figure), the column's best wrapped in ``bold``,
    ``W/T/L`` as the last column and row."""
    means, signs, checked = result.means(metric), result.marks(metric), result.reproduced(metric)
    cells = pd.DataFrame("", index=means.index, columns=means.columns)
    for column in means.columns:
        best = is_best(means[column].dropna()).reindex(means.index, fill_value=False)
        for row in means.index:
            value = means.at[row, column]
            if pd.isna(value):
                continue
            text = f"{value:.4f}"
            text = f"{bold[0]}{text}{bold[1]}" if best[row] else text
            if column != AVERAGE:
                text += marks.get(int(signs.at[row, column]), "")
                if not pd.isna(checked.at[row, column]):
                    text += reproduced[bool(checked.at[row, column])]
            cells.at[row, column] = text
    per_row, per_dataset = result.wins_ties_losses(metric)
    cells["W/T/L"] = per_row
    cells.loc["W/T/L"] = [*per_dataset.reindex(result.comparisons).tolist(), "", ""]
    return cells


def legend(result: Benchmark, latex: bool = False) -> str:
    better, worse = ("dagger", "double dagger") if latex else (MARKS[1], MARKS[-1])
    checks = [c.reference for c in result.comparisons.values() if c.reference is not None]
    reference = (
        (
            f"; {'=' if latex else REPRODUCED[True]} / {'neq' if latex else REPRODUCED[False]}: the reference's figure "
            f"reproduced within {checks[0].tolerance} / not"
        )
        if checks
        else ""
    )
    return (
        f"{better} / {worse}: significantly better / worse than {result.baseline} on that dataset (paired randomization test, "
        f"Holm-corrected within the dataset, p < {ALPHA}){reference}; best of each column marked; average: mean of the dataset means; "
        f"W/T/L: datasets (row) or systems (column) significantly better / neither / worse than {result.baseline}"
    )


def render_benchmark(result: Benchmark, fmt: str = "table") -> str:
    """The benchmark as ``table`` (text, best marked *), ``markdown`` (best bold), ``latex``
    (booktabs, best bold, daggers as superscripts), ``csv`` or ``json`` (every dataset's figures)."""
    if fmt not in FORMATS:
        raise RagtrackError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if fmt in ("csv", "json"):
        long = pd.concat(
            [c.table.assign(dataset=dataset) for dataset, c in result.comparisons.items()], ignore_index=True
        )
        long = long[["dataset", *(column for column in long.columns if column != "dataset")]]
        if fmt == "csv":
            return csv_text(long, float_format="%.17g")
        pooled = json.loads(result.pooled.to_json(orient="records")) if result.pooled is not None else None
        return json_text(
            {
                "baseline": result.baseline,
                "metrics": result.metrics,
                "datasets": list(result.comparisons),
                "rows": json.loads(long.to_json(orient="records")),
                "pooled": pooled,
            },
            indent=2,
        )
    parts = []
    for metric in result.metrics:
        if fmt == "latex":
            cells = _cells(result, metric, (r"\textbf{", "}"), LATEX_MARKS, LATEX_REPRODUCED)
            header = " & ".join(["System", *(latex_escape(c) for c in cells.columns)]) + r" \\"
            body = [
                " & ".join(
                    [latex_escape(row), *(cell if "\\" in cell else latex_escape(cell) for cell in cells.loc[row])]
                )
                + r" \\"
                for row in cells.index[:-1]
            ]
            last = " & ".join(["W/T/L", *cells.iloc[-1]]) + r" \\"
            parts.append(
                "\n".join(
                    [
                        f"% {latex_escape(metric)}; needs \\usepackage{{booktabs}}",
                        r"\begin{tabular}{l" + "r" * len(cells.columns) + "}",
                        r"\toprule",
                        header,
                        r"\midrule",
                        *body,
                        r"\midrule",
                        last,
                        r"\bottomrule",
                        r"\end{tabular}",
                    ]
                )
            )
        elif fmt == "markdown":
            cells = _cells(result, metric, ("**", "**"), MARKS)
            lines = ["| " + " | ".join([metric, *cells.columns]) + " |", "|---" + "|---:" * len(cells.columns) + "|"]
            lines += ["| " + " | ".join([row, *cells.loc[row]]) + " |" for row in cells.index]
            parts.append("\n".join(lines))
        else:
            cells = _cells(result, metric, ("", "*"), MARKS)
            parts.append(cells.rename_axis(metric).to_string())
    text = "\n\n".join(parts) + "\n\n" + (f"% {legend(result, True)}" if fmt == "latex" else legend(result)) + "\n"
    if result.pooled is not None and fmt != "latex":
        text += "\n" + pooled_section(result.pooled, fmt)
    return text


def pooled_section(pooled: pd.DataFrame, fmt: str) -> str:
    """The pooled tests: per metric and row, the mean over all queries, Δ and Holm-corrected p-values."""
    shown = pooled.assign(
        delta=pooled["delta"].map(lambda v: "" if pd.isna(v) else f"{v:+.4f}"),
        mean=pooled["mean"].map("{:.4f}".format),
        p_randomization_holm=pooled["p_randomization_holm"].map(lambda v: "" if pd.isna(v) else f"{v:.4f}"),
        p_ttest_holm=pooled["p_ttest_holm"].map(lambda v: "" if pd.isna(v) else f"{v:.4f}"),
    )
    frame = shown[["metric", "system", "n", "mean", "delta", "p_randomization_holm", "p_ttest_holm"]]
    title = "Pooled over every dataset's queries (paired tests against the baseline, Holm-corrected across rows)"
    if fmt == "markdown":
        lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
        return (
            f"{title}\n\n"
            + "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in frame.to_numpy()])
            + "\n"
        )
    return f"{title}\n" + frame.to_string(index=False) + "\n"
