"""Defects found in the review of issues 28 and 29's code, each pinned by a test that failed before its fix."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from ragtrack.evaluators.citations import CitationEvaluator
from ragtrack.evaluators.faithfulness import FaithfulnessEvaluator
from ragtrack.evaluators.human_labels import read_human_labels
from ragtrack.evaluators.nuggets import NuggetEvaluator, load_prompts
from ragtrack.pipeline import usage
from ragtrack.pipeline.reference import read_reference

from ragtrack.core.errors import InputError
from ragtrack.core.llm import ChatClient
from tests.support import ChatServer


def test_a_refused_request_names_the_endpoint_without_its_credentials(chat_server: ChatServer) -> None:
    """An HTTP 4xx error named ``base_url`` with its ``user:password@``: the error text goes to
    judge.jsonl, nugget_scores.jsonl, citations.jsonl, generation.json and the log."""
    password = "pw-0123"  # shorter than the secrets registry's minimum: only the URL's own stripping hides it
    url = chat_server.url.replace("http://", f"http://alice:{password}@")
    client = ChatClient(base_url=url, model="m", backoff=0.01, max_retries=0)
    replies, failures = client.complete_all({"a": "[401] refused", "b": "[down] broken"})
    assert not replies and set(failures) == {"a", "b"}
    assert "HTTP 401" in failures["a"] and "HTTP 500" in failures["b"]
    assert all(password not in text and "alice" not in text for text in failures.values()), failures


class _SlowFirst(ChatClient):
    """Answers at once, except the prompt "first", whose reply arrives last."""

    def _request(self, prompt: str, http):
        if prompt == "first":
            time.sleep(0.3)
        return f"reply to {prompt}", (len(prompt), 1)


def test_calls_are_recorded_in_prompt_order_however_the_replies_arrive() -> None:
    """Calls were recorded as replies arrived, so the usage rows (and float sums of cost over them)
    depended on thread timing."""
    client = _SlowFirst(base_url="http://127.0.0.1:9/v1", model="m", concurrency=4)
    prompts = {"q0": "first", "q1": "second", "q2": "third"}
    replies, failures = client.complete_all(prompts)
    assert not failures and list(replies) == list(prompts)
    assert [call.prompt_id for call in client.take_calls()] == list(prompts)


def _calls(rows: list[tuple]) -> pd.DataFrame:
    """Meter rows (system, stage, qid, cached, prompt_tokens, completion_tokens, cost)."""
    meter = usage.Meter()
    meter.rows = [dict(zip(usage.COLUMNS, (system, stage, qid, False, cached, False, False, prompt, completion, cost, 0.0 if cached else 0.5)))
                  for system, stage, qid, cached, prompt, completion, cost in rows]
    return meter.table()


def test_token_sums_of_calls_without_usage_are_unknown_not_zero() -> None:
    """A server that reports no usage gave prompt_tokens 0 (results.json, MLflow) and 0 in usage.csv;
    the sent calls' new_cost was 0 when only cached calls had a cost."""
    calls = _calls([("bm25", "generator", "q1", False, None, None, None), ("bm25", "generator", "q2", False, None, None, None),
                    ("bm25", "llm_judge", "q1", True, 10, 2, 0.5), ("bm25", "llm_judge", "q1", False, None, None, None)])
    generator = usage.figures(calls[calls["stage"] == "generator"])
    assert generator["calls"] == 2 and generator["unknown_usage"] == 2
    assert "prompt_tokens" not in generator and "new_completion_tokens" not in generator
    everything = usage.figures(calls)
    assert everything["prompt_tokens"] == 10 and everything["cost"] == 0.5  # lower bounds: unknown_usage says so
    assert "new_prompt_tokens" not in everything and "new_cost" not in everything  # the sent calls' usage is all unknown
    assert usage.figures(calls[calls["cached"]])["new_prompt_tokens"] == 0  # nothing sent: truly 0
    assert all(key.rsplit("/", 1)[-1] != "prompt_tokens" for key in usage.metrics({"generator": generator}))
    table = usage.per_query(calls).set_index(["stage", "qid"])
    assert pd.isna(table.loc[("generator", "q1"), "prompt_tokens"]) and table.loc[("llm_judge", "q1"), "prompt_tokens"] == 10
    assert "\r\ngenerator,q1,1,0,1,,,,0.5\r\n" in usage.usage_csv(calls)


