"""LLM-as-judge: lenient reply parsing with clear errors, and scoring against the misbehaving server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragtrack.pipeline.config import datasets_dir
from ragtrack.evaluators.base import EvalInput
from ragtrack.evaluators.judge import LLMJudge, parse_judgement
from ragtrack.core.data import load_beir
from ragtrack.core.runs import Run
from tests.support import ChatServer

CRITERIA = ["correctness", "faithfulness", "relevance"]
PROMPT = "Q {question}\nC {context}\nGOLD ANSWERS {gold_answers}\nA {answer}"


@pytest.mark.parametrize("reply, scores, rationale", [
    ('{"correctness": 4, "faithfulness": 5, "relevance": 3, "rationale": "close"}', [4, 5, 3], "close"),
    ('Sure!\n```json\n{"Correctness": "4", "faithfulness": 5.0, "relevance": "3/5"}\n```', [4, 5, 3], ""),
    ('Here you go: {"scores": {"correctness": 2, "faithfulness": 1, "relevance": 5}, "explanation": "off"} hope it helps', [2, 1, 5], "off"),
    ("Correctness: 4\nFaithfulness = 5/5\n**Relevance**: 3.\nRationale: mostly right", [4, 5, 3], "mostly right"),
    ("correctness score: 1, faithfulness score - 2, relevance score: 5", [1, 2, 5], ""),
])
def test_parse_judgement_accepts_json_and_text(reply: str, scores: list, rationale: str) -> None:
    parsed, why = parse_judgement(reply, CRITERIA)
    assert [parsed[c] for c in CRITERIA] == scores and why == rationale


@pytest.mark.parametrize("reply, problem", [
    ("Correctness: excellent\nFaithfulness: 5\nRelevance: 4", "non-numeric correctness score 'excellent'"),
    ('{"correctness": 7, "faithfulness": 5, "relevance": 4}', "correctness score 7 is outside 1-5"),
    ('{"correctness": 4, "relevance": 4}', "no faithfulness score"),
    ("I think the answer is fine.", "no correctness score"),
    ('{"correctness": true, "faithfulness": 5, "relevance": 4}', "non-numeric correctness score"),
])
def test_parse_judgement_says_what_is_wrong(reply: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_judgement(reply, CRITERIA)


def test_single_criterion_accepts_a_bare_score() -> None:
    assert parse_judgement("Score: 4", ["correctness"]) == ({"correctness": 4.0}, "")
    assert parse_judgement('{"score": 2}', ["relevance"])[0] == {"relevance": 2.0}


def test_judge_scores_reports_and_excludes_failures(chat_server: ChatServer, tmp_path: Path) -> None:  # noqa: F811
    dataset = load_beir(datasets_dir() / "xquad_en")
    qids = list(dataset.queries)[:6]
    queries = {qid: dataset.queries[qid] for qid in qids}
    tags = ["", "[429]", "[nonnumeric]", "[down]", "[garbage]", None]  # None: no generated answer
    generated = {qid: f"answer {tag}" for qid, tag in zip(qids, tags) if tag is not None}
    run = Run("bm25", {qid: {"Super_Bowl_50_0": 2.0, "Super_Bowl_50_1": 1.0} for qid in qids})
    judge = LLMJudge(base_url=chat_server.url, model="judge", prompt=PROMPT, top_k=1, timeout=5, max_retries=1,
                     backoff=0.01, output_dir=str(tmp_path))
    data = EvalInput(qrels=dataset.qrels, run=run, queries=queries, answers=dataset.answers, generated=generated, corpus=dataset.corpus)
    assert judge.applies_to(data) and not judge.applies_to(EvalInput(qrels={}, run=run, queries=queries, corpus=dataset.corpus))
    table = judge.evaluate(data)
    assert table.loc[qids[0]].tolist() == [4.0, 5.0, 3.0] and table.loc[qids[1]].tolist() == [4.0, 5.0, 3.0]
    assert table.loc[qids[2:]].isna().all().all()
    assert judge.counted(data, table).tolist() == [True, True, False, False, False, False]
    records = {r["qid"]: r for r in map(json.loads, (tmp_path / "systems" / "bm25" / "judge.jsonl").read_text().splitlines())}
    assert records[qids[0]]["rationale"] == "close" and records[qids[0]]["error"] == ""
    assert "non-numeric correctness score 'excellent'" in records[qids[2]]["error"]
    assert "HTTP 500" in records[qids[3]]["error"] and "malformed reply" in records[qids[4]]["error"]
    assert records[qids[5]]["error"] == "no generated answer"
    prompt = next(r["body"]["messages"][-1]["content"] for r in chat_server.requests if "answer [429]" in r["body"]["messages"][-1]["content"])
    assert prompt.startswith(f"Q {queries[qids[1]]}\nC [1] ") and f'GOLD ANSWERS {json.dumps(dataset.answers[qids[1]])}' in prompt
