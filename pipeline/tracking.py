"""MLflow writing: one parent run per Hydra job, one child run per system (names in ``layout``).

Any tracking URI works: a local SQLite store gets the configured artifact folder, a tracking server
(``http(s)://``, ``databricks``) stores artifacts where the server says. A job killed with SIGKILL
cannot end its runs; every run is tagged with its host and process (``ragtrack.process``), and the next
job of the experiment on that host marks RUNNING runs whose process is gone as KILLED. A failed job
ends its runs FAILED with the error as tag ``ragtrack.error``. Secrets are redacted by the caller
(``redaction``) before anything reaches this module.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

from ragtrack.core.errors import RagtrackError
from ragtrack.core.processes import process_alive, process_tag
from ragtrack.pipeline.layout import (EXPERIMENT_KIND, TAG_ERROR, TAG_EXPERIMENT_KIND, TAG_NOTE, TAG_PARENT, TAG_PROCESS, TAG_SYSTEM,
                                      child_run_name)

log = logging.getLogger(__name__)

EXPERIMENT_NOTE = ("Retrieval experiments tracked by ragtrack: one parent run per job, its systems (bm25, dense, hybrid, ...) "
                   "as child runs named `<system> · <job>`. Each job's description holds its systems x key metrics table; "
                   "`ragtrack compare` adds paired tests.")
UI_URL = "http://127.0.0.1:5000"  # where `ragtrack ui` serves by default
PARAM_LIMIT = 6000  # characters of one logged param value
BATCH_PARAMS, BATCH_ENTRIES = 100, 1000  # MLflow's log_batch limits


def ensure_store(uri: str) -> None:
    """Create a SQLite store once under a file lock (concurrent first opens can half-migrate it) and
    switch it to write-ahead logging: a commit then syncs one file instead of a rollback journal and
    the database (MLflow logging ~40% faster), and the MLflow UI can read while jobs write."""
    if not uri.startswith("sqlite:///"):
        return
    database = Path(uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(database) + ".lock"):
        from mlflow.tracking import MlflowClient

        MlflowClient(uri).search_experiments(max_results=1)
        with contextlib.closing(sqlite3.connect(database)) as connection:
            connection.execute("PRAGMA journal_mode=WAL")  # a property of the file: set once, kept


def is_local_store(uri: str) -> bool:
    """A store this process writes itself (SQLite or a file path), as opposed to a tracking server."""
    return uri.startswith(("sqlite:", "file:", "/")) or "://" not in uri


@functools.lru_cache(maxsize=8)
def _open_experiment(uri: str, experiment: str, artifact_location: str | None) -> tuple[Any, str]:
    """Client and experiment id, once per process (the jobs of a multirun share them); the first open
    also ends the runs of killed jobs (``mark_killed_runs``)."""
    from mlflow.tracking import MlflowClient

    ensure_store(uri)
    client = MlflowClient(uri)
    if not is_local_store(uri) and artifact_location:
        log.info("MLflow server %s: artifacts go where the server says (artifact_location ignored)", uri)
        artifact_location = None
    found = client.get_experiment_by_name(experiment)
    if found is None:
        try:
            experiment_id = client.create_experiment(experiment, artifact_location=artifact_location, tags={TAG_NOTE: EXPERIMENT_NOTE, TAG_EXPERIMENT_KIND: EXPERIMENT_KIND})
        except Exception:  # created meanwhile by a parallel job
            experiment_id = client.get_experiment_by_name(experiment).experiment_id
    else:
        experiment_id = found.experiment_id
    mark_killed_runs(client, experiment_id)
    return client, experiment_id


def mark_killed_runs(client: Any, experiment_id: str) -> list[str]:
    """End as KILLED the RUNNING runs of the experiment whose process (on this host) is gone."""
    stale = [run for run in client.search_runs([experiment_id], "attributes.status = 'RUNNING'", max_results=1000)
             if TAG_PROCESS in run.data.tags and not process_alive(run.data.tags[TAG_PROCESS])]
    for run in stale:
        client.set_tag(run.info.run_id, TAG_ERROR, f"process {run.data.tags[TAG_PROCESS]} ended without finishing the run")
        client.set_terminated(run.info.run_id, "KILLED")
    if stale:
        log.warning("MLflow: marked %d run(s) of killed jobs as KILLED", len(stale))
    return [run.info.run_id for run in stale]


@contextlib.contextmanager
def reported_as_one_line() -> Any:
    """MLflow's failures (store unreachable, disk full, a folder that is a file) as one-line errors."""
    try:
        yield
    except RagtrackError:
        raise
    except Exception as exc:
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise RagtrackError(f"MLflow logging failed: {type(exc).__name__}: {detail}") from None


class Tracker:
    """No tracking (``tracking=none``); the MLflow tracker has the same methods."""

    enabled = False
    run_id: str | None = None

    def start(self, run_name: str, tags: dict, params: dict) -> None: ...
    def log_system(self, system: str, params: dict, metrics: dict[str, float], artifacts: list[Path], tags: dict | None = None,
                   steps: dict[str, dict[int, float]] | None = None) -> None: ...
    def log_parent(self, metrics: dict[str, float], artifacts: list[Path], note: str | None = None) -> None: ...
    def finish(self, error: BaseException | None = None) -> None: ...

    def where(self) -> list[str]:
        """Lines that tell a person where the job's runs are (none without tracking)."""
        return []


