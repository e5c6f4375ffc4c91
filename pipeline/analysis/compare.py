"""``ragtrack compare``: systems from MLflow side by side, with CIs, paired tests and failure analysis.

Rows are the child runs (one per system and job, tag ``ragtrack.system``) of an experiment, or of one
sweep (parent tag ``ragtrack.sweep``). Rows of the same system with identical per-query scores (bm25
in every job of an RRF sweep; the latency columns ``layout.LATENCY_COLUMNS`` left out), the same
logged configuration and the same qrels (dataset hash) are shown once; the merged rows' run ids select that row as the baseline. A row
is labelled by its system, or by its job's run name where a system appears in several jobs (``hybrid k=30``).

Per metric and row: the mean and percentile-bootstrap 95% CI over the metric's paired queries, those
where every row has a value (``comparison.defined_queries``; ranking metrics: the judged queries, as
trec_eval averages, or those with a relevant judgment where the jobs ran with ``without_relevant: exclude``
(``ranking.counted_queries``); answer and abstention metrics: where they are defined; the numbers the experiment logged
where those queries are each row's own), the difference to the baseline, paired t-test and seeded randomization-test p-values (``evaluators.significance``), both
Holm-corrected across the rows compared with the baseline, and per-query win/tie/loss counts.
The relevant judgments come from the dataset named by the job's logged ``config.yaml`` (its hash must
match); without the dataset a ranking metric counts the queries where it has a value (jobs write it blank
where a query does not count) and failure analysis is skipped.
Jobs whose qrels (dataset hash), relevance threshold, rule for queries without a relevant judgment or
query set (a merged row's queries count for each of its jobs) differ are refused, naming two of them
(run name and short run id) and what differs; ``allow_mixed`` keeps them, labels every row with its
job's threshold and counts the queries counted in every job (so a row's mean may differ from the one its
job logged).

With a reference (``pipeline.analysis.reference``: an original job's folder, results.json or MLflow run, or a
published table of means), each row is also checked against the reference system of its name: the
difference per metric within a tolerance and, with the original's per-query values and runs, the
reproduction measures of ``evaluators.reproduction``. A job reference of other qrels or another
relevance threshold is refused as jobs are, unless ``allow_mixed``.
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from ragtrack.core.data import Dataset
from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import json_text, yaml_text
from ragtrack.core.runs import Run, read_trec
from ragtrack.core.words import counted
from ragtrack.evaluators.ranking import counted_queries
from ragtrack.evaluators.reproduction import RANKING_COLUMNS
from ragtrack.pipeline.analysis.benchmark import Benchmark, benchmark, render_benchmark
from ragtrack.pipeline.analysis.comparison import (
    DEFAULT_METRICS,
    Comparison,
    SystemRun,
    alias_of,
    compare_systems,
    defined_queries,
    find_baseline,
)
from ragtrack.pipeline.analysis.comparison_plots import PLOT_SUFFIXES, plot
from ragtrack.pipeline.analysis.comparison_report import REPORT_FILE, verdicts, write_comparison
from ragtrack.pipeline.analysis.comparison_tables import FORMATS, TEXT_WIDTH, reference_section, render
from ragtrack.pipeline.analysis.reference import TOLERANCE, Reference, check_reference, read_job, read_reference
from ragtrack.pipeline.analysis.tuning import (
    Tuning,
    log_tuning,
    same_setting,
    split_tune,
    swept_rows,
    tune_sweep,
    write_tuning,
)
from ragtrack.pipeline.configuration.inputs import load_dataset, relevance_threshold, without_relevant
from ragtrack.pipeline.records.csv_files import read_csv
from ragtrack.pipeline.records.layout import (
    CONFIG_FILE,
    CURVE_METRICS,
    LATENCY_COLUMNS,
    PER_QUERY_FILE,
    RESULTS_FILE,
    RUN_FILE,
    TAG_BENCHMARK,
    TAG_COMPARED_RUNS,
    TAG_COMPARISON,
    TAG_DATASET,
    TAG_DATASET_HASH,
    TAG_NOTE,
    TAG_OVERRIDES,
    TAG_PARENT,
    TAG_SWEEP,
    TAG_SYSTEM,
    curve_key,
    key_part,
    metric_key,
    reference_key,
    run_page,
)
from ragtrack.pipeline.records.tracking import log_figures, reading_client, run_and_job, ui_base

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- reading MLflow


def _all_runs(client, experiment_id: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id], max_results=5000, page_token=token, order_by=["attribute.start_time ASC"]
        )
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


def select_jobs(runs: list, sweep: str | None, experiment: str = "") -> tuple[dict[str, object], str]:
    """Finished parent runs (jobs) by id, of one sweep if given (``latest``: the newest sweep), and what
    was searched and found (``experiment``: its name, for messages)."""
    jobs = [
        r
        for r in runs
        if r.info.status == "FINISHED" and TAG_PARENT not in r.data.tags and TAG_COMPARISON not in r.data.tags
    ]
    if sweep:
        sweeps = list(dict.fromkeys(r.data.tags[TAG_SWEEP] for r in jobs if TAG_SWEEP in r.data.tags))
        if not sweeps:
            raise RagtrackError(
                f"no sweep in experiment {experiment!r}; run one with `ragtrack run -m ...` or pick another "
                "with --experiment"
            )
        wanted = sweeps[-1] if sweep == "latest" else sweep
        jobs = [r for r in jobs if _sweep_matches(r.data.tags.get(TAG_SWEEP, ""), wanted)]
        if not jobs:
            raise RagtrackError(
                f"no finished runs of sweep {sweep!r} in experiment {experiment!r}; sweeps: "
                + ", ".join(Path(t).name for t in sweeps)
            )
        scope = f"sweep {Path(wanted).name} of experiment {experiment!r}; its sweeps: {', '.join(Path(t).name for t in sweeps)}"
    else:
        scope = f"experiment {experiment!r}"
    return {r.info.run_id: r for r in jobs}, scope


def download_artifact(client, run_id: str, path: str, folder: Path) -> Path:
    try:
        return Path(client.download_artifacts(run_id, path, str(folder)))
    except Exception as exc:  # MLflow raises several types for a missing artifact
        raise RagtrackError(f"run {run_id} has no artifact {path!r} ({type(exc).__name__})") from None


def load_systems(client, jobs: dict, runs: list, folder: Path) -> list[SystemRun]:
    """Every system child run of ``jobs`` with its per-query table, cutoff curves and the settings that
    differ between the jobs, duplicates (timings aside) merged into the first (``SystemRun.merged``)."""
    systems, seen, swept = [], {}, differing_settings(jobs)
    for child in runs:
        job = jobs.get(child.data.tags.get(TAG_PARENT, ""))
        if job is None or TAG_SYSTEM not in child.data.tags or child.info.status != "FINISHED":
            continue
        target = folder / child.info.run_id
        per_query = read_csv(
            download_artifact(client, child.info.run_id, PER_QUERY_FILE, target), dtype={"qid": str}
        ).set_index("qid")
        system = child.data.tags[TAG_SYSTEM]
        scores = per_query.drop(columns=list(LATENCY_COLUMNS.values()), errors="ignore")
        fingerprint = (
            system,
            job.data.tags.get(TAG_DATASET_HASH),
            tuple(sorted(child.data.params.items())),
            int(pd.util.hash_pandas_object(scores).sum()),
        )
        settings = swept.get(job.info.run_id, {})
        if fingerprint in seen:  # shown once: keep only the settings its jobs share
            kept = seen[fingerprint]
            kept.params = {k: v for k, v in kept.params.items() if settings.get(k) == v}
            kept.merged[child.info.run_id] = job.info.run_id
            continue
        curves = {
            key: {m.step: m.value for m in client.get_metric_history(child.info.run_id, key)}
            for key in map(curve_key, CURVE_METRICS)
        }
        systems.append(
            SystemRun(
                system,
                child.info.run_id,
                job.info.run_name or job.info.run_id,
                job.info.run_id,
                child.info.start_time,
                per_query,
                curves={k: v for k, v in curves.items() if v},
                params=settings,
                alias=alias_of(child.data.params),
            )
        )
        seen[fingerprint] = systems[-1]
    if not systems:
        raise RagtrackError("no finished system runs (tag ragtrack.system) found for the selected runs")
    _label(systems)
    return systems


def job_settings(job) -> dict[str, str]:
    """The ``key=value`` overrides a job was run with (tag ``ragtrack.overrides``), keys without ``+``/``~``."""
    pairs = (o.split("=", 1) for o in job.data.tags.get(TAG_OVERRIDES, "").split() if "=" in o)
    return {key.lstrip("+~"): value for key, value in pairs}


def differing_settings(jobs: dict) -> dict[str, dict[str, str]]:
    """Per job id: the overrides whose value is not the same in every job (the swept settings)."""
    settings = {job_id: job_settings(job) for job_id, job in jobs.items()}
    keys = dict.fromkeys(k for values in settings.values() for k in values)
    varying = [k for k in keys if len({values.get(k) for values in settings.values()}) > 1]
    return {job_id: {k: values[k] for k in varying if k in values} for job_id, values in settings.items()}


def short_settings(params: dict[str, str]) -> str:
    """``k=60 k1=0.9``: each setting by the last part of its key, the whole key where that is ambiguous;
    only the settings a reader of a table wants (:func:`readable_settings`)."""
    params = readable_settings(params)
    last = pd.Series([k.rsplit(".", 1)[-1] for k in params], dtype=object)
    return " ".join(
        f"{k if ambiguous else short}={v}"
        for (k, v), short, ambiguous in zip(params.items(), last, last.duplicated(keep=False))
    )


HYDRA_ESCAPE = re.compile(r"\\([\\:=,()\[\]{} '\"])")  # Hydra's override grammar escapes these with a backslash
LABEL_EXCLUDED = ("run_name",)  # the job's run name labels a row by itself when nothing else differs
SECRET_KEY_PART = re.compile(r"(key|token|secret|password|credential)", re.IGNORECASE)


def readable_settings(params: dict[str, str]) -> dict[str, str]:
    """The settings worth a row label: Hydra's escapes removed; lists of config group choices
    (``reranker=[llm]``; a single choice such as ``encoder=minilm`` stays), ``run_name``, endpoints and paths (URLs,
    values with ``/``), secrets (keys naming a key, token or password) and long values (over 24
    characters) left out."""
    kept = {}
    for key, value in params.items():
        value = HYDRA_ESCAPE.sub(r"\1", value)
        if (
            key in LABEL_EXCLUDED
            or SECRET_KEY_PART.search(key.rsplit(".", 1)[-1])
            or "/" in value
            or len(value) > 24
            or value.startswith("[")
        ):
            continue
        kept[key] = value
    return kept


def _label(systems: list[SystemRun]) -> None:
    """The system's name (its ``alias`` where it has one) if the system is unique, else that name and
    the settings that differ between the jobs (``bm25 k1=0.6``), else the job's run name (prefixed by
    the name unless it starts with it)."""
    counts = pd.Series([s.system for s in systems]).value_counts()
    for s in systems:
        name = s.alias or s.system
        if counts[s.system] == 1:
            s.label = name
        elif settings := short_settings({k: v for k, v in s.params.items() if not k.endswith(".alias")}):
            s.label = f"{name} {settings}"
        else:
            s.label = s.job_name if s.job_name.split(" ")[0] == name else f"{name} {s.job_name}"
    labels = pd.Series([s.label for s in systems])
    for s, duplicated in zip(systems, labels.duplicated(keep=False)):
        if duplicated:
            s.label = f"{s.label} ({s.run_id[:8]})"


def load_job_dataset(client, job, folder: Path) -> tuple[Dataset | None, DictConfig]:
    """The dataset of a job from its logged config.yaml, if present with the logged hash; and that config."""
    logged = download_artifact(client, job.info.run_id, CONFIG_FILE, folder / job.info.run_id)
    config = OmegaConf.create(yaml_text(logged, "logged config"))  # a shared store's file: checked for bombs first
    try:
        dataset = load_dataset(config.dataset, check_documents=False)
    except RagtrackError as exc:
        log.warning(
            "dataset of run %s not available (%s): every query counts, no failure analysis", job.info.run_id, exc
        )
        return None, config
    if dataset.hash != job.data.tags.get(TAG_DATASET_HASH):
        log.warning(
            "dataset %s changed since run %s (hash differs): every query counts, no failure analysis",
            dataset.source,
            job.info.run_id,
        )
        return None, config
    return dataset, config


@dataclass(frozen=True)
class JobScope:
    """What a job's scores are relative to: its qrels (dataset hash), relevance threshold, rule for queries
    without a relevant judgment, the queries its systems scored and those that count (the judged ones of its
    dataset that its rule counts, else every scored one)."""

    name: str  # its run name and short run id: 'hybrid k=30' (run 1a2b3c4d)
    dataset_hash: str | None
    threshold: int
    without_relevant: str
    scored: frozenset[str]  # those of its rows, merged ones included
    counted: tuple[str, ...]
    dataset: Dataset | None


def job_scope(client, job, systems: list[SystemRun], folder: Path) -> JobScope:
    dataset, config = load_job_dataset(client, job, folder)
    threshold, rule = relevance_threshold(config), without_relevant(config)
    job_id = job.info.run_id
    scored = tuple(
        dict.fromkeys(
            q for s in systems if job_id == s.job_id or job_id in s.merged.values() for q in s.per_query.index
        )
    )
    counted = scored if dataset is None else tuple(counted_queries(dataset.qrels, threshold, rule))
    return JobScope(
        f"{job.info.run_name or job_id!r} (run {job_id[:8]})",
        job.data.tags.get(TAG_DATASET_HASH),
        threshold,
        rule,
        frozenset(scored),
        counted,
        dataset,
    )


def _shown(value: object) -> object:
    return f"{len(value)} queries" if isinstance(value, frozenset) else str(value)[:12]


def scope_difference(scopes: Sequence[JobScope]) -> str | None:
    """``jobs 'a' (run 1a2b3c4d) and 'b' (run 5e6f7a8b) differ in <what> (<a's> vs <b's>)`` for the first job
    that differs from the first one in qrels, relevance threshold or query set; None when all agree."""
    first = scopes[0]
    for other in scopes[1:]:
        for what, mine, theirs in (
            ("qrels (dataset hash)", first.dataset_hash, other.dataset_hash),
            ("relevance threshold", first.threshold, other.threshold),
            ("without_relevant", first.without_relevant, other.without_relevant),
            ("query set", first.scored, other.scored),
        ):
            if mine != theirs:
                return f"jobs {first.name} and {other.name} differ in {what} ({_shown(mine)} vs {_shown(theirs)})"
    return None


def load_logged_reference(client, run_id: str, folder: Path) -> Reference:
    """The reference of an MLflow run id: its job's results.json, per_query.csv and config.yaml, its system
    runs' run.trec (downloaded when read); a system run gives only its system."""
    run, job = run_and_job(
        client, run_id, f"reference {run_id!r}: no such file or folder, and no such run in the tracking store"
    )
    target = folder / "reference"
    results = download_artifact(client, job.info.run_id, RESULTS_FILE, target)
    for optional in (PER_QUERY_FILE, CONFIG_FILE):
        try:
            download_artifact(client, job.info.run_id, optional, target)
        except RagtrackError:
            log.warning("reference run %s has no %s", job.info.run_id, optional)
    children = client.search_runs([job.info.experiment_id], f"tags.`{TAG_PARENT}` = '{job.info.run_id}'")
    runs = {
        c.data.tags[TAG_SYSTEM]: partial(_download_run, client, c.info.run_id, folder)
        for c in children
        if TAG_SYSTEM in c.data.tags
    }
    reference = read_job(results, run_id, runs)
    system = run.data.tags.get(TAG_SYSTEM) if job is not run else None
    return reference.only(system) if system in reference.values else reference