def test_hostile_label_prompt_and_reference_files_are_one_line(tmp_path: Path) -> None:
    """Each of these was a TypeError or ValueError traceback."""
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("1: a\ncreate: b\n")
    with pytest.raises(InputError, match=r"prompts\.yaml: nugget prompts are a mapping with exactly the keys create, importance, "
                                         r"assign; found \['1', 'create'\]$"):
        load_prompts(str(prompts))
    for number, criterion in enumerate(('["correctness"]', '{"a": 1}', "3")):
        labels = tmp_path / f"labels{number}.jsonl"
        labels.write_text(f'{{"qid": "q1", "system": "bm25", "criterion": {criterion}, "label": 3}}\n')
        with pytest.raises(InputError, match=rf"labels{number}\.jsonl:1: 'criterion' must be a rubric's name, got "):
            read_human_labels(labels, {"correctness": [1, 2, 3], "relevance": [1, 2, 3]}, "system")


def test_a_reference_per_query_table_with_a_repeated_or_blank_query_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"systems": {"bm25": {"ndcg@10": 0.5}}}))
    for rows, problem in ((["bm25,q1,0.5", "bm25,q2,0.25", "bm25,q1,0.5"], r":4: query 'q1' of bm25 is given twice \(first on line 2\)$"),
                          (["bm25,q1,0.5", "bm25,,0.25"], r":3: empty qid$"), (["bm25,q1,0.5", ",q2,0.25"], r":3: empty system$")):
        (folder / "per_query.csv").write_text("\r\n".join(["system,qid,ndcg@10", *rows]) + "\r\n")
        with pytest.raises(InputError, match=r"per_query\.csv" + problem):
            read_reference(str(folder))


def test_citing_changes_no_faithfulness_metric() -> None:
    """docs/answers.md: the answer metrics take citation markers out, so citing changes none of them;
    k_precision and sentence_support counted the marker's number as an unsupported token (and a marker
    after the full stop as a sentence of its own)."""
    from tests.unit.test_faithfulness import _data

    passages = {"q": ["The Denver Broncos won Super Bowl 50.", "Carolina lost."]}
    scores = [FaithfulnessEvaluator(top_k=2).evaluate(_data({"q": answer}, {"q": ["Denver Broncos"]}, passages)).loc["q"].to_dict()
              for answer in ("The Denver Broncos won. Carolina lost.", "The Denver Broncos won [1]. Carolina lost. [2]")]
    assert scores[0] == scores[1] == {"k_precision": 1.0, "answer_recall": 1.0, "sentence_support": 1.0}


def test_a_dry_run_of_the_nuggets_evaluator_bounds_the_requests_of_the_real_run(tmp_path: Path) -> None:
    """Offline, creation's first window failed as not sent and nothing after it was counted: 2 planned
    requests where the real run sends 12 (3 creation, 3 importance, 3 assignments per system)."""
    from tests.unit.test_nuggets import NuggetServer, toy_data

    server = NuggetServer()
    try:
        settings = {"base_url": server.url, "model": "judge", "timeout": 5, "max_retries": 0, "max_passages": 6, "passages_per_request": 4,
                    "max_nuggets": 5, "nuggets_per_request": 2, "cache_dir": str(tmp_path / "cache")}
        dry, real = NuggetEvaluator(**settings), NuggetEvaluator(**settings)
        dry.client.offline = True
        planned = 0
        for system in ("bm25", "dense"):
            data = toy_data({qid: f"{system} {qid}" for qid in ("q1", "q2", "q3", "q4")}, system)
            dry.evaluate(data)
            planned += len(dry.client.take_calls()) + dry.unsent_followups()
            real.evaluate(data)
        assert real.client.requests_sent == 12
        # upper bound: q1 1 more window + 3 importance + 3 assignments per system, q3 3 importance + 3 per system
        assert planned == 2 + (1 + 3 + 3) + (3 + 3) + (3 + 3) >= real.client.requests_sent
    finally:
        server.stop()


def test_a_dry_run_of_llm_citations_bounds_the_later_rounds() -> None:
    """Offline, the joint checks failed as not sent and the single-passage checks after them went
    uncounted: 2 planned where the real run asks 4 (ANSWER: [1][3] jointly, then each alone)."""
    from tests.unit.test_citations import ANSWER, SupportServer, data_for

    server = SupportServer()
    try:
        settings = {"mode": "llm", "prompt": "Q: {question}\nPASSAGES:\n{passages}\nSTATEMENT: {statement}\nyes or no?", "top_k": 3,
                    "base_url": server.url, "model": "m", "timeout": 5, "max_retries": 0}
        dry, real = CitationEvaluator(**settings), CitationEvaluator(**settings)
        dry.client.offline = True
        dry.evaluate(data_for({"q": ANSWER}))
        planned = dry.client.take_calls()
        assert len(planned) == 2 and dry.unsent_followups() == 4  # (1, 3) and (2) jointly; then ≤ 2 checks per citation of (1, 3)
        real.evaluate(data_for({"q": ANSWER}))
        assert len(server.requests) == 4 <= len(planned) + dry.unsent_followups()
    finally:
        server.stop()
