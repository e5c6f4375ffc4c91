"""MLflow writing: one parent run per Hydra job, one child run per system (names in ``layout``).

Any tracking URI works: a local SQLite store gets the configured artifact folder, a tracking server
(``http(s)://``, ``databricks``) stores artifacts where the server says. A job killed with SIGKILL
cannot end its runs; every run is tagged with its host and process (``ragtrack.process``), and the next
job of the experiment on that host marks RUNNING runs whose process is gone as KILLED. A failed job
ends its runs FAILED with the error as tag ``ragtrack.error``. Secrets are redacted by the caller
(``redaction``) before anything reaches this module, and every known secret value is masked in what
it sends (:func:`ragtrack.core.secrets.mask`). The credentials of an ``http(s)://user:password@host``
URI reach MLflow through its documented variables (:func:`use_credentials`) and the probe as HTTP basic
authentication; the URI is shown and given to MLflow without them.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib
import json
import logging
import math
import os
import sqlite3
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from filelock import FileLock

from ragtrack.core.errors import RagtrackError, describe_fault
from ragtrack.core.processes import process_alive, process_tag
from ragtrack.core.secrets import mask, remember_url_credentials, split_credentials, without_credentials
from ragtrack.pipeline.records.layout import (
    EXPERIMENT_KIND,
    QUERIES_TABLE,
    TAG_DATASET,
    TAG_DATASET_HASH,
    TAG_ERROR,
    TAG_EXPERIMENT_KIND,
    TAG_NOTE,
    TAG_PARENT,
    TAG_PROCESS,
    TAG_SYSTEM,
    TAG_VIEW_PREFIX,
    child_run_name,
    metric_key,
    run_page,
    runs_table_page,
    sqlite_path,
    sqlite_uri,
)

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

EXPERIMENT_NOTE = (
    "Retrieval experiments tracked by ragtrack: one parent run per job, its systems (bm25, dense, hybrid, ...) "
    "as child runs named `<system> · <job>`. Each job's description holds its systems x key metrics table; "
    "`ragtrack compare` adds paired tests."
)
UI_URL = "http://127.0.0.1:5000"  # where `ragtrack ui` serves by default
PARAM_LIMIT = 6000  # characters of one logged param value
BATCH_PARAMS, BATCH_ENTRIES = 100, 1000  # MLflow's log_batch limits


DEFAULT_TIMEOUT, DEFAULT_RETRIES = 10, 2  # tracking.timeout (seconds), tracking.retries
CREDENTIAL_VARIABLES = (
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
)  # MLflow's documented basic authentication
_credentials_set: dict[str, str] = {}  # what use_credentials put there, to take back for a URI without credentials


POOL_VARIABLE = "MLFLOW_SQLALCHEMYSTORE_POOLCLASS"  # MLflow's documented setting of its SQLAlchemy connection pool


def ensure_store(uri: str) -> None:
    """Make a SQLite store usable, under a file lock (concurrent first opens): a new store is created
    in a temporary file and renamed into place once MLflow has created and migrated its schema, so a
    kill at any moment leaves either no store or a complete one. A store without runs whose schema is
    unfinished (left by a killed MLflow, e.g. an older ragtrack) is set aside and created anew. The store
    then uses write-ahead logging: a commit syncs one file instead of a rollback journal and the
    database (MLflow logging ~40% faster), and the MLflow UI can read while jobs write. MLflow keeps one
    store per URI for the life of the process; it opens a connection per operation (``NullPool``, unless
    the user chose another pool), so a store deleted or replaced between two jobs of a long-lived process
    is created or opened anew, never written through a connection to the deleted file."""
    if not uri.startswith("sqlite:///"):
        return
    os.environ.setdefault(
        POOL_VARIABLE, "NullPool"
    )  # before MLflow's first engine for the URI: no connection kept to a file deleted later
    database = sqlite_path(uri)
    database.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(database) + ".lock"):
        if database.exists() and _half_created(database):
            if _count_runs(database):  # a store holding runs is never replaced
                raise RagtrackError(
                    f"MLflow store {uri} holds runs but not the schema of the installed MLflow: "
                    f"back it up, then run: mlflow db upgrade {uri}"
                )
            aside = database.with_name(f"{database.name}.broken-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            os.replace(database, aside)
            log.warning(
                "MLflow store %s was left half-created (a killed first job?); set aside as %s, creating it anew",
                database,
                aside,
            )
        if not database.exists():
            _create_store(database)
        _open_store(uri)
        with contextlib.closing(sqlite3.connect(database)) as connection:
            connection.execute("PRAGMA journal_mode=WAL")  # a property of the file: set once, kept


def _create_store(database: Path) -> None:
    """A new SQLite store: MLflow creates the schema in a temporary file, which is renamed into place."""
    for stale in database.parent.glob(f".{database.name}.new-*"):  # left by a killed creation
        stale.unlink(missing_ok=True)
    scratch = database.with_name(f".{database.name}.new-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        _open_store(sqlite_uri(scratch))
        os.replace(scratch, database)
    finally:
        scratch.unlink(missing_ok=True)


def _open_store(uri: str) -> None:
    """Open the store as MLflow does (it creates the schema of an empty database and checks its version)."""
    from mlflow.tracking import MlflowClient

    MlflowClient(uri).search_experiments(max_results=1)


def _half_created(database: Path) -> bool:
    """Whether a SQLite file lacks the schema version of a finished MLflow store: MLflow was stopped
    while creating or migrating it (alembic records each migration's version as it goes). A file that
    is not SQLite at all is left to MLflow's own error."""
    with contextlib.closing(_read_only(database)) as connection:
        try:
            versions = [row[0] for row in connection.execute("SELECT version_num FROM alembic_version")]
        except sqlite3.OperationalError:  # no such table
            return True
        except sqlite3.DatabaseError:  # not a database
            return False
    return versions != [_schema_head()]


@functools.cache
def _schema_head() -> str:
    """The schema version of a finished store of the installed MLflow: the head of the migrations it
    ships (``mlflow/store/db_migrations``, read with alembic's public API, as ``mlflow db upgrade`` does)."""
    from importlib.resources import files

    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(files("mlflow.store") / "db_migrations"))
    return ScriptDirectory.from_config(config).get_current_head()


