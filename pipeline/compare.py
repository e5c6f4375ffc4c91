"""``ragtrack compare``: systems from MLflow side by side, with CIs, paired tests and failure analysis.

Rows are the child runs (one per system and job, tag ``ragtrack.system``) of an experiment, or of one
sweep (parent tag ``ragtrack.sweep``). Rows of the same system with identical per-query scores (bm25
in every job of an RRF sweep) and the same logged configuration are shown once. A row is labelled by its system, or by its job's run
name where a system appears in several jobs (``hybrid k=30``).

Per metric and row: the mean and percentile-bootstrap 95% CI over the queries with a relevant
judgment (``evaluators.base.aggregate``, the numbers the experiment logged), the difference to the
baseline, paired t-test and seeded randomization-test p-values (``evaluators.significance``), both
Holm-corrected across the rows compared with the baseline, and per-query win/tie/loss counts.
Queries are those of the dataset named by the job's logged ``config.yaml`` (its hash must match);
without the dataset every query of the per-query table counts and failure analysis is skipped.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from ragtrack.evaluators.base import aggregate
from ragtrack.evaluators.significance import holm, paired_t_test, randomization_test, win_tie_loss
from ragtrack.core.data import Dataset
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run, read_trec
from ragtrack.pipeline.inputs import load_dataset
from ragtrack.pipeline.layout import (CONFIG_FILE, CURVE_METRICS, PER_QUERY_FILE, RUN_FILE, TAG_COMPARED_RUNS, TAG_COMPARISON,
                                      TAG_DATASET_HASH, TAG_PARENT, TAG_SWEEP, TAG_SYSTEM, curve_key, metric_key)
from ragtrack.pipeline.slices import COLUMN_PREFIX as SLICE_COLUMN_PREFIX

log = logging.getLogger(__name__)

DEFAULT_METRICS = ("ndcg@10", "recall@100")
FORMATS = ("table", "markdown", "csv", "json", "latex")


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


@dataclass
class Comparison:
    """The result of :func:`compare_systems`: a long table (one row per system and metric)."""

    table: pd.DataFrame
    systems: list[SystemRun]
    baseline: SystemRun
    metrics: list[str]
    queries: list[str]
    logged: str | None = None  # "<run id> (<run name>)" of the comparison run ``run_compare`` logged


# --------------------------------------------------------------------------- reading MLflow

def _all_runs(client, experiment_id: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=5000, page_token=token, order_by=["attribute.start_time ASC"])
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def find_experiment(client, name: str | None):
    """The named experiment, or the one with the most recent run."""
    if name:
        found = client.get_experiment_by_name(name)
        if found is None:
            names = [e.name for e in client.search_experiments()]
            raise RagtrackError(f"no MLflow experiment {name!r}; experiments: {', '.join(names) or 'none'}")
        return found
    newest = {}
    for candidate in client.search_experiments():
        latest = client.search_runs([candidate.experiment_id], max_results=1, order_by=["attribute.start_time DESC"])
        if latest:
            newest[candidate.experiment_id] = (latest[0].info.start_time, candidate)
    if not newest:
        raise RagtrackError("the tracking store has no runs; run `ragtrack run` first")
    return max(newest.values(), key=lambda pair: pair[0])[1]


def _sweep_matches(tag: str, wanted: str) -> bool:
    return tag == wanted or tag.rstrip("/").endswith("/" + wanted.strip("/"))


def select_jobs(runs: list, sweep: str | None) -> dict[str, object]:
    """Finished parent runs (jobs) by id, of one sweep if given (``latest``: the newest sweep)."""
    jobs = [r for r in runs if r.info.status == "FINISHED" and TAG_PARENT not in r.data.tags
            and TAG_COMPARISON not in r.data.tags]
    if sweep:
        tags = [r.data.tags[TAG_SWEEP] for r in jobs if TAG_SWEEP in r.data.tags]
        if not tags:
            raise RagtrackError("no sweep in this experiment; run one with `ragtrack run -m ...`")
        wanted = tags[-1] if sweep == "latest" else sweep
        jobs = [r for r in jobs if _sweep_matches(r.data.tags.get(TAG_SWEEP, ""), wanted)]
        if not jobs:
            raise RagtrackError(f"no finished runs of sweep {sweep!r}; sweeps: {', '.join(dict.fromkeys(tags))}")
    return {r.info.run_id: r for r in jobs}


def download_artifact(client, run_id: str, path: str, folder: Path) -> Path:
    try:
        return Path(client.download_artifacts(run_id, path, str(folder)))
    except Exception as exc:  # MLflow raises several types for a missing artifact
        raise RagtrackError(f"run {run_id} has no artifact {path!r} ({type(exc).__name__})") from None


def load_systems(client, jobs: dict, runs: list, folder: Path) -> list[SystemRun]:
    """Every system child run of ``jobs`` with its per-query table and cutoff curves, duplicates removed."""
    systems, seen = [], {}
    for child in runs:
        job = jobs.get(child.data.tags.get(TAG_PARENT, ""))
        if job is None or TAG_SYSTEM not in child.data.tags or child.info.status != "FINISHED":
            continue
        target = folder / child.info.run_id
        per_query = pd.read_csv(download_artifact(client, child.info.run_id, PER_QUERY_FILE, target), index_col="qid", dtype={"qid": str})
        system = child.data.tags[TAG_SYSTEM]
        fingerprint = (system, tuple(sorted(child.data.params.items())), int(pd.util.hash_pandas_object(per_query).sum()))
        if fingerprint in seen:
            continue
        seen[fingerprint] = child.info.run_id
        curves = {key: {m.step: m.value for m in client.get_metric_history(child.info.run_id, key)} for key in map(curve_key, CURVE_METRICS)}
        systems.append(SystemRun(system, child.info.run_id, job.info.run_name or job.info.run_id, job.info.run_id,
                                 child.info.start_time, per_query, curves={k: v for k, v in curves.items() if v}))
    if not systems:
        raise RagtrackError("no finished system runs (tag ragtrack.system) found for the selected runs")
    _label(systems)
    return systems


def _label(systems: list[SystemRun]) -> None:
    """System name if unique, else the job's run name (prefixed by the system unless it starts with it)."""
    counts = pd.Series([s.system for s in systems]).value_counts()
    for s in systems:
        if counts[s.system] == 1:
            s.label = s.system
        else:
            s.label = s.job_name if s.job_name.split(" ")[0] == s.system else f"{s.system} {s.job_name}"
    labels = pd.Series([s.label for s in systems])
    for s, duplicated in zip(systems, labels.duplicated(keep=False)):
        if duplicated:
            s.label = f"{s.label} ({s.run_id[:8]})"


