"""Faults of the environment: an unreachable MLflow server, a read-only or full disk under the cache,
the output folder or the store, a file where a folder belongs. Each stops the job (or command) with
one line, exit code 2 and no traceback, and writes nothing half: no results, no MLflow run (a fault in
mid-build ends the run FAILED), no incomplete cache entry. ``describe_fault`` is the one table that
maps exceptions to those lines; its own cases run without a job.

Read-only and full disks are real file systems: as root a small tmpfs is mounted (read-only, or a few
kilobytes), otherwise a read-only folder is a chmod 555 one and the full-disk cases are skipped (their
message mapping is still tested in ``test_describe_fault``)."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import sqlite3
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ragtrack.core.cache import MANIFEST
from ragtrack.core.errors import InputError, RagtrackError, describe_fault
from tests.support import TOY_JOB, free_port, ragtrack

ROOT_USER = os.geteuid() == 0


def _mount(folder: Path, options: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], check=True)


@dataclass
class Place:
    """Folders of one test: ``ro`` read-only, ``full`` a nearly full disk (None without root), ``file`` a file."""

    root: Path
    ro: Path
    ro_reason: str
    full: Path | None
    file: Path


@pytest.fixture
def place(tmp_path: Path):
    ro, full, mounts = tmp_path / "ro", None, []
    if ROOT_USER:
        _mount(ro, "ro,size=64k")
        full = tmp_path / "full"
        _mount(full, "size=64k")
        mounts = [ro, full]
    else:
        ro.mkdir()
        ro.chmod(0o555)
    (tmp_path / "afile").write_text("not a folder")
    yield Place(tmp_path, ro, "read-only file system" if ROOT_USER else "permission denied", full, tmp_path / "afile")
    for folder in mounts:
        subprocess.run(["umount", str(folder)], check=False)
    if not ROOT_USER:
        ro.chmod(0o755)


@pytest.fixture(scope="module")
def fresh_store(tmp_path_factory) -> Path:
    from ragtrack.pipeline.records.tracking import ensure_store

    database = tmp_path_factory.mktemp("store") / "mlflow.db"
    ensure_store(f"sqlite:///{database}")
    return database


@pytest.fixture(scope="module")
def silent_server():
    """A loopback socket that accepts connections and never answers (closed by the test)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


ENOTDIR = "a file is in the way where a folder is needed"
EEXIST = "exists and is not a folder (a file is in the way?)"
ENOSPC = "no space left on the device (disk full)"


@dataclass
class Case:
    args: Callable[[Place, str], list[str]]  # (place, silent server URL) -> overrides of `ragtrack run`
    message: Callable[[Place, str], str]  # the one line after "ragtrack: error: "
    needs_full_disk: bool = False
    store: bool = True  # a fresh SQLite store in the root (the store is not the fault)
    run_failed: bool = False  # the fault comes mid-build: the job's MLflow run ends FAILED


def _server_down(p: Place, _: str) -> str:
    return f"http://127.0.0.1:{PORT}"


