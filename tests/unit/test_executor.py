"""One executor (issue 39, item 2): the live run, its robustness reruns and the dry run make, answer and
score their systems by ``Executor.run``, and differ only by their policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragtrack.pipeline.execution.dryrun import dry_run
from ragtrack.pipeline.execution.executor import Executor
from ragtrack.pipeline.execution.experiment import run_experiment
from tests.support import toy_config

STUDY = "robustness={seed: 0, metrics: [ndcg@10], perturbations: {lowercase: {kind: lowercase}}}"


def _job(tmp_path: Path, *overrides: str):
    return toy_config(tmp_path, "tracking=none", STUDY, *overrides)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, list[str]]]:
    """Every ``Executor.run``: its policy, the stage prefix its calls are filed under, its systems."""
    seen, run = [], Executor.run

    def recorded(self: Executor, dataset):
        results = run(self, dataset)
        seen.append((type(self.policy).__name__, self.policy.meter.prefix, list(results)))
        return results

    monkeypatch.setattr(Executor, "run", recorded)
    return seen


def test_the_live_run_and_its_reruns_are_the_executor_with_the_live_policy(tmp_path: Path, runs) -> None:
    results = run_experiment(_job(tmp_path))
    systems = ["bm25", "dense", "hybrid"]
    assert runs == [("Live", "", systems), ("Live", "robustness/lowercase/", systems)]
    assert set(results["robustness"]["drops"]) == set(systems)


def test_the_dry_run_is_the_executor_with_the_count_only_policy(tmp_path: Path, runs) -> None:
    """With an LLM generator (offline: nothing is sent), the dry run plans the reruns too."""
    llm = ["generator=openai", "generator.base_url=http://127.0.0.1:9/v1", "generator.model=g"]
    planned = dry_run(_job(tmp_path, "retriever=[bm25]", "fusion=[]", *llm))
    assert runs == [("CountOnly", "", ["bm25"]), ("CountOnly", "robustness/lowercase/", ["bm25"])]
    assert planned.to_send == 6 + 1  # six answers, and the one query lower-casing changes
