"""Secrets by value, store paths: a real job given a secret through each source ragtrack treats as
secret (``${oc.env:}``, an ``*_env`` variable, URL credentials of the tracking server and of an LLM
endpoint, a header) writes and prints none of them anywhere, while the credentials work (an MLflow
server behind basic authentication, a chat server); an unreachable server with credentials is one line
without them; a store under a folder named with ``%``, ``?`` and ``#`` is where the folder says."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support import BasicAuthServer, ChatServer, free_port, ragtrack, server

NOTE, SERVICE_KEY, HEADER, LLM_PASSWORD, TRACKING_PASSWORD = (  # one per source, each distinct
    "oc-env-7d41c9b2e6",
    "env-var-7d41c9b2e6",
    "header-7d41c9b2e6",
    "llm:pw@7d41c9b2e6",
    "track-pw-7d41c9b2e6",
)
SECRETS = (NOTE, SERVICE_KEY, HEADER, LLM_PASSWORD, TRACKING_PASSWORD)


def _leaks(root: Path, *texts: str) -> list[str]:
    """Where any secret appears, as written or percent-encoded: files under ``root``, and ``texts``."""
    forms = {form for secret in SECRETS for form in (secret, secret.replace(":", "%3A").replace("@", "%40"))}
    found = [
        f"{path}: {form}"
        for path in root.rglob("*")
        if path.is_file()
        for form in forms
        if form.encode() in path.read_bytes()
    ]
    return found + [f"terminal: {form}" for form in forms for text in texts if form in text]


def test_secret_values_reach_no_store_output_cache_log_or_terminal(tmp_path: Path) -> None:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{tmp_path}/server.db",
        "--artifacts-destination",
        str(tmp_path / "server-artifacts"),
    ]
    chat = ChatServer()
    try:
        with server(
            command,
            f"http://127.0.0.1:{port}/health",
            tmp_path / "mlflow.log",
            env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        ):
            guard = BasicAuthServer("alice", TRACKING_PASSWORD, upstream=f"127.0.0.1:{port}")
            try:
                result = ragtrack(
                    tmp_path,
                    "run",
                    "-m",
                    "dataset=toy",
                    "encoder=hashing",
                    "fusion=[]",
                    "hydra.sweep.dir=outputs/sweep",
                    f"tracking.uri=http://alice:{TRACKING_PASSWORD}@127.0.0.1:{guard.port}",
                    "+vars.note=${oc.env:RT_TEST_NOTE}",
                    "run_name=nightly ${oc.env:RT_TEST_NOTE}",
                    "+vars.service.key_env=RT_TEST_SERVICE_KEY",
                    f"+vars.pasted={SERVICE_KEY}",  # pasted by mistake: known by value
                    f"+retriever.dense.chroma.headers.X-Api-Key={HEADER}",
                    "generator=openai",
                    "generator.model=m",
                    "generator.max_retries=0",
                    f"generator.base_url={chat.url.replace('http://', 'http://bob:llm%3Apw%407d41c9b2e6@')}",
                    env={"RT_TEST_NOTE": NOTE, "RT_TEST_SERVICE_KEY": SERVICE_KEY},
                )
            finally:
                guard.stop()
            client = MlflowClient(f"http://127.0.0.1:{port}")
            runs = client.search_runs([client.get_experiment_by_name("ragtrack-toy").experiment_id])
    finally:
        chat.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    assert guard.authorized > 10 and guard.refused == 0  # the probe and MLflow sent the URI's credentials
    assert {r["auth"] for r in chat.requests} == {"Basic " + base64.b64encode(f"bob:{LLM_PASSWORD}".encode()).decode()}
    assert _leaks(tmp_path, result.stdout, result.stderr) == [], [
        line for line in (result.stdout + result.stderr).splitlines() if "track-pw" in line
    ]
    parent = next(
        r for r in runs if "mlflow.parentRunId" not in r.data.tags and "ragtrack.comparison" not in r.data.tags
    )
    assert (
        parent.info.status == "FINISHED" and parent.info.run_name == "nightly ***" and len(runs) == 4
    )  # job, 2 systems, the sweep's comparison
    assert parent.data.params["vars.note"] == parent.data.params["vars.pasted"] == "***"
    assert "+retriever.dense.chroma.headers.X-Api-Key=***" in parent.data.tags["ragtrack.overrides"].split()
    job = tmp_path / "outputs" / "sweep" / "0"
    failed = json.loads((job / "systems" / "bm25" / "generation.json").read_text())["errors"][
        "q2"
    ]  # the ATP question: HTTP 500
    assert failed.startswith("http://127.0.0.1:") and "bob" not in failed  # the endpoint without its credentials
    assert "X-Api-Key: '***'" in (job / "config.yaml").read_text()
    assert (job / "ragtrack.log").is_file() and (tmp_path / "outputs" / "sweep" / "multirun.yaml").is_file()


def test_an_unreachable_server_with_credentials_is_one_line_without_them(tmp_path: Path) -> None:
    closed = free_port()
    uri = f"http://alice:{TRACKING_PASSWORD}@127.0.0.1:{closed}"
    line = f"ragtrack: error: MLflow tracking server http://127.0.0.1:{closed} is unreachable: connection refused (nothing listens there)"
    job = ragtrack(
        tmp_path,
        "run",
        "dataset=toy",
        "retriever=[bm25]",
        "fusion=[]",
        f"tracking.uri={uri}",
        "hydra.run.dir=outputs/job",
    )
    compare = ragtrack(tmp_path, "compare", "--tracking-uri", uri)
    for result in (job, compare):
        assert (
            result.returncode == 2
            and "Traceback" not in result.stderr
            and result.stderr.strip().splitlines()[-1] == line
        ), result.stderr[-3000:]
    assert (tmp_path / "outputs" / "job" / "FAILED").read_text() == line.removeprefix("ragtrack: error: ") + "\n"
    assert _leaks(tmp_path, job.stdout, job.stderr, compare.stdout, compare.stderr) == []


@pytest.mark.slow  # a whole job or sweep: make test-slow (CI's default run stays under 10 minutes)
def test_a_store_under_a_folder_named_with_percent_question_mark_and_hash(tmp_path: Path) -> None:
    """Before, ``%41`` read as ``A`` and ``?`` ended the path: the store went elsewhere, or nowhere."""
    root = tmp_path / "a?b#c%41"
    root.mkdir()
    result = ragtrack(root, "run", "dataset=toy", "retriever=[bm25]", "fusion=[]", "hydra.run.dir=outputs/job")
    assert result.returncode == 0, result.stderr[-3000:]
    store = root / "mlruns" / "mlflow.db"
    client = MlflowClient("sqlite:///" + str(store).replace("%", "%25").replace("?", "%3F"))
    experiment = client.get_experiment_by_name("ragtrack-toy")
    parent = next(r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" not in r.data.tags)
    assert parent.info.status == "FINISHED"
    assert experiment.artifact_location == (root / "mlruns" / "artifacts" / "ragtrack-toy").as_uri()
    assert (
        root / "mlruns" / "artifacts" / "ragtrack-toy" / parent.info.run_id / "artifacts" / "results.json"
    ).is_file()
    assert not (tmp_path / "a?b#cA").exists() and not (tmp_path / "a").exists()  # where the old URIs pointed
    compare = ragtrack(root, "compare", "--no-log")  # the default URI of the CLI, from RAGTRACK_ROOT
    assert compare.returncode == 0 and "bm25" in compare.stdout, compare.stderr[-3000:]


def test_a_settings_error_quoting_a_secret_value_shows_it_masked(tmp_path: Path) -> None:
    result = ragtrack(
        tmp_path,
        "run",
        "dataset=toy",
        "retriever=[bm25]",
        "fusion=[]",
        "depth=${oc.env:RT_TEST_NOTE}",
        env={"RT_TEST_NOTE": NOTE},
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == "ragtrack: error: depth: '***' is not allowed: an integer >= 1"
    assert _leaks(tmp_path, result.stdout, result.stderr) == []