PORT = free_port()
CASES = {
    "store folder is a file": Case(
        lambda p, s: [f"tracking.uri=sqlite:///{p.file}/mlflow.db"],
        store=False,
        message=lambda p, s: f"MLflow store sqlite:///{p.file}/mlflow.db (tracking.uri): {p.file}: {EEXIST}",
    ),
    "store folder under a file": Case(
        lambda p, s: [f"tracking.uri=sqlite:///{p.file}/mlruns/mlflow.db"],
        store=False,
        message=lambda p, s: (
            f"MLflow store sqlite:///{p.file}/mlruns/mlflow.db (tracking.uri): {p.file}/mlruns: {ENOTDIR}"
        ),
    ),
    "store on a read-only disk": Case(
        lambda p, s: [f"tracking.uri=sqlite:///{p.ro}/mlruns/mlflow.db"],
        store=False,
        message=lambda p, s: (
            f"MLflow store sqlite:///{p.ro}/mlruns/mlflow.db (tracking.uri): {p.ro}/mlruns: {p.ro_reason}"
        ),
    ),
    "store on a full disk": Case(
        lambda p, s: [f"tracking.uri=sqlite:///{p.full}/mlflow.db"],
        store=False,
        needs_full_disk=True,
        message=lambda p, s: (
            f"MLflow store sqlite:///{p.full}/mlflow.db (tracking.uri): disk full (SQLite: database or disk is full)"
        ),
    ),
    "server: nothing listens": Case(
        lambda p, s: [f"tracking.uri=http://127.0.0.1:{PORT}"],
        store=False,
        message=lambda p, s: (
            f"MLflow tracking server http://127.0.0.1:{PORT} is unreachable: connection refused (nothing listens there)"
        ),
    ),
    "server: never answers": Case(
        lambda p, s: [f"tracking.uri={s}", "tracking.timeout=2"],
        store=False,
        message=lambda p, s: f"MLflow tracking server {s} is unreachable: no answer within 2 s (tracking.timeout)",
    ),
    "cache folder is a file": Case(
        lambda p, s: [f"paths.cache_dir={p.file}"],
        message=lambda p, s: f"the cache folder cannot be written: {p.file}: {EEXIST}",
    ),
    "cache folder under a file": Case(
        lambda p, s: [f"paths.cache_dir={p.file}/cache"],
        message=lambda p, s: f"the cache folder cannot be written: {p.file}/cache: {ENOTDIR}",
    ),
    "cache on a read-only disk": Case(
        lambda p, s: [f"paths.cache_dir={p.ro}/cache"],
        message=lambda p, s: f"the cache folder cannot be written: {p.ro}/cache: {p.ro_reason}",
    ),
    "cache disk fills up": Case(
        lambda p, s: [
            f"paths.cache_dir={p.full}/cache",
            "retriever=[dense]",
            "fusion=[]",
            "retriever.dense.chroma.build=always",
        ],
        needs_full_disk=True,
        run_failed=True,  # the embeddings fit in 64k, Chroma's database does not
        message=lambda p, s: (
            f"cannot build the dense chroma cache entry in {p.full}/cache/chroma: disk full (SQLite: database or disk is full)"
        ),
    ),
    "output folder under a file": Case(
        lambda p, s: [f"hydra.run.dir={p.file}/out"],
        message=lambda p, s: f"the output folder cannot be written: {p.file}/out: {ENOTDIR}",
    ),
    "output on a read-only disk": Case(
        lambda p, s: [f"hydra.run.dir={p.ro}/out"],
        message=lambda p, s: f"the output folder cannot be written: {p.ro}/out: {p.ro_reason}",
    ),
    "log folder on a read-only disk": Case(
        lambda p, s: [f"paths.log_dir={p.ro}/outputs"],
        message=lambda p, s: f"the output folder cannot be written: {p.ro}/outputs: {p.ro_reason}",
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_fault_is_one_line_exit_2_and_nothing_written(
    name: str, place: Place, fresh_store: Path, silent_server: str
) -> None:
    case = CASES[name]
    if case.needs_full_disk and place.full is None:
        pytest.skip(
            "a full disk needs a small tmpfs, which only root can mount; the message mapping is in test_describe_fault"
        )
    if case.store:
        (place.root / "mlruns").mkdir()
        shutil.copy(fresh_store, place.root / "mlruns" / "mlflow.db")
    started = time.monotonic()
    result = ragtrack(place.root, *TOY_JOB, *case.args(place, silent_server), timeout=120)
    seconds = time.monotonic() - started
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"ragtrack: error: {case.message(place, silent_server)}"
    assert seconds < 60, "a fault stops the job in seconds"
    assert_nothing_half_written(place, case.run_failed)


def assert_nothing_half_written(place: Place, run_failed: bool) -> None:
    searched = [place.root / "outputs", place.ro, *([place.full] if place.full else [])]
    assert not [p for folder in searched if folder.is_dir() for p in folder.rglob("results.json")], (
        "results were written"
    )
    assert not [p for folder in searched[:2] if folder.is_dir() for p in folder.rglob("*.trec")], (
        "run files were written"
    )
    for cache in [place.root / ".cache" / "ragtrack", *((place.full / "cache",) if place.full else ())]:
        partial = [p for p in cache.glob("*/*") if p.is_dir() and not (p / MANIFEST).exists()] if cache.is_dir() else []
        assert not partial, f"incomplete cache entries: {partial}"
        if not run_failed:
            assert not (cache.is_dir() and list(cache.glob(f"*/*/{MANIFEST}"))), "a cache entry was built"
    store = place.root / "mlruns" / "mlflow.db"
    if store.exists():
        client = MlflowClient(f"sqlite:///{store}")
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        assert [r.info.status for r in runs] == (["FAILED"] if run_failed else [])


def test_output_disk_fills_up(tmp_path: Path, fresh_store: Path) -> None:
    """The output folder's disk fills up while results are written: one line, the result files are
    removed, FAILED names the error, and the job's MLflow run ends FAILED."""
    if not ROOT_USER:
        pytest.skip("a full disk needs a small tmpfs, which only root can mount")
    out = tmp_path / "small"
    _mount(out, "size=28k")
    try:
        (tmp_path / "mlruns").mkdir()
        shutil.copy(fresh_store, tmp_path / "mlruns" / "mlflow.db")
        result = ragtrack(tmp_path, *TOY_JOB, f"hydra.run.dir={out}/job")
        assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
        line = result.stderr.strip().splitlines()[-1]
        assert line == f"ragtrack: error: {ENOSPC}"  # raised on closing a file: no file name
        assert not [
            p
            for p in out.rglob("*")
            if p.name in ("results.json", "comparison.csv", "per_query.csv", "runs", "systems")
        ]
        assert (out / "job" / "FAILED").read_text().strip() == line.removeprefix("ragtrack: error: ")
        client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
        (run,) = client.search_runs(
            [client.get_experiment_by_name("ragtrack-toy").experiment_id], "tags.ragtrack.system IS NULL"
        )
        assert run.info.status == "FAILED"
    finally:
        subprocess.run(["umount", str(out)], check=False)


def test_store_disk_fills_up_while_logging(tmp_path: Path, fresh_store: Path) -> None:
    """The store's disk fills up while the job logs its systems: one line (no MLflow traceback, no
    doubled prefix), exit 2; the job's run and the system runs it had not finished end FAILED as far
    as the store takes writes, and a run the full store could not end is ended KILLED by the next job
    (docs/reliability.md)."""
    if not ROOT_USER:
        pytest.skip("a full disk needs a small tmpfs, which only root can mount")
    store = tmp_path / "mlruns"
    _mount(store, f"size={fresh_store.stat().st_size // 1024 + 256}k")
    try:
        shutil.copy(fresh_store, store / "mlflow.db")
        result = ragtrack(tmp_path, *TOY_JOB)
        assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
        assert (
            result.stderr.strip()
            == "ragtrack: error: MLflow logging failed: disk full (SQLite: database or disk is full)"
        )
        client = MlflowClient(f"sqlite:///{store}/mlflow.db")
        experiment = client.get_experiment_by_name("ragtrack-toy").experiment_id
        runs = client.search_runs([experiment])
        left = {run.info.run_id for run in runs if run.info.status == "RUNNING"}
        parent = next(run for run in runs if "mlflow.parentRunId" not in run.data.tags)
        assert parent.info.status in ("FAILED", "RUNNING") and {run.info.status for run in runs} <= {
            "FAILED",
            "RUNNING",
            "FINISHED",
        }
        subprocess.run(
            ["mount", "-o", "remount,size=64m", str(store)], check=True
        )  # room again: the next job ends what was left
        assert ragtrack(tmp_path, *TOY_JOB).returncode == 0
        after = {run.info.run_id: run.info.status for run in client.search_runs([experiment])}
        assert all(after[run_id] == "KILLED" for run_id in left) and after[parent.info.run_id] != "FINISHED"
    finally:
        subprocess.run(["umount", "--lazy", str(store)], check=False)  # the test's MLflow client still holds the file


def test_a_fault_while_handling_an_error_is_told_as_itself() -> None:
    """Ending a run after ``MLflow logging failed: ...`` fails too: its own fault, not the first error again."""
    try:
        try:
            raise RagtrackError("MLflow logging failed: disk full")
        except RagtrackError:
            raise OSError(errno.ENOSPC, "No space left on device", "/m/x")
    except OSError as second:
        assert describe_fault(second) == "/m/x: no space left on the device (disk full)"


def test_cli_commands_report_faults_in_one_line(tmp_path: Path) -> None:
    """compare and reproduce: an unreachable server fails at once; compare's plot on a read-only path."""
    for command in (["compare"], ["reproduce", "0123abcd"]):
        started = time.monotonic()
        result = ragtrack(tmp_path, *command, "--tracking-uri", f"http://127.0.0.1:{PORT}")
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert result.stderr.strip() == (
            f"ragtrack: error: MLflow tracking server http://127.0.0.1:{PORT} is unreachable: "
            "connection refused (nothing listens there)"
        )
        assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            lambda: OSError(errno.ENOSPC, "No space left on device", "/data/x"),
            "/data/x: no space left on the device (disk full)",
        ),
        (lambda: OSError(errno.EDQUOT, "Disk quota exceeded", "/data/x"), "/data/x: disk quota exceeded"),
        (
            lambda: OSError(errno.EFBIG, "File too large", "/data/x"),
            "/data/x: file too large for this file system or process limit",
        ),
        (lambda: OSError(errno.EROFS, "Read-only file system", "/data"), "/data: read-only file system"),
        (lambda: PermissionError(errno.EACCES, "Permission denied", "/data"), "/data: permission denied"),
        (lambda: NotADirectoryError(errno.ENOTDIR, "Not a directory", "/a/b"), f"/a/b: {ENOTDIR}"),
        (lambda: IsADirectoryError(errno.EISDIR, "Is a directory", "/a"), "/a: is a folder, not a file"),
        (lambda: OSError(errno.EXDEV, "Invalid cross-device link", "/a", "/b"), None),
        (
            lambda: OSError("3072 requested and 3040 written"),
            "disk full? a write was cut short (3072 requested and 3040 written)",
        ),
        (lambda: sqlite3.OperationalError("database or disk is full"), "disk full (SQLite: database or disk is full)"),
        (
            lambda: sqlite3.OperationalError("attempt to write a readonly database"),
            "read-only database (SQLite: attempt to write a readonly database)",
        ),
        (lambda: sqlite3.OperationalError("no such table: runs"), None),
        (
            lambda: UnicodeEncodeError("utf-8", "\udc80", 0, 1, "surrogates not allowed"),
            "text that cannot be encoded or decoded: 'utf-8' codec can't encode character '\\udc80' in position 0: surrogates not allowed",
        ),
        (lambda: RagtrackError("a user mistake\nsecond line"), "a user mistake"),
        (lambda: InputError("/d/corpus.jsonl", "NUL byte in line", 3), "/d/corpus.jsonl:3: NUL byte in line"),
        (lambda: ZeroDivisionError("division by zero"), None),
        (lambda: KeyError("x"), None),
    ],
)
def test_describe_fault(make, expected) -> None:
    assert describe_fault(make()) == expected