def _download_run(client, run_id: str, folder: Path) -> Run:
    return read_trec(download_artifact(client, run_id, RUN_FILE, folder / run_id))


def reference_scope_difference(reference: Reference, scope: JobScope) -> str | None:
    """``reference X and job 'a' differ in <what> (<its> vs <the job's>)`` for a job reference of other
    qrels or another relevance threshold; None when they agree or the reference does not say."""
    for what, theirs, mine in (
        ("qrels (dataset hash)", reference.dataset_hash, scope.dataset_hash),
        ("relevance threshold", reference.threshold, scope.threshold),
    ):
        if theirs is not None and mine is not None and theirs != mine:
            return f"reference {reference.source} and job {scope.name} differ in {what} ({_shown(theirs)} vs {_shown(mine)})"
    return None


# --------------------------------------------------------------------------- tuning on another split


def split_jobs(jobs: dict, tune_on: str) -> tuple[dict, dict, tuple[str, str]]:
    """``--tune-on SPLIT``: the jobs to choose on, those where a setting that differs between the jobs
    has the value SPLIT (``KEY=VALUE`` or ``VALUE``: ``train`` for ``dataset.split=train``), the jobs to
    report on (the others, which must share one value of that setting), and both splits as words
    (``dataset.split=train``, ``dataset.split=test``)."""
    settings = differing_settings(jobs)
    wanted, _, value = tune_on.rpartition("=")
    keys = sorted(
        {key for values in settings.values() for key, given in values.items() if given == value and wanted in ("", key)}
    )
    if len(keys) != 1:
        varying = dict.fromkeys(key for values in settings.values() for key in values)
        shown = (
            "; ".join(
                f"{key}: {', '.join(dict.fromkeys(v[key] for v in settings.values() if key in v))}" for key in varying
            )
            or "none"
        )
        problem = (
            "no setting that differs between the jobs has this value"
            if not keys
            else "several settings that differ between the jobs have this value: give KEY=VALUE"
        )
        raise RagtrackError(f"--tune-on {tune_on}: {problem}; the settings that differ: {shown}")
    key = keys[0]
    tuning = {job_id: job for job_id, job in jobs.items() if settings[job_id].get(key) == value}
    reported = {job_id: job for job_id, job in jobs.items() if job_id not in tuning}
    others = {settings[job_id].get(key, "its default") for job_id in reported}
    if len(others) != 1:
        raise RagtrackError(
            f"--tune-on {tune_on}: the other jobs have {len(others)} values of {key} ({', '.join(sorted(others))}); "
            "report on one: pick its jobs and the tuning jobs with --run"
        )
    return tuning, reported, (f"{key}={value}", f"{key}={others.pop()}")


