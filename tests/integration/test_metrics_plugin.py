"""The evaluator plugin API end to end: a package in tests/plugins/ registers ``best_grade@k`` through the
``ragtrack.evaluators`` entry point; installed into a temporary folder (nothing global changes), its
metric is computed by ``ragtrack run`` (aggregates in results.json and MLflow) and ``ragtrack eval``,
and listed by ``ragtrack metrics`` - with no change to ragtrack."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from ragtrack.evaluators.abstention import AbstentionEvaluator
from ragtrack.evaluators.answer import AnswerEvaluator, BertScoreEvaluator, ContextRecallEvaluator
from ragtrack.evaluators.citations import CitationEvaluator
from ragtrack.evaluators.faithfulness import FaithfulnessEvaluator
from ragtrack.evaluators.judge import LLMJudge
from ragtrack.evaluators.nuggets import NuggetEvaluator
from ragtrack.evaluators.pairwise import PairwiseJudge
from ragtrack.evaluators.ranking import describe_metrics
from ragtrack.pipeline.commands.cli import main as cli_main
from tests.support import TESTS, TOY

PLUGIN = TESTS / "plugins" / "ragtrack_demo_metric"
QRELS = str(TOY / "qrels" / "test.tsv")


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """pip-install the plugin (a copy: builds write into the source folder) into a folder of its own."""
    work = tmp_path_factory.mktemp("plugin")
    shutil.copytree(PLUGIN, work / "source")
    site = work / "site"
    install = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        "--no-build-isolation",
        "--target",
        str(site),
        str(work / "source"),
    ]
    result = subprocess.run(install, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return site


@pytest.fixture
def with_plugin(plugin_site: Path, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(plugin_site))
    return plugin_site


@pytest.fixture(scope="module")
def job(plugin_site: Path, tmp_path_factory) -> Path:
    """``ragtrack run`` in a fresh interpreter that sees the plugin on PYTHONPATH; MLflow in a temporary SQLite store."""
    root = tmp_path_factory.mktemp("job")
    env = {
        **os.environ,
        "RAGTRACK_ROOT": str(root),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin_site), os.environ.get("PYTHONPATH")])),
    }
    overrides = [
        "dataset=toy",
        "encoder=hashing",
        "retriever=[bm25]",
        "fusion=[]",
        "+evaluator.demo={type:demo,metrics:[best_grade@3,best_grade@5]}",
        "hydra.run.dir=outputs/job",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "ragtrack.pipeline.commands.cli", "run", *overrides],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "best_grade@5" in result.stdout
    return root


def test_run_computes_and_logs_the_plugin_metric(job: Path) -> None:
    results = json.loads((job / "outputs" / "job" / "results.json").read_text())
    summary = results["aggregates"]["bm25"]
    assert 0 < results["systems"]["bm25"]["best_grade@5"] <= 2  # the toy grades are 1 and 2
    for metric in ("best_grade@5", "ndcg@10"):
        assert set(summary[metric]) == {"mean", "std", "ci_low", "ci_high"}
        assert summary[metric]["ci_low"] <= summary[metric]["mean"] <= summary[metric]["ci_high"]
    client = MlflowClient(f"sqlite:///{job}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("ragtrack-toy")
    (child,) = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    logged = child.data.metrics
    for metric, key in (("best_grade@5", "best_grade_at_5"), ("ndcg@10", "ndcg_at_10")):
        assert logged[key] == pytest.approx(summary[metric]["mean"], abs=1e-12)
        assert logged[f"{key}_std"] == pytest.approx(summary[metric]["std"], abs=1e-12)
        assert logged[f"{key}_ci_low"] == pytest.approx(summary[metric]["ci_low"], abs=1e-12)
        assert logged[f"{key}_ci_high"] == pytest.approx(summary[metric]["ci_high"], abs=1e-12)


def test_eval_computes_the_plugin_metric(job: Path, with_plugin: Path, capsys) -> None:
    run = str(job / "outputs" / "job" / "runs" / "bm25.trec")
    assert cli_main(["eval", QRELS, run, "-m", "best_grade@5", "-m", "ndcg@10", "--json", "--per-query"]) == 0
    payload = json.loads(capsys.readouterr().out)
    results = json.loads((job / "outputs" / "job" / "results.json").read_text())["aggregates"]["bm25"]
    per_query = pd.read_csv(job / "outputs" / "job" / "per_query.csv", dtype={"qid": str}).set_index("qid")
    for metric in ("best_grade@5", "ndcg@10"):
        assert payload["aggregate"][metric] == pytest.approx(results[metric]["mean"], abs=1e-12)
        assert payload["std"][metric] == pytest.approx(results[metric]["std"], abs=1e-12)
        assert payload["ci95"][metric] == pytest.approx(
            [results[metric]["ci_low"], results[metric]["ci_high"]], abs=1e-12
        )
        assert {qid: values[metric] for qid, values in payload["per_query"].items()} == pytest.approx(
            per_query[metric].to_dict(), abs=1e-12
        )
    assert payload["queries"] == 6

    assert cli_main(["eval", QRELS, run, "-m", "best_grade@5", "-m", "ndcg@10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[:2] for line in lines] == [["best_grade@5".ljust(16), "all"], ["ndcg@10".ljust(16), "all"]]
    mean = results["best_grade@5"]
    assert lines[0].split("\t")[2:] == [
        f"{mean['mean']:.4f}",
        f"(std {mean['std']:.4f}, 95% CI {mean['ci_low']:.4f}-{mean['ci_high']:.4f}, n=6 judged queries (trec_eval))",
    ]


def test_metrics_lists_every_metric_with_a_description(with_plugin: Path, capsys) -> None:
    assert cli_main(["metrics"]) == 0
    listed = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("  "):
            name, description = line.split(maxsplit=1)
            listed[name] = description
    answer_metrics = {
        name: text
        for cls in (
            AnswerEvaluator,
            BertScoreEvaluator,
            ContextRecallEvaluator,
            FaithfulnessEvaluator,
            LLMJudge,
            AbstentionEvaluator,
            PairwiseJudge,
            NuggetEvaluator,
            CitationEvaluator,
        )
        for name, text in cls.provides().items()
    }
    assert listed == describe_metrics() | answer_metrics | {
        "best_grade@k": "highest grade among the top k documents (0 if none is judged)"
    }


def test_unknown_metric_fails_listing_the_known_ones(with_plugin: Path, capsys) -> None:
    assert cli_main(["eval", QRELS, QRELS, "-m", "ndgc@10"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("ragtrack: error: unknown metric 'ndgc@10'; known: ") and "\n" not in error
    assert {"best_grade@k", "judged@k", "ndcg[@k]", "auc", "p@k"} <= set(error.split("known: ")[1].split(", "))