def _read_only(database: Path) -> sqlite3.Connection:
    """A read-only connection (an SQLite URI filename: the path percent-encoded, whatever it holds)."""
    return sqlite3.connect(f"{database.absolute().as_uri()}?mode=ro", uri=True)


def _count_runs(database: Path) -> int:
    """Runs in a SQLite store (0 when it has no runs table)."""
    with contextlib.closing(_read_only(database)) as connection:
        try:
            return connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


def configure_http(timeout: int, retries: int) -> None:
    """MLflow's HTTP settings (its environment variables, read at each request): ``timeout`` seconds
    per request, ``retries`` retries with a 1 s backoff, so an unreachable server fails within about
    ``(retries + 1) * timeout + 2 ** retries`` seconds instead of MLflow's default of minutes."""
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(int(timeout))
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(int(retries))
    os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] = "1"
    os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_JITTER"] = "0.5"


def quiet_mlflow_logs() -> None:
    """MLflow's own lines ("Creating initial MLflow database tables...", and the traceback it logs
    before raising, on a full disk) stay out of the terminal: ragtrack reports MLflow's failures itself,
    in one line. Its loggers (configured when ``mlflow`` is imported, hence the import first) show
    critical records only, unless the user chose a level with MLflow's ``MLFLOW_LOGGING_LEVEL``."""
    importlib.import_module("mlflow")
    if "MLFLOW_LOGGING_LEVEL" not in os.environ:
        logging.getLogger("mlflow").setLevel(logging.CRITICAL)


def is_server(uri: str) -> bool:
    """A tracking server (``http(s)://``), as opposed to a store this process opens itself."""
    return uri.startswith(("http://", "https://"))


def use_credentials(uri: str) -> str:
    """The URI to give MLflow. The credentials of an ``http(s)://user:password@host`` URI are remembered
    as secrets and set as MLflow's documented ``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD``,
    and the URI is returned without them; for a server URI without credentials, the ones this function
    set before are taken back (they must not reach another server). Other URIs are returned as they are
    (a database URI keeps its password; it is remembered as a secret)."""
    remember_url_credentials(uri)
    if not is_server(uri):
        return uri
    bare, user, password = split_credentials(uri)
    wanted = dict(zip(CREDENTIAL_VARIABLES, (user, password))) if password is not None else {}
    for name in CREDENTIAL_VARIABLES:
        if name in wanted:
            os.environ[name] = _credentials_set[name] = wanted[name]
        elif name in _credentials_set and os.environ.get(name) == _credentials_set.pop(name):
            del os.environ[name]
    return bare