def split_keys(settings: dict, tuning_jobs: dict, reported_jobs: dict) -> set[str]:
    """The settings that make the split: one value on every tuning job and another on every reported
    job (``dataset.split``; a TREC topics file and its qrels file, ``dataset.topics`` and ``dataset.qrels``)."""

    def values(jobs: dict, key: str) -> set[str]:
        return {str(settings[job_id].get(key)) for job_id in jobs}

    keys = {key for values_ in settings.values() for key in values_}
    return {
        key
        for key in keys
        if len(tuned := values(tuning_jobs, key)) == 1
        and len(reported := values(reported_jobs, key)) == 1
        and tuned != reported
    }


def tune_on_split(
    client,
    tuning_jobs: dict,
    reported_jobs: dict,
    splits: tuple[str, str],
    runs: list,
    folder: Path,
    comparison: Comparison,
    seed: int,
    resamples: int,
    default_of: Callable[[str], object] | None,
) -> Tuning:
    """``--tune-on``: the swept setting chosen on the rows of ``tuning_jobs`` over their judged queries,
    reported by the comparison's row of the same settings (``pipeline.analysis.tuning.split_tune``). Rows meet
    across the splits by the settings that differ between the jobs, the split's aside (:func:`split_keys`); a setting a job
    does not override has its default (``default_of``, else the config the reported jobs compose to)."""
    metric, rows = comparison.metrics[0], swept_rows(comparison.systems, comparison.baseline, "--tune-on")
    systems = load_systems(client, tuning_jobs, runs, folder)
    scopes = [job_scope(client, job, systems, folder) for job in tuning_jobs.values()]
    if difference := scope_difference(scopes):
        raise RagtrackError(f"on {splits[0]}, {difference}")
    candidates = [s for s in systems if s.system == comparison.baseline.system]
    if any(metric not in s.per_query for s in candidates):
        raise RagtrackError(f"{metric!r} is not a logged metric of {comparison.baseline.system} on {splits[0]}")
    shared = set.intersection(*(set(scope.counted) for scope in scopes))
    queries = defined_queries(
        candidates,
        metric,
        [q for q in scopes[0].counted if q in shared and all(q in s.per_query.index for s in candidates)],
    )
    settings = differing_settings({**tuning_jobs, **reported_jobs})
    keys = {key for values in settings.values() for key in values} - split_keys(settings, tuning_jobs, reported_jobs)
    every = [job_id for s in (*candidates, *rows) for job_id in (s.job_id, *s.merged.values())]
    fallback = (
        default_of or composed_default(reported_jobs, keys)
        if any(k not in settings[j] for j in every for k in keys)
        else None
    )

    def setting(job_id: str, key: str) -> object:
        return settings[job_id][key] if key in settings[job_id] else fallback(key) if fallback else None

    def counterpart(candidate: SystemRun) -> SystemRun | None:
        return next(
            (
                row
                for row in rows
                if any(
                    all(same_setting(setting(candidate.job_id, k), setting(job_id, k)) for k in keys)
                    for job_id in (row.job_id, *row.merged.values())
                )
            ),
            None,
        )

    return split_tune(
        candidates,
        queries,
        rows,
        comparison.baseline,
        metric,
        comparison.paired.get(metric, comparison.queries),
        counterpart,
        splits,
        seed,
        resamples,
    )


