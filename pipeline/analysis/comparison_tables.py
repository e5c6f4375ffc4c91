"""A comparison (``pipeline.analysis.comparison``) as tables: ``table`` (terminal text), ``markdown``, ``latex``,
``csv`` and ``json``, with the reference check and the per-slice means where there are."""

from __future__ import annotations

import json
import re
import textwrap

import pandas as pd

from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import json_text
from ragtrack.evaluators.base import aggregate
from ragtrack.pipeline.analysis.comparison import Comparison, coverage_note, query_counts
from ragtrack.pipeline.analysis.slices import COLUMN_PREFIX as SLICE_COLUMN_PREFIX
from ragtrack.pipeline.records.csv_files import csv_text

FORMATS = ("table", "markdown", "csv", "json", "latex")
TEXT_WIDTH = 100  # characters of the terminal table (``ragtrack compare --wide``: one wide table)


def p_text(value: float) -> str:
    """A p-value as shown in tables: 4 decimals, ``<0.0001`` below, blank when there is none."""
    if pd.isna(value):
        return ""
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def wide_table(comparison: Comparison, bold: tuple[str, str] = ("", "*")) -> pd.DataFrame:
    """One row per system; per metric: mean [CI] (best marked), Δ [its 95% CI], Holm-corrected p-values, W/T/L."""
    open_mark, close_mark = bold
    out = pd.DataFrame(index=pd.Index([s.label for s in comparison.systems], name="system"))
    for metric in comparison.metrics:
        rows = comparison.table[comparison.table["metric"] == metric].set_index("system")
        cell = rows.apply(
            lambda r: "" if pd.isna(r["mean"]) else f"{r['mean']:.4f} [{r['ci_low']:.4f}, {r['ci_high']:.4f}]", axis=1
        )
        out[metric] = [f"{open_mark}{c}{close_mark}" if best else c for c, best in zip(cell, rows["best"])]
        out[f"Δ {metric}"] = [
            (
                "baseline"
                if r["baseline"]
                else ""
                if pd.isna(r["delta"])
                else f"{r['delta']:+.4f}"
                + ("" if pd.isna(r["delta_ci_low"]) else f" [{r['delta_ci_low']:+.4f}, {r['delta_ci_high']:+.4f}]")
            )
            for _, r in rows.iterrows()
        ]
        out[f"p t-test {metric}"] = rows["p_ttest_holm"].map(p_text)
        out[f"p rand. {metric}"] = rows["p_randomization_holm"].map(p_text)
        out[f"W/T/L {metric}"] = rows.apply(
            lambda r: "" if pd.isna(r["wins"]) else f"{int(r['wins'])}/{int(r['ties'])}/{int(r['losses'])}", axis=1
        )
    return out


LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "Δ": r"$\Delta$",
    "†": r"$^{\dagger}$",
    "‡": r"$^{\ddagger}$",
    "±": r"$\pm$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "×": r"$\times$",
}
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
        return json_text(
            {
                "baseline": comparison.baseline.label,
                "metrics": comparison.metrics,
                "queries": len(comparison.queries),
                "rows": json.loads(comparison.table.to_json(orient="records")),
                **reference,
            },
            indent=2,
        )
    footer = (
        f"{query_counts(comparison)}; mean [95% bootstrap CI]; Δ [95% t-interval of the paired difference]; p: paired t-test "
        f"and randomization test against {comparison.baseline.label}, Holm-corrected (every p in this report); W/T/L: per-query wins/ties/losses; best marked"
    )
    coverage = f". {coverage_note(comparison)}" if coverage_note(comparison) else ""
    if fmt == "markdown":
        wide = wide_table(comparison, ("**", "**"))
        header = "| system | " + " | ".join(wide.columns) + " |"
        lines = [header, "|" + "---|" * (len(wide.columns) + 1)]
        lines += ["| " + " | ".join([label, *row]) + " |" for label, row in zip(wide.index, wide.to_numpy())]
        return (
            "\n".join(lines)
            + f"\n\n{footer.replace('best marked', 'best in bold')}{coverage}\n"
            + slice_section(comparison, fmt)
            + reference_section(comparison, fmt)
        )
    if fmt == "latex":
        wide = wide_table(comparison, (r"\textbf{", "}"))
        lines = [
            r"\begin{tabular}{l" + "r" * len(wide.columns) + "}",
            r"\toprule",
            " & ".join(["system", *map(latex_escape, wide.columns)]) + r" \\",
            r"\midrule",
        ]
        lines += [
            " & ".join([latex_escape(label), *(c if c.startswith(r"\textbf") else latex_escape(c) for c in row)])
            + r" \\"
            for label, row in zip(wide.index, wide.to_numpy())
        ]
        return (
            "\n".join([*lines, r"\bottomrule", r"\end{tabular}", f"% {footer}{coverage}"])
            + "\n"
            + reference_section(comparison, fmt)
        )
    wide = wide_table(comparison)
    note = f"{footer} (*){coverage}"
    text = wide.to_string()
    if width and max(map(len, text.splitlines())) > width:  # one block per metric, its figures as columns
        text = "\n\n".join(
            f"{metric}\n"
            + wide[[c for c in wide.columns if c == metric or c.endswith(f" {metric}")]]
            .rename(columns=lambda c: c.removesuffix(f" {metric}") if c != metric else "mean [95% CI]")
            .to_string()
            for metric in comparison.metrics
        )
    return (
        text
        + "\n\n"
        + (textwrap.fill(note, width) if width else note)
        + "\n"
        + slice_section(comparison, fmt, width)
        + reference_section(comparison, fmt, width)
    )


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
            parts.append(
                f"{title}\n\n" + "\n".join(rows + ["| " + " | ".join(map(str, row)) + " |" for row in frame.to_numpy()])
            )
        elif fmt == "latex":
            rows = [
                " & ".join(latex_escape(str(c)) for c in row) + r" \\" for row in [frame.columns, *frame.to_numpy()]
            ]
            parts.append(
                "\n".join(
                    [
                        f"% {title}",
                        r"\begin{tabular}{" + "l" * len(frame.columns) + "}",
                        r"\toprule",
                        rows[0],
                        r"\midrule",
                        *rows[1:],
                        r"\bottomrule",
                        r"\end{tabular}",
                    ]
                )
            )
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
    return (
        textwrap.fill(text, width, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)
        if width
        else text
    )


def slice_table(comparison: Comparison) -> pd.DataFrame | None:
    """Mean [95% bootstrap CI, seed 0] of each compared row per slice (rows: metric, slice, n), when
    every per-query table has the same ``slice.<attribute>`` columns (``pipeline.analysis.slices``); else None.
    Queries: each metric's paired ones (:func:`defined_queries`) in the slice."""
    shared = set.intersection(
        *({c for c in s.per_query.columns if c.startswith(SLICE_COLUMN_PREFIX)} for s in comparison.systems)
    )
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
                    row["n"], row[s.label] = (
                        int(summary["n"]),
                        f"{summary['mean']:.4f} [{summary['ci_low']:.4f}, {summary['ci_high']:.4f}]",
                    )
                rows.append(row)
    return pd.DataFrame(rows).set_index(["metric", "slice", "n"])


def slice_section(comparison: Comparison, fmt: str, width: int | None = TEXT_WIDTH) -> str:
    """:func:`slice_table` for the ``table`` and ``markdown`` formats (csv, json and latex keep their
    single table); "" without slices."""
    table = slice_table(comparison) if fmt in ("table", "markdown") else None
    if table is None:
        return ""
    if fmt == "markdown":
        lines = [
            "| metric | slice | n | " + " | ".join(table.columns) + " |",
            "|---|---|---:|" + "---|" * len(table.columns),
        ]
        lines += [
            "| " + " | ".join([*map(str, index), *row]) + " |" for index, row in zip(table.index, table.to_numpy())
        ]
        return "\n## Slices\n\n" + "\n".join(lines) + "\n\nmean [95% bootstrap CI] over each slice's queries\n"
    return "\nSlices: mean [95% bootstrap CI] over each slice's queries\n" + table.to_string(line_width=width) + "\n"


# --------------------------------------------------------------------------- plots
