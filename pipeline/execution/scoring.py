"""What a job knows of each system once it is scored (:class:`SystemResult`) and how it is scored: the
evaluators side by side, the latency columns, the cutoff curves and the key metrics."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from ragtrack.core.cache import IdentityMemo
from ragtrack.core.data import Corpus, Dataset
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.evaluators.base import EvalInput, Evaluator, aggregate
from ragtrack.evaluators.ranking import cutoff_curves
from ragtrack.pipeline.configuration.inputs import relevance_threshold, without_relevant
from ragtrack.pipeline.records import layout

log = logging.getLogger(__name__)


@dataclass
class SystemResult:
    name: str
    run: Run
    per_query: pd.DataFrame
    summary: pd.DataFrame  # index metric; columns mean std ci_low ci_high n
    efficiency: dict[str, float | str]  # figures (MLflow metrics) and labels (strings: MLflow params)
    params: dict
    passage_run: Run | None = None  # what a generator reads: chunk ids of ``passages`` (ragtrack.retrievers.chunking)
    passages: Corpus | None = None  # the indexed units: chunks, or the documents when unchunked
    counted: pd.DataFrame | None = None  # queries x metrics: True where the query enters the metric's mean
    inputs: list[str] = field(default_factory=list)  # the systems its stage read


scored = IdentityMemo()  # what the jobs of a multirun share of a run: its evaluation, curves and file texts


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


def labels(efficiency: Mapping[str, float | str]) -> dict[str, str]:
    """The labels among a system's efficiency figures (strings, e.g. ``encoded_by.device``): MLflow params, not metrics."""
    return {key: value for key, value in efficiency.items() if isinstance(value, str)}


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


def system_curves(result: SystemResult, dataset: Dataset, cfg: DictConfig) -> dict[str, dict[int, float]]:
    """recall@k and ndcg@k of a system for k up to ``depth`` (memoized: a multirun's jobs share runs)."""
    threshold, rule = relevance_threshold(cfg), without_relevant(cfg)
    return scored.get(
        (result.run, dataset.qrels),
        ("curves", int(cfg.depth), threshold, rule),
        lambda: {
            layout.curve_key(base): curve
            for base, curve in cutoff_curves(
                result.run.scores, dataset.qrels, int(cfg.depth), threshold, without_relevant=rule
            ).items()
        },
    )
