"""One experiment: dataset -> systems -> evaluators -> outputs and MLflow.

``run_experiment(cfg)`` is a plain function of the composed config (the Hydra entry point only
gathers the job's metadata), so tests and other tools call it directly. It is a recipe of steps that
live in their own modules: the executor runs the systems (``pipeline.execution.executor``), the findings add
slices, robustness, pairwise judging and each system against its input (``pipeline.execution.job_findings``),
then the job writes its files (``pipeline.execution.job_outputs``), logs to MLflow (``pipeline.execution.job_tracking``)
and prints its summary (``pipeline.execution.terminal_report``).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ragtrack.core.data import Dataset
from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.analysis.slices import query_attributes
from ragtrack.pipeline.configuration.inputs import relevance_threshold
from ragtrack.pipeline.execution import executor, job_findings, job_outputs, job_tracking, terminal_report
from ragtrack.pipeline.execution.agreement import rubric_agreement
from ragtrack.pipeline.execution.job import JobInfo
from ragtrack.pipeline.execution.usage import Meter, Usage
from ragtrack.pipeline.records.library_logs import quiet_libraries
from ragtrack.pipeline.redaction import check_variable_names, redact_hydra_files, remember_config_secrets
from ragtrack.retrievers.chunking import plan_chunks


def run_experiment(cfg: DictConfig, job: JobInfo | None = None, dataset: Dataset | None = None) -> dict:
    """Run every system of ``cfg`` on its dataset (``dataset``: one given in Python, instead of the one
    ``cfg.dataset`` names), score, write outputs and log to MLflow; returns the content of results.json
    plus ``mlflow_run_id`` (the job's parent run, ``None`` without tracking) and ``per_query_table``
    (per_query.csv as a DataFrame)."""
    job = job or JobInfo()
    quiet_libraries()  # before the first chat request: no line per request from httpx
    if cfg.get("dry_run"):
        raise RagtrackError(
            "dry_run is true: a dry run is ragtrack.pipeline.execution.dryrun.dry_run(cfg) (ragtrack run --dry-run), not run_experiment"
        )
    remember_config_secrets(cfg)  # first: every secret value is masked wherever the job writes or prints
    redact_hydra_files(job.hydra_records)
    check_variable_names(OmegaConf.to_container(cfg, resolve=True))  # before anything is built or logged
    output_dir = make_output_dir(cfg)
    planned = executor.plan(cfg, dataset)
    dataset = planned.dataset
    attributes = query_attributes(cfg, dataset, relevance_threshold(cfg))
    with executor.stage("chunk" if planned.chunker else "check judgments"):
        chunks = plan_chunks(dataset, planned.chunker, planned.oversample)
    executor.warn_cutoffs_past_depth(cfg, int(cfg.depth))
    meter = Meter()
    parts = executor.JobParts.build(cfg, planned, chunks, meter)
    tracker = job_tracking.make_tracker(cfg.tracking)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    parent = job_tracking.parent_run(cfg, resolved, job, dataset)
    try:  # a run made and then not logged (a full disk) ends FAILED too
        job_tracking.open_parent_run(tracker, parent, dataset, str(cfg.dataset.type))
        run = executor.Executor(parts, executor.Live(meter, output_dir))
        results = run.run(dataset)
        findings = (
            job_findings.findings(cfg, dataset, results, attributes, output_dir, run.rerun)
            .merge(run.compare(results, dataset))
            .merge(job_findings.against_inputs(cfg, dataset, results))
            .merge(rubric_agreement(parts.evaluators, results, dataset, output_dir, int(cfg.seed)))
        )
        used = Usage(meter.table(), {name: r.inputs for name, r in results.items()}, len(dataset.queries))
        written = job_outputs.write_outputs(
            cfg, resolved, dataset, results, output_dir, findings.results, parent[0], used
        )
        job_tracking.log_job(tracker, results, output_dir, job, dataset, cfg, findings, written, used)
    except BaseException as exc:
        tracker.finish(exc)
        raise
    tracker.finish()
    if job.report and not job.sweep:  # a sweep's jobs are summed up at its end (pipeline.app.SweepSummary)
        terminal_report.print_summary(written, tracker, output_dir, used)
    return {**written["results"], "mlflow_run_id": tracker.run_id, "per_query_table": written["per_query"]}


def make_output_dir(cfg: DictConfig) -> Path:
    """The job's output folder (``paths.output_dir``), made."""
    output_dir = Path(cfg.paths.output_dir)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a path no folder can be made at (/proc/x, under a file): the user's to change
        raise RagtrackError(
            f"paths.output_dir: the folder {output_dir} cannot be made: {exc.strerror or exc}"
        ) from None
    return output_dir
