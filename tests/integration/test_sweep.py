"""Multirun sweeps: one sweep tag, readable run names, no re-encoding; every preset composes; Optuna."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from mlflow.tracking import MlflowClient

from ragtrack.core.data import load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.app import objective
from ragtrack.pipeline.commands.cli import main as cli_main
from ragtrack.pipeline.configuration.config import CONFIG_MODULE
from tests.support import TOY, ragtrack

PRESETS = sorted(p.stem for p in Path(str(files(CONFIG_MODULE))).joinpath("experiment").glob("*.yaml"))


def jobs_and_children(uri: str, experiment: str) -> tuple[list, list]:
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=1000)
    runs = [r for r in runs if "ragtrack.comparison" not in r.data.tags]
    return [r for r in runs if "mlflow.parentRunId" not in r.data.tags], [
        r for r in runs if "mlflow.parentRunId" in r.data.tags
    ]


def test_sweep_jobs_share_one_tag_and_have_readable_names(toy_sweep) -> None:
    jobs, children = jobs_and_children(toy_sweep.uri, toy_sweep.experiment)
    assert sorted(j.info.run_name for j in jobs) == sorted(f"hybrid k={k}" for k in toy_sweep.ks)
    assert len({j.data.tags["ragtrack.sweep"] for j in jobs}) == 1
    assert all(j.info.status == "FINISHED" for j in jobs)
    assert sorted(c.data.tags["ragtrack.system"] for c in children) == sorted(
        ["bm25", "dense", "hybrid"] * len(toy_sweep.ks)
    )
    assert sorted(c.info.run_name for c in children if c.data.tags["ragtrack.system"] == "hybrid") == sorted(
        f"hybrid · k={k}" for k in toy_sweep.ks
    )


def test_a_sweep_shows_at_most_three_lines_per_job_and_its_page(toy_sweep) -> None:
    """The terminal: a line per job from Hydra, from the summary table and with its run link; then the
    sweep's runs view, its report and the next command; every line fits 100 columns but URLs."""
    import re

    lines = toy_sweep.log.splitlines()
    jobs = len(toy_sweep.ks)
    assert len(lines) <= 3 * jobs + 12, toy_sweep.log
    for k in toy_sweep.ks:
        assert len([line for line in lines if re.search(rf"(fusion\.rrf\.)?k={k}\b", line)]) <= 3
        (line,) = [line for line in lines if line.startswith(f"k={k}  hybrid ndcg@10 ")]
        assert re.fullmatch(
            rf"k={k}  hybrid ndcg@10 \d\.\d{{4}} \[\d\.\d{{4}}, \d\.\d{{4}}\]  http://127\.0\.0\.1:5000/#/experiments/\d+/runs/\w+",
            line,
        )
    long = [
        line
        for line in lines
        if len(line) > 100 and "http" not in line and str(toy_sweep.root) not in line and "MLflow database" not in line
    ]
    assert long == []  # URLs and the sweep's folder (as long as the machine's paths) may be longer
    view = re.search(
        r"^Sweep runs:   http://127\.0\.0\.1:5000/#/experiments/(\d+)/runs\?viewStateShareKey=([^&\s]+)&workflowType=machine_learning$",
        toy_sweep.log,
        re.MULTILINE,
    )
    state = json.loads(
        MlflowClient(toy_sweep.uri).get_experiment(view.group(1)).tags[f"mlflow.sharedViewState.{view.group(2)}"]
    )
    assert (
        state["searchFilter"].startswith("tags.`ragtrack.sweep` = '")
        and "metrics.`hybrid/ndcg_at_10`" in state["selectedColumns"]
    )
    assert (
        state["selectedColumns"][0] == "params.`fusion.rrf.k`" and state["orderByKey"] == "metrics.`hybrid/ndcg_at_10`"
    )  # the swept value, then the metrics
    jobs, _ = jobs_and_children(toy_sweep.uri, toy_sweep.experiment)
    assert sorted(int(j.data.params["fusion.rrf.k"]) for j in jobs) == sorted(
        toy_sweep.ks
    )  # the column's values: each job's own
    report = re.search(
        r"^Sweep report: http://\S+/runs/(\w+)/artifacts/report\.html$", toy_sweep.log, re.MULTILINE
    ).group(1)
    assert {"report.html", "sweep.png"} <= {
        a.path for a in MlflowClient(toy_sweep.uri).list_artifacts(report)
    }  # k on a numeric axis
    assert f"Next:         ragtrack compare --sweep {view.group(2)}" in lines


