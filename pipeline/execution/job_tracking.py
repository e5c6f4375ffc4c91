"""What a job records in its tracker (MLflow): the parent run's name, tags, params and dataset, each
system's child run (params, metrics, curves, files, per-query table), the job's metrics and artifacts
and its run page's description (:func:`summary_note`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from ragtrack.core.data import Dataset
from ragtrack.core.progress import step
from ragtrack.core.secrets import mask
from ragtrack.core.stage_kinds import STAGE_KINDS
from ragtrack.evaluators.nuggets import NUGGETS_FILE
from ragtrack.pipeline.analysis.comparison import Comparison, is_best
from ragtrack.pipeline.analysis.comparison_report import REPORT_FILE
from ragtrack.pipeline.analysis.comparison_tables import p_text
from ragtrack.pipeline.analysis.slices import Findings
from ragtrack.pipeline.execution import usage
from ragtrack.pipeline.execution.agreement import run_page_note
from ragtrack.pipeline.execution.job import JobInfo
from ragtrack.pipeline.execution.job_outputs import write_system_files
from ragtrack.pipeline.execution.scoring import SystemResult, labels, shown_metrics, system_curves
from ragtrack.pipeline.execution.usage import Usage
from ragtrack.pipeline.records import layout
from ragtrack.pipeline.records.provenance import provenance_tags
from ragtrack.pipeline.records.tracking import DatasetIdentity, MlflowTracker, Tracker, tracking_target
from ragtrack.pipeline.redaction import flatten, redact_overrides

log = logging.getLogger(__name__)


def make_tracker(cfg: Mapping) -> Tracker:
    """MLflow when ``tracking.enabled``, else a tracker that records nothing."""
    if not cfg.get("enabled", False):
        return Tracker()
    return MlflowTracker(*tracking_target(cfg))


def shared_params(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The parent run's params from the job's flattened settings: all but every stage section (each
    system's run carries its own stages' settings), ``paths`` and ``tracking``."""
    private = (*(f"{kind.section}." for kind in STAGE_KINDS), "paths.", "tracking.")
    return {key: value for key, value in flat.items() if not key.startswith(private)}


def parent_run(cfg: DictConfig, resolved: dict, job: JobInfo, dataset: Dataset) -> tuple[str, dict, dict[str, Any]]:
    """The job's parent run: its name (``run_name``, else :func:`job_name`), its tags (the dataset,
    provenance, the overrides typed, Hydra's choices that differ from the defaults, the sweep) and
    its params (:func:`shared_params` of ``resolved`` and every key an override typed)."""
    flat = flatten(resolved)
    typed = redact_overrides(job.overrides)
    overridden = (override.partition("=")[0].lstrip("+~") for override in typed)
    params = shared_params(flat) | {
        key: flat[key] for key in overridden if key in flat
    }  # a sweep's view shows each job's swept values as columns
    overrides = " ".join(typed)
    tags = {
        layout.TAG_DATASET: dataset.name,
        layout.TAG_DATASET_HASH: dataset.hash,
        **provenance_tags(),
        layout.TAG_OVERRIDES: overrides or "(none)",
        **{
            f"{layout.HYDRA_CHOICE_PREFIX}{k}": v
            for k, v in job.choices.items()
            if v is not None and v != job.default_choices.get(k)
        },
    }
    if job.sweep:
        tags[layout.TAG_SWEEP] = job.sweep
    return mask(cfg.get("run_name") or job_name(job.choices, typed)), tags, params


def open_parent_run(tracker: Tracker, parent: tuple[str, dict, dict], dataset: Dataset, provider: str) -> None:
    """Start the job's parent run (:func:`parent_run`) and log its dataset."""
    tracker.start(*parent)
    tracker.log_dataset(dataset_identity(dataset, provider))


def job_name(choices: Mapping, typed: list[str]) -> str:
    """A job's default MLflow run name: its experiment preset and the other overrides typed, redacted
    (``compare_retrievers``, ``rrf_k fusion.rrf.k=30``)."""
    others = [o for o in typed if not o.lstrip("+~").startswith("experiment=")]
    return " ".join([choices.get("experiment") or "ragtrack", *others])