# --------------------------------------------------------------------------- the command


def run_compare(
    tracking_uri: str,
    experiment: str | Sequence[str] | None = None,
    sweep: str | None = None,
    metrics: Sequence[str] | None = None,
    baseline: str | None = None,
    fmt: str = "table",
    plot_file: str | None = None,
    seed: int = 0,
    resamples: int = 10_000,
    failures: int = 10,
    log_to_mlflow: bool = True,
    width: int | None = TEXT_WIDTH,
    allow_mixed: bool = False,
    reference: str | None = None,
    reference_map: Sequence[str] = (),
    tolerance: float = TOLERANCE,
    runs: Sequence[str] = (),
    labels: Sequence[str] = (),
    pooled: bool = False,
    default_of: Callable[[str], object] | None = None,
    folds: int | None = None,
    tune_on: str | None = None,
) -> tuple[Comparison | Benchmark, str]:
    """Load, compare, render; write the plot; log everything as a comparison run. Returns (comparison, text).
    ``experiment``: one name or several (their jobs together); ``runs``: jobs picked by run id (a job's
    or one of its system runs') instead. Jobs of several datasets are a benchmark (``pipeline.analysis.benchmark``):
    each dataset's jobs compared apart, then the datasets × systems table. Within a dataset, jobs of
    different qrels, thresholds or query sets fail unless ``allow_mixed`` (module docstring).
    ``reference``: a path, ``beir`` (the shipped published figures) or an MLflow run id the rows are
    checked against (``pipeline.analysis.reference``; a table with a dataset column is matched by dataset), its
    systems paired by name or by ``reference_map`` (``ROW=REFERENCE``), differences within ``tolerance``.
    ``labels``: ``ROW=NAME`` renames a row (label or system name); ``pooled``: a benchmark's pooled tests.
    Without ``baseline``, a sweep's rows are judged against its default row (``default_of``: a setting's
    default value, else the config the jobs' shared overrides compose to; :func:`compare_jobs`). ``folds``:
    the swept setting tuned by k-fold cross-validation on the first metric, against the baseline;
    ``tune_on``: chosen on the jobs of that split (:func:`split_jobs`), reported on the others
    (``pipeline.analysis.tuning``: printed, ``tuning.json``, a report section, the tuning run with a child per fold)."""
    check_arguments(fmt, plot_file, reference, reference_map, tolerance)
    renames = label_pairs(labels)
    original = (
        read_reference(reference) if reference else None
    )  # a file or folder: a bad one fails before MLflow is read
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    client = reading_client(tracking_uri)
    names = [experiment] if isinstance(experiment, str) else list(experiment or [])
    found, every_run = experiments_and_runs(client, names, bool(sweep or runs))
    jobs, scope, found, shown_names = find_jobs(client, every_run, found, bool(names), sweep, runs)
    reported_jobs, tuning_jobs, splits = jobs, {}, ("", "")
    if tune_on:
        tuning_jobs, reported_jobs, splits = split_jobs(jobs, tune_on)
    groups = by_dataset(reported_jobs)
    experiment_id = (
        found[0].experiment_id if found else next(iter(jobs.values())).info.experiment_id
    )  # where a comparison run is logged
    with tempfile.TemporaryDirectory(prefix="ragtrack-compare-") as scratch:
        folder = Path(scratch)
        if reference:  # an MLflow run id, found before the rows are read (its runs are downloaded when measured)
            original = original or load_logged_reference(client, reference, folder)
        compared = {}
        for dataset, group in groups.items():
            compared[dataset] = compare_jobs(
                client, group, every_run, folder, metrics, baseline, seed, resamples, allow_mixed, renames, default_of
            )
            if reference:
                check_against(compared[dataset], original.for_dataset(dataset), reference_map, tolerance, allow_mixed)
        if (folds is not None or tune_on) and (len(compared) > 1 or pooled):
            raise RagtrackError(
                f"{'--folds' if folds is not None else '--tune-on'} tunes a sweep on one dataset: compare one dataset's jobs "
                "(--experiment, --sweep)"
            )
        if len(compared) > 1 or pooled:
            result = benchmark({dataset: c.comparison for dataset, c in compared.items()}, pooled, seed, resamples)
            result.scope = scope
            text = render_benchmark(result, fmt) + (
                "".join(reference_section(c.comparison, fmt, width) for c in compared.values())
                if fmt in ("table", "markdown", "latex")
                else ""
            )
            write_benchmark(result, folder / "comparison")
            if log_to_mlflow:
                _log_benchmark(client, experiment_id, result, jobs, folder / "comparison", tracking_uri)
            return result, text
        only = next(iter(compared.values()))
        comparison = only.comparison
        comparison.scope = scope
        text = render(comparison, fmt, width)
        outputs = folder / "comparison"
        tuning = (
            tune_sweep(comparison, folds, seed, resamples)
            if folds is not None
            else tune_on_split(
                client,
                tuning_jobs,
                reported_jobs,
                splits,
                every_run,
                folder / "tuning",
                comparison,
                seed,
                resamples,
                default_of,
            )
            if tune_on
            else None
        )
        text = with_tuning(text, fmt, tuning, outputs) if tuning else text
        trec = (
            {s.run_id: only.row_run(s) for s in comparison.systems}
            if only.dataset is not None and failures > 0
            else None
        )
        experiment_name = found[0].name if len(found) == 1 else shown_names
        title = f"{experiment_name}: {counted(len(comparison.systems), 'system')} vs {comparison.baseline.label}"
        write_comparison(
            comparison,
            outputs,
            title,
            only.dataset,
            trec,
            failures,
            sections=[("tuning", "Tuned without the reported queries", tuning.html())] if tuning else (),
        )
        if plot_file:  # the format of its suffix; plot() makes a missing folder
            plot(comparison, Path(plot_file), title)
        if log_to_mlflow:
            _log_and_link(
                client, experiment_id, comparison, reported_jobs, sweep, outputs, tuning, ui_base(tracking_uri)
            )
    return comparison, text


