"""``ragtrack eval QRELS RUN``: a TREC run file scored against a qrels file, fast as a whole process.

The run is read as columns (``ragtrack.core.runs.read_run_scores``: Arrow's CSV reader under the
strict field rules; a file under 256 KiB line by line, before Arrow could be imported) and scored by the
built-in ranking metrics straight from those columns, with numpy only: no dict per query, no pandas,
no plugin scan, no Hydra. The values and their summary are
those of :func:`ragtrack.pipeline.commands.api.evaluate` to the last bit (same grade matrix, same metric
functions, same ``summarize``). Metric names that are not built-in ranking metrics (plugins, or a
metric that needs the judged pool) and unknown names go through :func:`~ragtrack.pipeline.commands.api.evaluate`,
which also words the errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragtrack.core.data import load_qrels
from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import json_ready
from ragtrack.core.runs import read_run_scores
from ragtrack.evaluators.common import summarize
from ragtrack.evaluators.ranking import (
    COUNT_WITHOUT_RELEVANT,
    DEFAULT_METRICS,
    RELEVANCE_THRESHOLD,
    WithoutRelevant,
    counted_rows,
    parse_metric,
    ranking_values,
)


@dataclass(frozen=True)
class FileEvaluation:
    """Per-query values (rows in qrels order) and their summary; the same views as ``api.Evaluation``."""

    qids: list[str]
    values: dict[str, np.ndarray]  # metric -> value per query
    summary: dict[str, dict[str, float]]  # metric -> mean std ci_low ci_high n
    missing: tuple[str, ...] = ()
    no_relevant: tuple[
        str, ...
    ] = ()  # judged queries without a relevant judgment: counted unless without_relevant="exclude"

    def summary_rows(self) -> dict[str, dict[str, float]]:
        return self.summary

    def per_query_rows(self) -> dict[str, dict[str, float]]:
        return {
            qid: {metric: float(values[row]) for metric, values in self.values.items()}
            for row, qid in enumerate(self.qids)
        }

    def to_dict(self, per_query: bool = False) -> dict:
        """The payload of ``ragtrack eval --json``."""
        return json_payload(self.summary, self.per_query_rows() if per_query else None)


def counted_queries(summary: Mapping[str, Mapping[str, float]]) -> int:
    """How many queries the means of a summary (``{metric: {mean ... n}}``) are over: the most any metric counts."""
    return max(int(row["n"]) for row in summary.values())


def json_payload(
    summary: Mapping[str, Mapping[str, float]], per_query: Mapping[str, Mapping[str, float]] | None = None
) -> dict:
    """What ``ragtrack eval --json`` prints (``to_dict`` of both result types): ``aggregate``, ``std``,
    ``ci95``, ``queries`` and, when given, ``per_query``; valid JSON, with null (None) for undefined
    values (NaN: a mean over no query, a metric that does not apply to a query; ``core.files.json_ready``)."""
    payload = {
        "aggregate": {m: row["mean"] for m, row in summary.items()},
        "std": {m: row["std"] for m, row in summary.items()},
        "ci95": {m: [row["ci_low"], row["ci_high"]] for m, row in summary.items()},
        "queries": counted_queries(summary),
    }
    if per_query is not None:
        payload["per_query"] = per_query
    return json_ready(payload)


def _ranking_only(metrics: Sequence[str]) -> bool:
    """Every name is a built-in ranking metric scored from the run alone (no judged pool)."""
    try:
        return all(not parse_metric(name)[0].needs_pool for name in metrics)
    except RagtrackError:
        return False  # the general path words the error, with every evaluator's names


def evaluate_files(
    qrels_path: Path,
    run_path: Path,
    metrics: Sequence[str] | None = None,
    relevance_threshold: int = RELEVANCE_THRESHOLD,
    seed: int = 0,
    without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT,
):
    """Score the run file against the qrels file; a :class:`FileEvaluation`, or an ``api.Evaluation``
    where the general path is needed (see the module docstring). ``without_relevant``: which judged
    queries enter the means (``ranking.counted_rows``). Where no query counts (``exclude`` and no
    relevant judgment at ``relevance_threshold``), every mean would be over no query: a one-line error."""
    from ragtrack.pipeline.registry import metric_names

    metrics = list(dict.fromkeys(metric_names(metrics) or DEFAULT_METRICS))
    if _ranking_only(metrics):
        qrels = load_qrels(qrels_path)[0]
        run = read_run_scores(run_path)
        m, values = ranking_values(run, qrels, metrics, relevance_threshold)
        counted = counted_rows(m.num_rel, without_relevant)
        stats = summarize(np.column_stack([values[name] for name in metrics])[counted], seed=seed)
        n = int(stats.pop("n"))
        summary = {
            name: {key: float(column[i]) for key, column in stats.items()} | {"n": n} for i, name in enumerate(metrics)
        }
        missing = tuple(qid for qid, retrieved, kept in zip(m.qids, m.retrieved, counted) if kept and not retrieved)
        result = FileEvaluation(
            m.qids, values, summary, missing, tuple(qid for qid, num_rel in zip(m.qids, m.num_rel) if not num_rel)
        )
    else:
        from ragtrack.pipeline.commands.api import evaluate  # pandas and the plugins: only where a metric needs them

        result = evaluate(qrels_path, run_path, metrics, relevance_threshold, seed, without_relevant)
    if counted_queries(result.summary_rows()) == 0:
        raise RagtrackError(
            f"no query in {qrels_path} has a relevant judgment at relevance threshold {relevance_threshold} "
            f"(a grade >= {relevance_threshold}), so nothing can be evaluated with without_relevant=exclude"
        )
    return result
