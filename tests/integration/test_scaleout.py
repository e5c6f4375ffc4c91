"""Scale-out: a Chroma server and an MLflow server give the embedded stores' metrics; joblib and Ray
sweeps build each index once; concurrent first use of the MLflow SQLite store and of one cache key."""

from __future__ import annotations

import multiprocessing
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ragtrack.core.cache import MANIFEST, Cache
from ragtrack.core.data import load_beir
from ragtrack.retrievers.dense import DenseRetriever
from ragtrack.retrievers.encoders import HashingEncoder
from tests.support import TOY, TOY_JOB, free_port, ragtrack, server, systems


@pytest.fixture(scope="module")
def embedded(tmp_path_factory) -> dict:
    """The toy job on the embedded defaults (SQLite store, Chroma PersistentClient)."""
    root = tmp_path_factory.mktemp("embedded")
    result = ragtrack(root, *TOY_JOB, "hydra.run.dir=outputs/job")
    assert result.returncode == 0, result.stderr[-3000:]
    return systems(root / "outputs" / "job")


def _create_store(uri: str, queue) -> None:
    from ragtrack.pipeline.records.tracking import MlflowTracker

    try:
        tracker = MlflowTracker(uri, "parallel")
        tracker.start("job", {}, {"p": 1})
        tracker.finish()
        queue.put("ok")
    except Exception as exc:  # reported to the parent test
        queue.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.slow
def test_four_processes_create_one_new_mlflow_store(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    context = multiprocessing.get_context("spawn")  # fork would copy Chroma's native threads and can hang
    queue = context.Queue()
    workers = [context.Process(target=_create_store, args=(uri, queue)) for _ in range(4)]
    for worker in workers:
        worker.start()
    outcomes = [queue.get(timeout=240) for _ in workers]
    for worker in workers:
        worker.join(30)
    assert outcomes == ["ok"] * 4
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("parallel").experiment_id])
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}


def _build_dense(cache_dir: str, queue) -> None:
    dataset = load_beir(TOY)
    cache = Cache(cache_dir)
    retriever = DenseRetriever(HashingEncoder(), chroma={"build": "always"})
    retriever.index(dataset.corpus, cache)
    queue.put((cache.builds, retriever.search(dataset.queries, 100).scores))


def test_concurrent_builders_of_one_chroma_folder_build_it_once(tmp_path) -> None:
    """Four processes on a cold cache: one builds (into a private folder, renamed), three wait and reuse."""
    context = multiprocessing.get_context("spawn")  # fork would copy Chroma's native threads and can hang
    queue = context.Queue()
    workers = [context.Process(target=_build_dense, args=(str(tmp_path), queue)) for _ in range(4)]
    for worker in workers:
        worker.start()
    outcomes = [queue.get(timeout=240) for _ in workers]
    for worker in workers:
        worker.join(30)
    builds = [b for builds, _ in outcomes for b in builds]
    assert sorted(b.split("/")[0] for b in builds) == ["chroma", "embeddings"]
    assert all(scores == outcomes[0][1] for _, scores in outcomes)
    folders = [p for p in (tmp_path / "chroma").iterdir() if p.is_dir()]  # no temporary folder left
    assert [p.name for p in folders] == [b.split("/")[1] for b in builds if b.startswith("chroma/")]
    assert (folders[0] / MANIFEST).exists()


@pytest.mark.slow
def test_chroma_server_gives_the_embedded_metrics(tmp_path, embedded) -> None:
    port = free_port()
    command = [
        sys.executable,
        "-c",
        "import sys; from chromadb.cli.cli import app; sys.argv[0] = 'chroma'; app()",
        "run",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--path",
        str(tmp_path / "chroma-server"),
    ]
    with server(command, f"http://127.0.0.1:{port}/api/v2/heartbeat", tmp_path / "chroma.log"):
        http = (
            "retriever.dense.chroma.mode=http",
            "retriever.dense.chroma.host=127.0.0.1",
            f"retriever.dense.chroma.port={port}",
            "retriever.dense.chroma.token_env=RAGTRACK_TEST_CHROMA_TOKEN",
        )
        env = {"RAGTRACK_TEST_CHROMA_TOKEN": "chroma-token-must-not-leak"}
        first = ragtrack(tmp_path, *TOY_JOB, "tracking=none", *http, "hydra.run.dir=outputs/first", env=env)
        assert first.returncode == 0, first.stderr[-3000:]
        # a second job with a cold local cache finds the complete collection on the server
        again = ragtrack(
            tmp_path,
            *TOY_JOB,
            "tracking=none",
            *http,
            "paths.cache_dir=" + str(tmp_path / "other-cache"),
            "hydra.run.dir=outputs/again",
            env=env,
        )
        assert again.returncode == 0, again.stderr[-3000:]
        _untrusted_server_collections_are_rebuilt(port, tmp_path / "cache-3")
    assert "chroma server: built collection" in (tmp_path / "outputs/first/ragtrack.log").read_text()
    assert "chroma server: reusing collection" in (tmp_path / "outputs/again/ragtrack.log").read_text()
    assert systems(tmp_path / "outputs" / "first") == embedded == systems(tmp_path / "outputs" / "again")
    assert not (tmp_path / "cache" / "chroma").exists()
    leaked = [
        p for p in (tmp_path / "outputs").rglob("*") if p.is_file() and b"chroma-token-must-not-leak" in p.read_bytes()
    ]
    assert leaked == []


