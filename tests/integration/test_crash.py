"""Crash safety: a job SIGKILLed while encoding or while writing the Chroma index leaves no cache entry
that a later job trusts; the rerun succeeds with the same numbers, and the killed job's MLflow run
is marked KILLED instead of staying RUNNING."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ragtrack.core.cache import MANIFEST
from tests.support import TOY_JOB, ragtrack, run_until_stalled, systems


def _entries(cache: Path, kind: str) -> tuple[list[str], list[str]]:
    """Complete entries and other folders (temporary builds) of one kind."""
    folders = [p for p in (cache / kind).iterdir() if p.is_dir()] if (cache / kind).exists() else []
    return [p.name for p in folders if (p / MANIFEST).exists()], [
        p.name for p in folders if not (p / MANIFEST).exists()
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("reference")
    result = ragtrack(root, *TOY_JOB, "tracking=none", "hydra.run.dir=outputs/job")
    assert result.returncode == 0, result.stderr[-3000:]
    return systems(root / "outputs" / "job")


@pytest.mark.slow  # two MLflow jobs: about a minute
def test_killed_while_encoding(tmp_path: Path, reference: dict) -> None:
    run_until_stalled(tmp_path, "encode", *TOY_JOB, "hydra.run.dir=outputs/killed")
    cache = tmp_path / ".cache" / "ragtrack"
    complete, partial = _entries(cache, "embeddings")
    assert complete == [] and len(partial) == 1 and partial[0].startswith(".")
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("ragtrack-toy").experiment_id
    (killed,) = client.search_runs([experiment])
    assert killed.info.status == "RUNNING" and killed.data.tags["ragtrack.process"]

    rerun = ragtrack(tmp_path, *TOY_JOB, "hydra.run.dir=outputs/rerun")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert systems(tmp_path / "outputs" / "rerun") == reference
    assert _entries(cache, "embeddings")[1] == []  # the killed job's temporary folder was removed
    marked = client.get_run(killed.info.run_id)
    assert marked.info.status == "KILLED" and "ended without finishing" in marked.data.tags["ragtrack.error"]
    assert not (tmp_path / "outputs" / "killed" / "results.json").exists()


def test_killed_while_writing_the_chroma_index(tmp_path: Path, reference: dict) -> None:
    build = "retriever.dense.chroma.build=always"  # exact search alone would not build the collection
    run_until_stalled(tmp_path, "index", *TOY_JOB, build, "tracking=none", "hydra.run.dir=outputs/killed")
    cache = tmp_path / ".cache" / "ragtrack"
    assert len(_entries(cache, "embeddings")[0]) == 1  # encoding had finished: a complete entry
    complete, partial = _entries(cache, "chroma")
    assert complete == [] and len(partial) == 1

    rerun = ragtrack(tmp_path, *TOY_JOB, build, "tracking=none", "hydra.run.dir=outputs/rerun")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert systems(tmp_path / "outputs" / "rerun") == reference
    log = (tmp_path / "outputs" / "rerun" / "ragtrack.log").read_text()
    assert "cache hit: dense embeddings" in log and "cache build: dense chroma" in log
    assert len(_entries(cache, "chroma")[0]) == 1 and _entries(cache, "chroma")[1] == []
