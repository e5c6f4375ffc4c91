"""The MLflow layout of ragtrack: every tag name, metric-key rule, artifact path and the default store.

The writer (``tracking``, ``experiment``) and the readers (``compare``, ``reproduce``, the CLI) take
names from here only, so they cannot drift apart. docs/mlflow.md describes the same layout for users.

One parent run per Hydra job, one child run per system (tag ``mlflow.parentRunId``):

- parent: tags :data:`TAG_DATASET`, :data:`TAG_DATASET_HASH`, :data:`TAG_VERSION`, :data:`TAG_GIT_COMMIT`
  (inside a git checkout only), :data:`TAG_OVERRIDES`, ``hydra.choice.<group>``, :data:`TAG_SWEEP` in a
  sweep; params: the shared config; metrics ``<system>/<metric_key>``; artifacts :data:`JOB_ARTIFACTS`
  and Hydra's ``.hydra/`` folder;
- parent description (:data:`TAG_NOTE`): systems x key metrics (mean, 95% CI, Δ and p, report link);
- child: run name :func:`child_run_name`, tag :data:`TAG_SYSTEM`; params: its config; metrics ``<metric_key>`` plus ``_std``,
  ``_ci_low``, ``_ci_high`` and efficiency figures, identical keys across systems; step metrics
  :func:`curve_key` (step = cutoff k); artifacts :data:`RUN_FILE` and :data:`PER_QUERY_FILE`;
- derived keys, all built from a metric key and suffixed like it (:data:`SUMMARY_SUFFIXES`): per slice
  :func:`slice_key` (``ndcg_at_10/slice/question_type/who``), per query perturbation :func:`drop_key`
  (``ndcg_at_10/drop/typos_10``), latency quantiles :func:`latency_key` (``latency/retrieval_p95_ms``),
  LLM tokens and cost :func:`usage_key` (``llm/generator/prompt_tokens``, a robustness rerun's
  ``llm/robustness/typos_10/generator/prompt_tokens``);
  the child run logs them as they are, the parent run with the ``<system>/`` prefix
  (:func:`system_metric_key`);
- a ``ragtrack compare`` run: tag :data:`TAG_COMPARISON`; each row's mean as ``<row>/<metric_key>``, and
  with ``--reference`` its figures against the reference :func:`reference_key` (``<row>/ndcg_at_10/reference/rmse``).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

TAG_PARENT = "mlflow.parentRunId"  # MLflow's own: the UI nests child runs under it
TAG_SYSTEM = "ragtrack.system"
TAG_SWEEP = "ragtrack.sweep"
TAG_COMPARISON = "ragtrack.comparison"
TAG_COMPARED_RUNS = "ragtrack.compared_runs"
TAG_BENCHMARK = "ragtrack.benchmark"  # a comparison run of several datasets (pipeline.analysis.benchmark)
TAG_DATASET = "ragtrack.dataset"
TAG_DATASET_HASH = "ragtrack.dataset_hash"
TAG_VERSION = "ragtrack.version"
TAG_GIT_COMMIT = "ragtrack.git_commit"
TAG_OVERRIDES = "ragtrack.overrides"
TAG_PROCESS = "ragtrack.process"  # host:pid:start of the job, to mark runs of killed jobs KILLED
TAG_ERROR = "ragtrack.error"
HYDRA_CHOICE_PREFIX = "hydra.choice."
TAG_NOTE = "mlflow.note.content"  # MLflow's own: the markdown description on a run's or experiment's page
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"  # MLflow 3's UI opens an experiment by its kind: this one's runs table
EXPERIMENT_KIND = "custom_model_development"
KEY_METRICS = ("ndcg@10", "recall@100", "mrr")  # the default of tracking.key_metrics

RUN_FILE = "run.trec"
PER_QUERY_FILE = "per_query.csv"
PER_QUERY_WIDE_FILE = "per_query_wide.csv"  # a job's compared queries: each system's key metrics and Δ to the baseline
CONFIG_FILE = "config.yaml"
RESULTS_FILE = "results.json"
COMPARISON_FILE = "comparison.csv"
TAG_VIEW_PREFIX = "mlflow.sharedViewState."  # MLflow UI's own: an experiment tag holding a shared runs-table view
QUERIES_TABLE = "queries.json"  # a system run's and (every system side by side) a job's per-query table (MlflowClient.log_table): query, top documents, answer, metrics
COMPARISON_DIR = "comparison"  # the job's systems side by side: comparison.md/.png, failures/, report.html (pipeline.analysis.comparison)
JOB_ARTIFACTS = (RESULTS_FILE, COMPARISON_FILE, CONFIG_FILE, PER_QUERY_FILE, COMPARISON_DIR)

STORE_FOLDER = "mlruns"  # under the root folder (the working folder or $RAGTRACK_ROOT)
STORE_FILE = "mlflow.db"
CURVE_METRICS = ("recall", "ndcg")
LATENCY_COLUMNS = {
    "retrieval": "retrieval_ms",
    "generation": "generation_ms",
}  # per_query.csv's wall-clock columns per stage (time per query, docs/performance.md): they differ run to run


def metric_key(name: str) -> str:
    """MLflow-legal metric key: ``ndcg@10`` -> ``ndcg_at_10`` (``@`` is not allowed in keys)."""
    return name.replace("@", "_at_")


def system_metric_key(system: str, metric: str) -> str:
    """A parent run's key for one system's metric: ``hybrid/ndcg_at_10``; a chain's ``+`` (not allowed in
    MLflow keys) becomes ``_``: ``bm25+cross_encoder/ndcg_at_10`` is logged as ``bm25_cross_encoder/ndcg_at_10``."""
    return f"{system_key(system)}/{metric_key(metric)}"


def system_key(system: str) -> str:
    """A system name as an MLflow key segment (``bm25+rm3`` -> ``bm25_rm3``)."""
    return system.replace("+", "_")


SUMMARY_SUFFIXES = {
    "": "mean",
    "_std": "std",
    "_ci_low": "ci_low",
    "_ci_high": "ci_high",
}  # key suffix -> summary column


def key_part(text: str) -> str:
    """``text`` as one segment of an MLflow key: characters other than letters, digits, ``_ - .``
    become ``_`` (``how many`` -> ``how_many``); a segment of dots only becomes underscores."""
    part = re.sub(r"[^\w.-]", "_", text)
    return "_" * len(part) if set(part) == {"."} else part


def slice_key(metric: str, attribute: str, value: str) -> str:
    """A metric over the queries of one slice: ``ndcg_at_10/slice/question_type/who``."""
    return f"{metric_key(metric)}/slice/{key_part(attribute)}/{key_part(value)}"


def drop_key(metric: str, perturbation: str) -> str:
    """How much a metric drops when queries are perturbed (clean - perturbed): ``ndcg_at_10/drop/typos_10``."""
    return f"{metric_key(metric)}/drop/{key_part(perturbation)}"


def reference_key(measure: str, metric: str | None = None) -> str:
    """A row's figure against ``ragtrack compare --reference``: per metric ``ndcg_at_10/reference/difference``,
    per row ``reference/ktu``."""
    return f"{metric_key(metric)}/reference/{measure}" if metric else f"reference/{measure}"


def latency_key(stage: str, quantile: int) -> str:
    """A per-query latency quantile in milliseconds: ``latency/retrieval_p50_ms``."""
    return f"latency/{stage}_p{quantile}_ms"


def usage_key(stage: str, figure: str) -> str:
    """A figure of a stage's LLM calls (``pipeline.execution.usage``): ``llm/generator/prompt_tokens``, ``llm/all/cost``;
    each ``/``-separated part of the stage one segment (a robustness rerun's ``llm/robustness/typos_10/generator/cost``)."""
    return "/".join(["llm", *map(key_part, stage.split("/")), figure])


def curve_key(base: str) -> str:
    """Step metric of ``base@k`` against k: ``recall_at_k``."""
    return f"{base}_at_k"


def child_run_name(system: str, job_name: str) -> str:
    """A system's run name, telling apart the same system in different jobs: ``hybrid · rrf_k k=30``;
    a job named after the system is not named twice (job ``hybrid k=60``: ``hybrid · k=60``)."""
    return f"{system} · {job_name.removeprefix(f'{system} ') or job_name}"


def default_tracking_uri(root: str | Path) -> str:
    """The SQLite store of the default tracking config under ``root``."""
    return sqlite_uri(Path(root) / STORE_FOLDER / STORE_FILE)


def sqlite_uri(path: str | Path) -> str:
    """The tracking URI of the SQLite store at ``path``: ``%`` and ``?`` percent-encoded (SQLAlchemy
    decodes the path and ends it at ``?``), every other character as written (``a?b#c%41`` ->
    ``sqlite:///a%3Fb#c%2541``)."""
    return "sqlite:///" + str(path).replace("%", "%25").replace("?", "%3F")


def sqlite_path(uri: str) -> Path:
    """The file of a ``sqlite:///`` tracking URI (:func:`sqlite_uri` read back, as SQLAlchemy reads it)."""
    return Path(unquote(uri.removeprefix("sqlite:///")))


def file_uri(path: str | Path) -> str:
    """A folder as a ``file://`` URI (an artifact location), every special character percent-encoded."""
    return Path(path).absolute().as_uri()


UI_WORKFLOW = "machine_learning"  # the MLflow 3 UI's "Model training" switch (URL parameter workflowType), not "GenAI"


def runs_table_page(experiment_id: str, view: str) -> str:
    """The UI route of a shared runs-table view (experiment tag :data:`TAG_VIEW_PREFIX` + ``view``), in
    the UI's model-training mode."""
    return f"#/experiments/{experiment_id}/runs?viewStateShareKey={view}&workflowType={UI_WORKFLOW}"


def run_page(experiment_id: str, run_id: str, artifact: str = "") -> str:
    """The UI route of a run's page, or of one of its artifacts (``comparison/report.html``)."""
    return f"#/experiments/{experiment_id}/runs/{run_id}" + (f"/artifacts/{artifact}" if artifact else "")
