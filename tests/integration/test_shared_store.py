"""A store and a terminal shared with other people and tools: an experiment deleted in the MLflow UI
stops a job in one line that says how to restore it, and a reader that closes the pipe early ends
ragtrack quietly."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support import PYTHON_CLI, TOY_JOB, ragtrack


@pytest.mark.slow  # a whole job or several: make test-slow
def test_an_experiment_deleted_in_the_ui_is_one_line_saying_how_to_restore_it(tmp_path: Path) -> None:
    first = ragtrack(tmp_path, *TOY_JOB, "retriever=[bm25]", "fusion=[]")
    assert first.returncode == 0, first.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("ragtrack-toy")
    client.delete_experiment(experiment.experiment_id)
    again = ragtrack(tmp_path, *TOY_JOB, "retriever=[bm25]", "fusion=[]")
    assert again.returncode == 2 and "Traceback" not in again.stderr, again.stderr[-3000:]
    assert again.stderr.strip().splitlines()[-1] == (
        "ragtrack: error: the MLflow experiment 'ragtrack-toy' was deleted (in the UI or with `mlflow experiments delete`): restore it with "
        f"`mlflow experiments restore --experiment-id {experiment.experiment_id}` against the same tracking URI, "
        "or log elsewhere with tracking.experiment=NAME"
    )
    elsewhere = ragtrack(tmp_path, *TOY_JOB, "retriever=[bm25]", "fusion=[]", "tracking.experiment=ragtrack-toy-2")
    assert elsewhere.returncode == 0, elsewhere.stderr[-3000:]


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    done = subprocess.run(
        f"{' '.join(PYTHON_CLI)} metrics | head -1; exit ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == "" and done.stdout.count("\n") == 1
