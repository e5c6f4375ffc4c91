"""A process that keeps running (a notebook, a service) and calls ``ragtrack.run_experiment`` again:
each call reads the dataset's files as they are now (an edited qrels file is scored, its hash logged),
opens the MLflow store as it is now (a deleted store is created anew, a deleted experiment is one
line), and calls from two threads both succeed, one after the other."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.commands import api
from tests.support import TOY

JOB = ["dataset=beir", "retriever=[bm25]", "fusion=[]", "encoder=hashing", "evaluator=[ranking]"]


def _job(tmp_path: Path, *overrides: str) -> api.ExperimentResult:
    return api.run_experiment(
        [
            *JOB,
            f"dataset.path={tmp_path / 'data'}",
            f"paths.root_dir={tmp_path}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            f"tracking.uri=sqlite:///{tmp_path}/store/mlflow.db",
            *overrides,
        ]
    )


@pytest.fixture
def data(tmp_path: Path) -> Path:
    shutil.copytree(TOY, tmp_path / "data")
    return tmp_path / "data"


def test_an_edited_qrels_file_is_read_again(tmp_path: Path, data: Path) -> None:
    first = _job(tmp_path)
    qrels = data / "qrels" / "test.tsv"
    lines = qrels.read_text().splitlines()
    qrels.write_text("\n".join(lines[:-1]) + "\n")  # one judgment fewer
    second = _job(tmp_path)
    assert second.results["dataset"]["hash"] != first.results["dataset"]["hash"]
    client = MlflowClient(f"sqlite:///{tmp_path}/store/mlflow.db")
    assert client.get_run(second.run_id).data.tags["ragtrack.dataset_hash"] == second.results["dataset"]["hash"]


def test_a_deleted_store_is_created_anew_and_a_deleted_experiment_is_one_line(tmp_path: Path, data: Path) -> None:
    _job(tmp_path)
    shutil.rmtree(tmp_path / "store")
    second = _job(tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path}/store/mlflow.db")
    assert client.get_run(second.run_id).info.status == "FINISHED"  # in the store that exists now
    client.delete_experiment(client.get_run(second.run_id).info.experiment_id)
    with pytest.raises(RagtrackError, match="the MLflow experiment 'ragtrack-data' was deleted"):
        _job(tmp_path)


def test_two_threads_run_one_after_the_other(tmp_path: Path, data: Path) -> None:
    results, errors = [], []

    def run(name: str) -> None:
        try:
            results.append(_job(tmp_path, f"run_name={name}"))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 2 and results[0].results["systems"] == results[1].results["systems"]
