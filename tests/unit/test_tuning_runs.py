"""``ragtrack compare --tune-on`` over jobs as MLflow holds them: a sweep of RRF k run on a train and a
test split of one dataset (its own qrels each), the choice made on train, reported on test, logged as a
tuning run with a child per fold; and the same sweep over two TREC topic files (one qrels file), tuned
on one topics file and reported on the other."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from ragtrack.core.data import load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.analysis.compare import run_compare
from ragtrack.pipeline.configuration.inputs import load_dataset
from ragtrack.pipeline.records.layout import (
    CONFIG_FILE,
    PER_QUERY_FILE,
    TAG_DATASET,
    TAG_DATASET_HASH,
    TAG_OVERRIDES,
    TAG_PARENT,
    TAG_SYSTEM,
)
from tests.support import TOY

SPLITS = {"train": ["q1", "q2", "q3"], "test": ["q4", "q5", "q6"]}
# hybrid's nDCG@10 per k: k=10 best on train (0.8), k=30 best on test (1.0); the default is k=60
HYBRID = {
    "train": {10: [0.9, 0.8, 0.7], 30: [0.5, 0.5, 0.5], 60: [0.6, 0.6, 0.6]},
    "test": {10: [0.5, 0.4, 0.3], 30: [1.0, 1.0, 1.0], 60: [0.5, 0.5, 0.5]},
}


def beir_split(data, split: str) -> tuple[dict, str, str]:
    """The dataset config of the toy data's ``split``, its hash and the override that selects it."""
    config = {
        "type": "beir",
        "name": "toy",
        "path": str(data),
        "split": split,
        "qrels_file": None,
        "slices_file": None,
        "slice_metadata": [],
    }
    return config, load_beir(data, split).hash, f"dataset.split={split}"


def trec_topics(data, split: str) -> tuple[dict, str, str]:
    """The dataset config of the TREC topics file ``<split>.topics`` with its qrels ``<split>.qrels``, its
    hash and the override that selects it."""
    topics = data / f"{split}.topics"
    config = {
        "type": "trec",
        "corpus": str(data / "corpus.jsonl"),
        "topics": str(topics),
        "qrels": str(data / f"{split}.qrels"),
        "name": "toy",
        "query_field": "title",
        "slices_file": None,
        "slice_metadata": [],
    }
    override = f"dataset=trec dataset.corpus={config['corpus']} dataset.topics={topics} dataset.qrels={config['qrels']}"
    return config, load_dataset(config).hash, override


def log_job(client, experiment_id: str, dataset: tuple[dict, str, str], split: str, k: int, folder) -> None:
    """A finished job of ``experiment=rrf_k fusion.rrf.k=K`` on ``dataset`` (config, hash, override)
    with bm25 and hybrid rows."""
    settings, dataset_hash, override = dataset
    config = {"dataset": settings, "evaluator": {"ranking": {"relevance_threshold": 1}}}
    tags = {
        TAG_DATASET: "toy",
        TAG_DATASET_HASH: dataset_hash,
        TAG_OVERRIDES: f"experiment=rrf_k fusion.rrf.k={k} {override}",
    }
    parent = client.create_run(experiment_id, run_name=f"hybrid k={k}", tags=tags).info.run_id
    folder.mkdir(exist_ok=True)
    OmegaConf.save(OmegaConf.create(config), folder / CONFIG_FILE)
    client.log_artifact(parent, str(folder / CONFIG_FILE))
    for system, values in (("bm25", [0.4, 0.4, 0.4]), ("hybrid", HYBRID[split][k])):
        child = client.create_run(
            experiment_id, run_name=f"{system} · k={k}", tags={TAG_PARENT: parent, TAG_SYSTEM: system}
        ).info.run_id
        pd.DataFrame({"system": system, "qid": SPLITS[split], "ndcg@10": values}).to_csv(
            folder / PER_QUERY_FILE, index=False
        )
        client.log_artifact(child, str(folder / PER_QUERY_FILE))
        client.set_terminated(child, "FINISHED")
    client.set_terminated(parent, "FINISHED")


