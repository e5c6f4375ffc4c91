"""A comparison's figures: metric by system with CIs, recall@k and nDCG@k against k, the sorted
per-query differences (:func:`plot`), and each metric against a swept numeric setting (:func:`sweep_plot`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ragtrack.pipeline.comparison import Comparison, SystemRun
from ragtrack.pipeline.layout import curve_key

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