def find_jobs(
    client, every_run: list, found: list, named: bool, sweep: str | None, runs: Sequence[str]
) -> tuple[dict, str, list, str]:
    """The jobs to compare: picked by run id (``runs``), else of the sweep or of the ``found``
    experiments (``named``: by the user); what was searched (for messages); the experiments that hold
    them; their names."""
    shown_names = ", ".join(e.name for e in found) if named or not (sweep or runs) else "every experiment"
    if runs:
        jobs, scope = jobs_by_id(client, runs), f"the jobs of runs {', '.join(r[:8] for r in runs)}"
    else:
        jobs, scope = select_jobs(every_run, sweep, shown_names)
        if (
            sweep and not named
        ):  # found in every experiment: the scope names the experiments that hold it, and their sweeps
            holding = {job.info.experiment_id for job in jobs.values()}
            found = [e for e in found if e.experiment_id in holding]
            shown_names = ", ".join(e.name for e in found)
            jobs, scope = select_jobs([r for r in every_run if r.info.experiment_id in holding], sweep, shown_names)
    if not jobs:
        raise RagtrackError(f"experiment {shown_names} has no finished runs")
    return jobs, scope, found, shown_names


def with_tuning(text: str, fmt: str, tuning: Tuning, outputs: Path) -> str:
    """The comparison's ``text`` with the tuning (json: a ``tuning`` key; table, markdown, latex: its
    section; csv: nothing), the tuning written into ``outputs`` (``tuning.json``)."""
    write_tuning(tuning, outputs)
    if fmt == "json":
        return json_text({**json.loads(text), "tuning": tuning.summary()}, indent=2)
    return text + ("\n" + tuning.text() if fmt in ("table", "markdown", "latex") else "")