class MlflowTracker(Tracker):
    """``start`` creates the job's parent run, ``log_system`` a finished child run with its artifacts,
    params and metrics, ``log_parent`` the job's metrics and artifacts, ``finish`` ends the parent
    FINISHED or FAILED (with the error as tag ``ragtrack.error``)."""

    enabled = True

    def __init__(self, uri: str, experiment: str, artifact_location: str | None = None):
        self.uri, self.experiment_name = uri, experiment
        with reported_as_one_line():
            self.client, self.experiment_id = _open_experiment(uri, experiment, artifact_location)
        self.process = process_tag()
        self.run_id = None
        self.run_name = ""

    def start(self, run_name: str, tags: dict, params: dict) -> None:
        tags = {**tags, TAG_PROCESS: self.process}
        with reported_as_one_line():
            run = self.client.create_run(self.experiment_id, run_name=run_name, tags={k: str(v) for k, v in tags.items()})
            self.run_id, self.run_name = run.info.run_id, run_name
            self._log(self.run_id, params=params)
        log.info("MLflow: experiment %s, run %s (%s)", self.experiment_id, run_name, self.run_id)

    def log_system(self, system: str, params: dict, metrics: dict[str, float], artifacts: list[Path], tags: dict | None = None,
                   steps: dict[str, dict[int, float]] | None = None) -> None:
        tags = {TAG_PARENT: self.run_id, TAG_SYSTEM: system, TAG_PROCESS: self.process, **(tags or {})}
        with reported_as_one_line():
            run = self.client.create_run(self.experiment_id, run_name=child_run_name(system, self.run_name), tags={k: str(v) for k, v in tags.items()})
            self._log_artifacts(run.info.run_id, artifacts)  # first: finding a run's artifact store reads the whole run
            self._log(run.info.run_id, params=params, metrics=metrics, steps=steps)
            self.client.set_terminated(run.info.run_id, "FINISHED")

    def log_parent(self, metrics: dict[str, float], artifacts: list[Path], note: str | None = None) -> None:
        """The job's metrics and artifacts; ``note``: markdown shown as the run's description."""
        with reported_as_one_line():
            self._log_artifacts(self.run_id, artifacts)
            self._log(self.run_id, metrics=metrics)
            if note:
                self.client.set_tag(self.run_id, TAG_NOTE, note)

    def finish(self, error: BaseException | None = None) -> None:
        if self.run_id is None:
            return
        with reported_as_one_line():
            if error is not None:
                self.client.set_tag(self.run_id, TAG_ERROR, f"{type(error).__name__}: {error}"[:5000])
            self.client.set_terminated(self.run_id, "FAILED" if error is not None else "FINISHED")

    def where(self) -> list[str]:
        """The run id and the run's page: on the tracking server, or in ``ragtrack ui`` for a local store."""
        page = f"#/experiments/{self.experiment_id}/runs/{self.run_id}"
        if not is_local_store(self.uri):
            return [f"MLflow run:    {self.run_id} (experiment {self.experiment_name!r})", f"Run page:      {self.uri.rstrip('/')}/{page}"]
        return [f"MLflow run:    {self.run_id} (experiment {self.experiment_name!r})",
                f"Run page:      {UI_URL}/{page}", f"               after: ragtrack ui --tracking-uri {self.uri}"]

    def _log(self, run_id: str, params: dict | None = None, metrics: dict | None = None, steps: dict | None = None) -> None:
        """``steps``: ``{key: {step: value}}``, metrics MLflow draws against the step (e.g. recall by k)."""
        from mlflow.entities import Metric, Param

        param_list = [Param(k, str(v)[:PARAM_LIMIT]) for k, v in (params or {}).items()]
        metric_list = [Metric(k, float(v), 0, 0) for k, v in (metrics or {}).items()]
        metric_list += [Metric(k, float(v), 0, step) for k, curve in (steps or {}).items() for step, v in curve.items()]
        while param_list or metric_list:  # MLflow's batch limits: 100 params, 1000 entries in all
            batch_params, param_list = param_list[:BATCH_PARAMS], param_list[BATCH_PARAMS:]
            room = BATCH_ENTRIES - len(batch_params)
            batch_metrics, metric_list = metric_list[:room], metric_list[room:]
            self.client.log_batch(run_id, metrics=batch_metrics, params=batch_params)

    def _log_artifacts(self, run_id: str, paths: list[Path]) -> None:
        """Files at the artifact root; a folder keeps its name (``.hydra/``)."""
        for path in paths:
            if Path(path).is_dir():
                self.client.log_artifacts(run_id, str(path), artifact_path=Path(path).name)
            else:
                self.client.log_artifact(run_id, str(path))


def tracking_target(cfg: Mapping) -> tuple[str, str, str | None]:
    """(uri, experiment, artifact location) of a ``tracking`` config."""
    location = cfg.get("artifact_location")
    return str(cfg["uri"]), str(cfg["experiment"]), None if location is None else str(location)
