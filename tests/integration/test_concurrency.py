"""Concurrent jobs: three toy jobs started at once on one SQLite store and one cache get three output
folders, and each job's MLflow run carries the records of its own folder (overrides, config, results)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from mlflow.artifacts import download_artifacts
from mlflow.tracking import MlflowClient

from tests.support import PYTHON_CLI, TOY_JOB


@pytest.mark.slow  # a whole job or several: make test-slow
def test_three_jobs_started_at_once_keep_their_own_folders_and_records(tmp_path: Path) -> None:
    env = {**os.environ, "RAGTRACK_ROOT": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    seeds = (11, 12, 13)  # one override that tells the jobs apart
    jobs = [
        subprocess.Popen(
            [*PYTHON_CLI, *TOY_JOB, f"seed={seed}"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in seeds
    ]
    outputs = [job.communicate(timeout=600) for job in jobs]
    for job, (stdout, stderr) in zip(jobs, outputs):
        assert job.returncode == 0, stderr[-3000:]

    folders = sorted((tmp_path / "outputs" / "runs").iterdir())
    assert len(folders) == 3
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_[0-9a-f]{6}", folder.name) for folder in folders)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    client = MlflowClient(uri)
    for seed, (stdout, _) in zip(seeds, outputs):
        folder = Path(re.search(r"^Output folder: (.+)$", stdout, re.M).group(1))
        run_id = re.search(r"^MLflow run: +(\w+)", stdout, re.M).group(1)
        assert yaml.safe_load((folder / ".hydra" / "overrides.yaml").read_text()) == [
            "dataset=toy",
            "encoder=hashing",
            f"seed={seed}",
        ]
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED" and run.data.params["seed"] == str(seed)
        for artifact in (".hydra/overrides.yaml", ".hydra/config.yaml", "results.json", "config.yaml"):
            logged = Path(
                download_artifacts(
                    run_id=run_id, artifact_path=artifact, tracking_uri=uri, dst_path=str(tmp_path / "dl" / run_id)
                )
            )
            assert logged.read_bytes() == (folder / artifact).read_bytes(), artifact
    parents = client.search_runs(
        [client.get_experiment_by_name("ragtrack-toy").experiment_id], "tags.ragtrack.system IS NULL"
    )
    assert sorted(run.data.params["seed"] for run in parents) == ["11", "12", "13"]
