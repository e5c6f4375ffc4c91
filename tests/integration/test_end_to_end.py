"""`ragtrack run` on the toy dataset with the offline hashing encoder into a temporary MLflow store."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from ragtrack import __version__
from ragtrack.core.runs import read_trec
from ragtrack.pipeline.commands.cli import main as cli_main
from ragtrack.pipeline.records.provenance import SOURCE_ROOT
from tests.support import TOY


def ragtrack(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAGTRACK_ROOT": str(root)}
    command = [sys.executable, "-m", "ragtrack", *args]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def toy_job(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    root = tmp_path_factory.mktemp("job")
    result = ragtrack(root, "run", "dataset=toy", "encoder=hashing", "hydra.run.dir=outputs/job")
    assert result.returncode == 0, result.stderr[-3000:]
    return root, result


def test_outputs(toy_job) -> None:
    root, result = toy_job
    out = root / "outputs" / "job"
    results = json.loads((out / "results.json").read_text())
    assert set(results["systems"]) == {"bm25", "dense", "hybrid"}
    assert results["dataset"]["name"] == "toy" and results["dataset"]["queries"] == 6
    assert 0 < results["systems"]["bm25"]["ndcg@10"] <= 1
    assert results["aggregates"]["bm25"]["ndcg@10"]["ci_low"] <= results["systems"]["bm25"]["ndcg@10"]
    per_query = pd.read_csv(out / "per_query.csv")
    assert list(per_query.columns[:2]) == ["system", "qid"] and len(per_query) == 3 * 6
    for system in ("bm25", "dense", "hybrid"):
        run = read_trec(out / "runs" / f"{system}.trec")
        assert set(run.scores) == {f"q{i}" for i in range(1, 7)}
    assert (out / "config.yaml").exists() and (out / ".hydra" / "overrides.yaml").exists()
    modes = {
        path.relative_to(out).as_posix(): oct(path.stat().st_mode & 0o777) for path in out.rglob("*") if path.is_file()
    }
    assert len(set(modes.values())) == 1, modes  # results.json like every other output (umask applied)
    assert "ndcg@10" in result.stdout and "hybrid" in result.stdout and "ragtrack ui" in result.stdout


def test_mlflow_layout(toy_job) -> None:
    root, _ = toy_job
    client = MlflowClient(f"sqlite:///{root}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("ragtrack-toy")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 3
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["ragtrack.dataset_hash"] and parent.data.tags["hydra.choice.dataset"] == "toy"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=SOURCE_ROOT, capture_output=True, text=True).stdout.strip()
    assert parent.data.tags.get("ragtrack.git_commit") == (
        head or None
    )  # the code's checkout, wherever RAGTRACK_ROOT is
    assert parent.data.tags["ragtrack.version"] == __version__
    assert "bm25/ndcg_at_10" in parent.data.metrics and "hybrid/recall_at_10" in parent.data.metrics
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {
        "results.json",
        "comparison.csv",
        "config.yaml",
        "per_query.csv",
        ".hydra",
    }
    (used,) = parent.inputs.dataset_inputs  # the UI's Datasets section: what the job was evaluated on
    assert (used.dataset.name, used.dataset.source_type, used.dataset.digest) == (
        "toy",
        "beir",
        parent.data.tags["ragtrack.dataset_hash"][:16],
    )
    assert json.loads(used.dataset.source)["uri"] == f"beir:{TOY}" and [(t.key, t.value) for t in used.tags] == [
        ("mlflow.data.context", "evaluation")
    ]
    assert (
        json.loads(used.dataset.profile)["queries"] == 6 and len(json.loads(used.dataset.profile)["qrels_sha256"]) == 64
    )
    keys = None
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.run_name == f"{child.data.tags['ragtrack.system']} · {parent.info.run_name}"
        quality = {
            k
            for k in child.data.metrics
            if not k.endswith(("_seconds", "_bytes", "_second", "_cache", "_missing", "latency_queries"))
        }
        keys = keys or quality
        assert quality == keys  # identical metric keys across systems
        assert {"ndcg_at_10", "ndcg_at_10_std", "ndcg_at_10_ci_low", "recall_at_100", "mrr", "map"} <= quality
        assert {a.path for a in client.list_artifacts(child.info.run_id)} == {
            "run.trec",
            "per_query.csv",
            "queries.json",
        }
        assert [i.dataset.digest for i in client.get_run(child.info.run_id).inputs.dataset_inputs] == [
            used.dataset.digest
        ]
    assert children[0].data.params  # each system's config


def test_second_job_reuses_the_cache(toy_job) -> None:
    root, _ = toy_job
    result = ragtrack(
        root, "run", "dataset=toy", "encoder=hashing", "tracking=none", "fusion.rrf.k=30", "hydra.run.dir=outputs/again"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = (root / "outputs" / "again" / "ragtrack.log").read_text()
    assert "cache build" not in log and log.count("cache hit") >= 2  # the bm25 and dense runs: no index is opened


def test_user_errors_are_one_line_with_exit_code_2(tmp_path: Path) -> None:
    result = ragtrack(tmp_path, "run", "dataset=beir", f"dataset.path={tmp_path}/missing", "encoder=hashing")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"ragtrack: error: {tmp_path}/missing: dataset folder not found"
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "mlruns").exists()  # nothing logged for a job that could not start
    assert (result.stdout + result.stderr).count("dataset folder not found") == 1  # printed once
    (job_log,) = (tmp_path / "outputs" / "runs").glob("*/ragtrack.log")
    assert (
        "[ERROR] - " + f"{tmp_path}/missing: dataset folder not found" in job_log.read_text()
    )  # and kept in the job's log
    assert (
        job_log.parent / "FAILED"
    ).read_text() == f"{tmp_path}/missing: dataset folder not found\n"  # the folder says it failed
    missing = ragtrack(tmp_path, "run", "dataset=beir", "encoder=hashing")
    assert (
        missing.returncode == 2
        and "dataset.path: a value is required (the config has ???)" in missing.stderr
        and "Traceback" not in missing.stderr
    )


def test_eval_cli_errors(tmp_path: Path, capsys) -> None:
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 d1 1 x t\n")
    assert cli_main(["eval", str(TOY / "qrels" / "test.tsv"), str(run)]) == 2
    assert capsys.readouterr().err.strip() == f"ragtrack: error: {run}:1: score 'x' is not a number"
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    assert cli_main(["eval", str(TOY / "qrels" / "test.tsv"), str(run), "-m", "ndcg@x"]) == 2
    assert "cutoff must be a positive integer" in capsys.readouterr().err


def test_eval_rejects_metrics_it_cannot_compute(tmp_path: Path, capsys) -> None:
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    qrels = str(TOY / "qrels" / "test.tsv")
    assert cli_main(["eval", qrels, str(run), "-m", "judge_correctness"]) == 2
    assert "need the 'llm_judge' evaluator's settings" in capsys.readouterr().err
    assert cli_main(["eval", qrels, str(run), "-m", "answer_f1"]) == 2
    assert "need data that a qrels and a run file do not have (answers)" in capsys.readouterr().err


def test_run_experiment_from_python_equals_the_command(tmp_path: Path, monkeypatch) -> None:
    import ragtrack as package

    monkeypatch.setenv("RAGTRACK_ROOT", str(tmp_path))
    environment = dict(os.environ)
    result = package.run_experiment(["dataset=toy", "encoder=hashing"])
    assert dict(os.environ) == environment  # MLflow's variables (MLFLOW_TRACKING_URI, ...) do not outlive the job
    assert (
        set(result.systems) == {"bm25", "dense", "hybrid"} and result.output_dir.parent == tmp_path / "outputs" / "runs"
    )
    assert json.loads((result.output_dir / "results.json").read_text())["systems"] == result.systems
    job = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db").get_run(result.run_id)
    assert (
        job.info.status == "FINISHED" and job.data.metrics["hybrid/ndcg_at_10"] == result.systems["hybrid"]["ndcg@10"]
    )
    done = ragtrack(tmp_path, "run", "dataset=toy", "encoder=hashing", f"hydra.run.dir={tmp_path}/cli")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "cli" / "results.json").read_text())["systems"] == result.systems
    untracked = package.run_experiment(
        ["dataset=toy", "encoder=hashing", "tracking=none", f"paths.output_dir={tmp_path}/mine"]
    )
    assert (
        untracked.run_id is None and untracked.output_dir == tmp_path / "mine" and untracked.systems == result.systems
    )


def test_the_job_page_shows_the_comparison_and_runs_name_themselves(tmp_path: Path) -> None:
    done = ragtrack(tmp_path, "run", "dataset=toy", "encoder=hashing", "retriever.bm25.k1=1.2")
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("ragtrack-toy")
    assert "one parent run per job" in experiment.tags["mlflow.note.content"]
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI opens on the runs table
    runs = client.search_runs([experiment.experiment_id])
    (job,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert job.info.run_name == "compare_retrievers dataset=toy encoder=hashing retriever.bm25.k1=1.2"
    assert sorted(r.info.run_name for r in runs if r is not job) == [
        f"{s} · {job.info.run_name}" for s in ("bm25", "dense", "hybrid")
    ]
    note = job.data.tags["mlflow.note.content"].splitlines()
    assert note[0] == "| | bm25 | dense | hybrid |" and note[-1].startswith(f"**{job.info.run_name}** on `toy`")
    assert "[report.html](#/experiments/" in note[-1]
    means, cis, counts, tests = (
        [cell.replace("&nbsp;", "").strip() for cell in line.strip("|").split("|")] for line in note[2:6]
    )
    assert (means[0], cis[0], counts[0], tests[0]) == ("**ndcg@10**", "95% CI", "n", "Δ (p)")
    written = json.loads(next((tmp_path / "outputs" / "runs").glob("*/results.json")).read_text())
    results, counted = written["aggregates"], written["queries_counted"]
    best = max(r["ndcg@10"]["mean"] for r in results.values())
    for i, system in enumerate(("bm25", "dense", "hybrid"), start=1):  # a column per system: mean, CI, n, Δ (p)
        ndcg = results[system]["ndcg@10"]
        assert means[i] == (f"**{ndcg['mean']:.4f}**" if ndcg["mean"] == best else f"{ndcg['mean']:.4f}")
        assert cis[i] == f"[{ndcg['ci_low']:.4f}, {ndcg['ci_high']:.4f}]" and counts[i] == str(
            counted[system]["ndcg@10"]
        )
        assert tests[i] == "baseline" if system == "bm25" else re.fullmatch(r"[+-]\d\.\d{4} \(p [<\d.]+\)", tests[i])
    assert (
        set(job.data.tags) >= {"hydra.choice.dataset", "hydra.choice.encoder"}
        and "hydra.choice.paths" not in job.data.tags
    )