def test_describe_fault_finds_the_cause_inside_library_errors() -> None:
    """MLflow wraps SQLAlchemy, which wraps sqlite3; requests and httpx raise their own classes."""
    import httpx
    import requests

    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as inner:
            raise RuntimeError("(sqlite3.OperationalError) database or disk is full [SQL: INSERT ...]") from inner
    except RuntimeError as wrapped:
        assert describe_fault(wrapped) == "disk full (SQLite: database or disk is full)"
    refused = requests.exceptions.ConnectionError("HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded")
    assert (
        describe_fault(refused) == "cannot connect: HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded"
    )
    assert (
        describe_fault(requests.exceptions.ReadTimeout("read timed out"))
        == "no answer within the time-out: read timed out"
    )
    assert (
        describe_fault(httpx.ConnectError("[Errno 111] Connection refused"))
        == "cannot connect: [Errno 111] Connection refused"
    )
    assert describe_fault(httpx.ReadTimeout("timed out")) == "no answer within the time-out: timed out"


def test_a_failed_job_removes_only_what_it_wrote(tmp_path: Path) -> None:
    """In a folder the user gives (``hydra.run.dir``) that already holds their files, a job that fails
    removes what it wrote and nothing else: not their run file, not a results.json of an earlier job,
    not the folders they made."""
    job = tmp_path / "job"
    (job / "runs").mkdir(parents=True)
    (job / "runs" / "final_submission.trec").write_text("q1 Q0 d1 1 1.0 mine\n")
    (job / "results.json").write_text('{"earlier": true}')
    (job / "config.yaml").write_text("mine: true\n")
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")  # found, so the job starts; it fails when the reranker loads it
    done = ragtrack(
        tmp_path,
        "run",
        "dataset=toy",
        "retriever=[bm25]",
        "fusion=[]",
        "reranker=[cross_encoder]",
        "tracking=none",
        f"reranker.cross_encoder.model={broken}",
        f"hydra.run.dir={job}",
    )
    assert done.returncode == 2 and "cannot load" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert (job / "runs" / "final_submission.trec").read_text() == "q1 Q0 d1 1 1.0 mine\n"
    assert (job / "results.json").read_text() == '{"earlier": true}' and (
        job / "config.yaml"
    ).read_text() == "mine: true\n"
    assert sorted(p.name for p in (job / "runs").iterdir()) == ["final_submission.trec"]  # the job's bm25.trec is gone
    assert (job / "FAILED").is_file() and not (job / "systems").exists()
