"""Judge agreement in a real job (toy dataset, hashing encoder, answers and both judges from a fake chat
server, SQLite MLflow): people's labels for llm_judge (JSON lines) and pairwise_judge (TSV, the pair
written the other way round) give kappa, alpha, accuracy and the PPI-corrected scores in results.json,
equal to scikit-learn on the same pairs; the labels that cannot be compared are counted; the figures
reach the system's and the job's MLflow runs, the confusion CSVs, report.html and the run page."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from mlflow.tracking import MlflowClient
from sklearn.metrics import cohen_kappa_score

from ragtrack.pipeline.configuration.config import CONFIG_MODULE
from ragtrack.pipeline.execution.experiment import run_experiment
from ragtrack.pipeline.records.tracking import TAG_NOTE
from tests.support import ChatServer

CORRECTNESS = {
    "how do plants make glucose from sunlight": 5,
    "where is ATP produced in cells": 3,
    "what causes earthquakes": 4,
    "how do vaccines protect against disease": 2,
    "why can light not escape a black hole": 1,
}


class GradingServer(ChatServer):
    """Rubric prompts: correctness by question (:data:`CORRECTNESS`), relevance 6 − correctness, and an
    unparseable reply to another question (q6); pairwise prompts: the longer answer wins (tie if equally
    long); other prompts as :class:`ChatServer` (answers; the ATP question's generation fails)."""

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        prompt = json.loads(body)["messages"][-1]["content"]
        if "ANSWER A:" in prompt:
            a, b = (len(re.search(rf"ANSWER {x}: (.*)", prompt).group(1)) for x in "AB")
            return self._reply(handler, json.dumps({"winner": "A" if a > b else "B" if b > a else "tie"}))
        if '"correctness": <' in prompt:
            question = re.findall(r"QUESTION: (.*)", prompt)[-1]  # the rubrics' examples come first
            if question not in CORRECTNESS:
                return self._reply(handler, "I would rather not grade this.")
            return self._reply(
                handler, json.dumps({"correctness": CORRECTNESS[question], "relevance": 6 - CORRECTNESS[question]})
            )
        return super().handle(handler, body)

    def _reply(self, handler: BaseHTTPRequestHandler, content: str) -> None:
        self.send(
            handler, 200, json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        )


HUMAN = {
    "q1": 5,
    "q2": 3,
    "q3": 3,
    "q4": 2,
    "q5": 2,
    "q6": 3,
}  # people's correctness (q2: no answer, q6: unparseable, so no judge score)


def test_agreement_with_people_in_a_job(tmp_path: Path) -> None:
    server = GradingServer()
    labels = [
        {"qid": qid, "system": system, "criterion": "correctness", "label": label}
        for system in ("bm25", "dense")
        for qid, label in HUMAN.items()
    ]
    labels += [
        {
            "qid": "q7",
            "system": "bm25",
            "criterion": "correctness",
            "label": 3,
        },  # q7: no judgments, not a query of the job
        {"qid": "q1", "system": "colbert", "criterion": "relevance", "label": 1},
        {"qid": "q3", "system": "dense", "criterion": "relevance", "label": 2},
    ]
    (tmp_path / "labels.jsonl").write_text("".join(json.dumps(label) + "\n" for label in labels))
    verdicts = {"q1": "win", "q2": "tie", "q3": "tie", "q4": "loss", "q5": "tie", "q6": "win"}  # of dense against bm25
    (tmp_path / "verdicts.tsv").write_text(
        "qid\tpair\tlabel\n"
        + "".join(f"{q}\tdense vs bm25\t{v}\n" for q, v in verdicts.items())
        + "q7\tbm25 vs dense\twin\n"
    )
    judge = [f"base_url={server.url}", "model=judge", "max_retries=0", "backoff=0.01"]
    try:
        with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
            cfg = compose(
                "config",
                overrides=[
                    "dataset=toy",
                    "encoder=hashing",
                    "retriever=[bm25,dense]",
                    "fusion=[]",
                    "generator=openai",
                    f"generator.base_url={server.url}",
                    "generator.model=m",
                    "generator.top_k=1",
                    "generator.max_retries=0",
                    "generator.prompt='{context} {question}'",
                    "evaluator=[ranking,llm_judge,pairwise_judge]",
                    *(f"evaluator.llm_judge.{s}" for s in judge),
                    "evaluator.llm_judge.rubrics=[correctness,relevance]",
                    f"evaluator.llm_judge.human_labels={tmp_path / 'labels.jsonl'}",
                    *(f"evaluator.pairwise_judge.{s}" for s in judge),
                    f"evaluator.pairwise_judge.human_labels={tmp_path / 'verdicts.tsv'}",
                    f"paths.root_dir={tmp_path}",
                    f"paths.output_dir={tmp_path / 'out'}",
                    f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                ],
            )
        results = run_experiment(cfg)
    finally:
        server.stop()
    section = results["agreement"]
    assert {
        k: section[k] for k in ("labels", "unknown_query", "unknown_system", "stale", "judge_missing", "off_scale")
    } == {
        "labels": 15,
        "unknown_query": 1,
        "unknown_system": 1,
        "stale": 0,
        "judge_missing": 4,
        "off_scale": 0,
    }  # q2 and q6, each system
    per_query = results["per_query_table"].set_index(["system", "qid"])
    for system in ("bm25", "dense"):
        found = section["systems"][system]["judge_correctness"]
        compared = [q for q in HUMAN if q not in ("q2", "q6")]
        judge_scores = [per_query.at[(system, q), "judge_correctness"] for q in compared]
        assert (
            judge_scores == [5, 4, 2, 1]
            and found["compared"] == 4
            and found["kappa_weights"] == "quadratic"
            and found["alpha_level"] == "ordinal"
        )
        assert found["kappa"] == pytest.approx(
            cohen_kappa_score([HUMAN[q] for q in compared], judge_scores, labels=[1, 2, 3, 4, 5], weights="quadratic")
        )
        assert (
            found["accuracy"] == pytest.approx(2 / 4)
            and found["kappa_ci_low"] <= found["kappa"] <= found["kappa_ci_high"]
        )
        assert found["ppi"] == pytest.approx(
            12 / 4 + (0 - 1 + 0 + 1) / 4
        )  # every judged query is labelled: the labels' mean
    pair = results["pairwise_agreement"]["pairs"]["bm25 vs dense"]
    outcomes = {
        r["qid"]: r["outcome"] for r in map(json.loads, (tmp_path / "out" / "pairwise.jsonl").read_text().splitlines())
    }
    flipped = {"win": "loss", "tie": "tie", "loss": "win"}
    assert pair["compared"] == 6 and pair["kappa"] == pytest.approx(
        cohen_kappa_score(
            [flipped[v] for v in verdicts.values()], [outcomes[q] for q in verdicts], labels=["win", "tie", "loss"]
        )
    )
    assert "win_rate_ppi_ci_high" in pair and (
        results["pairwise_agreement"]["unknown_pair"],
        results["pairwise_agreement"]["unknown_query"],
    ) == (0, 1)
    assert section["systems"]["dense"]["judge_relevance"]["compared"] == 1

    report = (tmp_path / "out" / "comparison" / "report.html").read_text()
    assert 'id="agreement">Judge agreement with people' in report and "pairwise_correctness win rate" in report
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("ragtrack-toy").experiment_id])
    child = next(r for r in runs if r.data.tags.get("ragtrack.system") == "bm25")
    bm25 = section["systems"]["bm25"]["judge_correctness"]
    assert (
        child.data.metrics["judge_correctness_kappa"] == bm25["kappa"]
        and child.data.metrics["judge_correctness_ppi_ci_low"] == bm25["ppi_ci_low"]
    )
    assert "judge_correctness_confusion.csv" in {a.path for a in client.list_artifacts(child.info.run_id)}
    parent = client.get_run(results["mlflow_run_id"])
    assert parent.data.metrics["pairwise/bm25_vs_dense/kappa"] == pair["kappa"]
    assert "pairwise_confusion_bm25_vs_dense.csv" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert (
        "**Judge agreement with people**" in parent.data.tags[TAG_NOTE]
        and "| bm25 | judge_correctness | 4 |" in parent.data.tags[TAG_NOTE]
    )