def dataset_identity(dataset: Dataset, provider: str) -> DatasetIdentity:
    """The job's dataset as MLflow shows it (:class:`~ragtrack.pipeline.records.tracking.DatasetIdentity`)."""
    profile = {
        "documents": len(dataset.corpus),
        "queries": len(dataset.queries),
        "judgments": sum(map(len, dataset.qrels.values())),
        **{f"{part}_sha256": digest for part, digest in dataset.hashes.items()},
    }
    return DatasetIdentity(dataset.name, dataset.hash[:16], provider, dataset.source, profile)


def system_metrics(result: SystemResult) -> dict[str, float]:
    metrics = {}
    for name, row in result.summary.iterrows():
        key = layout.metric_key(str(name))
        metrics |= {
            key: row["mean"],
            f"{key}_std": row["std"],
            f"{key}_ci_low": row["ci_low"],
            f"{key}_ci_high": row["ci_high"],
        }
    params = labels(result.efficiency)
    return {k: v for k, v in metrics.items() if pd.notna(v)} | {
        k: v for k, v in result.efficiency.items() if k not in params
    }


def log_job(
    tracker: Tracker,
    results: dict[str, SystemResult],
    output_dir: Path,
    job: JobInfo,
    dataset: Dataset,
    cfg: DictConfig,
    findings: Findings,
    written: dict,
    used: Usage,
) -> None:
    """Each system's child run and the parent run's metrics, artifacts and description. ``written``:
    what :func:`~ragtrack.pipeline.execution.job_outputs.write_outputs` returned (its comparison and per-query
    tables); ``used``: the job's LLM calls (child metrics ``llm/<stage>/<figure>`` of each system's
    chain, the job's on the parent run, ``usage.csv``)."""
    if not tracker.enabled:
        return
    key_metrics = shown_metrics(cfg, results)
    top = int(OmegaConf.select(cfg, "tracking.per_query_table", default=10))
    with step("log to MLflow", log):
        spent = used.section()
        parent_metrics = usage.metrics(spent.get("job", {}))
        for name, folder in write_system_files(results, output_dir).items():
            result = results[name]
            metrics = (
                system_metrics(result)
                | findings.system_metrics.get(name, {})
                | usage.metrics(spent.get("systems", {}).get(name, {}))
            )
            tracker.log_system(
                name,
                result.params,
                metrics,
                sorted(folder.iterdir()),
                steps=system_curves(result, dataset, cfg),
                table=queries_table(result, dataset, key_metrics, top),
            )
            parent_metrics |= {
                layout.system_metric_key(name, str(m)): v for m, v in result.summary["mean"].items() if pd.notna(v)
            }
        artifacts = [output_dir / name for name in layout.JOB_ARTIFACTS] + findings.artifacts
        artifacts += [output_dir / usage.FILE] if spent else []
        artifacts += [
            path for path in [output_dir / NUGGETS_FILE] if path.is_file()
        ]  # the nuggets evaluator's, reusable
        parent_metrics |= findings.parent_metrics
        if job.hydra_dir and job.hydra_dir.is_dir():
            artifacts.append(job.hydra_dir)
        comparison, wide = written["comparison"], written["per_query_wide"]
        if wide is not None:
            artifacts.append(output_dir / layout.PER_QUERY_WIDE_FILE)
        report = layout.run_page(tracker.experiment_id, tracker.run_id, f"{layout.COMPARISON_DIR}/{REPORT_FILE}")
        note = summary_note(results, key_metrics, dataset, tracker.run_name, comparison, report) + run_page_note(
            findings.results
        )
        tracker.log_parent(parent_metrics, artifacts, note, wide if top else None)
        tracker.share_runs_view(key_metrics)


