"""MLflow logging: one parent run per Hydra job, one child run per system.

Parent: tags (Hydra choices and overrides, dataset hash, git commit, sweep), params (shared config),
metrics ``<system>/<metric>``, artifacts (resolved config, ``.hydra/``, comparison table). Child:
tag ``ragtrack.system``, params (its config), metrics with identical keys across systems, artifacts
``run.trec``, per-query table. A failed job ends its runs FAILED with the error logged. Secrets
(config keys that look like keys, tokens or passwords) are redacted before anything is logged.

Any tracking URI works: a local SQLite store gets the configured artifact folder, a tracking server
(``http(s)://``, ``databricks``) stores artifacts where the server says. A job killed with SIGKILL
cannot end its runs; every run is tagged with its host and process (``ragtrack.process``), and the next
job of the experiment on that host marks RUNNING runs whose process is gone as KILLED.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import multiprocessing
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

from pipeline import PROJECT_DIR
from pipeline.errors import RagtrackError
from pipeline.processes import process_alive, process_tag
from pipeline.runs import write_atomically

log = logging.getLogger(__name__)

SECRET_WORDS = r"api_?key|token|secret|password|authorization"  # a key ending in one of these holds a secret
SECRET_KEY = re.compile(rf"({SECRET_WORDS})$", re.IGNORECASE)
PARAM_LIMIT = 6000
BATCH_PARAMS, BATCH_ENTRIES = 100, 1000


def metric_key(name: str) -> str:
    """MLflow-legal metric key: ``ndcg@10`` -> ``ndcg_at_10``."""
    return name.replace("@", "_at_")


def _redacted(key: object, value: Any) -> Any:
    return "***" if SECRET_KEY.search(str(key)) and value not in (None, "") and not isinstance(value, Mapping) else value


def redact(config: Any) -> Any:
    """A copy of a nested config with the values of secret-looking keys replaced by ``***``."""
    if isinstance(config, Mapping):
        return {key: redact(_redacted(key, value)) for key, value in config.items()}
    if isinstance(config, list):
        return [redact(value) for value in config]
    return config


def redact_overrides(overrides: list[str]) -> list[str]:
    """Hydra overrides (``key=value``) with the values of secret-looking keys replaced by ``***``."""
    redacted = []
    for override in overrides:
        key, sign, value = override.partition("=")
        redacted.append(f"{key}={_redacted(key.lstrip('+~'), value)}" if sign else override)
    return redacted


SECRET_YAML_ENTRY = re.compile(rf"""^[\s-]*['"]?[\w.\-]*(?:{SECRET_WORDS})['"]?:[ \t]*(?!null$|''$|""$|'\*\*\*'$)\S""",
                               re.IGNORECASE | re.MULTILINE)
SECRET_ASSIGNMENT = re.compile(rf"""([\w.\-]*(?:{SECRET_WORDS}))=(?!\*\*\*)(?:'[^']*'|"[^"]*"|[^\s,'"\]]+)""", re.IGNORECASE)


def redact_text(text: str) -> str:
    """``key=value`` assignments of secret-looking keys inside free text (override lists, log lines)
    with the value replaced by ``***``."""
    return SECRET_ASSIGNMENT.sub(r"\1=***", text)


def redact_everywhere(config: Any) -> Any:
    """``redact``, plus ``redact_text`` on every string (Hydra's own files hold overrides as strings)."""
    if isinstance(config, Mapping):
        return {key: redact_everywhere(_redacted(key, value)) for key, value in config.items()}
    if isinstance(config, list):
        return [redact_everywhere(value) for value in config]
    return redact_text(config) if isinstance(config, str) else config


def redact_hydra_files(paths: list[Path]) -> None:
    """Rewrite Hydra's records of a job (``.hydra/*.yaml``, a sweep's ``multirun.yaml``) with secrets
    redacted, before anything is logged: a secret typed on the command line is stored in them as typed."""
    import yaml

    for path in paths:
        original = path.read_text(encoding="utf-8")
        if not (SECRET_ASSIGNMENT.search(original) or SECRET_YAML_ENTRY.search(original)):
            continue  # nothing to redact (parsing Hydra's YAML costs ~0.1 s per job)
        loaded = yaml.safe_load(original)
        redacted = redact_everywhere(loaded)
        if redacted != loaded:
            write_atomically(path, yaml.safe_dump(redacted, sort_keys=False, allow_unicode=True))