def load_job_dataset(client, job, folder: Path) -> tuple[Dataset | None, int]:
    """The dataset of a job from its logged config.yaml, if present with the logged hash; and its
    relevance threshold."""
    config = OmegaConf.load(download_artifact(client, job.info.run_id, CONFIG_FILE, folder / job.info.run_id))
    threshold = int(OmegaConf.select(config, "evaluator.ranking.relevance_threshold", default=1))
    try:
        dataset = load_dataset(config.dataset, check_documents=False)
    except RagtrackError as exc:
        log.warning("dataset of run %s not available (%s): every query counts, no failure analysis", job.info.run_id, exc)
        return None, threshold
    if dataset.hash != job.data.tags.get(TAG_DATASET_HASH):
        log.warning("dataset at %s changed since run %s (hash differs): every query counts, no failure analysis",
                    config.dataset.path, job.info.run_id)
        return None, threshold
    return dataset, threshold


# --------------------------------------------------------------------------- statistics

def find_baseline(systems: list[SystemRun], baseline: str | None) -> SystemRun:
    """A row by label, system name (first such row) or run id (child or job); default: bm25 or the first row."""
    if baseline is None:
        return next((s for s in systems if s.system == "bm25"), systems[0])
    for matches in ((s for s in systems if s.label == baseline), (s for s in systems if s.system == baseline),
                    (s for s in systems if baseline in (s.run_id, s.job_id))):
        found = next(matches, None)
        if found is not None:
            return found
    raise RagtrackError(f"baseline {baseline!r} is not a compared system or run; rows: {', '.join(s.label for s in systems)}")