def _untrusted_server_collections_are_rebuilt(port: int, cache_dir: Path) -> None:
    """A collection without its completion mark and a temporary build of a dead process are dropped."""
    dataset = load_beir(TOY)
    settings = {"mode": "http", "host": "127.0.0.1", "port": port, "hnsw": {"ef_search": 50}}
    first, cache = DenseRetriever(HashingEncoder(), chroma=settings), Cache(cache_dir)
    first.index(dataset.corpus, cache)
    expected = first.search(dataset.queries, 100).scores
    name = cache.builds[-1].split("/")[1]
    client = first._client
    client.get_collection(name).modify(metadata={"ragtrack.process": "elsewhere:1:1"})  # completion mark gone
    dead = subprocess.Popen(["true"])
    dead.wait()
    client.create_collection(
        f"{name}-tmp-killed", metadata={"ragtrack.process": f"{socket.gethostname()}:{dead.pid}:1"}
    )
    second, cache = DenseRetriever(HashingEncoder(), chroma=settings), Cache(cache_dir)
    second.index(dataset.corpus, cache)
    assert cache.builds == [f"chroma-server/{name}"]
    assert [c.name for c in client.list_collections() if c.name.startswith(name)] == [name]
    assert second.search(dataset.queries, 100).scores == expected


@pytest.mark.slow
def test_mlflow_server_gives_the_embedded_metrics(tmp_path, embedded) -> None:
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
    uri = f"http://127.0.0.1:{port}"
    with server(command, f"{uri}/health", tmp_path / "mlflow.log", env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}):
        result = ragtrack(tmp_path, *TOY_JOB, f"tracking.uri={uri}", "hydra.run.dir=outputs/job")
        assert result.returncode == 0, result.stderr[-3000:]
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("ragtrack-toy")
        runs = client.search_runs([experiment.experiment_id])
        parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
        assert parent.info.status == "FINISHED" and len(runs) == 4
        assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"results.json", "config.yaml", ".hydra"}
    assert experiment.artifact_location.startswith("mlflow-artifacts:")
    assert (
        tmp_path / "server-artifacts" / experiment.experiment_id / parent.info.run_id / "artifacts" / "results.json"
    ).exists()
    assert not (tmp_path / "mlruns").exists()
    logged = {
        key: value for key, value in parent.data.metrics.items() if "/latency/" not in key
    }  # quantiles: not in results.json's systems
    assert logged == {
        f"{system}/{metric.replace('@', '_at_')}": value
        for system, metrics in embedded.items()
        for metric, value in metrics.items()
    }
    assert systems(tmp_path / "outputs" / "job") == embedded


def _sweep_results(sweep: Path) -> dict[str, dict]:
    """Each job's systems by its overrides."""
    return {(job / ".hydra" / "overrides.yaml").read_text(): systems(job) for job in sweep.glob("[0-9]*")}


SWEEP = ("run", "--multirun", "dataset=toy", "encoder=hashing", "fusion.rrf.k=10,20,40,60", "tracking=none")


@pytest.mark.slow
def test_joblib_sweep_builds_each_index_once(tmp_path) -> None:
    """Four jobs, two joblib workers, cold cache: each index is built by one job; the same numbers as serially."""
    (tmp_path / "parallel").mkdir()
    (tmp_path / "serial").mkdir()
    parallel = ragtrack(
        tmp_path / "parallel",
        *SWEEP,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "hydra.sweep.dir=outputs/sweep",
    )
    assert parallel.returncode == 0, parallel.stderr[-3000:]
    serial = ragtrack(tmp_path / "serial", *SWEEP, "hydra.sweep.dir=outputs/sweep")
    assert serial.returncode == 0, serial.stderr[-3000:]
    logs = [p.read_text() for p in (tmp_path / "parallel" / "outputs" / "sweep").glob("*/ragtrack.log")]
    assert len(logs) == 4
    builds = [
        line.split("cache build: ")[1].rsplit(" (", 1)[0].rsplit(" ", 1)[0]
        for log in logs
        for line in log.splitlines()
        if "cache build: " in line
    ]
    assert sorted(builds) == ["bm25", "bm25 run", "dense embeddings", "dense run"]  # each once
    assert sum(log.count("cache hit") for log in logs) >= 3 * 2  # the three other jobs reused at least both runs
    parallel_results = _sweep_results(tmp_path / "parallel" / "outputs" / "sweep")
    assert len(parallel_results) == 4 and parallel_results == _sweep_results(tmp_path / "serial" / "outputs" / "sweep")


@pytest.mark.slow
def test_ray_sweep_on_a_local_instance(tmp_path) -> None:
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="the `scale` extra installs the Ray launcher")
    result = ragtrack(
        tmp_path,
        "run",
        "--multirun",
        "dataset=toy",
        "encoder=hashing",
        "fusion.rrf.k=20,60",
        "tracking=none",
        "hydra/launcher=ray",
        "hydra.launcher.ray.init.address=local",
        "+hydra.launcher.ray.init.num_cpus=2",
        "+hydra.launcher.ray.init.include_dashboard=false",
        "hydra.sweep.dir=outputs/sweep",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = _sweep_results(tmp_path / "outputs" / "sweep")
    assert len(results) == 2
    assert all(set(found) == {"bm25", "dense", "hybrid"} for found in results.values())