def _log_and_link(
    client,
    experiment_id: str,
    comparison: Comparison,
    jobs: dict,
    sweep: str | None,
    outputs: Path,
    tuning: Tuning | None,
    base: str,
) -> None:
    """The comparison logged as its run (with a ``tuning``: the tuning run, a child per fold,
    ``pipeline.analysis.tuning.log_tuning``), its run id and the UI links (``base``: the UI's address) kept on
    the comparison for the terminal."""
    name = f"tuning {comparison.baseline.system} ({tuning.protocol}) vs {comparison.baseline.label}" if tuning else None
    run_id, name = _log_comparison(client, experiment_id, comparison, jobs, sweep, outputs, name)
    if tuning:
        log_tuning(client, experiment_id, run_id, tuning)
    comparison.logged = f"{run_id} ({name})"
    comparison.links = {
        "Run page": f"{base}/{run_page(experiment_id, run_id)}",
        "report.html": f"{base}/{run_page(experiment_id, run_id, REPORT_FILE)}",
    }


def check_arguments(
    fmt: str, plot_file: str | None, reference: str | None, reference_map: Sequence[str], tolerance: float
) -> None:
    """:func:`run_compare`'s arguments that need nothing read: each mistake one line, before MLflow is asked."""
    if fmt not in FORMATS:
        raise RagtrackError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if plot_file and Path(plot_file).suffix.lower() not in PLOT_SUFFIXES:
        raise RagtrackError(f"--plot {plot_file}: name a {', '.join(PLOT_SUFFIXES)} file (the suffix picks the format)")
    if reference_map and not reference:
        raise RagtrackError(
            "--reference-map pairs rows with a reference's systems: give the reference with --reference RUN_OR_TABLE"
        )
    if reference and not tolerance >= 0:
        raise RagtrackError(f"--tolerance {tolerance}: give a difference >= 0 (Pyserini's: {TOLERANCE})")


def label_pairs(labels: Sequence[str]) -> dict[str, str]:
    """``ROW=NAME`` pairs (``--label``) as a mapping; a pair without ``=`` or with an empty side is refused."""
    pairs = {}
    for pair in labels:
        row, _, name = pair.partition("=")
        if not row.strip() or not name.strip():
            raise RagtrackError(
                f"--label {pair!r}: give ROW=NAME, ROW a row's label or system name, e.g. --label 'bm25_multifield=BM25 (multifield)'"
            )
        pairs[row.strip()] = name.strip()
    return pairs


def experiments_and_runs(client, names: Sequence[str], everywhere: bool) -> tuple[list, list]:
    """The named experiments (default: the most recent one, or every experiment when ``everywhere``:
    a sweep or run ids may span several) and all their runs, oldest first."""
    if names:
        found = [find_experiment(client, name) for name in dict.fromkeys(names)]
    elif everywhere:
        found = list(client.search_experiments())
    else:
        found = [find_experiment(client, None)]
    runs = [run for e in found for run in _all_runs(client, e.experiment_id)]
    return found, sorted(runs, key=lambda r: r.info.start_time)


def jobs_by_id(client, run_ids: Sequence[str]) -> dict[str, object]:
    """The jobs of ``run_ids`` (each a job's run id or one of its system runs'), in the order given."""
    jobs = {}
    for run_id in run_ids:
        _, job = run_and_job(client, run_id, f"--run {run_id}: no such run in the tracking store")
        if job.info.status != "FINISHED":
            raise RagtrackError(
                f"--run {run_id}: its job {job.info.run_name or job.info.run_id!r} is {job.info.status}, not FINISHED"
            )
        jobs[job.info.run_id] = job
    return jobs


def by_dataset(jobs: dict) -> dict[str, dict]:
    """The jobs grouped by their dataset's name (tag ``ragtrack.dataset``), in order of first appearance.
    Jobs of one name whose qrels differ (another dataset hash) stay one group, compared as
    ``allow_mixed`` says."""
    groups: dict[str, dict] = {}
    for job_id, job in jobs.items():
        groups.setdefault(job.data.tags.get(TAG_DATASET, "dataset"), {})[job_id] = job
    return groups


@dataclass
class Compared:
    """One dataset's comparison, its dataset (when the logged config finds it) and the rows' runs."""

    comparison: Comparison
    dataset: Dataset | None
    scopes: dict
    row_run: Callable[[SystemRun], Run]