def prepare_connection(uri: str, timeout: int = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES) -> str:
    """Before a command talks to MLflow (and before it imports MLflow, so that its own mistakes are told
    at once): its HTTP settings and credentials, and a tracking server that must answer; returns the URI
    to give MLflow (:func:`use_credentials`)."""
    configure_http(timeout, retries)
    probe_server(uri, timeout)
    return use_credentials(uri)


def check_store_exists(uri: str) -> None:
    """For a command that reads the store (``compare``, ``reproduce``), without importing MLflow: a
    SQLite store or a store folder that does not exist is one line (MLflow would create an empty one)."""
    if uri.startswith("sqlite:///"):
        path = sqlite_path(uri)
    elif uri.startswith(("file:", "/", ".")):
        path = Path(unquote(urlsplit(uri).path) if uri.startswith("file:") else uri)
    else:
        return
    if not path.exists():
        raise RagtrackError(
            f"no MLflow store at {path} (tracking URI {without_credentials(uri)}): "
            "give the store of your runs with --tracking-uri, or log one with `ragtrack run`"
        )


def reading_client(uri: str) -> Any:
    """An MLflow client for a command that reads the store (``uri`` as :func:`prepare_connection` returned
    it), MLflow's own INFO lines quieted; a URI MLflow refuses (an unknown scheme, the old file store) is
    one line."""
    quiet_mlflow_logs()
    from mlflow.tracking import MlflowClient

    with faults_as_one_line(f"MLflow store {without_credentials(uri)}", mlflow_refusals=True):
        return MlflowClient(uri)


def probe_server(uri: str, timeout: float) -> None:
    """Fail within ``timeout`` seconds, with one line, when the tracking server at an ``http(s)://`` URI
    does not answer (nothing listening, or a server that accepts and never replies). Any HTTP answer
    (even an error status) counts as reachable: MLflow then reports what is wrong. The URI's
    credentials go as HTTP basic authentication; the line names the server without them."""
    if not is_server(uri):
        return
    address, user, password = split_credentials(uri)
    request = urllib.request.Request(f"{address.rstrip('/')}/health")
    if password is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            detail = f"no answer within {timeout:g} s (tracking.timeout)"
        else:
            detail = (describe_fault(reason) if isinstance(reason, BaseException) else None) or str(reason)
        raise RagtrackError(f"MLflow tracking server {address} is unreachable: {detail}") from None


def is_local_store(uri: str) -> bool:
    """A store this process writes itself (SQLite or a file path), as opposed to a tracking server."""
    return uri.startswith(("sqlite:", "file:", "/")) or "://" not in uri


def run_and_job(client, run_id: str, missing: str) -> tuple:
    """The MLflow run ``run_id`` and its job: the run itself, or its parent when it is a system run;
    ``missing``: the one-line error when the store has no such run."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise RagtrackError(missing) from None
    parent = run.data.tags.get(TAG_PARENT)
    return run, client.get_run(parent) if parent else run


def log_figures(client, run_id: str, figures: dict[str, float]) -> None:
    """The finite ``figures`` as metrics of ``run_id`` (step 0, timestamped now), in batches within
    MLflow's limit: the figures ``ragtrack compare`` logs on its comparison and benchmark runs."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    logged = [Metric(key, float(value), now, 0) for key, value in figures.items() if math.isfinite(value)]
    for start in range(0, len(logged), BATCH_ENTRIES):
        client.log_batch(run_id, metrics=logged[start : start + BATCH_ENTRIES])


def _open_experiment(
    uri: str,
    experiment: str,
    artifact_location: str | None,
    timeout: int = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
) -> tuple[Any, str]:
    """Client and experiment id, checked anew for every job (a process that keeps running, a notebook or
    a service, sees a store deleted or an experiment deleted in the UI since its last job): probes a
    tracking server, creates a SQLite store that is not there, and ends the runs of killed jobs
    (``mark_killed_runs``)."""
    from mlflow.tracking import MlflowClient

    given = prepare_connection(uri, timeout, retries)
    quiet_mlflow_logs()
    with store_faults(uri):
        ensure_store(uri)
        client = MlflowClient(given)
        found = client.get_experiment_by_name(experiment)
    if not is_local_store(uri) and artifact_location:
        log.info("MLflow server %s: artifacts go where the server says (artifact_location ignored)", given)
        artifact_location = None
    if found is not None and found.lifecycle_stage == "deleted":
        raise RagtrackError(
            f"the MLflow experiment {experiment!r} was deleted (in the UI or with `mlflow experiments delete`): restore it with "
            f"`mlflow experiments restore --experiment-id {found.experiment_id}` against the same tracking URI, "
            "or log elsewhere with tracking.experiment=NAME"
        )
    if found is None:
        try:
            experiment_id = client.create_experiment(
                experiment,
                artifact_location=artifact_location,
                tags={TAG_NOTE: EXPERIMENT_NOTE, TAG_EXPERIMENT_KIND: EXPERIMENT_KIND},
            )
        except Exception:  # created meanwhile by a parallel job
            experiment_id = client.get_experiment_by_name(experiment).experiment_id
    else:
        experiment_id = found.experiment_id
    mark_killed_runs(client, experiment_id)
    return client, experiment_id