class SecretFilter(logging.Filter):
    """A logging filter (wired into Hydra's log handlers in ``conf/hydra/default.yaml``) that redacts
    secret-looking ``key=value`` assignments in every record, e.g. Hydra's list of a sweep's jobs."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


def flatten(config: Mapping, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested mapping; secrets redacted, lists kept as their string form."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= flatten(value, f"{dotted}.")
        else:
            flat[dotted] = _redacted(key, value)
    return flat


@functools.lru_cache(maxsize=4)
def git_commit(folder: Path = PROJECT_DIR) -> str | None:
    """The commit of the checkout ragtrack runs from (once per process: the code a process runs does not
    change while it runs); ``None`` outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


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
            experiment_id = client.create_experiment(experiment, artifact_location=artifact_location)
        except Exception:  # created meanwhile by a parallel job
            experiment_id = client.get_experiment_by_name(experiment).experiment_id
    else:
        experiment_id = found.experiment_id
    mark_killed_runs(client, experiment_id)
    return client, experiment_id


def mark_killed_runs(client: Any, experiment_id: str) -> list[str]:
    """End as KILLED the RUNNING runs of the experiment whose process (on this host) is gone."""
    stale = [run for run in client.search_runs([experiment_id], "attributes.status = 'RUNNING'", max_results=1000)
             if "ragtrack.process" in run.data.tags and not process_alive(run.data.tags["ragtrack.process"])]
    for run in stale:
        client.set_tag(run.info.run_id, "ragtrack.error", f"process {run.data.tags['ragtrack.process']} ended without finishing the run")
        client.set_terminated(run.info.run_id, "KILLED")
    if stale:
        log.warning("MLflow: marked %d run(s) of killed jobs as KILLED", len(stale))
    return [run.info.run_id for run in stale]


class Tracker:
    """No tracking (``tracking=none``); the MLflow tracker has the same methods."""

    enabled = False

    def start(self, run_name: str, tags: dict, params: dict) -> None: ...
    def log_system(self, system: str, params: dict, metrics: dict[str, float], artifacts: list[Path], tags: dict | None = None,
                   steps: dict[str, dict[int, float]] | None = None) -> None: ...
    def log_parent(self, metrics: dict[str, float], artifacts: list[Path]) -> None: ...
    def finish(self, error: BaseException | None = None) -> None: ...

    @property
    def url_hint(self) -> str | None:
        return None


class MlflowTracker(Tracker):
    """Logs a job to MLflow through a writer: in this process (``MlflowWriter``), or, for the jobs of a
    sweep that share a process, in a background process (``BackgroundWriter``) that writes job N while
    job N+1 computes. Either way the same operations reach MLflow in the same order."""

    enabled = True

    def __init__(self, uri: str, experiment: str, artifact_location: str | None = None, background: bool = False):
        self.uri, self.experiment_name = uri, experiment
        target = (uri, experiment, artifact_location)
        self.writer = background_writer(target) if background else MlflowWriter.open(*target)
        self.job = uuid.uuid4().hex  # names the job's parent run until the writer has created it
        self.process = process_tag()

    def start(self, run_name: str, tags: dict, params: dict) -> None:
        self.writer.submit(("start", self.job, run_name, {**tags, "ragtrack.process": self.process}, params))

    def log_system(self, system: str, params: dict, metrics: dict[str, float], artifacts: list[Path], tags: dict | None = None,
                   steps: dict[str, dict[int, float]] | None = None) -> None:
        tags = {"ragtrack.system": system, "ragtrack.process": self.process, **(tags or {})}
        self.writer.submit(("system", self.job, system, tags, params, metrics, artifacts, steps))

    def log_parent(self, metrics: dict[str, float], artifacts: list[Path]) -> None:
        self.writer.submit(("parent", self.job, metrics, artifacts))

    def finish(self, error: BaseException | None = None) -> None:
        self.writer.submit(("finish", self.job, None if error is None else f"{type(error).__name__}: {error}"[:5000]))

    @property
    def url_hint(self) -> str:
        if not is_local_store(self.uri):
            return f"{self.uri}  (experiment {self.experiment_name!r})"
        return f"ragtrack ui --tracking-uri {self.uri}   (or: mlflow ui --backend-store-uri {self.uri} --host 127.0.0.1)"