def composed_default(jobs: dict, swept: set[str]) -> Callable[[str], object] | None:
    """A setting's default in a sweep: its value in the config its jobs' shared overrides compose to
    (the jobs' common command line, without the ``swept`` keys); None where that config does not
    compose here (e.g. a job run with configs of its own, ``--config-dir``)."""
    from ragtrack.pipeline.configuration.config import compose

    tags = next(iter(jobs.values())).data.tags.get(TAG_OVERRIDES, "").split()
    try:
        config = compose(
            [o for o in tags if o.split("=", 1)[0].lstrip("+~") not in swept and o.split("=", 1)[0] != "hydra.run.dir"]
        )
    except RagtrackError:
        return None
    return lambda key: OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False)


def default_row(systems: list[SystemRun], default_of: Callable[[str], object] | None) -> SystemRun | None:
    """The sweep's default: of the system whose rows differ between jobs (the first such), the row whose
    swept settings all equal their defaults (``default_of(key)``); None without such a row."""
    if default_of is None:
        return None
    counts = pd.Series([s.system for s in systems]).value_counts()
    swept = [s for s in systems if counts[s.system] > 1 and s.params]
    return next(
        (
            s
            for s in swept
            if s.system == swept[0].system
            and all(
                (default := default_of(key)) is not None and same_setting(value, default)
                for key, value in s.params.items()
            )
        ),
        None,
    )


def compare_jobs(
    client,
    jobs: dict,
    runs: list,
    folder: Path,
    metrics: Sequence[str] | None,
    baseline: str | None,
    seed: int,
    resamples: int,
    allow_mixed: bool,
    renames: dict[str, str],
    default_of: Callable[[str], object] | None = None,
) -> Compared:
    """The systems of ``jobs`` (one dataset) compared (module docstring). Without a ``baseline`` a sweep's
    rows are judged against its default (:func:`default_row`, labelled ``(default)``; ``default_of``:
    a setting's default, else :func:`composed_default`)."""
    systems = load_systems(client, jobs, runs, folder)
    swept = {key for s in systems for key in s.params}  # the settings that differ between the jobs: none, no sweep
    default = default_row(systems, default_of or composed_default(jobs, swept)) if baseline is None and swept else None
    if default is not None:
        default.label = f"{default.label} (default)"
    relabel(systems, renames)
    shown = {s.job_id for s in systems} | {job_id for s in systems for job_id in s.merged.values()}
    scopes = {job_id: job_scope(client, job, systems, folder) for job_id, job in jobs.items() if job_id in shown}
    difference = scope_difference(list(scopes.values()))
    if difference and not allow_mixed:
        raise RagtrackError(
            f"{difference}; compare them apart (--sweep, --experiment), choose on one and report on the other (--tune-on), "
            "or pass --allow-mixed to keep them, each row labelled with its threshold"
        )
    if difference:
        for s in systems:
            s.label = f"{s.label} [threshold {scopes[s.job_id].threshold}]"
    dataset = next(iter(scopes.values())).dataset
    shared = set.intersection(*(set(scope.counted) for scope in scopes.values()))
    judged = (
        [q for q in next(iter(scopes.values())).counted if q in shared] if dataset is not None or difference else None
    )
    comparison = compare_systems(
        systems,
        list(metrics or DEFAULT_METRICS),
        default or find_baseline(systems, baseline),
        None,
        seed,
        resamples,
        judged=judged,
    )
    downloaded: dict[str, Run] = {}

    def row_run(s: SystemRun) -> Run:
        if s.run_id not in downloaded:
            downloaded[s.run_id] = _download_run(client, s.run_id, folder)
        return downloaded[s.run_id]

    return Compared(comparison, dataset, scopes, row_run)


def relabel(systems: list[SystemRun], renames: dict[str, str]) -> None:
    """``--label ROW=NAME``: each pair renames the row of that label, else the one row of that system."""
    for row, name in renames.items():
        matches = [s for s in systems if s.label == row] or [s for s in systems if s.system == row]
        if len(matches) == 1:
            matches[0].label = name
        elif len(matches) > 1:
            raise RagtrackError(
                f"--label {row}={name}: {row!r} names {len(matches)} rows ({', '.join(s.label for s in matches)}); name one by its label"
            )


def check_against(
    compared: Compared, original: Reference, reference_map: Sequence[str], tolerance: float, allow_mixed: bool
) -> None:
    """``--reference``: the comparison's rows against ``original`` (``comparison.reference``, its table annotated)."""
    comparison = compared.comparison
    differs = reference_scope_difference(original, next(iter(compared.scopes.values())))
    if differs and not allow_mixed:
        raise RagtrackError(f"{differs}; pass --allow-mixed to check against it anyway")
    comparison.reference = check_reference(comparison, original, reference_map, tolerance, compared.row_run)
    if differs:
        comparison.reference.notes.insert(0, differs)
    comparison.table = comparison.reference.annotate(comparison.table)