def compare_systems(systems: list[SystemRun], metrics: Sequence[str], baseline: SystemRun, queries: Sequence[str] | None = None,
                    seed: int = 0, resamples: int = 10_000) -> Comparison:
    """Mean, CI, difference, paired tests (Holm-corrected per metric and test) and win/tie/loss per row."""
    for s in systems:
        absent = [m for m in metrics if m not in s.per_query.columns]
        if absent:
            raise RagtrackError(f"{s.label}: no per-query values for {absent}; logged: {', '.join(s.per_query.columns)}")
    if queries is None:
        queries = list(baseline.per_query.index)
    queries = [q for q in queries if all(q in s.per_query.index for s in systems)]
    if not queries:
        raise RagtrackError("the compared runs share no judged queries")
    rows = []
    for metric in metrics:
        base = baseline.per_query.loc[queries, metric].to_numpy(float)
        for s in systems:
            values = s.per_query.loc[queries, metric].to_numpy(float)
            summary = aggregate(pd.DataFrame({metric: values}), seed=seed).loc[metric]
            row = {"system": s.label, "metric": metric, "mean": summary["mean"], "ci_low": summary["ci_low"],
                   "ci_high": summary["ci_high"], "n": int(summary["n"]), "baseline": s is baseline}
            if s is not baseline:
                wins, ties, losses = win_tie_loss(values, base)
                row |= {"delta": values.mean() - base.mean(), "p_ttest": paired_t_test(values, base).p_value,
                        "p_randomization": randomization_test(values, base, resamples=resamples, seed=seed).p_value,
                        "wins": wins, "ties": ties, "losses": losses}
            rows.append(row)
    table = pd.DataFrame(rows)
    for column in ("delta", "p_ttest", "p_randomization", "wins", "ties", "losses"):
        if column not in table:
            table[column] = np.nan
    for test in ("p_ttest", "p_randomization"):
        table[f"{test}_holm"] = table.groupby("metric")[test].transform(lambda p: pd.Series(holm(p.to_numpy()), index=p.index))
    table["best"] = table["mean"] == table.groupby("metric")["mean"].transform("max")
    return Comparison(table, systems, baseline, list(metrics), list(queries))


# --------------------------------------------------------------------------- rendering

def _p(value: float) -> str:
    if pd.isna(value):
        return ""
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def wide_table(comparison: Comparison, bold: tuple[str, str] = ("", "*")) -> pd.DataFrame:
    """One row per system; per metric: mean [CI] (best marked), Δ, Holm-corrected p-values, W/T/L."""
    open_mark, close_mark = bold
    out = pd.DataFrame(index=pd.Index([s.label for s in comparison.systems], name="system"))
    for metric in comparison.metrics:
        rows = comparison.table[comparison.table["metric"] == metric].set_index("system")
        cell = rows.apply(lambda r: f"{r['mean']:.4f} [{r['ci_low']:.4f}, {r['ci_high']:.4f}]", axis=1)
        out[metric] = [f"{open_mark}{c}{close_mark}" if best else c for c, best in zip(cell, rows["best"])]
        out[f"Δ {metric}"] = rows["delta"].map(lambda v: "baseline" if pd.isna(v) else f"{v:+.4f}")
        out[f"p t-test {metric}"] = rows["p_ttest_holm"].map(_p)
        out[f"p rand. {metric}"] = rows["p_randomization_holm"].map(_p)
        out[f"W/T/L {metric}"] = rows.apply(lambda r: "" if pd.isna(r["wins"]) else f"{int(r['wins'])}/{int(r['ties'])}/{int(r['losses'])}", axis=1)
    return out


def _latex_escape(text: str) -> str:
    return re.sub(r"([&%$#_{}])", r"\\\1", text).replace("Δ", r"$\Delta$")


