"""The Python API: ragtrack's exact metrics, comparisons and experiments inside notebooks and other
people's code. Exported from ``ragtrack`` (``ragtrack.evaluate`` ...); docs/api.md has runnable
examples.

- :func:`evaluate` scores a run against judgments (what ``ragtrack eval`` prints, to the last bit);
- :func:`evaluate_answers` scores answers against gold answers (SQuAD F1/EM, ROUGE, BLEU);
- :func:`compare` sets runs side by side with the statistics of ``ragtrack compare``;
- :func:`run_experiment` runs a whole configured experiment, as ``ragtrack run OVERRIDES`` does.

Runs and judgments may be given as dicts (``{qid: {docid: score}}``, ``{qid: {docid: grade}}``), as
pandas DataFrames (columns ``qid, docid, score`` and ``qid, docid, grade``) or as paths to TREC run
files and BEIR/TREC qrels files.
"""

from __future__ import annotations

import contextlib
import html
import math
import numbers
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import pandas as pd

from ragtrack.core.data import Qrels, load_qrels
from ragtrack.core.errors import RagtrackError, did_you_mean
from ragtrack.core.runs import Run, read_trec
from ragtrack.core.words import counted
from ragtrack.evaluators.base import EvalInput, Evaluator, aggregate
from ragtrack.evaluators.ranking import COUNT_WITHOUT_RELEVANT, RELEVANCE_THRESHOLD, WithoutRelevant, counted_queries
from ragtrack.pipeline.records.layout import COMPARISON_DIR, KEY_METRICS
from ragtrack.pipeline.registry import metric_names

ONE_JOB_AT_A_TIME = threading.RLock()  # run_experiment's jobs in one process, whichever thread calls
RunLike = Union[Run, Mapping[str, Mapping[str, float]], pd.DataFrame, str, Path]
QrelsLike = Union[Mapping[str, Mapping[str, int]], pd.DataFrame, str, Path]


@dataclass(frozen=True)
class Evaluation:
    """Per-query values and their summary (mean, std, bootstrap 95% CI over the counted queries)."""

    per_query: pd.DataFrame  # index qid, one column per metric
    summary: pd.DataFrame  # index metric; columns mean std ci_low ci_high n
    missing: tuple[str, ...] = ()  # counted judged queries that the run does not answer, or questions with gold answers
    # but no prediction: they score 0
    no_relevant: tuple[
        str, ...
    ] = ()  # judged queries without a relevant judgment (no grade >= the threshold): counted,
    # as trec_eval counts them, unless without_relevant="exclude"

    @property
    def aggregate(self) -> dict[str, float]:
        """Mean of every metric over the counted queries (ranking metrics: every judged query, by default)."""
        return self.summary["mean"].to_dict()

    @property
    def std(self) -> dict[str, float]:
        return self.summary["std"].to_dict()

    @property
    def ci95(self) -> dict[str, tuple[float, float]]:
        return {metric: (float(row["ci_low"]), float(row["ci_high"])) for metric, row in self.summary.iterrows()}

    def to_dict(self, per_query: bool = False) -> dict:
        """The payload of ``ragtrack eval --json``: valid JSON, with null for undefined values (NaN)."""
        from ragtrack.pipeline.run_files import json_payload

        return json_payload(self.summary_rows(), self.per_query_rows() if per_query else None)

    def summary_rows(self) -> dict[str, dict[str, float]]:
        """``{metric: {mean, std, ci_low, ci_high, n}}`` (what ``ragtrack eval`` prints)."""
        return self.summary.to_dict(orient="index")

    def per_query_rows(self) -> dict[str, dict[str, float]]:
        """``{qid: {metric: value}}``."""
        return self.per_query.to_dict(orient="index")

    def _repr_html_(self) -> str:
        return self.summary.to_html(float_format=lambda v: f"{v:.4f}")

    def __repr__(self) -> str:
        return f"Evaluation({counted(len(self.per_query), 'query')})\n{self.summary.to_string(float_format=lambda v: f'{v:.4f}')}"


