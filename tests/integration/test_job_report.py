"""Every job writes and logs its own systems side by side: comparison.md, the plot, the failure
analysis and a self-contained report.html holding the numbers of results.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support import TOY_JOB, ragtrack


def test_a_job_writes_and_logs_its_comparison_and_report(tmp_path: Path) -> None:
    done = ragtrack(tmp_path, *TOY_JOB, "hydra.run.dir=outputs/job")
    assert done.returncode == 0, done.stderr[-3000:]
    job = tmp_path / "outputs" / "job"
    folder = job / "comparison"
    assert {
        "comparison.md",
        "comparison.csv",
        "comparison.json",
        "comparison.txt",
        "comparison.png",
        "report.html",
    } <= {p.name for p in folder.iterdir()}
    assert sorted(p.name for p in (folder / "failures").iterdir()) == ["dense.md", "hybrid.md"]  # baseline: bm25

    results = json.loads((job / "results.json").read_text())
    report = (folder / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", report), "report.html must be self-contained"
    assert "data:image/png;base64," in report and "<style>" in report
    for system, metrics in results["systems"].items():  # the same means, to the 4 decimals shown
        row = re.search(rf"<tr( class=\"best\")?><td>{system}</td>(.*?)</tr>", report).group(2)
        assert f"{metrics['ndcg@10']:.4f} [" in row
    assert "toy" in report.split("</h1>")[0]  # the dataset is named in the title
    assert "relevance_threshold" in report  # the config

    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("ragtrack-toy")
    (parent,) = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "comparison")}
    assert {
        "comparison/report.html",
        "comparison/comparison.md",
        "comparison/comparison.png",
        "comparison/failures",
    } <= logged


def test_each_system_run_logs_what_it_retrieved_per_query_as_an_mlflow_table(tmp_path: Path) -> None:
    done = ragtrack(tmp_path, *TOY_JOB, "hydra.run.dir=outputs/job", "tracking.per_query_table=3")
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("ragtrack-toy")
    children = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    per_query = {
        row["qid"]: row for row in _csv_rows(tmp_path / "outputs" / "job" / "per_query.csv") if row["system"] == "bm25"
    }
    for run in children:
        table = json.loads(
            Path(
                client.download_artifacts(run.info.run_id, "queries.json", str(tmp_path / run.info.run_id))
            ).read_text()
        )
        assert table["columns"][:4] == ["qid", "query", "retrieved", "relevant"] and "ndcg@10" in table["columns"]
        assert len(table["data"]) == 6
        if run.data.tags["ragtrack.system"] == "bm25":
            for row in table["data"]:
                record = dict(zip(table["columns"], row))
                assert len(record["retrieved"].splitlines()) <= 3 and record["retrieved"].startswith("1. ")
                assert record["ndcg@10"] == round(float(per_query[record["qid"]]["ndcg@10"]), 4)  # rounded for reading


def test_the_job_logs_every_systems_key_metrics_per_query_with_the_difference_to_the_baseline(tmp_path: Path) -> None:
    done = ragtrack(tmp_path, *TOY_JOB, "hydra.run.dir=outputs/job")
    assert done.returncode == 0, done.stderr[-3000:]
    wide = _csv_rows(tmp_path / "outputs" / "job" / "per_query_wide.csv")
    long = {
        (row["system"], row["qid"]): float(row["ndcg@10"])
        for row in _csv_rows(tmp_path / "outputs" / "job" / "per_query.csv")
    }
    assert list(wide[0])[:5] == ["qid", "query", "bm25 ndcg@10", "dense ndcg@10", "dense Δ ndcg@10"] and len(wide) == 6
    for row in wide:
        assert float(row["dense ndcg@10"]) == round(long["dense", row["qid"]], 4)
        assert float(row["hybrid Δ ndcg@10"]) == round(long["hybrid", row["qid"]] - long["bm25", row["qid"]], 4)
    assert wide[0]["query"] == "how do plants make glucose from sunlight"
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    (parent,) = [
        r
        for r in client.search_runs([client.get_experiment_by_name("ragtrack-toy").experiment_id])
        if "mlflow.parentRunId" not in r.data.tags
    ]
    table = json.loads(
        Path(client.download_artifacts(parent.info.run_id, "queries.json", str(tmp_path / "dl"))).read_text()
    )
    assert table["columns"] == list(wide[0]) and len(table["data"]) == 6
    assert "per_query_wide.csv" in {a.path for a in client.list_artifacts(parent.info.run_id)}


def test_the_per_query_table_can_be_switched_off(tmp_path: Path) -> None:
    done = ragtrack(tmp_path, *TOY_JOB, "tracking.per_query_table=0")
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("ragtrack-toy")
    children = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert children and all(
        "queries.json" not in {a.path for a in client.list_artifacts(r.info.run_id)} for r in children
    )


def _csv_rows(path: Path) -> list[dict]:
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_undefined_metrics_end_a_job_cleanly_blank_and_null(tmp_path: Path) -> None:
    """The trial's defects on the toy dataset, one job (a query judged non-relevant only, a generator
    that never abstains): abstention_precision is undefined on every query, so the job's comparison has
    a metric defined nowhere (it crashed: idxmax of all NA) and results.json held a bare NaN. The query
    without a relevant judgment counts in the ranking means with its values (0), as trec_eval counts it;
    the answer metrics are blank where they are undefined."""
    import shutil

    data = shutil.copytree(Path(__file__).parents[2] / "data" / "toy", tmp_path / "toy")
    with (data / "qrels" / "test.tsv").open("a") as qrels:
        qrels.write("q7\td3\t0\n")
    done = ragtrack(
        tmp_path,
        "run",
        "dataset=toy",
        f"dataset.path={data}",
        "encoder=hashing",
        "generator=extractive",
        "generator.abstain_below=0",
        "evaluator=[ranking,answer,abstention]",
        "tracking.key_metrics=[ndcg@10,abstention_precision]",
        "hydra.run.dir=outputs/job",
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    job = tmp_path / "outputs" / "job"

    def strict(path: Path) -> dict:
        return json.loads(
            path.read_text(), parse_constant=lambda constant: pytest.fail(f"{path.name} holds {constant}")
        )

    results = strict(job / "results.json")
    assert all(means["abstention_precision"] is None for means in results["systems"].values())
    assert (
        results["queries_counted"]["bm25"]["ndcg@10"] == 7
        and results["queries_counted"]["bm25"]["abstention_precision"] == 0
    )
    rows = [
        row for row in strict(job / "comparison" / "comparison.json")["rows"] if row["metric"] == "abstention_precision"
    ]
    assert [row["n"] for row in rows] == [0, 0, 0] and all(row["mean"] is None for row in rows)
    for path in job.rglob("*.json"):
        strict(path)
    q7 = [row for row in _csv_rows(job / "per_query.csv") if row["qid"] == "q7"]
    assert q7 and all(float(row["ndcg@10"]) == 0 and row["abstention_precision"] == "" for row in q7)
    assert "abstention_precision: no query has a value for every row" in " ".join(
        (job / "comparison" / "comparison.txt").read_text().split()
    )
