"""One experiment: dataset -> retrievers -> fusions -> evaluators -> outputs and MLflow.

``run_experiment(cfg)`` is a plain function of the composed config (the Hydra entry point only
gathers the job's metadata), so tests and other tools call it directly.
"""

from __future__ import annotations

import hashlib
import html
import logging
import os
import shutil
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from ragtrack.chunking import Chunker, ChunkPlan, plan_chunks
from ragtrack.core import words
from ragtrack.core.cache import Cache, IdentityMemo
from ragtrack.core.data import Corpus, Dataset
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.files import json_text, write_atomically
from ragtrack.core.progress import step
from ragtrack.core.runs import Run, trec_text
from ragtrack.core.secrets import mask, masked
from ragtrack.core.stage_kinds import STAGE_KINDS
from ragtrack.core.stages import Stage, StageContext, StageOutput
from ragtrack.evaluators.base import EvalInput, Evaluator, SystemComparer, aggregate
from ragtrack.evaluators.judge import LLMJudge
from ragtrack.evaluators.nuggets import NUGGETS_FILE
from ragtrack.evaluators.ranking import cutoff_curves
from ragtrack.generation import NoGenerator, answer_questions
from ragtrack.pipeline import layout, registry, robustness, usage
from ragtrack.pipeline.agreement import pairwise_agreement, report_section, rubric_agreement, run_page_note
from ragtrack.pipeline.agreement import summary_text as agreement_text
from ragtrack.pipeline.comparison import (
    Comparison,
    SystemRun,
    alias_of,
    compare_systems,
    find_baseline,
    is_best,
    per_query_differences,
    query_counts,
)
from ragtrack.pipeline.comparison_report import REPORT_FILE, write_comparison
from ragtrack.pipeline.comparison_tables import p_text
from ragtrack.pipeline.csv_files import csv_text
from ragtrack.pipeline.inputs import load_dataset, relevance_threshold, without_relevant
from ragtrack.pipeline.job import JobInfo
from ragtrack.pipeline.library_logs import quiet_libraries
from ragtrack.pipeline.provenance import provenance_tags
from ragtrack.pipeline.redaction import (
    check_variable_names,
    flatten,
    redact,
    redact_hydra_files,
    redact_overrides,
    remember_config_secrets,
)
from ragtrack.pipeline.slices import Attribute, Findings, annotate, query_attributes, summarize
from ragtrack.pipeline.systems import PlannedSystem, plan_systems
from ragtrack.pipeline.tracking import DatasetIdentity, MlflowTracker, Tracker, tracking_target
from ragtrack.pipeline.usage import Meter, Usage

log = logging.getLogger(__name__)


@dataclass
class SystemResult:
    name: str
    run: Run
    per_query: pd.DataFrame
    summary: pd.DataFrame  # index metric; columns mean std ci_low ci_high n
    efficiency: dict[str, float | str]  # figures (MLflow metrics) and labels (strings: MLflow params)
    params: dict
    passage_run: Run | None = None  # what a generator reads: chunk ids of ``passages`` (ragtrack.chunking)
    passages: Corpus | None = None  # the indexed units: chunks, or the documents when unchunked
    counted: pd.DataFrame | None = None  # queries x metrics: True where the query enters the metric's mean
    inputs: list[str] = field(default_factory=list)  # the systems its stage read


def stage(name: str):
    """A step of the job, logged by this module (``ragtrack.core.progress.step``)."""
    return step(name, log)


_scored = IdentityMemo()  # evaluations and cutoff curves of runs the jobs of a multirun share


def make_tracker(cfg: Mapping) -> Tracker:
    """MLflow when ``tracking.enabled``, else a tracker that records nothing."""
    if not cfg.get("enabled", False):
        return Tracker()
    return MlflowTracker(*tracking_target(cfg))


def build_chunker(cfg: Mapping | None) -> tuple[Chunker | None, int]:
    """The chunker a ``chunking`` config names by ``type`` (a ``ragtrack.chunkers`` plugin; ``none``:
    no chunking) and its ``oversample``."""
    settings = dict(OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else (cfg or {}))
    if settings.get("type", "none") == "none":
        return None, 1
    chunker = registry.build("chunkers", settings)
    return chunker, getattr(chunker, "oversample", settings.get("oversample", 1))


def eval_input(run: Run, dataset: Dataset, generated: dict | None = None, context_run: Run | None = None) -> EvalInput:
    """What the evaluators see of one system (``dataset.corpus``: the passages ``context_run`` ranks)."""
    return EvalInput(
        qrels=dataset.qrels,
        run=run,
        queries=dataset.queries,
        answers=dataset.answers,
        generated=generated or {},
        corpus=dataset.corpus,
        context_run=context_run,
    )