def test_human_labels_go_to_one_rubric_judge(tmp_path: Path) -> None:
    """results.json holds one agreement section: two llm_judge evaluators with human labels stop the job
    before it starts, naming both."""
    from omegaconf import open_dict

    from ragtrack.core.errors import RagtrackError
    from ragtrack.pipeline.execution.executor import build_evaluators
    from ragtrack.pipeline.execution.usage import Meter

    (tmp_path / "labels.jsonl").write_text(
        json.dumps({"qid": "q1", "system": "bm25", "criterion": "correctness", "label": 5}) + "\n"
    )
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "dataset=toy",
                "evaluator=[ranking,llm_judge]",
                "evaluator.llm_judge.base_url=http://127.0.0.1:9/v1",
                "evaluator.llm_judge.model=judge",
                "evaluator.llm_judge.rubrics=[correctness]",
                f"evaluator.llm_judge.human_labels={tmp_path / 'labels.jsonl'}",
                f"paths.output_dir={tmp_path / 'out'}",
            ],
        )
    with open_dict(cfg):
        cfg.evaluator.second_judge = cfg.evaluator.llm_judge
    with pytest.raises(
        RagtrackError,
        match=r"^human_labels on evaluator\.llm_judge and evaluator\.second_judge: give them to one llm_judge",
    ):
        build_evaluators(cfg, Meter())