def queries_table(result: SystemResult, dataset: Dataset, key_metrics: list[str], top: int) -> pd.DataFrame | None:
    """What the system did for each query, for MLflow's table view (None when ``top`` is 0): the query,
    its top ``top`` documents as ``rank. id [grade] score title`` lines, the relevant documents, the
    generated answer (if any) and the key metrics."""
    if top == 0:
        return None
    shown = {qid: result.run.ranking(qid)[:top] for qid in result.per_query.index}
    wanted = {
        doc for ranking in shown.values() for doc, _ in ranking
    }  # the titles of these only: no dict of the whole corpus
    titles = {doc: title for doc, title in zip(dataset.corpus.ids, dataset.corpus.titles) if doc in wanted}
    metrics = [m for m in key_metrics if m in result.per_query.columns]
    rows = []
    for qid, ranking in shown.items():
        judged = dataset.qrels.get(qid, {})
        ranked = [
            f"{rank}. {doc} [{judged[doc] if doc in judged else '-'}] {score:.4f} {titles.get(doc, '')[:80]}"
            for rank, (doc, score) in enumerate(ranking, start=1)
        ]
        row = {
            "qid": qid,
            "query": dataset.queries.get(qid, ""),
            "retrieved": "\n".join(ranked) or "(nothing retrieved)",
            "relevant": " ".join(
                f"{doc}[{grade}]"
                for doc, grade in sorted(judged.items(), key=lambda item: (-item[1], item[0]))
                if grade > 0
            ),
        }
        if "generated_answer" in result.per_query.columns:
            row["answer"] = str(result.per_query.at[qid, "generated_answer"])
        rows.append(row | {m: round(float(result.per_query.at[qid, m]), 4) for m in metrics})
    return pd.DataFrame(rows)


NOTE_PAD = "&nbsp;" * 2  # around a cell: MLflow's description table has no cell padding


def summary_note(
    results: dict[str, SystemResult],
    key_metrics: list[str],
    dataset: Dataset,
    name: str,
    comparison: Comparison | None = None,
    report: str = "",
) -> str:
    """Markdown for the job's run page, a column per system and per key metric its rows: the mean (best
    in bold), its 95% CI, n (the queries the mean is over) and, with several systems, Δ and the
    Holm-corrected paired t-test p against the baseline; a link to ``report`` (the route of report.html).
    A metric of ``comparison`` shows the comparison's figures (over its paired queries, so Δ is the
    difference of the means shown), any other metric each system's own (results.json)."""
    metrics = [m for m in key_metrics if any(m in r.summary.index for r in results.values())]
    compared = comparison.table.set_index(["system", "metric"]) if comparison is not None else None
    tests = len(results) > 1 and compared is not None
    lines = ["| | " + " | ".join(results) + " |", "|---|" + "---:|" * len(results)]  # first: the UI folds long notes
    for metric in metrics:
        if compared is not None and metric in comparison.metrics:
            rows = {s: compared.loc[(s, metric)] for s in results}
        else:
            rows = {s: r.summary.loc[metric] for s, r in results.items() if metric in r.summary.index}
        rows = {s: row for s, row in rows.items() if pd.notna(row["mean"])}
        best = is_best(pd.Series({s: row["mean"] for s, row in rows.items()}, dtype=float))
        means = {s: f"**{row['mean']:.4f}**" if best[s] else f"{row['mean']:.4f}" for s, row in rows.items()}
        table = [
            (f"**{metric}**", means),
            ("95% CI", {s: f"[{row['ci_low']:.4f}, {row['ci_high']:.4f}]" for s, row in rows.items()}),
            ("n", {s: str(int(row["n"])) for s, row in rows.items()}),
        ]
        if tests and metric in comparison.metrics:
            table.append(
                (
                    "Δ (p)",
                    {
                        s: "baseline"
                        if row["baseline"]
                        else f"{row['delta']:+.4f} (p {p_text(row['p_ttest_holm']) or 'none'})"
                        for s, row in rows.items()
                    },
                )
            )
        for label, cells in table:
            lines.append(
                f"| {label} | "
                + " | ".join(f"{NOTE_PAD}{cells[s]}{NOTE_PAD}" if s in cells else "" for s in results)
                + " |"
            )
    against = f" Δ and p (paired t-test, Holm-corrected) against {comparison.baseline.label}." if tests else ""
    lines += [
        "",
        f"**{name}** on `{dataset.name}` ({len(dataset.corpus):,} documents): mean over n queries [95% bootstrap CI], "
        "best in bold; per metric, the queries where every system has a value (ranking metrics: the judged queries, as "
        f"trec_eval averages, or with without_relevant=exclude those with a relevant judgment; answer metrics: those with gold answers), blank where there is none.{against} All metrics are in the child runs"
        + (f"; the full comparison: [report.html]({report})." if report else "."),
    ]
    return "\n".join(lines)