@contextlib.contextmanager
def faults_as_one_line(what: str, mlflow_refusals: bool = False) -> Any:
    """A fault (:func:`describe_fault`) as one line ``<what>: <message>``; with ``mlflow_refusals``,
    MLflow's own refusals (a bad URI, an old schema) too. What is not a fault (a bug) keeps its traceback."""
    try:
        yield
    except RagtrackError:
        raise
    except Exception as exc:
        message = describe_fault(exc)
        if message is None and mlflow_refusals and type(exc).__module__.startswith("mlflow"):
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if message is None:
            raise
        raise RagtrackError(f"{what}: {message}") from None


def store_faults(uri: str) -> Any:
    """A fault while opening or creating the store as one line naming the store (tracking.uri)."""
    return faults_as_one_line(f"MLflow store {without_credentials(uri)} (tracking.uri)", mlflow_refusals=True)


def mark_killed_runs(client: Any, experiment_id: str) -> list[str]:
    """End as KILLED the RUNNING runs of the experiment whose process (on this host) is gone."""
    stale = [
        run
        for run in client.search_runs([experiment_id], "attributes.status = 'RUNNING'", max_results=1000)
        if TAG_PROCESS in run.data.tags and not process_alive(run.data.tags[TAG_PROCESS])
    ]
    for run in stale:
        client.set_tag(
            run.info.run_id, TAG_ERROR, f"process {run.data.tags[TAG_PROCESS]} ended without finishing the run"
        )
        client.set_terminated(run.info.run_id, "KILLED")
    if stale:
        log.warning("MLflow: marked %d run(s) of killed jobs as KILLED", len(stale))
    return [run.info.run_id for run in stale]


def reported_as_one_line() -> Any:
    """MLflow's failures while logging (store unreachable, disk full, a folder that is a file) as one line."""
    return faults_as_one_line("MLflow logging failed")


DATASET_CONTEXT_TAG, DATASET_CONTEXT = (
    "mlflow.data.context",
    "evaluation",
)  # MLflow's tag for what a dataset input was used for


@dataclass(frozen=True)
class DatasetIdentity:
    """What a job was evaluated on, as MLflow shows a dataset input: ``name``, ``digest`` (the first 16
    hex digits of the dataset's sha256), ``provider`` (beir, trec, irds: MLflow's source type), ``source``
    (``irds:beir/scifact/test``) and ``profile`` (counts and the sha256 of documents, queries and qrels)."""

    name: str
    digest: str
    provider: str
    source: str
    profile: dict


class Tracker:
    """No tracking (``tracking=none``); the MLflow tracker has the same methods."""

    enabled = False
    run_id: str | None = None

    def start(self, run_name: str, tags: dict, params: dict) -> None: ...
    def log_dataset(self, identity: DatasetIdentity) -> None: ...
    def log_system(
        self,
        system: str,
        params: dict,
        metrics: dict[str, float],
        artifacts: list[Path],
        tags: dict | None = None,
        steps: dict[str, dict[int, float]] | None = None,
        table: pd.DataFrame | None = None,
    ) -> None: ...
    def log_parent(
        self,
        metrics: dict[str, float],
        artifacts: list[Path],
        note: str | None = None,
        table: pd.DataFrame | None = None,
    ) -> None: ...
    def share_runs_view(self, key_metrics: list[str]) -> None: ...
    def finish(self, error: BaseException | None = None) -> None: ...

    def where(self) -> list[str]:
        """Lines that tell a person where the job's runs are (none without tracking)."""
        return []