def render(comparison: Comparison, fmt: str) -> str:
    """The comparison as ``table`` (text), ``markdown``, ``latex``, ``csv`` or ``json`` (full precision)."""
    if fmt not in FORMATS:
        raise RagtrackError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if fmt == "csv":
        return comparison.table.to_csv(index=False, float_format="%.17g")
    if fmt == "json":
        return json.dumps({"baseline": comparison.baseline.label, "metrics": comparison.metrics, "queries": len(comparison.queries),
                           "rows": json.loads(comparison.table.to_json(orient="records"))}, indent=2)
    footer = (f"{len(comparison.queries)} queries; mean [95% bootstrap CI]; p: paired t-test and randomization test "
              f"against {comparison.baseline.label}, Holm-corrected; W/T/L: per-query wins/ties/losses; best marked")
    if fmt == "markdown":
        wide = wide_table(comparison, ("**", "**"))
        header = "| system | " + " | ".join(wide.columns) + " |"
        lines = [header, "|" + "---|" * (len(wide.columns) + 1)]
        lines += ["| " + " | ".join([label, *row]) + " |" for label, row in zip(wide.index, wide.to_numpy())]
        return "\n".join(lines) + f"\n\n{footer.replace('best marked', 'best in bold')}\n" + slice_section(comparison, fmt)
    if fmt == "latex":
        wide = wide_table(comparison, (r"\textbf{", "}"))
        lines = [r"\begin{tabular}{l" + "r" * len(wide.columns) + "}", r"\toprule",
                 " & ".join(["system", *map(_latex_escape, wide.columns)]) + r" \\", r"\midrule"]
        lines += [" & ".join([_latex_escape(label), *(c if c.startswith(r"\textbf") else _latex_escape(c) for c in row)]) + r" \\"
                  for label, row in zip(wide.index, wide.to_numpy())]
        return "\n".join([*lines, r"\bottomrule", r"\end{tabular}", f"% {footer}"]) + "\n"
    wide = wide_table(comparison)
    return wide.to_string() + f"\n\n{footer} (*)\n" + slice_section(comparison, fmt)


def slice_section(comparison: Comparison, fmt: str) -> str:
    """Mean [95% bootstrap CI, seed 0] of each compared row per slice, when every per-query table has
    the same ``slice.<attribute>`` columns (``pipeline.slices``); for the ``table`` and ``markdown``
    formats (csv, json and latex keep their single table). Queries: the comparison's, minus those a
    metric leaves blank (answer metrics on questions without gold answers)."""
    shared = set.intersection(*({c for c in s.per_query.columns if c.startswith(SLICE_COLUMN_PREFIX)} for s in comparison.systems))
    if fmt not in ("table", "markdown") or not shared:
        return ""
    rows = []
    for column in sorted(shared):
        labels = comparison.baseline.per_query.loc[comparison.queries, column].astype(str)
        for value in sorted(labels.unique()):
            qids = list(labels.index[labels == value])
            for metric in comparison.metrics:
                row = {"metric": metric, "slice": f"{column.removeprefix(SLICE_COLUMN_PREFIX)}={value}"}
                for s in comparison.systems:
                    values = s.per_query.loc[qids, metric].astype(float)
                    summary = aggregate(values.to_frame(), values.notna()).loc[metric]
                    row["n"], row[s.label] = int(summary["n"]), f"{summary['mean']:.4f} [{summary['ci_low']:.4f}, {summary['ci_high']:.4f}]"
                rows.append(row)
    table = pd.DataFrame(rows).set_index(["metric", "slice", "n"])
    if fmt == "markdown":
        lines = ["| metric | slice | n | " + " | ".join(table.columns) + " |", "|---|---|---:|" + "---|" * len(table.columns)]
        lines += ["| " + " | ".join([*map(str, index), *row]) + " |" for index, row in zip(table.index, table.to_numpy())]
        return "\n## Slices\n\n" + "\n".join(lines) + "\n\nmean [95% bootstrap CI] over each slice's queries\n"
    return "\nSlices: mean [95% bootstrap CI] over each slice's queries\n" + table.to_string() + "\n"