def evaluators_for(
    metrics: Sequence[str],
    relevance_threshold: int = RELEVANCE_THRESHOLD,
    without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT,
) -> list[Evaluator]:
    """The evaluators (built-ins and plugins alike) that provide ``metrics`` (names as :func:`metric_names`
    reads them), each given its metrics (the ranking evaluator also the threshold and ``without_relevant``)."""
    from ragtrack.pipeline import registry

    classes = registry.load_all("evaluators")
    chosen: dict[str, list[str]] = {}
    for metric in metrics:
        owner = next((name for name, cls in classes.items() if cls.handles(metric)), None)
        if owner is None:
            known = sorted(m for cls in classes.values() for m in cls.provides())
            raise RagtrackError(f"unknown metric {metric!r}; known: {', '.join(known)}{_suggestion(metric, classes)}")
        chosen.setdefault(owner, []).append(metric)
    evaluators = []
    for name, names in chosen.items():
        kwargs = (
            {"relevance_threshold": relevance_threshold, "without_relevant": without_relevant}
            if name == "ranking"
            else {}
        )
        needs = f"metrics {', '.join(names)} need the {name!r} evaluator's settings; use them in `ragtrack run` (evaluator={name})"
        schema = (
            getattr(classes[name], "settings_schema", None) if name != "ranking" else None
        )  # ranking's: no pydantic
        if schema is not None and any(field.is_required() for field in schema.model_fields.values()):
            raise RagtrackError(needs)
        try:
            evaluators.append(classes[name](metrics=names, **kwargs))
        except TypeError:
            raise RagtrackError(needs) from None
    return evaluators


def _suggestion(metric: str, classes: Mapping[str, type[Evaluator]]) -> str:
    """``; did you mean 'ndcg@10'?`` for ``ndcg10`` (a cutoff without its ``@``), else the closest name."""
    glued = re.fullmatch(r"(.*?[^\d@])(\d+)", metric)
    if glued and any(cls.handles(f"{glued[1]}@{glued[2]}") for cls in classes.values()):
        return f"; did you mean '{glued[1]}@{glued[2]}'?"
    return did_you_mean(metric, [m for cls in classes.values() for m in cls.provides()])