def logged_sweep(root, dataset_of) -> str:
    """A new MLflow store under ``root`` holding the six jobs, k = 10, 30, 60 on each split (its
    dataset ``dataset_of(split)``); its URI."""
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("ragtrack-toy", artifact_location=str(root / "artifacts"))
    for split in SPLITS:
        for k in (10, 30, 60):
            log_job(client, experiment_id, dataset_of(split), split, k, root / "upload")
    return uri


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The toy dataset with q1-q3 judged in qrels/train.tsv and q4-q6 in qrels/test.tsv, and the six jobs."""
    root = tmp_path_factory.mktemp("tune_on")
    data = root / "toy"
    shutil.copytree(TOY, data)
    lines = (data / "qrels" / "test.tsv").read_text().splitlines()
    for split, queries in SPLITS.items():
        (data / "qrels" / f"{split}.tsv").write_text(
            "\n".join([lines[0], *(line for line in lines[1:] if line.split("\t")[0] in queries)]) + "\n"
        )
    return logged_sweep(root, lambda split: beir_split(data, split))


@pytest.fixture(scope="module")
def trec_store(tmp_path_factory):
    """The toy corpus with q1-q3 in train.topics and q4-q6 in test.topics (qid<TAB>text), each with its
    TREC qrels, and the six jobs."""
    root = tmp_path_factory.mktemp("tune_on_trec")
    data = root / "toy"
    data.mkdir()
    shutil.copy(TOY / "corpus.jsonl", data / "corpus.jsonl")
    toy = load_beir(TOY)
    for split, queries in SPLITS.items():
        (data / f"{split}.topics").write_text("".join(f"{q}\t{toy.queries[q]}\n" for q in queries))
        (data / f"{split}.qrels").write_text(
            "".join(f"{q} 0 {d} {g}\n" for q in queries for d, g in toy.qrels[q].items())
        )
    return logged_sweep(root, lambda split: trec_topics(data, split)), data


def test_chosen_on_train_reported_on_test_and_logged_with_a_child(store) -> None:
    comparison, text = run_compare(store, metrics=["ndcg@10"], tune_on="train", resamples=100, failures=0)
    text = " ".join(text.split())  # unwrapped
    assert comparison.baseline.label == "hybrid k=60 (default)" and set(comparison.queries) == set(SPLITS["test"])
    assert (
        "dataset.split=test (3 queries): hybrid k=10, chosen on 3 queries of dataset.split=train (0.8000 there)" in text
    )
    assert (
        "held-out ndcg@10 0.4000 vs hybrid k=60 (default) 0.5000: Δ -0.1000" in text
    )  # k=30 would have won on test: never read
    client = MlflowClient(store)
    run = client.get_run(comparison.logged.split()[0])
    assert run.info.run_name.startswith(
        "tuning hybrid (chosen on dataset.split=train, reported on dataset.split=test) vs hybrid k=60 (default)"
    )
    assert run.data.metrics["tuning/ndcg_at_10/held_out"] == pytest.approx(0.4) and run.data.metrics[
        "tuning/ndcg_at_10/delta"
    ] == pytest.approx(-0.1)
    assert "tuning.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
    (child,) = client.search_runs([run.info.experiment_id], f"tags.`{TAG_PARENT}` = '{run.info.run_id}'")
    assert child.info.run_name == "dataset.split=test: hybrid k=10" and child.data.params["fusion.rrf.k"] == "10"
    assert child.data.params["tuned_on"] == "3" and child.data.metrics["where_chosen/ndcg_at_10"] == pytest.approx(0.8)
    assert child.data.metrics["ndcg_at_10"] == pytest.approx(0.4) and child.data.metrics[
        "default/ndcg_at_10"
    ] == pytest.approx(0.5)


def test_json_carries_the_tuning_and_a_bad_split_is_one_line(store) -> None:
    _, text = run_compare(
        store,
        metrics=["ndcg@10"],
        tune_on="dataset.split=train",
        resamples=100,
        fmt="json",
        failures=0,
        log_to_mlflow=False,
    )
    tuning = json.loads(text)["tuning"]
    assert (
        tuning["protocol"] == "chosen on dataset.split=train, reported on dataset.split=test"
        and tuning["chosen"][0]["chosen"] == "hybrid k=10"
    )
    with pytest.raises(RagtrackError, match="--tune-on dev: no setting that differs between the jobs has this value"):
        run_compare(store, metrics=["ndcg@10"], tune_on="dev", log_to_mlflow=False)
    with pytest.raises(RagtrackError, match="--tune-on tunes the settings of one swept system"):
        run_compare(store, metrics=["ndcg@10"], tune_on="train", baseline="bm25", log_to_mlflow=False)


def test_the_command_refuses_two_ways_to_tune_in_one_line(store, capsys) -> None:
    from ragtrack.pipeline.commands.cli import main

    assert main(["compare", "--tracking-uri", store, "--folds", "3", "--tune-on", "train"]) == 2
    assert capsys.readouterr().err == (
        "ragtrack: error: --folds and --tune-on are two ways to tune: cross-validate over the reported queries, "
        "or choose on another split; give one\n"
    )
    assert main(["compare", "--tracking-uri", store, "--tune-on", "dataset.split="]) == 2
    assert "give the tuning split as VALUE or KEY=VALUE" in capsys.readouterr().err


def test_tuned_on_one_trec_topics_file_reported_on_another(trec_store) -> None:
    """TREC topic files as the split: the jobs differ in ``dataset.topics`` (and ``dataset.qrels``); the
    choice reads the tuning topics' queries only, the report the other topics'."""
    store, data = trec_store
    comparison, text = run_compare(
        store,
        metrics=["ndcg@10"],
        tune_on=f"dataset.topics={data / 'train.topics'}",
        resamples=100,
        failures=0,
        log_to_mlflow=False,
    )
    text = "".join(text.split())  # unwrapped (the paths' hyphens wrap)
    assert set(comparison.queries) == set(SPLITS["test"])
    expected = (
        f"dataset.topics={data / 'test.topics'} (3 queries): hybrid k=10, chosen on 3 queries of "
        f"dataset.topics={data / 'train.topics'} (0.8000 there)",
        "held-out ndcg@10 0.4000 vs hybrid k=60 (default) 0.5000: Δ -0.1000",  # k=30 would have won on test
    )
    assert all("".join(line.split()) in text for line in expected)
