"""Slices and latency in a real job (toy dataset, hashing encoder, extractive answers, SQLite MLflow):
every slice's metric equals the mean over that slice's counted rows of per_query.csv; the key scheme
in MLflow; compare's slices table; latency columns that never touch the run files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_module
from mlflow.tracking import MlflowClient

from ragtrack.pipeline.analysis.compare import run_compare
from ragtrack.pipeline.configuration.config import CONFIG_MODULE
from ragtrack.pipeline.execution.experiment import run_experiment
from ragtrack.pipeline.records import layout
from tests.support import TOY


def toy_with_attributes(tmp_path: Path) -> Path:
    """The toy dataset with a slices file, a metadata attribute and q3 without gold answers."""
    folder = tmp_path / "toy"
    shutil.copytree(TOY, folder)
    queries = [json.loads(line) for line in (TOY / "queries.jsonl").read_text().splitlines()]
    for i, query in enumerate(queries):
        query["metadata"] = {
            "topic": "biology" if query["_id"] in ("q1", "q2", "q4", "q6") else "physics",
            "free": {"x": i},
        }
        if query["_id"] == "q3":
            del query["answers"]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "kinds.tsv").write_text(
        "qid\tkind\n" + "".join(f"q{i}\t{'how' if i in (1, 4) else 'other'}\n" for i in range(1, 7))
    )
    return folder


def config(tmp_path: Path, folder: Path, *overrides: str):
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                "dataset=toy",
                f"dataset.path={folder}",
                f"dataset.slices_file={folder / 'kinds.tsv'}",
                "dataset.slice_metadata=[topic]",
                "slices=[query_length,relevant_docs]",
                "encoder=hashing",
                "generator=extractive",
                "evaluator=[ranking,answer]",
                "evaluator.ranking.relevance_threshold=2",  # q6 (grade 1 only) has no relevant document: not counted by ranking metrics
                f"paths.root_dir={tmp_path}",
                f"paths.output_dir={tmp_path / 'out'}",
                *overrides,
            ],
        )


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("slices")
    folder = toy_with_attributes(tmp_path)
    results = run_experiment(config(tmp_path, folder, f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"))
    return tmp_path, folder, results


def test_every_slice_metric_is_the_mean_of_its_counted_per_query_rows(job) -> None:
    tmp_path, folder, results = job
    per_query = pd.read_csv(tmp_path / "out" / "per_query.csv", dtype={"qid": str, "slice.relevant_docs": str})
    slices = results["slices"]
    assert list(slices["attributes"]) == ["kind", "topic", "query_length", "relevant_docs"]
    assert slices["attributes"]["relevant_docs"]["queries"] == {"0": 1, "1": 5}  # threshold 2: q6 has none
    assert slices["attributes"]["kind"] == {
        "source": "slices_file",
        "rule": "column 'kind' of kinds.tsv",
        "queries": {"how": 2, "other": 4},
    }
    ranking = [m for m in results["systems"]["bm25"] if "@" in m or m in ("mrr", "map")]
    answer = ["answer_f1", "exact_match"]
    checked = 0
    for system, attributes in slices["systems"].items():
        rows = per_query[per_query["system"] == system]
        for attribute, values in attributes.items():
            for value, metrics in values.items():
                in_slice = rows[rows[f"slice.{attribute}"].astype(str) == value]
                for metric, summary in metrics.items():
                    counted = (
                        in_slice if metric in ranking else in_slice[in_slice[metric].notna()]
                    )  # q6 (judged, none relevant) counts, as trec_eval counts it
                    assert summary["n"] == len(counted), (system, attribute, value, metric)
                    if len(counted):
                        assert summary["mean"] == pytest.approx(counted[metric].mean(), abs=1e-12), (
                            system,
                            attribute,
                            value,
                            metric,
                        )
                        assert summary["ci_low"] <= summary["mean"] <= summary["ci_high"]
                    else:
                        assert summary["mean"] is None
                    checked += 1
    assert {"answer_f1", "ndcg@10"} <= set(metrics) and set(answer) <= set(metrics)
    assert checked == 3 * (2 + 2 + 3 + 2) * len(metrics)


def test_slices_in_mlflow_follow_the_key_scheme(job) -> None:
    tmp_path, _, results = job
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    parent = client.get_run(results["mlflow_run_id"])
    expected = results["slices"]["systems"]["hybrid"]["topic"]["physics"]["ndcg@10"]["mean"]
    assert parent.data.metrics["hybrid/ndcg_at_10/slice/topic/physics"] == expected
    assert (
        "bm25/latency/retrieval_p95_ms" in parent.data.metrics
        and "bm25/latency/generation_p50_ms" in parent.data.metrics
    )
    children = client.search_runs([parent.info.experiment_id], f"tags.`{layout.TAG_PARENT}` = '{parent.info.run_id}'")
    keys = None
    for child in children:
        system = child.data.tags[layout.TAG_SYSTEM]
        summary = results["slices"]["systems"][system]["query_length"]["short"]["mrr"]
        assert child.data.metrics["mrr/slice/query_length/short"] == summary["mean"]
        assert child.data.metrics["mrr/slice/query_length/short_ci_low"] == summary["ci_low"]
        sliced = {k for k in child.data.metrics if "/slice/" in k}
        keys = keys or sliced
        assert sliced == keys  # identical keys across systems


def test_compare_prints_a_slices_table(job) -> None:
    tmp_path, _, results = job
    _, text = run_compare(
        f"sqlite:///{tmp_path}/mlflow.db", metrics=["mrr"], fmt="markdown", log_to_mlflow=False, failures=0
    )
    assert "## Slices" in text and "| mrr | kind=how | 2 |" in text
    bm25 = results["slices"]["systems"]["bm25"]["kind"]["how"]["mrr"]
    assert f"{bm25['mean']:.4f} [{bm25['ci_low']:.4f}, {bm25['ci_high']:.4f}]" in text
    _, csv = run_compare(f"sqlite:///{tmp_path}/mlflow.db", metrics=["mrr"], fmt="csv", log_to_mlflow=False, failures=0)
    assert "Slices" not in csv


def test_latency_columns_and_quantiles_stay_out_of_the_run_files(job) -> None:
    tmp_path, folder, results = job
    per_query = pd.read_csv(tmp_path / "out" / "per_query.csv")
    assert list(per_query.columns[-6:]) == [
        "retrieval_ms",
        "generation_ms",
        "slice.kind",
        "slice.topic",
        "slice.query_length",
        "slice.relevant_docs",
    ]
    assert (per_query["retrieval_ms"] > 0).all() and (per_query["generation_ms"] > 0).all()
    for system in ("bm25", "dense", "hybrid"):
        rows = per_query[per_query["system"] == system]
        efficiency = results["efficiency"][system]
        assert efficiency["latency/retrieval_p50_ms"] == pytest.approx(rows["retrieval_ms"].median())
        assert efficiency["latency/retrieval_p50_ms"] <= efficiency["latency/retrieval_p95_ms"]
    hybrid, bm25, dense = (
        per_query[per_query["system"] == s].set_index("qid")["retrieval_ms"] for s in ("hybrid", "bm25", "dense")
    )
    assert (hybrid >= (bm25 + dense) - 2e-3).all()  # members' searches plus a share of the fusion (rounding to 1 µs)
    runs = {p.name: p.read_bytes() for p in (tmp_path / "out" / "runs").iterdir()}
    again = run_experiment(config(tmp_path, folder, f"paths.output_dir={tmp_path / 'again'}", "tracking=none"))
    assert {p.name: p.read_bytes() for p in (tmp_path / "again" / "runs").iterdir()} == runs
    assert again["systems"] == {k: v for k, v in results["systems"].items()} and again["slices"] == results["slices"]
    cached = pd.read_csv(tmp_path / "again" / "per_query.csv")
    searched = per_query["system"] != "hybrid"  # a fused run is fused again, with its own fusion time
    assert (
        cached.loc[searched, "retrieval_ms"].tolist() == per_query.loc[searched, "retrieval_ms"].tolist()
    )  # cached runs keep the latencies measured when built
