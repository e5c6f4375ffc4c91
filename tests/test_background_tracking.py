"""A sweep whose jobs share one process writes MLflow from a background process (pipeline.tracking.
BackgroundWriter). What lands in MLflow equals what the jobs write themselves (tracking.background=false),
a failed job still ends FAILED with its error, and a writer that cannot write fails the command with
one line and a non-zero exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.conftest import SWEEP_KS
from tests.helpers import TOY_JOB, ragtrack

TIMING = ("seconds", "bytes", "per_second", "from_cache")  # efficiency metrics: measured, so they differ run to run
PER_PROCESS_TAGS = {"ragtrack.process", "ragtrack.overrides", "ragtrack.sweep", "mlflow.runName", "mlflow.parentRunId"}


def _logged(uri: str, experiment: str) -> list[dict]:
    """Every job of the experiment in start order: its parent and child runs without run ids, times and
    per-process tags; timing metrics by key only."""
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], order_by=["attributes.start_time ASC"])
    jobs = []
    for parent in [r for r in runs if "mlflow.parentRunId" not in r.data.tags]:
        children = sorted((r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id), key=lambda r: r.info.run_name)
        jobs.append({run.info.run_name if run is not parent else "job": {
            "status": run.info.status,
            "metrics": {k: (None if any(t in k for t in TIMING) else v) for k, v in run.data.metrics.items()},
            "params": {k: v for k, v in run.data.params.items() if k != "tracking.background"},
            "tags": {k: v for k, v in run.data.tags.items() if k not in PER_PROCESS_TAGS and not k.startswith("mlflow.source")},
            "artifacts": sorted(a.path for a in client.list_artifacts(run.info.run_id)),
            "steps": {k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)] for k in ("recall", "ndcg")
                      if k in run.data.metrics},
        } for run in [parent, *children]})
    return jobs


def test_background_writes_equal_the_jobs_own_writes(toy_sweep, tmp_path) -> None:
    inline = ragtrack(tmp_path, "run", "-m", "experiment=rrf_k", "dataset=toy", "encoder=hashing",
                      f"fusion.rrf.k={','.join(map(str, SWEEP_KS))}", "tracking.background=false", timeout=600)
    assert inline.returncode == 0, inline.stderr[-3000:]
    background = _logged(toy_sweep.uri, toy_sweep.experiment)
    assert len(background) == len(SWEEP_KS) and all(set(job) == {"job", "bm25", "dense", "hybrid"} for job in background)
    assert all(run["status"] == "FINISHED" and run["metrics"] and run["artifacts"] for job in background for run in job.values())
    assert background == _logged(f"sqlite:///{tmp_path}/mlruns/mlflow.db", toy_sweep.experiment)


def test_a_failed_sweep_job_ends_failed_with_its_error(tmp_path) -> None:
    done = ragtrack(tmp_path, "run", "-m", *TOY_JOB[1:], "fusion.rrf.k=-1,60")
    assert done.returncode == 2 and "RRF k must be >= 0" in done.stderr and "Traceback" not in done.stderr
    (job,) = _logged(f"sqlite:///{tmp_path}/mlruns/mlflow.db", "ragtrack-toy")  # the sweep stops at its first failed job
    assert job["job"]["status"] == "FAILED" and "RRF k must be >= 0" in job["job"]["tags"]["ragtrack.error"]


def test_a_writer_that_cannot_write_fails_the_sweep_in_one_line(tmp_path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the store's folder should be")
    done = ragtrack(tmp_path, "run", "-m", *TOY_JOB[1:], "fusion.rrf.k=10,60", f"tracking.uri=sqlite:///{blocked}/mlflow.db")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("ragtrack: error:")]
    assert len(errors) == 1 and "MLflow logging failed" in errors[0] and "not-a-folder" in errors[0]


KILLED_SWEEP = """
import os, signal, sys, time
from pipeline.tracking import background_writer
writer = background_writer((sys.argv[1], "killed", None))
writer.submit(("start", "job-1", "a job", {"ragtrack.process": "this"}, {"p": 1}))
print(writer.process.pid, flush=True)
time.sleep(0.5)  # the queue's feeder thread has handed the operation to the pipe
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_writer_of_a_killed_sweep_writes_what_it_got_and_exits(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    done = subprocess.run([sys.executable, "-c", KILLED_SWEEP, uri], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    writer_pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 60
    while process_exists(writer_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not process_exists(writer_pid)
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("killed").experiment_id])
    assert run.info.run_name == "a job" and run.info.status == "RUNNING" and run.data.params == {"p": "1"}


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def test_a_sweep_that_does_not_log_in_the_background_ends_the_writer_started_ahead(tmp_path) -> None:
    """``ragtrack run -m`` starts a writer before the config is known; without MLflow it is ended unused."""
    done = ragtrack(tmp_path, "run", "-m", *TOY_JOB[1:], "fusion.rrf.k=10,60", "tracking=none")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / "mlruns").exists() and "Traceback" not in done.stderr