def evaluate_run(
    run: Run,
    dataset: Dataset,
    evaluators: list[Evaluator],
    seed: int,
    generated: dict | None = None,
    context_run: Run | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per-query table (all evaluators side by side), its summary (mean, std, bootstrap CI) and which
    queries count for each metric (booleans, same rows and metric columns as the table). A value is
    blank (NaN) wherever its query does not count for that metric (answer metrics on questions without
    gold answers; ranking metrics on queries without a relevant judgment only with
    ``without_relevant: exclude``, since trec_eval counts them), so the table has one convention: blank
    = undefined, and a mean is over its non-blank values.
    ``dataset.corpus`` holds the passages (chunks when chunked) that ``context_run`` ranks."""
    data = eval_input(run, dataset, generated, context_run)
    tables, summaries, masks = [], [], []
    for evaluator in evaluators:
        if not evaluator.applies_to(data):
            log.info("evaluator %s does not apply to this data; skipped", type(evaluator).__name__)
            continue
        table = evaluator.evaluate(data)
        counted = evaluator.counted(data, table).reindex(table.index, fill_value=False)
        mask = pd.DataFrame(
            {column: counted & table[column].notna() for column in table.columns}, index=table.index
        )  # NaN: not applicable
        tables.append(table.where(mask))
        masks.append(mask)
        summaries.append(aggregate(table, counted, seed=seed))
    if not tables:
        raise RagtrackError("no evaluator applies to this dataset")
    return pd.concat(tables, axis=1), pd.concat(summaries), pd.concat(masks, axis=1)


def shared_params(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The parent run's params from the job's flattened settings: all but every stage section (each
    system's run carries its own stages' settings), ``paths`` and ``tracking``."""
    private = (*(f"{kind.section}." for kind in STAGE_KINDS), "paths.", "tracking.")
    return {key: value for key, value in flat.items() if not key.startswith(private)}


def with_latency(
    per_query: pd.DataFrame, retrieval_ms: Mapping[str, float], generation_ms: float | None
) -> pd.DataFrame:
    """The per-query table with ``retrieval_ms`` (and ``generation_ms`` when answers were generated)
    appended, rounded to microseconds; blank where unknown: a system's time per query as
    docs/performance.md defines it (a retriever's and a generator's: the batch's wall time / queries;
    one query alone is a retriever's ``latency_*_seconds``). Wall-clock figures: they differ run to
    run, unlike every other column."""
    columns = {
        layout.LATENCY_COLUMNS["retrieval"]: [
            round(retrieval_ms[q], 3) if q in retrieval_ms else np.nan for q in per_query.index
        ]
    }
    if generation_ms is not None:
        columns[layout.LATENCY_COLUMNS["generation"]] = [round(generation_ms, 3)] * len(per_query)
    return per_query.assign(**columns)


def latency_quantiles(per_query: pd.DataFrame) -> dict[str, float]:
    """p50 and p95 of the per-query latency columns (child-run metrics :func:`layout.latency_key`)."""
    figures = {}
    for stage_name, column in layout.LATENCY_COLUMNS.items():
        values = per_query.get(column, pd.Series(dtype=float)).dropna().to_numpy(float)
        if len(values):
            figures |= {layout.latency_key(stage_name, q): float(np.percentile(values, q)) for q in (50, 95)}
    return figures


def run_experiment(cfg: DictConfig, job: JobInfo | None = None, dataset: Dataset | None = None) -> dict:
    """Run every system of ``cfg`` on its dataset (``dataset``: one given in Python, instead of the one
    ``cfg.dataset`` names), score, write outputs and log to MLflow; returns the content of results.json
    plus ``mlflow_run_id`` (the job's parent run, ``None`` without tracking) and ``per_query_table``
    (per_query.csv as a DataFrame)."""
    job = job or JobInfo()
    quiet_libraries()  # before the first chat request: no line per request from httpx
    if cfg.get("dry_run"):
        raise RagtrackError(
            "dry_run is true: a dry run is ragtrack.pipeline.dryrun.dry_run(cfg) (ragtrack run --dry-run), not run_experiment"
        )
    remember_config_secrets(cfg)  # first: every secret value is masked wherever the job writes or prints
    redact_hydra_files(job.hydra_records)
    check_variable_names(OmegaConf.to_container(cfg, resolve=True))  # before anything is built or logged
    output_dir = Path(cfg.paths.output_dir)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a path no folder can be made at (/proc/x, under a file): the user's to change
        raise RagtrackError(
            f"paths.output_dir: the folder {output_dir} cannot be made: {exc.strerror or exc}"
        ) from None
    chunker, oversample = build_chunker(cfg.get("chunking"))
    stages = build_stages(cfg)
    if dataset is None:  # ``ragtrack run`` reads it before importing this module (pipeline.app)
        with stage("load dataset"):
            dataset = load_dataset(cfg.dataset, check_documents=False)
    check_stages_on(stages, dataset)
    attributes = query_attributes(cfg, dataset, relevance_threshold(cfg))
    with stage("chunk" if chunker else "check judgments"):
        plan = plan_chunks(dataset, chunker, oversample)
    cache = Cache(cfg.paths.cache_dir)
    depth = int(cfg.depth)
    warn_cutoffs_past_depth(cfg, depth)
    meter = Meter()
    evaluators, pair_judges = build_evaluators(cfg, meter)
    tracker = make_tracker(cfg.tracking)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    flat = flatten(resolved)
    shared = shared_params(flat)
    typed = redact_overrides(job.overrides)
    overridden = (override.partition("=")[0].lstrip("+~") for override in typed)
    shared |= {
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
    name = mask(cfg.get("run_name") or job_name(job.choices, typed))
    try:  # a run made and then not logged (a full disk) ends FAILED too
        tracker.start(name, tags, shared)
        tracker.log_dataset(dataset_identity(dataset, str(cfg.dataset.type)))
        results = _run_systems(cfg, dataset, cache, depth, evaluators, plan, stages, meter)
        findings = _findings(
            cfg,
            dataset,
            results,
            attributes,
            output_dir,
            lambda perturbation, perturbed, folder: _run_systems(
                _with_output_dir(cfg, folder),
                perturbed,
                cache,
                depth,
                evaluators,
                plan,
                stages,
                meter.rerun(perturbation),
            ),
        )
        findings = findings.merge(judge_pairs(pair_judges, results, dataset, output_dir, int(cfg.seed), meter)).merge(
            against_inputs(cfg, dataset, results)
        )
        findings = findings.merge(rubric_agreement(evaluators, results, dataset, output_dir, int(cfg.seed)))
        used = Usage(meter.table(), {name: r.inputs for name, r in results.items()}, len(dataset.queries))
        report = _write_outputs(cfg, resolved, dataset, results, output_dir, findings.results, name, used)
        _log_to_tracker(tracker, results, output_dir, job, dataset, cfg, findings, report, used)
    except BaseException as exc:
        tracker.finish(exc)
        raise
    tracker.finish()
    if job.report and not job.sweep:  # a sweep's jobs are summed up at its end (pipeline.app.SweepSummary)
        written = report["results"]
        print_report(
            report["table"],
            tracker,
            output_dir,
            written["queries_counted"],
            [
                ("Answer generation failed:", generation_text(written)),
                ("Robustness (metric drop, clean - perturbed):", robustness.summary_text(written)),
                ("LLM calls:", usage.summary_text(used.calls)),
                ("Judge agreement with people:", agreement_text(written)),
            ],
        )
    return {**report["results"], "mlflow_run_id": tracker.run_id, "per_query_table": report["per_query"]}


def build_evaluators(cfg: DictConfig, meter: Meter) -> tuple[list[Evaluator], list[SystemComparer]]:
    """The evaluators of ``cfg``, their stages named by their config keys on ``meter``, and apart the
    pairwise judges (they compare systems, after all have answered)."""
    evaluators = cfg.get("evaluator") or {}
    built = [meter.name(str(key), registry.build("evaluators", ecfg)) for key, ecfg in evaluators.items()]
    labelled = [
        f"evaluator.{key}"
        for key, e in zip(evaluators, built)
        if isinstance(e, LLMJudge) and e.human_labels is not None
    ]
    if len(labelled) > 1:  # results.json holds one agreement section: the rubric judge's
        raise RagtrackError(
            f"human_labels on {' and '.join(labelled)}: give them to one llm_judge (one judge grades several rubrics)"
        )
    return [e for e in built if isinstance(e, Evaluator)], [e for e in built if isinstance(e, SystemComparer)]


def build_stages(cfg: DictConfig) -> list[tuple[PlannedSystem, Stage]]:
    """The stage of every system of ``cfg`` (``pipeline.systems``), inputs first, built and checked
    before the job does any work: a stage's :meth:`~ragtrack.core.stages.Stage.problems` (a model that
    cannot be found) is one line naming its setting."""
    planned = plan_systems(cfg)
    if not planned:
        raise RagtrackError("no systems configured: select at least one retriever (e.g. retriever=[bm25])")
    stages = [(system, registry.build(system.group, system.config, name=system.name)) for system in planned]
    for system, stage_object in stages:
        for setting, problem in stage_object.problems().items():
            raise InputError(f"{system.path}.{setting}", problem)
    return stages


def check_stages_on(stages: list[tuple[PlannedSystem, Stage]], dataset: Dataset) -> None:
    """Each stage's :meth:`~ragtrack.core.stages.Stage.dataset_problems` on the job's dataset, before
    any system runs: the first is one line naming its setting."""
    for system, stage_object in stages:
        for setting, problem in stage_object.dataset_problems(dataset).items():
            raise InputError(f"{system.path}.{setting}", problem)


def stage_context(dataset: Dataset, cache: Cache, depth: int, plan: ChunkPlan) -> StageContext:
    """What the stages of a job see (:class:`StageContext`)."""
    indexed = replace(dataset, corpus=plan.corpus(dataset.corpus))
    return StageContext(
        indexed,
        plan.judged_corpus(dataset.corpus),
        cache,
        depth,
        plan.search_depth(depth),
        judged=lambda run: plan.evaluated(run, depth),
        passages=plan.passages,
    )


def stage_label(system: PlannedSystem) -> str:
    """The step's name in the log: ``bm25+llm: reranker of bm25``."""
    return f"{system.name}: {system.section}" + (f" of {', '.join(system.inputs)}" if system.inputs else "")


def run_stages(
    stages: list[tuple[PlannedSystem, Stage]],
    dataset: Dataset,
    cache: Cache,
    depth: int,
    plan: ChunkPlan,
    meter: Meter | None = None,
) -> tuple[dict[str, StageOutput], dict[str, dict]]:
    """Every system made by its stage, inputs first (one loop, whatever the stage kinds): the outputs
    and the parameters (the stage's config, flattened, and the chunking) by system name; the stages'
    chat calls go to ``meter``."""
    context = stage_context(dataset, cache, depth, plan)
    outputs: dict[str, StageOutput] = {}
    params: dict[str, dict] = {}
    for system, stage_object in stages:
        with stage(stage_label(system)):
            outputs[system.name] = stage_object.produce({name: outputs[name] for name in system.inputs}, context)
        if meter is not None:
            meter.collect(system.name, system.section, [stage_object], chain=True)
        params[system.name] = flatten(OmegaConf.to_container(system.config, resolve=True)) | plan.params()
    return outputs, params


def _run_systems(
    cfg: DictConfig,
    dataset: Dataset,
    cache: Cache,
    depth: int,
    evaluators: list[Evaluator],
    plan: ChunkPlan | None = None,
    stages: list[tuple[PlannedSystem, Stage]] | None = None,
    meter: Meter | None = None,
) -> dict[str, SystemResult]:
    """Every system run, answered (with a generator) and scored; the chat calls of its stages,
    generator and evaluators go to ``meter``."""
    plan = plan or ChunkPlan()
    indexed = replace(dataset, corpus=plan.corpus(dataset.corpus))
    outputs, params = run_stages(stages or build_stages(cfg), dataset, cache, depth, plan, meter)
    generator = registry.build("generators", cfg.generator) if cfg.get("generator") else None
    evaluation = ("evaluate", OmegaConf.to_yaml(cfg.get("evaluator") or {}, resolve=True), int(cfg.seed))
    results = {}
    for name, output in outputs.items():
        run, passage_run, efficiency = output.run, output.passage_run, dict(output.efficiency)
        answers, generation_ms = None, None
        if generator is not None and not isinstance(generator, NoGenerator):
            with stage(f"{name}: generate answers"):
                started = time.perf_counter()
                answers = answer_questions(
                    generator, passage_run, indexed, Path(cfg.paths.output_dir) / "systems" / name
                )
                generation_ms = (
                    (time.perf_counter() - started) * 1000 / len(dataset.queries)
                )  # generators answer a batch
            if meter is not None:
                meter.collect(name, "generator", [generator])
            if answers is not None and (why := answers.none_given()):
                log.warning(
                    "%s: no answers: %s; every metric of the answers is blank (judge, citations, nuggets) or 0 "
                    "(answer_f1, exact_match)",
                    name,
                    why,
                )
        with stage(f"{name}: evaluate"):
            if answers:
                per_query, summary, counted = evaluate_run(
                    run, indexed, evaluators, int(cfg.seed), answers.texts, passage_run
                )
            else:  # a run the jobs of a multirun share (a cached retriever run) is scored once
                key = (run, passage_run, indexed.qrels, indexed.queries, indexed.answers, indexed.corpus)
                per_query, summary, counted = _scored.get(
                    key, evaluation, lambda: evaluate_run(run, indexed, evaluators, int(cfg.seed), None, passage_run)
                )
        if meter is not None:
            for evaluator in evaluators:
                meter.collect(name, meter.stage_of(evaluator), [evaluator])
        if answers:
            per_query, efficiency = answers.annotate(per_query, dataset), efficiency | answers.efficiency
        per_query = with_latency(per_query, output.latency_ms, generation_ms)
        efficiency |= latency_quantiles(per_query)
        without_hits = sum(1 for qid in dataset.queries if not run.scores.get(qid))
        if without_hits:
            log.warning(
                "%s: %d of %d queries have no hits (they score 0 on every metric)",
                name,
                without_hits,
                len(dataset.queries),
            )
        results[name] = SystemResult(
            name,
            run,
            per_query,
            summary,
            {**efficiency, "queries_without_hits": float(without_hits), **plan.stats(dataset.corpus)},
            params[name] | {"search": "approximate" if output.approximate else "exact"} | labels(efficiency),
            passage_run,
            indexed.corpus,
            counted,
            list(output.stage.inputs),
        )
    return results


def labels(efficiency: Mapping[str, float | str]) -> dict[str, str]:
    """The labels among a system's efficiency figures (strings, e.g. ``encoded_by.device``): MLflow params, not metrics."""
    return {key: value for key, value in efficiency.items() if isinstance(value, str)}


def _findings(
    cfg: DictConfig,
    dataset: Dataset,
    results: dict[str, SystemResult],
    attributes: list[Attribute],
    output_dir: Path,
    rerun: Callable[[str, Dataset, Path], dict[str, SystemResult]],
) -> Findings:
    """What the job adds beyond each system's metrics: metrics per slice (``pipeline.slices``; the
    per-query tables get the slice columns), latency quantiles for the parent run and, when
    ``robustness`` is set, the perturbed-query study (``pipeline.robustness``; ``rerun(perturbation,
    dataset, folder)`` runs every system on a dataset with other queries, writing into another folder
    and metering its LLM calls apart)."""
    for result in results.values():
        result.per_query = annotate(result.per_query, attributes)
    found = summarize({name: (r.per_query, r.counted) for name, r in results.items()}, attributes, int(cfg.seed))
    found.parent_metrics |= {
        layout.system_metric_key(name, key): value
        for name, r in results.items()
        for key, value in r.efficiency.items()
        if key.startswith("latency/")
    }
    if cfg.get("robustness"):
        found = found.merge(robustness.study(cfg.robustness, dataset, results, rerun, output_dir, int(cfg.seed)))
    return found


def judge_pairs(
    judges: list[SystemComparer],
    results: dict[str, SystemResult],
    dataset: Dataset,
    output_dir: Path,
    seed: int = 0,
    meter: Meter | None = None,
) -> Findings:
    """The pairwise judges' summaries by pair (results.json ``pairwise``, parent metrics
    ``pairwise/<first>_vs_<second>/<name>``, ``pairwise.jsonl``) over the systems that generated answers,
    their agreement with people where a judge has ``human_labels`` (``pipeline.agreement``); their chat
    calls go to ``meter`` (under :data:`usage.PAIRWISE`)."""
    answers = {
        name: r.per_query["generated_answer"].to_dict()
        for name, r in results.items()
        if "generated_answer" in r.per_query
    }
    pairs, agreed = {}, Findings()
    for judge in judges:
        summaries, records = judge.judge(answers, dataset.queries, dataset.answers)
        pairs |= summaries
        agreed = agreed.merge(pairwise_agreement(judge, records, dataset, output_dir, seed))
        if meter is not None:
            meter.collect(usage.PAIRWISE, meter.stage_of(judge), [judge])
    if not pairs:
        return agreed
    metrics = {
        f"pairwise/{layout.system_key(s['first'])}_vs_{layout.system_key(s['second'])}/{k}": v
        for s in pairs.values()
        for k, v in s.items()
        if isinstance(v, float) and pd.notna(v)
    }
    return Findings(
        {"pairwise": pairs}, metrics, {}, [p for p in [output_dir / "pairwise.jsonl"] if p.is_file()]
    ).merge(agreed)


def warn_cutoffs_past_depth(cfg: DictConfig, depth: int) -> None:
    """One warning where a ranking metric's cutoff is deeper than the job's ``depth``: no system returns
    more, so recall@100 at depth 10 equals recall@10 (trec_eval would say the same)."""
    deeper = [
        str(m)
        for e in (cfg.get("evaluator") or {}).values()
        if e.get("type") == "ranking"
        for m in (e.get("metrics") or [])
        if str(m).partition("@")[2].isdigit() and int(str(m).partition("@")[2]) > depth
    ]
    if deeper:
        log.warning(
            "depth %d is below the cutoff of %s: no system returns more than %d documents, so each equals its value at %d",
            depth,
            ", ".join(deeper),
            depth,
            depth,
        )


def job_key_metrics(cfg: DictConfig) -> list[str]:
    """The metrics of the job's tables and tests (``tracking.key_metrics``, else the layout's default)."""
    return list(OmegaConf.select(cfg, "tracking.key_metrics", default=None) or layout.KEY_METRICS)


def shown_metrics(cfg: DictConfig, results: Mapping[str, SystemResult]) -> list[str]:
    """The key metrics (:func:`job_key_metrics`) that every system has, else the first metric they all
    have (a job without ranking metrics: ``answer_f1``): the job's comparison, run page and runs view."""
    common = [
        m for m in next(iter(results.values())).summary.index if all(m in r.per_query.columns for r in results.values())
    ]
    return [m for m in job_key_metrics(cfg) if m in common] or common[:1]


def dataset_identity(dataset: Dataset, provider: str) -> DatasetIdentity:
    """The job's dataset as MLflow shows it (:class:`~ragtrack.pipeline.tracking.DatasetIdentity`)."""
    profile = {
        "documents": len(dataset.corpus),
        "queries": len(dataset.queries),
        "judgments": sum(map(len, dataset.qrels.values())),
        **{f"{part}_sha256": digest for part, digest in dataset.hashes.items()},
    }
    return DatasetIdentity(dataset.name, dataset.hash[:16], provider, dataset.source, profile)


def against_inputs(cfg: DictConfig, dataset: Dataset, results: dict[str, SystemResult]) -> Findings:
    """Each system made from one other (a reranker, a rewriter) against that input, on the key metrics
    over the queries where both have a value: the difference, paired t-test and randomization p-values and W/T/L
    (results.json ``against_input``; child-run metrics ``<metric>_vs_input_delta`` and ``_vs_input_p``,
    the randomization test's)."""
    key_metrics = job_key_metrics(cfg)
    section, child_metrics = {}, {}
    for name, result in results.items():
        if len(result.inputs) != 1 or result.inputs[0] not in results:
            continue
        first = results[result.inputs[0]]
        metrics = [m for m in key_metrics if m in result.per_query.columns and m in first.per_query.columns]
        if not metrics:
            continue
        pair = [SystemRun(r.name, r.name, "", "", 0, r.per_query, label=r.name) for r in (first, result)]
        table = compare_systems(pair, metrics, pair[0], seed=int(cfg.seed)).table
        rows = table[~table["baseline"]].set_index("metric")
        section[name] = {
            "input": first.name,
            **{
                metric: {
                    column: float(rows.at[metric, column])
                    for column in ("delta", "p_ttest", "p_randomization", "wins", "ties", "losses")
                }
                for metric in metrics
            },
        }
        child_metrics[name] = {
            f"{layout.metric_key(m)}_vs_input_{figure}": float(rows.at[m, column])
            for m in metrics
            for figure, column in (("delta", "delta"), ("p", "p_randomization"))
        }
    return Findings({"against_input": section}, {}, child_metrics) if section else Findings()


def _with_output_dir(cfg: DictConfig, folder: Path) -> DictConfig:
    """A copy of ``cfg`` writing its per-system files (generation.json) under ``folder``."""
    copy = cfg.copy()
    copy.paths = {**OmegaConf.to_container(cfg.paths, resolve=True), "output_dir": str(folder)}
    return copy


def per_query_table(system: str, per_query: pd.DataFrame) -> pd.DataFrame:
    """Columns ``system``, ``qid``, then the system's per-query columns (texts first, then metrics)."""
    table = per_query.reset_index().assign(system=system)
    return table[["system", "qid", *[c for c in table.columns if c not in ("system", "qid")]]]


def _write_outputs(
    cfg: DictConfig,
    resolved: dict,
    dataset: Dataset,
    results: dict[str, SystemResult],
    output_dir: Path,
    extra: dict | None = None,
    name: str = "ragtrack",
    used: Usage | None = None,
) -> dict:
    """``resolved``: ``cfg`` as a plain, resolved container (written redacted as config.yaml);
    ``extra``: more top-level sections of results.json (slices, robustness); ``name``: the job's
    (the title of its comparison); ``used``: its LLM calls (``usage.csv`` files, results.json ``usage``,
    a report.html section)."""
    for result in results.values():  # a run shared by the jobs of a multirun is formatted once
        text = _scored.get((result.run,), ("trec", result.name), lambda: trec_text(result.run, result.name))
        write_atomically(output_dir / "runs" / f"{result.name}.trec", text)
    per_query = pd.concat([per_query_table(name, r.per_query) for name, r in results.items()], ignore_index=True)
    (output_dir / layout.PER_QUERY_FILE).write_text(
        csv_text(per_query)
    )  # floats as repr: shortest text that reads back exactly
    table = pd.DataFrame({name: r.summary["mean"] for name, r in results.items()})
    table.index.name = "metric"
    (output_dir / layout.COMPARISON_FILE).write_text(csv_text(table, index=True))
    config_yaml = yaml_text(redact(resolved))
    (output_dir / layout.CONFIG_FILE).write_text(config_yaml)
    spent = used.section() if used is not None else {}
    if spent:
        usage.write(used, output_dir)
    with stage("compare systems"):
        failed = failed_generations({name: r.efficiency for name, r in results.items()})
        sections = [
            found
            for found in [
                generation_section(failed, len(dataset.queries)),
                robustness.report_section(extra or {}),
                report_section(extra or {}),
            ]
            if found
        ]
        sections += [("cost", "Cost and tokens", usage.summary_html(used.calls))] if spent else []
        comparison = _write_comparison(
            cfg, dataset, results, output_dir / layout.COMPARISON_DIR, name, config_yaml, sections
        )
    wide = None if comparison is None else per_query_differences(comparison, dict(dataset.queries.items()))
    if wide is not None:
        (output_dir / layout.PER_QUERY_WIDE_FILE).write_text(csv_text(wide))
    payload = {
        "dataset": {
            "name": dataset.name,
            "provider": cfg.dataset.type,
            "source": dataset.source,
            "hash": dataset.hash,
            "hashes": dataset.hashes,
            "documents": len(dataset.corpus),
            "queries": len(dataset.queries),
        },
        "config_hash": hashlib.sha256(config_yaml.encode()).hexdigest(),
        "systems": {name: r.summary["mean"].to_dict() for name, r in results.items()},
        "aggregates": {name: r.summary.drop(columns="n").to_dict(orient="index") for name, r in results.items()},
        "queries_counted": {name: {str(m): int(n) for m, n in r.summary["n"].items()} for name, r in results.items()},
        "efficiency": {name: r.efficiency for name, r in results.items()},
        "search": {
            name: r.params["search"] for name, r in results.items()
        },  # exact, or approximate (see approximate_recall)
        "aliases": {
            name: alias for name, r in results.items() if (alias := alias_of(r.params))
        },  # row labels across jobs (the alias setting)
        **({"usage": spent} if spent else {}),
        **(extra or {}),
    }
    write_atomically(
        output_dir / layout.RESULTS_FILE, json_text(masked(payload), indent=2)
    )  # last, whole: it marks the results complete
    return {
        "results": payload,
        "table": table,
        "per_query": per_query,
        "comparison": comparison,
        "per_query_wide": wide,
    }


def _curves(result: SystemResult, dataset: Dataset, cfg: DictConfig) -> dict[str, dict[int, float]]:
    """recall@k and ndcg@k of a system for k up to ``depth`` (memoized: a multirun's jobs share runs)."""
    threshold, rule = relevance_threshold(cfg), without_relevant(cfg)
    return _scored.get(
        (result.run, dataset.qrels),
        ("curves", int(cfg.depth), threshold, rule),
        lambda: {
            layout.curve_key(base): curve
            for base, curve in cutoff_curves(
                result.run.scores, dataset.qrels, int(cfg.depth), threshold, without_relevant=rule
            ).items()
        },
    )


def _write_comparison(
    cfg: DictConfig,
    dataset: Dataset,
    results: dict[str, SystemResult],
    folder: Path,
    name: str,
    config_yaml: str,
    sections: Sequence[tuple[str, str, str]] = (),
) -> Comparison | None:
    """The job's systems side by side on its key metrics (``pipeline.comparison``, as ``ragtrack compare``
    does across jobs): comparison.md/.png, failures/ and report.html (with the extra ``sections``) in
    ``folder``; baseline bm25 or the first system; per metric, the queries where every system has a
    value (``comparison.defined_queries``: ranking metrics, those the ranking evaluator counts)."""
    metrics = shown_metrics(cfg, results)
    if not metrics:
        return None
    systems = [
        SystemRun(system, system, name, "", 0, r.per_query, label=system, curves=_curves(r, dataset, cfg))
        for system, r in results.items()
    ]
    comparison = compare_systems(systems, metrics, find_baseline(systems, None), seed=int(cfg.seed))
    title = f"{dataset.name} ({query_counts(comparison)}): {name}"
    write_comparison(
        comparison,
        folder,
        title,
        dataset,
        {system: r.run for system, r in results.items()},
        config_text=config_yaml,
        sections=sections,
    )
    return comparison


def yaml_text(container: dict) -> str:
    """A plain container as YAML that ``OmegaConf.load`` reads back (``ragtrack reproduce`` does)."""
    return OmegaConf.to_yaml(container)


def _system_metrics(result: SystemResult) -> dict[str, float]:
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


def _log_to_tracker(
    tracker: Tracker,
    results: dict[str, SystemResult],
    output_dir: Path,
    job: JobInfo,
    dataset: Dataset,
    cfg: DictConfig,
    findings: Findings | None = None,
    written: dict | None = None,
    used: Usage | None = None,
) -> None:
    """``written``: what :func:`_write_outputs` returned (its comparison and per-query table); ``used``:
    the job's LLM calls (child metrics ``llm/<stage>/<figure>`` of each system's chain, the job's on
    the parent run, ``usage.csv``)."""
    if not tracker.enabled:
        return
    key_metrics = shown_metrics(cfg, results)
    top = int(OmegaConf.select(cfg, "tracking.per_query_table", default=10))
    with stage("log to MLflow"):
        spent = used.section() if used is not None else {}
        parent_metrics = usage.metrics(spent.get("job", {}))
        for name, result in results.items():
            folder = output_dir / "systems" / name
            folder.mkdir(parents=True, exist_ok=True)
            link_or_copy(output_dir / "runs" / f"{name}.trec", folder / layout.RUN_FILE)
            text = _scored.get(
                (result.per_query,), ("csv", name), lambda: csv_text(per_query_table(name, result.per_query))
            )
            write_atomically(folder / layout.PER_QUERY_FILE, text)
            metrics = (
                _system_metrics(result)
                | (findings.system_metrics.get(name, {}) if findings else {})
                | usage.metrics(spent.get("systems", {}).get(name, {}))
            )
            tracker.log_system(
                name,
                result.params,
                metrics,
                sorted(folder.iterdir()),
                steps=_curves(result, dataset, cfg),
                table=queries_table(result, dataset, key_metrics, top),
            )
            parent_metrics |= {
                layout.system_metric_key(name, str(m)): v for m, v in result.summary["mean"].items() if pd.notna(v)
            }
        artifacts = [output_dir / name for name in layout.JOB_ARTIFACTS] + (findings.artifacts if findings else [])
        artifacts += [output_dir / usage.FILE] if spent else []
        artifacts += [
            path for path in [output_dir / NUGGETS_FILE] if path.is_file()
        ]  # the nuggets evaluator's, reusable
        parent_metrics |= findings.parent_metrics if findings else {}
        if job.hydra_dir and job.hydra_dir.is_dir():
            artifacts.append(job.hydra_dir)
        comparison, wide = (written or {}).get("comparison"), (written or {}).get("per_query_wide")
        if wide is not None:
            artifacts.append(output_dir / layout.PER_QUERY_WIDE_FILE)
        report = layout.run_page(tracker.experiment_id, tracker.run_id, f"{layout.COMPARISON_DIR}/{REPORT_FILE}")
        note = summary_note(results, key_metrics, dataset, tracker.run_name, comparison, report) + run_page_note(
            findings.results if findings else {}
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


def job_name(choices: Mapping, typed: list[str]) -> str:
    """A job's default MLflow run name: its experiment preset and the other overrides typed, redacted
    (``compare_retrievers``, ``rrf_k fusion.rrf.k=30``)."""
    others = [o for o in typed if not o.lstrip("+~").startswith("experiment=")]
    return " ".join([choices.get("experiment") or "ragtrack", *others])


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


def link_or_copy(source: Path, target: Path) -> None:
    """A second name for an output file (a hard link; a copy where the file system has none)."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy(source, target)


def report_table(table: pd.DataFrame, width: int = 100) -> str:
    """``table`` (metrics x systems) as text, 4 decimals, the largest value of each row (:func:`is_best`)
    marked ``*``, split into column blocks that fit ``width`` characters."""
    best = table.apply(is_best, axis=1)
    cells = pd.DataFrame(
        {
            system: [("" if pd.isna(v) else f"{v:.4f}{'*' if best.loc[m, system] else ' '}") for m, v in column.items()]
            for system, column in table.items()
        },
        index=table.index,
    )
    return cells.to_string(line_width=width)


def counts_text(counted: Mapping[str, Mapping[str, int]], width: int = 100) -> str:
    """Over how many queries each mean of the terminal table is, from results.json's ``queries_counted``
    (system -> metric -> n): ``6 queries; mean per query`` when every mean is over the same queries, else
    metrics with the same counts together: ``mean per query over 952 queries (ndcg@10, answer_f1), 1190
    queries (abstention_rate); abstention_precision: 470 bm25, 364 dense``."""
    systems = list(counted)
    metrics = list(dict.fromkeys(m for n in counted.values() for m in n))
    groups: dict[tuple, list[str]] = {}
    for metric in metrics:
        groups.setdefault(tuple(counted[s].get(metric) for s in systems), []).append(metric)
    if len(groups) == 1 and len(set(next(iter(groups)))) == 1:
        return f"{words.counted(next(iter(groups))[0], 'query')}; mean per query; * best of each metric"
    same = [f"{ns[0]} queries ({', '.join(ms)})" for ns, ms in groups.items() if len(set(ns)) == 1]
    apart = [
        f"{', '.join(ms)}: " + ", ".join(f"{n} {s}" for s, n in zip(systems, ns) if n is not None)
        for ns, ms in groups.items()
        if len(set(ns)) > 1
    ]
    text = "mean per query over " + "; ".join(filter(None, [", ".join(same), *apart])) + "; * best of each metric"
    return textwrap.fill(text, width, subsequent_indent="  ", break_on_hyphens=False)


def print_report(
    table: pd.DataFrame,
    tracker: Tracker,
    output_dir: Path,
    counted: Mapping[str, Mapping[str, int]],
    blocks: Sequence[tuple[str, str]] = (),
) -> None:
    """The metrics x systems table (the best value of each metric marked ``*``; columns wrapped at 100
    characters), over how many queries each mean is (:func:`counts_text`), the ``blocks`` (heading, text;
    those with text: the failed generations, the robustness study's drops, the LLM calls' tokens and
    cost, the judges' agreement with people), then where the outputs and the MLflow runs are."""
    lines = [
        "",
        report_table(table),
        counts_text(counted),
        *(line for heading, text in blocks if text for line in ("", heading, text)),
        "",
        f"Output folder: {output_dir}",
        *tracker.where(),
    ]
    print(mask("\n".join(lines)))


def failed_generations(efficiency: Mapping[str, Mapping[str, float | str]]) -> dict[str, int]:
    """The systems whose answer generation failed for some queries, with how many (``generation_failures``)."""
    return {
        name: int(figures["generation_failures"])
        for name, figures in efficiency.items()
        if figures.get("generation_failures")
    }


def _failure_lines(failed: Mapping[str, int], queries: int) -> list[str]:
    return [
        f"{name}: {count} of {words.counted(queries, 'query')} (errors: systems/{name}/generation.json)"
        for name, count in failed.items()
    ]


GENERATION_NOTE = (
    "a failed query's answer is empty: it scores 0 on the answer metrics (answer_f1, exact_match, ...) and is blank "
    "(left out of the mean) on the judge, citation and nugget metrics"
)


def generation_text(results: Mapping) -> str:
    """The failed generations of results.json ``results`` for the job's terminal summary ("" when none failed)."""
    failed = failed_generations(results.get("efficiency", {}))
    if not failed:
        return ""
    return "\n".join([*_failure_lines(failed, results["dataset"]["queries"]), usage.wrapped(GENERATION_NOTE)])


def generation_section(failed: Mapping[str, int], queries: int) -> tuple[str, str, str] | None:
    """The report.html section of the failed generations (None when none failed)."""
    if not failed:
        return None
    items = "".join(f"<li>{html.escape(line)}</li>" for line in _failure_lines(failed, queries))
    return (
        "generation",
        "Answer generation failed",
        f'<ul>{items}</ul><p class="note">{html.escape(GENERATION_NOTE)}</p>',
    )
