"""``ragtrack eval --answers GOLD --predictions PRED`` equals the run-time answer metrics: a job on
XQuAD-en with the extractive generator writes its answers to per_query.csv; scored again from those
answers (SQuAD .json and JSON lines predictions; the shipped queries.jsonl and SQuAD's own dataset file
as gold), every metric agrees per query and in mean, std and CI."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ragtrack.pipeline.commands.cli import main as cli_main
from ragtrack.pipeline.configuration.config import datasets_dir
from tests.support import ragtrack

XQUAD = datasets_dir() / "xquad_en"
METRICS = [
    "answer_f1",
    "exact_match",
    "answer_f1_tokenset",
    "rouge1",
    "rouge2_precision",
    "rougeL_recall",
    "bleu",
    "bleu_p1",
    "bleu_p2",
    "bleu_bp",
    "answer_recall",
]


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("answers")
    answer_metrics = [m for m in METRICS if m != "answer_recall"]
    result = ragtrack(
        root,
        "run",
        "dataset=xquad_en",
        "encoder=hashing",
        "retriever=[bm25]",
        "fusion=[]",
        "generator=extractive",
        "evaluator=[answer,faithfulness]",
        f"evaluator.answer.metrics=[{','.join(answer_metrics)}]",
        "evaluator.faithfulness.metrics=[answer_recall]",
        "tracking=none",
        "hydra.run.dir=job",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "job"


def write_predictions(job: Path, kind: str) -> Path:
    table = pd.read_csv(job / "per_query.csv", dtype={"qid": str}, keep_default_na=False)
    answers = dict(zip(table["qid"], table["generated_answer"]))
    if kind == "json":
        (job / "pred.json").write_text(json.dumps(answers, indent=1))
        return job / "pred.json"
    (job / "pred.jsonl").write_text(
        "".join(json.dumps({"query_id": q, "prediction": a}) + "\n" for q, a in answers.items())
    )
    return job / "pred.jsonl"


@pytest.mark.parametrize(("gold", "kind"), [("queries.jsonl", "jsonl"), ("xquad.en.json", "json")])
def test_equals_the_run_time_answer_metrics(job: Path, gold: str, kind: str, capsys) -> None:
    predictions = write_predictions(job, kind)
    arguments = ["eval", "--answers", str(XQUAD / gold), "--predictions", str(predictions), "--json", "--per-query"]
    assert cli_main([*arguments, *(f"-m{m}" for m in METRICS)]) == 0
    payload = json.loads(capsys.readouterr().out)
    run_time = pd.read_csv(job / "per_query.csv", dtype={"qid": str}).set_index("qid")
    summary = json.loads((job / "results.json").read_text())["aggregates"]["bm25"]
    assert payload["queries"] == len(run_time) == 1190
    ours = pd.DataFrame.from_dict(payload["per_query"], orient="index")
    assert set(ours.index) == set(run_time.index)
    for metric in METRICS:
        assert ours[metric].to_dict() == pytest.approx(run_time[metric].to_dict(), abs=1e-12), metric
        assert payload["aggregate"][metric] == pytest.approx(summary[metric]["mean"], abs=1e-12)
        assert payload["std"][metric] == pytest.approx(summary[metric]["std"], abs=1e-12)
        assert payload["ci95"][metric] == pytest.approx(
            [summary[metric]["ci_low"], summary[metric]["ci_high"]], abs=1e-12
        )
    assert 0.1 < payload["aggregate"]["answer_f1"] < 0.9


def test_a_missing_prediction_is_scored_empty_and_reported(job: Path, capsys) -> None:
    lines = write_predictions(job, "jsonl").read_text().splitlines()
    (job / "partial.jsonl").write_text("\n".join(lines[1:]) + "\n")
    missing = json.loads(lines[0])["query_id"]
    assert (
        cli_main(
            [
                "eval",
                "--answers",
                str(XQUAD / "queries.jsonl"),
                "--predictions",
                str(job / "partial.jsonl"),
                "-m",
                "answer_f1",
                "--per-query",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.err == (
        f"ragtrack: note: 1 questions with gold answers have no prediction in {job / 'partial.jsonl'} "
        f"(scored as the empty answer): {missing}\n"
    )
    assert f"answer_f1       \t{missing}\t0.0000" in captured.out.splitlines()