def _score(
    evaluators: list[Evaluator], data: EvalInput, metrics: list[str], seed: int, needs: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    tables, summaries = [], []
    for evaluator in evaluators:
        if not evaluator.applies_to(data):
            raise RagtrackError(f"metrics {', '.join(evaluator.metrics)} need {needs}")
        table = evaluator.evaluate(data)
        tables.append(table)
        summaries.append(aggregate(table, evaluator.counted(data, table), seed=seed))
    return pd.concat(tables, axis=1)[metrics], pd.concat(summaries).loc[metrics]


def default_ranking_metrics() -> list[str]:
    from ragtrack.pipeline import registry

    return list(registry.load("evaluators", "ranking")().metrics)


def evaluate(
    qrels: QrelsLike,
    run: RunLike,
    metrics: Sequence[str] | None = None,
    relevance_threshold: int = RELEVANCE_THRESHOLD,
    seed: int = 0,
    without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT,
) -> Evaluation:
    """Score ``run`` against ``qrels`` with trec_eval's semantics (``ragtrack metrics`` lists the names).
    The means are over every judged query, as trec_eval's; ``without_relevant="exclude"`` leaves out
    those without a relevant judgment (``ranking.counted_rows``).

    >>> result = evaluate({"q1": {"d1": 1, "d2": 0}}, {"q1": {"d2": 0.9, "d1": 0.5}}, ["ndcg@10", "mrr"])
    >>> result.aggregate["mrr"]
    0.5
    """
    metrics = metric_names(metrics) or default_ranking_metrics()
    evaluators = evaluators_for(
        metrics, relevance_threshold, without_relevant
    )  # unknown names fail before any file is read
    judged, ranked = as_qrels(qrels), as_run(run)
    per_query, summary = _score(
        evaluators,
        EvalInput(qrels=judged, run=ranked),
        metrics,
        seed,
        "data that a qrels and a run file do not have (answers); score answers with evaluate_answers or in `ragtrack run`",
    )
    counted, relevant = (
        counted_queries(judged, relevance_threshold, without_relevant),
        set(counted_queries(judged, relevance_threshold, "exclude")),
    )
    return Evaluation(
        per_query,
        summary,
        tuple(q for q in counted if not ranked.scores.get(q)),
        tuple(q for q in judged if q not in relevant),
    )


def evaluate_answers(
    gold: Mapping[str, Sequence[str] | str] | str | Path,
    predictions: Mapping[str, str] | str | Path,
    metrics: Sequence[str] | None = None,
    seed: int = 0,
) -> Evaluation:
    """Score predicted answers against gold answers (one or several per question; the best counts).
    Either may be a file (``ragtrack eval --answers/--predictions``; formats in
    :mod:`ragtrack.pipeline.commands.answer_files`). Questions without a gold answer are left out (``per_query``
    holds the others); a question without a prediction is scored as the empty answer (0) and listed in
    ``missing``.

    >>> evaluate_answers({"q1": ["Denver Broncos"]}, {"q1": "the Broncos"}, ["answer_f1", "exact_match"]).aggregate
    {'answer_f1': 0.6666666666666666, 'exact_match': 0.0}
    """
    from ragtrack.evaluators.answer import AnswerEvaluator
    from ragtrack.pipeline.commands.answer_files import load_gold_answers, load_predictions, prediction_problem

    metrics = metric_names(metrics) or list(AnswerEvaluator().metrics)
    evaluators = evaluators_for(metrics)  # unknown names fail before any file is read
    if isinstance(gold, (str, Path)):
        gold = load_gold_answers(gold)
    golds = {str(qid): [answers] if isinstance(answers, str) else list(answers) for qid, answers in gold.items()}
    if isinstance(predictions, (str, Path)):
        predictions = load_predictions(predictions, set(golds))
    unknown = sorted(set(map(str, predictions)) - set(golds))
    problem = next(filter(None, (prediction_problem(qid, text) for qid, text in predictions.items())), None)
    if problem:
        raise RagtrackError(f"predictions: {problem}")
    if unknown:
        raise RagtrackError(f"predictions for questions without gold answers: {', '.join(unknown[:5])}")
    data = EvalInput(
        qrels={},
        run=Run("answers"),
        queries={qid: "" for qid in golds},
        answers=golds,
        generated={str(qid): text for qid, text in predictions.items()},
    )
    per_query, summary = _score(
        evaluators, data, metrics, seed, "retrieved documents or judgments; use evaluate or `ragtrack run`"
    )
    answered = [qid for qid, answers in golds.items() if answers]
    return Evaluation(per_query.loc[answered], summary, tuple(qid for qid in answered if qid not in data.generated))


def compare(
    runs: Mapping[str, RunLike],
    qrels: QrelsLike,
    metrics: Sequence[str] | None = None,
    baseline: str | None = None,
    relevance_threshold: int = RELEVANCE_THRESHOLD,
    seed: int = 0,
    resamples: int = 10_000,
    without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT,
) -> pd.DataFrame:
    """Runs side by side with the statistics of ``ragtrack compare``: per system and metric the mean
    and bootstrap 95% CI; against the baseline (default: ``bm25``, else the first run) the difference,
    paired t-test and randomization-test p-values (raw and Holm-corrected per metric) and per-query
    wins/ties/losses. Over the judged queries :func:`evaluate` counts; one row per (system, metric)."""
    from ragtrack.pipeline.analysis.comparison import DEFAULT_METRICS, SystemRun, compare_systems, find_baseline

    if not isinstance(runs, Mapping):
        raise TypeError(f"runs: a dict of runs by system name, e.g. {{'bm25': 'bm25.trec'}}, got {type(runs).__name__}")
    if not runs:
        raise RagtrackError("compare needs at least one run")
    metrics = metric_names(metrics) or list(DEFAULT_METRICS)
    judged = as_qrels(qrels)
    systems = [
        SystemRun(
            name,
            name,
            name,
            name,
            0,
            evaluate(judged, run, metrics, relevance_threshold, seed, without_relevant).per_query,
            label=name,
        )
        for name, run in runs.items()
    ]
    queries = counted_queries(judged, relevance_threshold, without_relevant)
    comparison = compare_systems(systems, metrics, find_baseline(systems, baseline), queries, seed, resamples)
    table = comparison.table.set_index(["system", "metric"])
    table.attrs |= {"baseline": comparison.baseline.label, "queries": len(comparison.queries)}
    return table


@dataclass(frozen=True)
class ExperimentResult:
    """What :func:`run_experiment` returns: the job's ``results.json`` content, its output folder, its
    MLflow parent run id (``None`` with ``tracking=none``) and per_query.csv as a DataFrame (columns
    ``system``, ``qid``, then every metric)."""

    results: dict
    output_dir: Path
    run_id: str | None
    per_query: pd.DataFrame

    @property
    def systems(self) -> dict[str, dict[str, float]]:
        return self.results["systems"]

    @property
    def dataset(self) -> str:
        return self.results["dataset"]["name"]

    @property
    def comparison(self) -> pd.DataFrame:
        """The job's systems side by side (``comparison/comparison.csv``): per system and metric the mean,
        CI, difference to the baseline, paired tests and W/T/L, as ``ragtrack compare`` computes them."""
        from ragtrack.pipeline.records.csv_files import read_csv

        return read_csv(self.output_dir / COMPARISON_DIR / "comparison.csv")

    def _key_table(self) -> pd.DataFrame:
        systems = self.systems
        metrics = [m for m in KEY_METRICS if all(m in values for values in systems.values())] or list(
            next(iter(systems.values()), {})
        )[:3]
        return pd.DataFrame(
            {metric: {system: values[metric] for system, values in systems.items()} for metric in metrics}
        )

    def __repr__(self) -> str:
        table = self._key_table()
        figures = "; ".join(
            f"{system}: " + ", ".join(f"{metric} {value:.4f}" for metric, value in row.items())
            for system, row in table.iterrows()
        )
        run = f", run {self.run_id[:8]}" if self.run_id else ""
        return f"<ExperimentResult {self.dataset}: {figures}{run}; {self.output_dir}>"

    def _repr_html_(self) -> str:
        caption = f"{html.escape(self.dataset)}" + (
            f", MLflow run {html.escape(self.run_id[:8])}" if self.run_id else ""
        )
        return f"<p>{caption}</p>" + self._key_table().to_html(float_format=lambda v: f"{v:.4f}")

    @property
    def summary(self) -> pd.DataFrame:
        """One row per (system, metric): mean, std, ci_low, ci_high (bootstrap 95%) and n (the queries counted)."""
        rows = {
            (system, metric): {**values, "n": self.results["queries_counted"][system][metric]}
            for system, metrics in self.results["aggregates"].items()
            for metric, values in metrics.items()
        }
        table = pd.DataFrame.from_dict(rows, orient="index")
        table.index = pd.MultiIndex.from_tuples(table.index, names=["system", "metric"])
        return table


def benchmark(
    jobs: Sequence[ExperimentResult],
    metrics: Sequence[str] | None = None,
    baseline: str | None = None,
    pooled: bool = False,
    labels: Mapping[str, str] | None = None,
    seed: int = 0,
    resamples: int = 10_000,
):
    """The systems of ``jobs`` (results of :func:`run_experiment`) as ``ragtrack compare`` shows jobs of
    several datasets: each dataset's systems compared apart (paired tests against ``baseline``, Holm
    within the dataset), then the datasets × systems table with the average of the dataset means
    (``pipeline.analysis.benchmark``). ``labels``: row label -> the name to show. Returns a ``Benchmark``:
    ``means(metric)`` and ``marks(metric)`` as DataFrames, ``render("latex"/"markdown"/"table")``,
    ``pooled`` (with ``pooled=True``); it shows itself as a table in a notebook."""
    from ragtrack.pipeline.analysis.benchmark import benchmark as build
    from ragtrack.pipeline.analysis.comparison import DEFAULT_METRICS, SystemRun, compare_systems, find_baseline

    if not jobs or not all(isinstance(job, ExperimentResult) for job in jobs):
        raise TypeError("benchmark: jobs must be a non-empty list of run_experiment results")
    metrics, labels = metric_names(metrics) or list(DEFAULT_METRICS), labels or {}
    groups: dict[str, list] = {}
    for job in jobs:
        for system, frame in job.per_query.groupby("system", sort=False):
            per_query = frame.drop(columns="system").set_index("qid")
            groups.setdefault(job.dataset, []).append(
                SystemRun(
                    system,
                    job.run_id or "",
                    job.dataset,
                    job.run_id or "",
                    0,
                    per_query,
                    label=labels.get(system, job.results.get("aliases", {}).get(system, system)),
                )
            )
    comparisons = {
        dataset: compare_systems(systems, metrics, find_baseline(systems, baseline), None, seed, resamples)
        for dataset, systems in groups.items()
    }
    return build(comparisons, pooled, seed, resamples)


def run_experiment(
    overrides: Sequence[str] | str = (), config_dir: str | Path | None = None, dataset: Any = None
) -> ExperimentResult:
    """One experiment from Python, composed by Hydra's compose API from ``overrides`` exactly as
    ``ragtrack run OVERRIDES`` composes it (``config_dir``: a folder of your own configs, like
    ``--config-dir``). ``dataset``: a dataset of DataFrames, ``dict(corpus=..., queries=..., qrels=...,
    answers=..., name=...)`` (:func:`ragtrack.evaluators.providers.dataset_from_frames` checks them), instead of
    the one the config names. Outputs go to a new folder under ``paths.log_dir/runs`` unless an
    override sets ``paths.output_dir``. Sweeps (``-m``) are the CLI's. The process environment is as it
    was afterwards (MLflow sets variables such as ``MLFLOW_TRACKING_URI`` while the job logs). Calls from
    several threads run one at a time (a job sets process-wide state: the environment, Hydra's, logging);
    each call reads the dataset's files and the MLflow store as they are then."""
    if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
        raise TypeError("run_experiment: overrides must be a list of strings, e.g. ['dataset=toy', 'retriever=[bm25]']")
    if dataset is not None and not isinstance(dataset, Mapping):
        raise TypeError(
            "run_experiment: dataset must be a dict of DataFrames: corpus, queries, qrels (answers and name optional)"
        )
    with ONE_JOB_AT_A_TIME, environment_kept():
        return _run_experiment(list(overrides), config_dir, dataset)


@contextlib.contextmanager
def environment_kept() -> Iterator[None]:
    """The process environment restored on exit: variables set meanwhile removed, changed ones reset."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]
        os.environ.update(before)


def _run_experiment(overrides: list[str], config_dir: str | Path | None, frames: Mapping | None) -> ExperimentResult:
    from omegaconf import open_dict

    from ragtrack.evaluators.providers import FRAME_COLUMNS, dataset_from_frames
    from ragtrack.pipeline.configuration.config import compose
    from ragtrack.pipeline.configuration.settings import absolute_inputs, validate
    from ragtrack.pipeline.execution.experiment import run_experiment as run_job
    from ragtrack.pipeline.execution.job import JobInfo
    from ragtrack.pipeline.redaction import remember_config_secrets

    cfg = compose(overrides, config_dir)
    remember_config_secrets(cfg)  # before any message: a settings error may quote a secret value
    given = None
    if frames is not None:
        unknown = sorted(set(frames) - {*FRAME_COLUMNS, "name"})
        missing = [key for key in ("corpus", "queries", "qrels") if key not in frames]
        if unknown or missing:
            problem = f"has no key {unknown[0]!r}" if unknown else f"lacks {missing[0]!r}"
            raise TypeError(
                f"run_experiment: dataset {problem}; its keys: corpus, queries, qrels, and optionally answers, name"
            )
        given = dataset_from_frames(**frames, check_documents=False)  # the job checks them against what it indexes
        with open_dict(
            cfg
        ):  # the job records where its data came from (the frames cannot be read from a config) and keeps
            slicing = {
                k: cfg.dataset[k] for k in ("slices_file", "slice_metadata") if k in cfg.dataset
            }  # how to slice them
            cfg.dataset = {"type": "frames", "name": given.name, **slicing}
    absolute_inputs(cfg, validate(cfg))  # bad settings fail here: no folder, no MLflow run, no cache entry
    made = None
    if not any(o.split("=", 1)[0].lstrip("+~") == "paths.output_dir" for o in overrides):
        folder = Path(cfg.paths.log_dir) / "runs"
        folder.mkdir(parents=True, exist_ok=True)
        with open_dict(cfg):
            cfg.paths.output_dir = made = tempfile.mkdtemp(prefix=time.strftime("%Y-%m-%d_%H-%M-%S_"), dir=folder)
    try:
        results = run_job(cfg, JobInfo(overrides=overrides), given)
    except BaseException:
        if made:  # a job that stopped before it wrote anything (a data error) leaves no empty folder
            with contextlib.suppress(OSError):
                Path(made).rmdir()
        raise
    return ExperimentResult(
        results, Path(cfg.paths.output_dir), results.pop("mlflow_run_id", None), results.pop("per_query_table")
    )


# --------------------------------------------------------------------------- inputs


def as_run(run: RunLike, name: str | None = None) -> Run:
    """A :class:`Run` from a Run, a ``{qid: {docid: score}}`` dict (or an iterable of its items), a DataFrame
    (qid, docid, score) or a TREC file."""
    if isinstance(run, Run):
        return run
    if isinstance(run, (str, Path)):
        return read_trec(run, name=name)
    if isinstance(run, pd.DataFrame):
        run = _nested(run, "score", "run")
    run = _mapping(run, "run", "score")
    scores: dict[str, dict[str, float]] = {}
    for qid, ranked in run.items():
        _require_ids(qid, ranked, "run")
        if not isinstance(ranked, Mapping):
            raise RagtrackError(f"run: query {qid!r} must map document ids to scores, got {type(ranked).__name__}")
        for doc_id, score in ranked.items():
            if not isinstance(score, numbers.Real) or isinstance(score, bool) or not math.isfinite(score):
                raise RagtrackError(f"run: query {qid!r}, document {doc_id!r}: score {score!r} is not a finite number")
        scores[str(qid)] = {str(doc_id): float(score) for doc_id, score in ranked.items()}
    return Run(name or "run", scores)


def as_qrels(qrels: QrelsLike) -> Qrels:
    """Judgments from a ``{qid: {docid: grade}}`` dict (or an iterable of its items), a DataFrame (qid, docid,
    grade) or a BEIR/TREC qrels file."""
    if isinstance(qrels, (str, Path)):
        return load_qrels(Path(qrels))[0]
    if isinstance(qrels, pd.DataFrame):
        qrels = _nested(qrels, "grade", "qrels")
    qrels = _mapping(qrels, "qrels", "grade")
    judged: Qrels = {}
    for qid, grades in qrels.items():
        _require_ids(qid, grades, "qrels")
        if not isinstance(grades, Mapping):
            raise RagtrackError(f"qrels: query {qid!r} must map document ids to grades, got {type(grades).__name__}")
        for doc_id, grade in grades.items():
            if _missing(grade):
                raise RagtrackError(f"qrels: query {qid!r}, document {doc_id!r}: grade is missing")
            if not isinstance(grade, numbers.Integral) or isinstance(grade, bool):
                raise RagtrackError(f"qrels: query {qid!r}, document {doc_id!r}: grade {grade!r} is not an integer")
        judged[str(qid)] = {str(doc_id): int(grade) for doc_id, grade in grades.items()}
    if not judged:
        raise RagtrackError("qrels: no judgments")
    return judged


def _mapping(value: object, label: str, figure: str) -> Mapping:
    """``value`` as a mapping: as it is, or the dict of an iterable of ``(qid, {docid: figure})`` pairs
    (a generator of them, ``dict.items()``); anything else is a ``TypeError`` naming what is accepted."""
    if isinstance(value, Mapping):
        return value
    try:
        return dict(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"{label}: expected a {{qid: {{docid: {figure}}}}} mapping or an iterable of (qid, {{docid: {figure}}}) pairs, "
            f"a DataFrame (qid, docid, {figure}){', a Run' if label == 'run' else ''} or a file path; "
            f"got {type(value).__name__}"
        ) from None


def _missing(value: object) -> bool:
    """None, NaN (any missing scalar pandas knows) or a blank string."""
    return not value.strip() if isinstance(value, str) else bool(pd.api.types.is_scalar(value) and pd.isna(value))


def _require_ids(qid: object, documents: object, label: str) -> None:
    """A one-line error for a missing query id, or a missing document id of ``documents``."""
    if _missing(qid):
        raise RagtrackError(f"{label}: query id is missing (got {qid!r})")
    blank = [doc for doc in documents if _missing(doc)] if isinstance(documents, Mapping) else []
    if blank:
        raise RagtrackError(f"{label}: query {qid!r}: document id is missing (got {blank[0]!r})")


def _nested(frame: pd.DataFrame, value: str, label: str) -> dict[str, dict[str, Any]]:
    """``{qid: {docid: value}}`` from a DataFrame's ``qid``, ``docid`` and ``value`` columns; the first
    row (by index label) with a missing id or value, or a grade that is not an integer (``1.0`` neither,
    as in a qrels file), fails."""
    absent = [c for c in ("qid", "docid", value) if c not in frame.columns]
    if absent:
        raise RagtrackError(f"{label}: the DataFrame needs columns qid, docid, {value}; missing: {', '.join(absent)}")
    problems = {
        "query id is missing": frame["qid"].map(_missing),
        "document id is missing": frame["docid"].map(_missing),
        f"{value} is missing": frame[value].map(_missing),
    }
    if value == "grade":
        from ragtrack.evaluators.providers import grade_problem

        problems["grade"] = ~problems[f"{value} is missing"] & frame[value].map(grade_problem).notna()
    for problem, bad in problems.items():
        if bad.any():
            row = bad.to_numpy().argmax()
            raise RagtrackError(
                f"{label} row {frame.index[row]}: {grade_problem(frame[value].to_numpy(dtype=object)[row]) if problem == 'grade' else problem}"
            )
    duplicated = frame.duplicated(["qid", "docid"])
    if duplicated.any():
        row = frame[duplicated].iloc[0]
        raise RagtrackError(f"{label}: document {row['docid']!r} appears twice for query {row['qid']!r}")
    nested: dict[str, dict[str, Any]] = {}
    for qid, doc_id, item in zip(frame["qid"], frame["docid"], frame[value]):
        nested.setdefault(str(qid), {})[str(doc_id)] = item.item() if hasattr(item, "item") else item
    return nested
