"""``experiment=query_robustness`` on SciFact with BM25 (as in CI): perturbed queries logged, drops
with paired bootstrap CIs, the same bytes on a second run, bad settings as one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_module

from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.configuration.config import CONFIG_MODULE
from ragtrack.pipeline.execution.experiment import run_experiment


def config(tmp_path: Path, output: str, *overrides: str):
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                "experiment=query_robustness",
                "dataset=scifact",
                "retriever=[bm25]",
                "fusion=[]",
                f"paths.root_dir={tmp_path}",
                f"paths.output_dir={tmp_path / output}",
                *overrides,
            ],
        )


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("robustness")
    return tmp_path, run_experiment(config(tmp_path, "out", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"))


def test_drop_table_on_scifact_bm25(study) -> None:
    tmp_path, results = study
    table = pd.read_csv(tmp_path / "out" / "robustness.csv")
    assert set(table["perturbation"]) == {"typos_5", "typos_10", "typos_20", "drop_words_20", "lowercase", "uppercase"}
    assert set(table["metric"]) == {"ndcg@10", "recall@100", "mrr"} and (table["n"] == 300).all()
    drop = table.set_index(["perturbation", "metric"])["drop"]
    assert (
        drop["typos_5", "ndcg@10"] < drop["typos_10", "ndcg@10"] < drop["typos_20", "ndcg@10"]
    )  # more typos hurt more
    assert drop["typos_5", "ndcg@10"] > 0 and drop["drop_words_20", "ndcg@10"] > 0
    assert drop["lowercase"].eq(0).all() and drop["uppercase"].eq(0).all()  # BM25's tokenizer lower-cases
    assert ((table["ci_low"] <= table["drop"]) & (table["drop"] <= table["ci_high"])).all()
    assert (
        table["drop"] - (table["clean"] - table["perturbed"])
    ).abs().max() < 1e-12  # paired: mean difference = difference of means
    clean = table[table["metric"] == "ndcg@10"]["clean"]
    assert (clean == results["systems"]["bm25"]["ndcg@10"]).all()
    logged = results["robustness"]["drops"]["bm25"]["typos_10"]["ndcg@10"]
    assert logged["drop"] == drop["typos_10", "ndcg@10"] and logged["n"] == 300
    assert (
        results["robustness"]["perturbations"]["typos_20"]["kind"] == "typos"
        and results["robustness"]["perturbations"]["lowercase"]["rate"] is None
    )

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    parent = client.get_run(results["mlflow_run_id"])
    assert parent.data.metrics["bm25/ndcg_at_10/drop/typos_10"] == logged["drop"]
    assert parent.data.metrics["bm25/ndcg_at_10/drop/typos_10_ci_low"] == logged["ci_low"]
    assert {"robustness.csv", "perturbed_queries.jsonl"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}


def test_perturbed_queries_artifact_and_determinism(study) -> None:
    tmp_path, _ = study
    lines = [json.loads(line) for line in (tmp_path / "out" / "perturbed_queries.jsonl").read_text().splitlines()]
    assert len(lines) == 6 * 300 and set(lines[0]) == {"perturbation", "_id", "text", "original"}
    typos = [line for line in lines if line["perturbation"] == "typos_20"]
    assert sum(line["text"] != line["original"] for line in typos) >= 290
    assert all(line["text"] == line["original"].lower() for line in lines if line["perturbation"] == "lowercase")
    run_experiment(config(tmp_path, "again", "tracking=none"))
    for name in ("robustness.csv", "perturbed_queries.jsonl"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "robustness.perturbations.typos_5.rate=1.5",
            "robustness.perturbations.typos_5.rate: 1.5 must be a number in (0, 1] for typos",
        ),
        (
            "robustness.perturbations.typos_5.kind=shout",
            "robustness.perturbations.typos_5.kind: 'shout' is not one of typos",
        ),
        ("robustness.metrics=[ndcg@11]", "robustness.metrics: ['ndcg@11'] are not scored by this job"),
    ],
)
def test_bad_settings_fail_in_one_line_before_any_output(tmp_path, override, message) -> None:
    with pytest.raises(RagtrackError) as error:
        run_experiment(config(tmp_path, "bad", override, "tracking=none", "dataset=toy", "encoder=hashing"))
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "bad" / "results.json").exists() and not (tmp_path / "bad" / "robustness.csv").exists()