class MlflowWriter:
    """Applies a tracker's operations to MLflow: ``start`` creates a job's parent run, ``system`` a
    finished child run with its artifacts, params and metrics, ``parent`` the job's metrics and
    artifacts, ``finish`` ends the parent FINISHED or FAILED (with the error as tag ``ragtrack.error``)."""

    def __init__(self, client: Any, experiment_id: str):
        self.client, self.experiment_id = client, experiment_id
        self.parents: dict[str, str] = {}  # tracker job -> parent run id

    @classmethod
    def open(cls, uri: str, experiment: str, artifact_location: str | None) -> "MlflowWriter":
        return cls(*_open_experiment(uri, experiment, artifact_location))

    def submit(self, operation: tuple) -> None:
        kind, job, *arguments = operation
        getattr(self, f"_{kind}")(job, *arguments)

    def _start(self, job: str, run_name: str, tags: dict, params: dict) -> None:
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags={k: str(v) for k, v in tags.items()})
        self.parents[job] = run.info.run_id
        self._log(run.info.run_id, params=params)
        log.info("MLflow: experiment %s, run %s (%s)", self.experiment_id, run_name, run.info.run_id)

    def _system(self, job: str, system: str, tags: dict, params: dict, metrics: dict, artifacts: list[Path], steps: dict | None) -> None:
        tags = {"mlflow.parentRunId": self.parents[job], **tags}
        run = self.client.create_run(self.experiment_id, run_name=system, tags={k: str(v) for k, v in tags.items()})
        self._log_artifacts(run.info.run_id, artifacts)  # first: finding a run's artifact store reads the whole run
        self._log(run.info.run_id, params=params, metrics=metrics, steps=steps)
        self.client.set_terminated(run.info.run_id, "FINISHED")

    def _parent(self, job: str, metrics: dict, artifacts: list[Path]) -> None:
        self._log_artifacts(self.parents[job], artifacts)
        self._log(self.parents[job], metrics=metrics)

    def _finish(self, job: str, error: str | None) -> None:
        parent = self.parents.pop(job, None)
        if parent is None:
            return
        if error is not None:
            self.client.set_tag(parent, "ragtrack.error", error)
        self.client.set_terminated(parent, "FAILED" if error is not None else "FINISHED")

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


PARENT_CHECK_SECONDS = 1.0