def test_sweep_encodes_the_corpus_once_and_reuses_every_index(toy_sweep) -> None:
    dataset = load_beir(TOY)
    # the jobs' logs: the corpus is encoded once, and each index is built once, by the first job
    assert toy_sweep.job_logs.count(f"dense: encoding {len(dataset.corpus)} documents") == 1
    builds = sorted(
        line.split("cache build: ")[1].rsplit(" ", 3)[0]
        for line in toy_sweep.job_logs.splitlines()
        if "cache build: " in line
    )
    assert builds == ["bm25", "bm25 run", "dense embeddings", "dense run"]  # each once
    assert toy_sweep.job_logs.count("cache hit: dense run") == len(toy_sweep.ks) - 1  # later jobs reuse the run
    _, children = jobs_and_children(toy_sweep.uri, toy_sweep.experiment)
    searched = sorted(c.data.tags["ragtrack.system"] for c in children if c.data.metrics.get("run_from_cache") == 0.0)
    assert searched == ["bm25", "dense"], "only the first job indexes and searches; the others reuse its runs"


def test_recall_and_ndcg_by_k_are_step_metrics(toy_sweep) -> None:
    client = MlflowClient(toy_sweep.uri)
    _, children = jobs_and_children(toy_sweep.uri, toy_sweep.experiment)
    history = client.get_metric_history(children[0].info.run_id, "recall_at_k")
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == [1, 2, 3, 5, 10, 20, 30, 50, 100]
    by_step = {m.step: m.value for m in history}
    assert by_step[10] == pytest.approx(children[0].data.metrics["recall_at_10"], abs=1e-12)
    assert all(by_step[a] <= by_step[b] for a, b in zip(sorted(by_step), sorted(by_step)[1:]))


SINGLE_JOB_PRESETS = {
    "compare_retrievers",
    "qa_xquad",
    "qa_xquad_cited",
    "query_robustness",
    "beir",
}  # the others are sweeps


@pytest.mark.parametrize("preset", PRESETS)
def test_every_experiment_preset_composes_with_sweep_params(preset: str) -> None:
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={preset}", "dataset=toy"], return_hydra_config=True)
    assert cfg.run_name is None or "${" not in str(cfg.run_name)
    if preset not in SINGLE_JOB_PRESETS:
        assert cfg.hydra.sweeper.params, f"{preset} must define hydra.sweeper.params"
        assert cfg.run_name, f"{preset} must give its runs readable names"


def test_hparams_search_preset_uses_optuna() -> None:
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", overrides=["hparams_search=rrf_optuna", "dataset=toy"], return_hydra_config=True)
    assert "optuna" in cfg.hydra.sweeper._target_.lower()
    assert cfg.optimize_metric == "hybrid/ndcg@10" and cfg.fusion.rrf.weights == [1.0, 1.0]


def test_objective_names_system_and_metric() -> None:
    results = {"systems": {"hybrid": {"ndcg@10": 0.5}}}
    assert objective(results, "hybrid/ndcg@10") == 0.5 and objective(results, None) is None
    with pytest.raises(RagtrackError, match="optimize_metric 'bm25/ndcg@10' is not a result"):
        objective(results, "bm25/ndcg@10")


def test_an_optuna_search_prints_no_library_noise(tmp_path) -> None:
    """The sweeper's import of a SQL store logs no alembic "setup plugin" lines, and a one-job sweep's
    summary speaks of one job."""
    done = ragtrack(
        tmp_path,
        "run",
        "hparams_search=rrf_optuna",
        "hydra.sweeper.n_trials=1",
        "dataset=toy",
        "encoder=hashing",
        "tracking=none",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "alembic" not in done.stdout + done.stderr
    assert "1 job: bm25 ndcg@10" in done.stdout + done.stderr


@pytest.mark.slow
def test_optuna_search_optimizes_the_returned_metric(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RAGTRACK_ROOT", str(tmp_path))
    cli_main(
        [
            "run",
            "hparams_search=rrf_optuna",
            "hydra.sweeper.n_trials=2",
            "dataset=toy",
            "encoder=hashing",
            "optimize_metric=hybrid/map",
        ]
    )
    jobs, _ = jobs_and_children(f"sqlite:///{tmp_path}/mlruns/mlflow.db", "ragtrack-toy")
    assert len(jobs) == 2 and all(j.info.run_name.startswith("hybrid k=") and " w=" in j.info.run_name for j in jobs)
    results = yaml.safe_load(
        next(Path(tmp_path, "outputs", "multiruns").glob("*/optimization_results.yaml")).read_text()
    )
    assert results["best_value"] == pytest.approx(max(j.data.metrics["hybrid/map"] for j in jobs), abs=1e-12)