def write_benchmark(result: Benchmark, folder: Path) -> None:
    """``benchmark.{md,tex,txt,csv,json}``, ``report.html`` (the tables, linking each dataset's report)
    and each dataset's comparison (``<dataset>/comparison.md``, its ``report.html``) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, kind in (
        ("benchmark.md", "markdown"),
        ("benchmark.tex", "latex"),
        ("benchmark.txt", "table"),
        ("benchmark.csv", "csv"),
        ("benchmark.json", "json"),
    ):
        (folder / name).write_text(render_benchmark(result, kind), encoding="utf-8")
    links = []
    for dataset, comparison in result.comparisons.items():
        write_comparison(
            comparison,
            folder / key_part(dataset),
            f"{dataset}: {counted(len(comparison.systems), 'system')} vs {comparison.baseline.label}",
        )
        links.append(f'<li><a href="{key_part(dataset)}/{REPORT_FILE}">{html.escape(dataset)}</a></li>')
    title = html.escape(
        f"benchmark: {counted(len(result.comparisons), 'dataset')} × {counted(len(result.rows), 'system')} vs {result.baseline}"
    )
    (folder / REPORT_FILE).write_text(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title}</title></head><body><h1>{title}</h1>'
        f"{result._repr_html_()}<h2>Each dataset's comparison</h2><ul>{''.join(links)}</ul></body></html>\n",
        encoding="utf-8",
    )


def _log_benchmark(client, experiment_id: str, result: Benchmark, jobs: dict, outputs: Path, tracking_uri: str) -> None:
    """A run ``benchmark: N datasets × M systems`` holding the tables and each dataset's comparison, each
    cell as ``<row>/<dataset>/<metric>`` and the averages as ``<row>/average/<metric>``, and a
    description showing the Markdown table."""
    name = f"benchmark: {counted(len(result.comparisons), 'dataset')} × {counted(len(result.rows), 'system')}"
    run = client.create_run(
        experiment_id,
        run_name=name,
        tags={TAG_COMPARISON: "true", TAG_BENCHMARK: "true", TAG_COMPARED_RUNS: ",".join(jobs)[:5000]},
    )
    client.log_param(run.info.run_id, "baseline", result.baseline)
    client.log_param(run.info.run_id, "metrics", ",".join(result.metrics))
    client.log_param(run.info.run_id, "datasets", ",".join(result.comparisons)[:500])
    log_figures(
        client,
        run.info.run_id,
        {
            f"{key_part(row)}/{key_part(dataset)}/{metric_key(metric)}": value
            for metric in result.metrics
            for row, values in result.means(metric).iterrows()
            for dataset, value in values.items()
        },
    )
    client.log_artifacts(run.info.run_id, str(outputs))
    client.set_tag(run.info.run_id, TAG_NOTE, render_benchmark(result, "markdown"))
    client.set_terminated(run.info.run_id, "FINISHED")
    result.logged = f"{run.info.run_id} ({name})"
    base = ui_base(tracking_uri)
    result.links = {
        "Run page": f"{base}/{run_page(experiment_id, run.info.run_id)}",
        "report.html": f"{base}/{run_page(experiment_id, run.info.run_id, REPORT_FILE)}",
    }


def _log_comparison(
    client,
    experiment_id: str,
    comparison: Comparison,
    jobs: dict,
    sweep: str | None,
    outputs: Path,
    name: str | None = None,
) -> tuple[str, str]:
    """A run named ``name`` (default ``comparison vs <baseline>``, and the sweep) holding the tables, the plot and the failure analyses, each row's
    mean as ``<row label>/<metric>`` and a description (verdicts, the table, the report's link): its id
    and name."""
    sweeps = {job.data.tags.get(TAG_SWEEP) for job in jobs.values()} - {None}
    tags = {TAG_COMPARISON: "true", TAG_COMPARED_RUNS: ",".join(s.run_id for s in comparison.systems)[:5000]}
    if sweep and len(sweeps) == 1:
        tags[TAG_SWEEP] = sweeps.pop()
    name = (name or f"comparison vs {comparison.baseline.label}") + (
        f" ({Path(tags[TAG_SWEEP]).name})" if TAG_SWEEP in tags else ""
    )
    run = client.create_run(experiment_id, run_name=name, tags=tags)
    client.log_param(run.info.run_id, "baseline", comparison.baseline.label)
    client.log_param(run.info.run_id, "metrics", ",".join(comparison.metrics))
    client.log_param(run.info.run_id, "queries", len(comparison.queries))
    for _, row in comparison.table.iterrows():  # each row's mean, named by its label: ``hybrid_k_30/ndcg_at_10``
        client.log_metric(run.info.run_id, f"{key_part(row['system'])}/{metric_key(row['metric'])}", float(row["mean"]))
    if comparison.reference is not None:
        _log_reference(client, run.info.run_id, comparison.reference)
    client.log_artifacts(run.info.run_id, str(outputs))
    link = run_page(experiment_id, run.info.run_id, REPORT_FILE)
    client.set_tag(
        run.info.run_id,
        TAG_NOTE,
        "\n".join(f"- {v}." for v in verdicts(comparison))
        + "\n\n"
        + render(comparison, "markdown")
        + f"\nThe full comparison: [report.html]({link}).",
    )
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id, name


def _log_reference(client, run_id: str, check) -> None:
    """The reference (params ``reference``, ``reference_tolerance``) and each row's figures against it,
    :func:`layout.reference_key` under the row's label: ``bm25/ndcg_at_10/reference/difference``."""
    client.log_param(run_id, "reference", check.source[:500])
    client.log_param(run_id, "reference_tolerance", check.tolerance)
    figures = {}
    for _, row in check.differences.iterrows():
        for measure in ("difference", "within_tolerance"):
            figures[f"{key_part(row['system'])}/{reference_key(measure, row['metric'])}"] = float(row[measure])
    for _, row in check.measures.iterrows():
        for measure in ("rmse", "effect_ratio", "delta_ri"):
            figures[f"{key_part(row['system'])}/{reference_key(measure, row['metric'])}"] = float(row[measure])
    for _, row in check.rankings.iterrows():
        for measure in RANKING_COLUMNS[1:]:
            figures[f"{key_part(row['system'])}/{reference_key(measure)}"] = float(row[measure])
    log_figures(client, run_id, figures)
