"""Shared fixtures (helpers that are not fixtures live in tests/support.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import SWEEP_KS, TOY, ChatServer


@pytest.fixture
def toy_path() -> Path:
    return TOY


@pytest.fixture(scope="session")
def toy_sweep(tmp_path_factory):
    """A real 5-job multirun (``ragtrack run -m experiment=rrf_k`` on the toy dataset, hashing encoder)
    into a temporary SQLite MLflow store; shared by the sweep, compare and UI tests. ``log``: what the
    terminal showed; ``job_logs``: the jobs' ragtrack.log files. It runs in a
    subprocess: Chroma's native threads in this process would deadlock tests that fork."""
    import os
    import subprocess
    import sys
    from types import SimpleNamespace

    root = tmp_path_factory.mktemp("sweep")
    command = [
        sys.executable,
        "-m",
        "ragtrack.pipeline.commands.cli",
        "run",
        "-m",
        "experiment=rrf_k",
        "dataset=toy",
        "encoder=hashing",
        f"fusion.rrf.k={','.join(map(str, SWEEP_KS))}",
    ]
    done = subprocess.run(
        command,
        cwd=root,
        env={**os.environ, "RAGTRACK_ROOT": str(root), "XDG_CACHE_HOME": str(root / ".cache")},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    job_logs = "".join(path.read_text() for path in sorted(root.glob("outputs/multiruns/*/*/ragtrack.log")))
    return SimpleNamespace(
        root=root,
        uri=f"sqlite:///{root}/mlruns/mlflow.db",
        experiment="ragtrack-toy",
        log=done.stdout + done.stderr,
        job_logs=job_logs,
        ks=SWEEP_KS,
    )


@pytest.fixture(scope="session", autouse=True)
def file_hash_memo(tmp_path_factory):
    """The memo of file hashes (ragtrack.core.checksums) of this test session, for its jobs too: tests
    leave no rows in the user's."""
    os.environ["RAGTRACK_HASH_MEMO"] = str(tmp_path_factory.mktemp("memo") / "file-hashes.sqlite")


@pytest.fixture(scope="session", autouse=True)
def user_cache(tmp_path_factory):
    """Jobs cache per user ($XDG_CACHE_HOME/ragtrack): this test session's own, never the real user's;
    ``tests.support.ragtrack`` gives each job root its own."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("user-cache"))


@pytest.fixture
def chat_server():
    """A local OpenAI-style chat server (:class:`tests.support.ChatServer`), stopped after the test."""
    server = ChatServer()
    yield server
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def config_resolvers():
    """The resolvers ragtrack's configs use, as the app registers them (tests compose configs directly)."""
    from ragtrack.pipeline.configuration.config import register_resolvers

    register_resolvers()


@pytest.fixture(autouse=True)
def no_tracking_uri_from_the_environment():
    """ragtrack honours MLFLOW_TRACKING_URI, and ``mlflow.set_tracking_uri`` sets it in os.environ for
    the rest of the process: no test may hand its store to the next one's jobs."""
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    yield
    os.environ.pop("MLFLOW_TRACKING_URI", None)