class MlflowTracker(Tracker):
    """``start`` creates the job's parent run, ``log_system`` a finished child run with its artifacts,
    params and metrics, ``log_parent`` the job's metrics and artifacts, ``finish`` ends the parent
    FINISHED, FAILED (with the error as tag ``ragtrack.error``) or, interrupted, KILLED."""

    enabled = True

    def __init__(
        self,
        uri: str,
        experiment: str,
        artifact_location: str | None = None,
        timeout: int = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
    ):
        self.experiment_name = experiment
        with reported_as_one_line():
            configure_http(
                timeout, retries
            )  # every job: ragtrack.run_experiment restores the caller's environment after each
            self.uri = use_credentials(uri)
            self.client, self.experiment_id = _open_experiment(uri, experiment, artifact_location, timeout, retries)
        self.process = process_tag()
        self.unfinished: list[str] = []  # system runs made whose logging has not finished
        self.run_id = None
        self.run_name = ""
        self.view_shared = False
        self.dataset_inputs: list = []
        self.dataset_tags: dict[str, str] = {}  # the job's dataset name and hash, set on its system runs too

    def start(self, run_name: str, tags: dict, params: dict) -> None:
        tags = {**tags, TAG_PROCESS: self.process}
        self.dataset_tags = {key: tags[key] for key in (TAG_DATASET, TAG_DATASET_HASH) if key in tags}
        with reported_as_one_line():
            run = self.client.create_run(self.experiment_id, run_name=mask(run_name), tags=_masked_tags(tags))
            self.run_id, self.run_name = run.info.run_id, run_name
            self._log(self.run_id, params=params)
        log.info("MLflow: experiment %s, run %s (%s)", self.experiment_id, run_name, self.run_id)

    def log_dataset(self, identity: DatasetIdentity) -> None:
        """The job's dataset as an MLflow dataset input of the parent run and (logged with them) of every
        system's run: the UI's Datasets column and section show its name, digest and source."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        entity = Dataset(
            name=identity.name,
            digest=identity.digest,
            source_type=identity.provider,
            source=json.dumps({"uri": identity.source}),
            profile=json.dumps(identity.profile),
        )
        self.dataset_inputs = [DatasetInput(entity, [InputTag(DATASET_CONTEXT_TAG, DATASET_CONTEXT)])]
        with reported_as_one_line():
            self.client.log_inputs(self.run_id, self.dataset_inputs)

    def log_system(
        self,
        system: str,
        params: dict,
        metrics: dict[str, float],
        artifacts: list[Path],
        tags: dict | None = None,
        steps: dict[str, dict[int, float]] | None = None,
        table: pd.DataFrame | None = None,
    ) -> None:
        """``table``: logged with ``MlflowClient.log_table`` as :data:`QUERIES_TABLE` (the UI's table view)."""
        tags = {
            TAG_PARENT: self.run_id,
            TAG_SYSTEM: system,
            TAG_PROCESS: self.process,
            **self.dataset_tags,
            **(tags or {}),
        }
        with reported_as_one_line():
            run = self.client.create_run(
                self.experiment_id, run_name=mask(child_run_name(system, self.run_name)), tags=_masked_tags(tags)
            )
            self.unfinished.append(run.info.run_id)  # ended by finish() if logging it fails
            self._log_artifacts(run.info.run_id, artifacts)  # first: finding a run's artifact store reads the whole run
            if table is not None:
                self.client.log_table(run.info.run_id, table, QUERIES_TABLE)
            if self.dataset_inputs:
                self.client.log_inputs(run.info.run_id, self.dataset_inputs)
            self._log(run.info.run_id, params=params, metrics=metrics, steps=steps)
            self.client.set_terminated(run.info.run_id, "FINISHED")
            self.unfinished.remove(run.info.run_id)

    def log_parent(
        self,
        metrics: dict[str, float],
        artifacts: list[Path],
        note: str | None = None,
        table: pd.DataFrame | None = None,
    ) -> None:
        """The job's metrics and artifacts; ``note``: markdown shown as the run's description; ``table``:
        its systems per query, logged as :data:`QUERIES_TABLE`."""
        with reported_as_one_line():
            self._log_artifacts(self.run_id, artifacts)
            if table is not None:
                self.client.log_table(self.run_id, table, QUERIES_TABLE)
            self._log(self.run_id, metrics=metrics)
            if note:
                self.client.set_tag(self.run_id, TAG_NOTE, mask(note))

    def finish(self, error: BaseException | None = None) -> None:
        if self.run_id is None:
            return
        if error is None:
            with reported_as_one_line():
                self.client.set_terminated(self.run_id, "FINISHED")
            return
        status = "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED"
        writes = [
            (self.run_id, lambda: self.client.set_terminated(self.run_id, status))
        ]  # statuses first: a full disk has little room
        writes += [
            (run_id, lambda run_id=run_id: self.client.set_terminated(run_id, status)) for run_id in self.unfinished
        ]
        writes.append(
            (
                self.run_id,
                lambda: self.client.set_tag(self.run_id, TAG_ERROR, mask(f"{type(error).__name__}: {error}")[:5000]),
            )
        )
        for (
            run_id,
            write,
        ) in writes:  # as far as the store takes writes; the job reports ``error``, never a failure here
            try:
                write()
            except Exception as exc:
                log.warning(
                    "MLflow: the end of run %s (%s) could not be written: %s",
                    run_id,
                    status,
                    describe_fault(exc) or f"{type(exc).__name__}: {exc}",
                )

    def share_runs_view(self, key_metrics: list[str]) -> None:
        """The job's systems in the runs table with the key metric columns showing, stored the way the
        MLflow UI stores a shared view (an experiment tag :data:`TAG_VIEW_PREFIX` + the job's run id,
        opened by ``?viewStateShareKey=``): filtered on the job, sorted by the first key metric."""
        with reported_as_one_line():
            share_view(
                self.client,
                self.experiment_id,
                self.run_id,
                f"tags.`{TAG_PARENT}` = '{self.run_id}'",
                [f"metrics.`{metric_key(m)}`" for m in key_metrics],
            )
        self.view_shared = True

    def where(self) -> list[str]:
        """The run id, the run's page and (after :meth:`share_runs_view`) its systems' runs table: on the
        tracking server, or in ``ragtrack ui`` for a local store."""
        local = is_local_store(self.uri)
        base = ui_base(self.uri)
        lines = [
            f"MLflow run:    {self.run_id} (experiment {self.experiment_name!r})",
            f"Run page:      {base}/{run_page(self.experiment_id, self.run_id)}",
        ]
        if self.view_shared:
            lines.append(f"Runs table:    {base}/{runs_table_page(self.experiment_id, self.run_id)}")
        return lines + ([f"               after: ragtrack ui --tracking-uri {self.uri}"] if local else [])

    def _log(
        self, run_id: str, params: dict | None = None, metrics: dict | None = None, steps: dict | None = None
    ) -> None:
        """``steps``: ``{key: {step: value}}``, metrics MLflow draws against the step (e.g. recall by k)."""
        from mlflow.entities import Metric, Param

        param_list = [Param(k, mask(str(v))[:PARAM_LIMIT]) for k, v in (params or {}).items()]
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


def share_view(
    client: Any, experiment_id: str, key: str, search_filter: str, columns: list[str], order_by: str | None = None
) -> None:
    """A runs-table view stored the way the MLflow UI stores a shared one (experiment tag
    :data:`TAG_VIEW_PREFIX` + ``key``, opened by ``?viewStateShareKey=``): the runs ``search_filter``
    selects, ``columns`` showing, sorted by ``order_by`` (default: the first column), descending."""
    state = {
        "searchFilter": search_filter,
        "orderByKey": order_by or columns[0],
        "orderByAsc": False,
        "selectedColumns": columns,
        "columnOrder": columns,
        "columnWidths": {c: 170 for c in columns},
    }
    client.set_experiment_tag(experiment_id, f"{TAG_VIEW_PREFIX}{key}", json.dumps(state))


def ui_base(uri: str) -> str:
    """Where the UI of a store is: the tracking server, or ``ragtrack ui`` for a local store."""
    return UI_URL if is_local_store(uri) else uri.rstrip("/")


def _masked_tags(tags: Mapping) -> dict[str, str]:
    return {key: mask(str(value)) for key, value in tags.items()}


def tracking_target(cfg: Mapping) -> tuple[str, str, str | None, int, int]:
    """(uri, experiment, artifact location, timeout, retries) of a ``tracking`` config."""
    location = cfg.get("artifact_location")
    return (
        str(cfg["uri"]),
        str(cfg["experiment"]),
        None if location is None else str(location),
        int(cfg.get("timeout", DEFAULT_TIMEOUT)),
        int(cfg.get("retries", DEFAULT_RETRIES)),
    )
