"""What a sweep logs to MLflow: every job with its system runs, the same content when the sweep runs
again, a failed job FAILED with its error, and a store that cannot be written fails the command with
one line and a non-zero exit."""

from __future__ import annotations

import re

import pytest
from mlflow.tracking import MlflowClient

from tests.support import SWEEP_KS, TOY_JOB, ragtrack

TIMING = (
    "seconds",
    "bytes",
    "per_second",
    "from_cache",
    "latency/",
)  # efficiency and latency metrics: measured, so they differ run to run
PER_PROCESS_TAGS = {"ragtrack.process", "ragtrack.overrides", "ragtrack.sweep", "mlflow.runName", "mlflow.parentRunId"}


def _logged(uri: str, experiment: str) -> list[dict]:
    """Every job of the experiment in start order (not the runs ``ragtrack compare`` logs): its parent and child runs without run ids, times and
    per-process tags; timing metrics by key only."""
    client = MlflowClient(uri)
    runs = client.search_runs(
        [client.get_experiment_by_name(experiment).experiment_id], order_by=["attributes.start_time ASC"]
    )
    jobs = []
    for parent in [
        r for r in runs if "mlflow.parentRunId" not in r.data.tags and "ragtrack.comparison" not in r.data.tags
    ]:
        children = sorted(
            (r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id),
            key=lambda r: r.data.tags["ragtrack.system"],
        )
        jobs.append(
            {
                run.data.tags["ragtrack.system"] if run is not parent else "job": {
                    "status": run.info.status,
                    "metrics": {k: (None if any(t in k for t in TIMING) else v) for k, v in run.data.metrics.items()},
                    "params": dict(run.data.params),
                    "tags": {
                        k: re.sub(r"/runs/\w+/", "/runs/<run id>/", v)
                        for k, v in run.data.tags.items()  # the note links its run
                        if k not in PER_PROCESS_TAGS and not k.startswith("mlflow.source")
                    },
                    "artifacts": sorted(a.path for a in client.list_artifacts(run.info.run_id)),
                    "steps": {
                        k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)]
                        for k in ("recall", "ndcg")
                        if k in run.data.metrics
                    },
                }
                for run in [parent, *children]
            }
        )
    return jobs


@pytest.mark.slow  # a whole job or several: make test-slow (the default run stays under 10 minutes on 2 cores)
def test_a_sweep_logs_every_job_and_the_same_content_when_run_again(toy_sweep, tmp_path) -> None:
    inline = ragtrack(
        tmp_path,
        "run",
        "-m",
        "experiment=rrf_k",
        "dataset=toy",
        "encoder=hashing",
        f"fusion.rrf.k={','.join(map(str, SWEEP_KS))}",
        timeout=600,
    )
    assert inline.returncode == 0, inline.stderr[-3000:]
    first = _logged(toy_sweep.uri, toy_sweep.experiment)
    assert len(first) == len(SWEEP_KS) and all(set(job) == {"job", "bm25", "dense", "hybrid"} for job in first)
    assert all(
        run["status"] == "FINISHED" and run["metrics"] and run["artifacts"] for job in first for run in job.values()
    )
    assert first == _logged(f"sqlite:///{tmp_path}/mlruns/mlflow.db", toy_sweep.experiment)


@pytest.mark.slow  # a whole job or sweep: make test-slow (CI's default run stays under 10 minutes)
def test_a_failed_sweep_job_ends_failed_with_its_error(tmp_path) -> None:
    """A model folder that exists but holds no model fails when the reranker first loads it, after the job
    has started logging. (A bad setting, a missing model folder included, stops a job before it logs
    anything: tests/integration/test_hostile_settings.py.)"""
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    done = ragtrack(
        tmp_path,
        "run",
        "-m",
        "dataset=toy",
        "retriever=[bm25]",
        "fusion=[]",
        "reranker=[cross_encoder]",
        f"reranker.cross_encoder.model={broken}",
        "reranker.cross_encoder.depth=5,10",
    )
    assert done.returncode == 2 and "cannot load" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    (job,) = _logged(
        f"sqlite:///{tmp_path}/mlruns/mlflow.db", "ragtrack-toy"
    )  # the sweep stops at its first failed job
    assert job["job"]["status"] == "FAILED" and "cannot load" in job["job"]["tags"]["ragtrack.error"]


def test_a_store_that_cannot_be_written_fails_the_sweep_in_one_line(tmp_path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the store's folder should be")
    done = ragtrack(
        tmp_path, "run", "-m", *TOY_JOB[1:], "fusion.rrf.k=10,60", f"tracking.uri=sqlite:///{blocked}/mlflow.db"
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("ragtrack: error:")]
    assert len(errors) == 1 and "MLflow store" in errors[0] and "not-a-folder" in errors[0]


def test_a_sweep_without_tracking_writes_no_store(tmp_path) -> None:
    done = ragtrack(tmp_path, "run", "-m", *TOY_JOB[1:], "fusion.rrf.k=10,60", "tracking=none")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / "mlruns").exists() and "Traceback" not in done.stderr


def test_the_dense_runs_say_what_encoded_them(toy_sweep) -> None:
    """Every job, its runs from the cache included, logs the device and backend that encoded the
    embeddings as params of the dense run (not as metrics), and results.json has them too."""
    import json

    jobs = _logged(toy_sweep.uri, toy_sweep.experiment)
    for job in jobs:
        assert {k: v for k, v in job["dense"]["params"].items() if k.startswith("encoded_by.")} == {
            "encoded_by.device": "cpu",
            "encoded_by.backend": "numpy",
        }
        assert not any(k.startswith("encoded_by.") for k in job["dense"]["metrics"])
    results = [json.loads(path.read_text()) for path in toy_sweep.root.rglob("results.json")]
    assert results and all(r["efficiency"]["dense"]["encoded_by.device"] == "cpu" for r in results)
