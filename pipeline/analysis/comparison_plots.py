"""A comparison's figures: metric by system with CIs, recall@k and nDCG@k against k, the sorted
per-query differences (:func:`plot`), and each metric against a swept numeric setting (:func:`sweep_plot`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ragtrack.pipeline.analysis.comparison import Comparison, SystemRun
from ragtrack.pipeline.records.layout import curve_key

PLOT_SUFFIXES = (".png", ".pdf", ".svg")  # ``ragtrack compare --plot FILE``: the formats written, named by the suffix


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
                axes[1].plot(
                    ks, [curve[k] for k in ks], style, marker=".", color=color, label=s.label if style == "-" else None
                )
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
    return [
        name
        for name in names
        if len({_number(s.params[name]) for s in systems if name in s.params} - {None}) >= 2
        and all(_number(s.params[name]) is not None for s in systems if name in s.params)
    ]


def _swept_rows(comparison: Comparison, metric: str, param: str) -> dict[str, list[tuple[float, pd.Series]]]:
    """Per system, its rows that set ``param`` as (value, the row of ``metric``), by value."""
    rows = comparison.table[comparison.table["metric"] == metric].set_index("system")
    by_system: dict[str, list[tuple[float, pd.Series]]] = {}
    for s in comparison.systems:
        if param in s.params:
            by_system.setdefault(s.system, []).append((float(s.params[param]), rows.loc[s.label]))
    return {system: sorted(points, key=lambda point: point[0]) for system, points in by_system.items()}


def varies(comparison: Comparison, metric: str, param: str) -> bool:
    """Whether ``metric`` takes more than one value over the rows that set ``param`` (a panel worth drawing)."""
    return len({row["mean"] for points in _swept_rows(comparison, metric, param).values() for _, row in points}) > 1


def against_param(axis, comparison: Comparison, metric: str, param: str) -> None:
    """``metric``'s paired difference to the baseline (Δ and its 95% t-interval; the baseline itself at
    0) against the numeric ``param`` (log axis when it spans two decades), a line per system; the
    right axis reads the same points as absolute means (baseline mean + Δ); rows without the
    parameter as dotted lines at their Δ, named in the legend (no label drawn over another)."""
    values = []
    for system, points in _swept_rows(comparison, metric, param).items():
        xs = [x for x, _ in points]
        delta = np.array([0.0 if r["baseline"] else r["delta"] for _, r in points])
        low = np.array([0.0 if r["baseline"] else r["delta_ci_low"] for _, r in points])
        high = np.array([0.0 if r["baseline"] else r["delta_ci_high"] for _, r in points])
        axis.errorbar(
            xs,
            delta,
            yerr=[np.nan_to_num(delta - low), np.nan_to_num(high - delta)],
            marker="o",
            capsize=4,
            label=f"{system}: Δ",
        )
        values += xs
    rows = comparison.table[comparison.table["metric"] == metric].set_index("system")
    for s in comparison.systems:
        if param not in s.params and s is not comparison.baseline:
            axis.axhline(
                rows.loc[s.label, "delta"], linestyle=":", linewidth=1, color="gray", label=f"{s.label} (Δ, not swept)"
            )
    axis.axhline(0, color="black", linewidth=0.6)
    if min(values) > 0 and max(values) / min(values) >= 100:
        axis.set_xscale("log")
    axis.set_xlabel(param)
    axis.set_ylabel(f"Δ {metric} vs {comparison.baseline.label} (95% CI)")
    base = float(rows.loc[comparison.baseline.label, "mean"])
    axis.secondary_yaxis("right", functions=(lambda delta: delta + base, lambda mean: mean - base)).set_ylabel(
        f"{metric} mean"
    )
    axis.set_title(f"{metric} against {param}")
    axis.legend(fontsize=7, loc="best")


def sweep_plot(comparison: Comparison, path: Path, title: str = "") -> Path | None:
    """Each metric against each swept numeric setting (:func:`against_param`), one panel each where the
    metric varies (the first metric's alone where none does, titled so); None (nothing written) without
    a swept numeric setting."""
    params = numeric_params(comparison.systems)
    if not params:
        return None
    panels = [(metric, param) for metric in comparison.metrics for param in params if varies(comparison, metric, param)]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    constant = not panels
    panels = panels or [(comparison.metrics[0], params[0])]
    figure, axes = plt.subplots(len(panels), 1, figsize=(7, 4 * len(panels)), squeeze=False)
    for axis, (metric, param) in zip(axes[:, 0], panels):
        against_param(axis, comparison, metric, param)
    if title or constant:
        figure.suptitle(
            "\n".join(filter(None, [title, "(every metric the same at every setting)" if constant else ""]))
        )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return Path(path)


# --------------------------------------------------------------------------- failure analysis