# --------------------------------------------------------------------------- plots

def plot(comparison: Comparison, path: Path) -> Path:
    """Metric by system with CIs, recall@k and ndcg@k against k, and sorted per-query differences."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = comparison.metrics[0]
    rows = comparison.table[comparison.table["metric"] == metric]
    figure, axes = plt.subplots(1, 3, figsize=(17, max(4.5, 0.35 * len(rows) + 1.5)))
    positions = np.arange(len(rows))[::-1]
    errors = [rows["mean"] - rows["ci_low"], rows["ci_high"] - rows["mean"]]
    palette = plt.get_cmap("tab10" if len(comparison.systems) <= 10 else "tab20")  # one distinct color per row
    colors = [palette(i % palette.N) for i in range(len(comparison.systems))]
    for position, mean, low, high, color in zip(positions, rows["mean"], *errors, colors):
        axes[0].errorbar(mean, position, xerr=[[low], [high]], fmt="o", color=color, capsize=4)
    axes[0].axvline(rows[rows["baseline"]]["mean"].iloc[0], color="gray", linestyle=":", linewidth=1)
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
    base = comparison.baseline.per_query.loc[comparison.queries, metric].to_numpy(float)
    for s, color in zip(comparison.systems, colors):
        if s is not comparison.baseline:
            diff = np.sort(s.per_query.loc[comparison.queries, metric].to_numpy(float) - base)[::-1]
            axes[2].plot(np.arange(1, len(diff) + 1), diff, label=s.label, color=color)
    axes[2].axhline(0, color="black", linewidth=0.8)
    axes[2].set_xlabel("queries, sorted")
    axes[2].set_title(f"per-query {metric} − {comparison.baseline.label}")
    if axes[2].lines:
        axes[2].legend(fontsize=7)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


# --------------------------------------------------------------------------- failure analysis

def _top(run: Run, qid: str, dataset: Dataset, titles: dict[str, str], k: int = 5) -> list[str]:
    judged = dataset.qrels.get(qid, {})
    return [f"  {rank}. {doc} (grade {judged[doc]}) {titles.get(doc, '')}" if doc in judged else f"  {rank}. {doc} {titles.get(doc, '')}"
            for rank, (doc, _) in enumerate(run.ranking(qid)[:k], start=1)] or ["  (nothing retrieved)"]


def failure_report(comparison: Comparison, system: SystemRun, runs: dict[str, Run], dataset: Dataset, limit: int = 10) -> str:
    """Markdown: the queries where ``system`` loses most against the baseline, with both top-5 lists."""
    metric, baseline = comparison.metrics[0], comparison.baseline
    titles = dict(zip(dataset.corpus.ids, dataset.corpus.titles))
    diff = (system.per_query.loc[comparison.queries, metric] - baseline.per_query.loc[comparison.queries, metric]).sort_values(kind="stable")
    losses = diff[diff < 0].head(limit)
    lines = [f"# {system.label} vs {baseline.label}: largest {metric} losses", "",
             f"{int((diff < 0).sum())} of {len(diff)} queries lose; the {len(losses)} largest losses follow.", ""]
    for qid, delta in losses.items():
        relevant = sorted(((g, d) for d, g in dataset.qrels.get(qid, {}).items() if g > 0), reverse=True)
        lines += [f"## {qid}: {metric} {baseline.per_query.loc[qid, metric]:.4f} -> {system.per_query.loc[qid, metric]:.4f} ({delta:+.4f})",
                  "", f"Query: {dataset.queries.get(qid, '?')}", "", "Relevant:",
                  *[f"  - {d} (grade {g}) {titles.get(d, '')}" for g, d in relevant], "",
                  f"{baseline.label} top 5:", *_top(runs[baseline.run_id], qid, dataset, titles), "",
                  f"{system.label} top 5:", *_top(runs[system.run_id], qid, dataset, titles), ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the command

def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", label).strip("_") or "system"


def run_compare(tracking_uri: str, experiment: str | None = None, sweep: str | None = None, metrics: Sequence[str] | None = None,
                baseline: str | None = None, fmt: str = "table", plot_file: str | None = None, seed: int = 0,
                resamples: int = 10_000, failures: int = 10, log_to_mlflow: bool = True) -> tuple[Comparison, str]:
    """Load, compare, render; write the plot; log everything as a comparison run. Returns (comparison, text)."""
    from mlflow.tracking import MlflowClient

    if fmt not in FORMATS:
        raise RagtrackError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    client = MlflowClient(tracking_uri)
    found = find_experiment(client, experiment)
    runs = _all_runs(client, found.experiment_id)
    jobs = select_jobs(runs, sweep)
    if not jobs:
        raise RagtrackError(f"experiment {found.name!r} has no finished runs")
    hashes = {job.data.tags.get(TAG_DATASET_HASH) for job in jobs.values()}
    if len(hashes) > 1:
        raise RagtrackError(f"the selected runs used {len(hashes)} different datasets; compare one dataset at a time (--sweep or --experiment)")
    with tempfile.TemporaryDirectory(prefix="ragtrack-compare-") as scratch:
        folder = Path(scratch)
        systems = load_systems(client, jobs, runs, folder)
        dataset, threshold = load_job_dataset(client, next(iter(jobs.values())), folder)
        queries = None if dataset is None else [q for q, judged in dataset.qrels.items() if any(g >= threshold for g in judged.values())]
        comparison = compare_systems(systems, list(metrics or DEFAULT_METRICS), find_baseline(systems, baseline), queries, seed, resamples)
        text = render(comparison, fmt)
        outputs = folder / "comparison"
        outputs.mkdir()
        for name, kind in (("comparison.md", "markdown"), ("comparison.csv", "csv"), ("comparison.json", "json"), ("comparison.txt", "table")):
            (outputs / name).write_text(render(comparison, kind))
        figure = plot(comparison, outputs / "comparison.png")
        if plot_file:
            Path(plot_file).parent.mkdir(parents=True, exist_ok=True)
            Path(plot_file).write_bytes(figure.read_bytes())
        if dataset is not None and failures > 0:
            trec = {s.run_id: read_trec(download_artifact(client, s.run_id, RUN_FILE, folder / s.run_id)) for s in systems}
            (outputs / "failures").mkdir()
            for s in systems:
                if s is not comparison.baseline:
                    (outputs / "failures" / f"{_slug(s.label)}.md").write_text(failure_report(comparison, s, trec, dataset, failures))
        if log_to_mlflow:
            comparison.logged = _log_comparison(client, found.experiment_id, comparison, jobs, sweep, outputs)
    return comparison, text


def _log_comparison(client, experiment_id: str, comparison: Comparison, jobs: dict, sweep: str | None, outputs: Path) -> str:
    """A run named ``comparison ...`` holding the tables, the plot and the failure analyses."""
    sweeps = {job.data.tags.get(TAG_SWEEP) for job in jobs.values()} - {None}
    tags = {TAG_COMPARISON: "true", TAG_COMPARED_RUNS: ",".join(s.run_id for s in comparison.systems)[:5000]}
    if sweep and len(sweeps) == 1:
        tags[TAG_SWEEP] = sweeps.pop()
    name = f"comparison vs {comparison.baseline.label}" + (f" ({Path(tags[TAG_SWEEP]).name})" if TAG_SWEEP in tags else "")
    run = client.create_run(experiment_id, run_name=name, tags=tags)
    client.log_param(run.info.run_id, "baseline", comparison.baseline.label)
    client.log_param(run.info.run_id, "metrics", ",".join(comparison.metrics))
    client.log_param(run.info.run_id, "queries", len(comparison.queries))
    best = comparison.table[comparison.table["best"]]
    for _, row in best.iterrows():
        client.log_metric(run.info.run_id, f"best_{metric_key(row['metric'])}", float(row["mean"]))
    client.log_artifacts(run.info.run_id, str(outputs))
    client.set_terminated(run.info.run_id, "FINISHED")
    log.info("comparison logged to MLflow run %s (%s)", run.info.run_id, name)
    return f"{run.info.run_id} ({name})"