def _write_in_background(operations: Any, failures: Any) -> None:
    """The background writer's process: imports MLflow's store at once (most of the ~4 s it takes to
    open one), then applies operations (the first names the store: ``("open", target)``) until
    ``None`` or until the sweep's process is gone and nothing is left to read. It stops at the first
    failure, which it reports as one line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the sweep; the jobs it finished are still logged
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (while the sweep composes its first job)

    sweep_process = multiprocessing.parent_process()
    writer = None
    while True:
        try:
            operation = operations.get(timeout=PARENT_CHECK_SECONDS)
        except queue.Empty:
            if sweep_process is not None and not sweep_process.is_alive():
                return  # killed: what it had submitted is written; its unfinished runs are marked KILLED later
            continue
        if operation is None:
            return
        try:
            if operation[0] == "open":
                writer = MlflowWriter.open(*operation[1])
            else:
                writer.submit(operation)
        except Exception as exc:
            failures.put(f"MLflow logging failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return


class BackgroundWriter:
    """A writer process for the jobs of a sweep that run in one process: ``submit`` queues and returns
    at once, so MLflow's writes (about 0.25 s per job) overlap the next job's work instead of adding to
    it. ``close`` waits until everything is written; a failure there or in an earlier operation raises
    a ``RagtrackError`` at the next submit or at close. The process starts before its store is known
    (``open``), so a sweep can start it first thing."""

    def __init__(self):
        context = multiprocessing.get_context("spawn")  # no fork of this process's threads (Chroma, MLflow)
        self.operations, self.failures = context.Queue(), context.Queue()
        self.failure: str | None = None
        self.process = context.Process(target=_write_in_background, args=(self.operations, self.failures),
                                       name="ragtrack-mlflow-writer")
        self.process.start()

    def open(self, target: tuple) -> None:
        self.submit(("open", target))

    def submit(self, operation: tuple) -> None:
        self._raise_failure()
        if not self.process.is_alive():
            self._raise_failure()  # it may have reported just before it ended (an ended process's queue is flushed)
            raise RagtrackError("the MLflow writer process ended unexpectedly; later jobs are not logged")
        self.operations.put(operation)

    def close(self) -> None:
        """Wait until everything is written; raise a failure that no ``submit`` has raised yet."""
        self.operations.put(None)
        self.process.join()
        if not self.failure:
            self._raise_failure()

    def discard(self) -> None:
        """End a writer that was never opened (nothing to write)."""
        self.process.terminate()
        self.process.join()

    def _raise_failure(self) -> None:
        """Raise the writer's failure, at every call once it has reported one."""
        if self.failure is None:
            with contextlib.suppress(queue.Empty):
                self.failure = self.failures.get_nowait()
        if self.failure is not None:
            raise RagtrackError(self.failure)


_background_writers: dict[tuple, BackgroundWriter] = {}
_spare_writers: list[BackgroundWriter] = []  # started ahead of a sweep, before its store is known


def tracking_target(cfg: Mapping) -> tuple[str, str, str | None]:
    """(uri, experiment, artifact location) of a ``tracking`` config: what a writer writes to."""
    location = cfg.get("artifact_location")
    return str(cfg["uri"]), str(cfg["experiment"]), None if location is None else str(location)


def start_spare_writer(argv: list[str]) -> None:
    """On a multirun command line (``-m``/``--multirun``), start a writer process now, so that MLflow's
    import (~4 s) runs beside the sweep's own start; ``discard_spare_writers`` ends it if the sweep
    turns out not to log in the background."""
    if not _spare_writers and not _background_writers and {"-m", "--multirun"} & set(argv):
        _register_exit_handler()
        _spare_writers.append(BackgroundWriter())


def discard_spare_writers() -> None:
    while _spare_writers:
        _spare_writers.pop().discard()


def background_writer(target: tuple) -> BackgroundWriter:
    """This process's background writer for ``target`` (uri, experiment, artifact location): a spare
    one if started, else a new one."""
    if target not in _background_writers:
        _register_exit_handler()
        writer = _spare_writers.pop() if _spare_writers else BackgroundWriter()
        writer.open(target)
        _background_writers[target] = writer
    return _background_writers[target]


def close_background_writers() -> None:
    """Wait until every background writer has written everything; raise its failure, if any."""
    discard_spare_writers()
    failures = []
    while _background_writers:
        _, writer = _background_writers.popitem()
        try:
            writer.close()
        except RagtrackError as exc:
            failures.append(str(exc))
    if failures:
        raise RagtrackError("; ".join(failures))


@functools.lru_cache(maxsize=1)
def _register_exit_handler() -> None:
    """Once, when the first writer starts: registered after multiprocessing's own exit handler, ours
    runs before it (atexit is last in, first out), so the writer gets its end marker before
    multiprocessing joins it; registered at import it would run after that join and wait forever."""
    atexit.register(_close_at_exit)


def _close_at_exit() -> None:
    """For processes that end without ``close_background_writers`` (a job that exits early): what was
    submitted is still written."""
    try:
        close_background_writers()
    except RagtrackError as exc:
        print(f"ragtrack: error: {exc}", file=sys.stderr)
