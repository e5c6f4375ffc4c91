"""Nugget evaluation (evaluators/nuggets.py) through a fake chat server: creation window by window,
importance labels, a given nuggets file that skips creation (no request), the four TREC RAG 2024
scores against the track's scorer (nuggetizer's code, ported) on random labels, unparseable replies
counted and reported, and the strict readers of the nuggets file and the prompts file."""

from __future__ import annotations

import json
import logging
import math
import random
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest

from ragtrack.core.data import Corpus
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.runs import Run
from ragtrack.evaluators.base import EvalInput
from ragtrack.evaluators.nuggets import NuggetEvaluator, load_prompts, nugget_scores, read_nuggets
from tests.support import ChatServer

METRICS = ["nugget_all", "nugget_all_strict", "nugget_vital", "nugget_vital_strict"]


class NuggetServer(ChatServer):
    """Answers the three nugget prompts of the shipped prompts file:

    - create: the current list plus, per passage ``[i] text``, its first three words (passages with
      [garbage-list] get prose);
    - importance: ``vital`` for nuggets in ``vital`` (a set), else ``okay``;
    - assign: ``support`` / ``partial_support`` / ``not_support`` from ``labels[(answer, nugget)]``
      (default not_support); answers with [prose] get prose, [short] one label too few, [odd] an
      unknown label, [down] HTTP 500.
    """

    def __init__(self) -> None:
        super().__init__()
        self.vital: set[str] = set()
        self.labels: dict[tuple[str, str], str] = {}
        self.kinds: list[str] = []

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        prompt = json.loads(body)["messages"][-1]["content"]
        with self.lock:
            self.requests.append({"body": json.loads(body)})
        if "CURRENT LIST:" in prompt:
            self.kinds.append("create")
            if "[garbage-list]" in prompt:
                return self._reply(handler, "These passages are about many things.")
            current = json.loads(re.search(r"CURRENT LIST: (.*)", prompt).group(1))
            added = [" ".join(text.split()[:3]) for text in re.findall(r"^\[\d+\] (.*)$", prompt, re.MULTILINE)]
            return self._reply(handler, "```json\n" + json.dumps(current + added) + "\n```")
        nuggets = json.loads(re.search(r"NUGGETS: (.*)", prompt).group(1))
        if '"vital" or "okay"' in prompt:
            self.kinds.append("importance")
            return self._reply(handler, str(["vital" if n in self.vital else "okay" for n in nuggets]))  # a Python list
        self.kinds.append("assign")
        answer = re.search(r"ANSWER: (.*)", prompt).group(1)
        if "[down]" in answer:
            return self.send(handler, 500, b'{"error": "internal"}')
        labels = [self.labels.get((answer, n), "not_support") for n in nuggets]
        if "[prose]" in answer:
            return self._reply(handler, "The answer covers most of them.")
        if "[short]" in answer:
            labels = labels[:-1]
        if "[odd]" in answer:
            labels[0] = "maybe"
        return self._reply(handler, "Labels: " + json.dumps(labels))

    def _reply(self, handler: BaseHTTPRequestHandler, content: str) -> None:
        self.send(
            handler, 200, json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        )


@pytest.fixture
def server():
    found = NuggetServer()
    yield found
    found.stop()


def evaluator(server: NuggetServer, tmp_path: Path, **settings) -> NuggetEvaluator:
    return NuggetEvaluator(
        base_url=server.url, model="judge", timeout=5, max_retries=0, output_dir=str(tmp_path), **settings
    )


def calculate_nugget_scores(qid: str, nuggets: list[dict]) -> dict[str, float]:
    """The TREC RAG track's scorer, ported: castorini/nuggetizer src/nuggetizer/core/metrics.py,
    ``calculate_nugget_scores`` at commit d00dc3eb791f4f8f49547ce3ca4f60a63b08cfd7 (its dataclass as a
    dict under ragtrack's names); a score over no nugget is 0.0."""
    vital_nuggets = [n for n in nuggets if n["importance"] == "vital"]
    all_nuggets = nuggets
    strict_vital_supported = sum(1 for n in vital_nuggets if n["assignment"] == "support")
    strict_all_supported = sum(1 for n in all_nuggets if n["assignment"] == "support")
    vital_supported = strict_vital_supported + sum(0.5 for n in vital_nuggets if n["assignment"] == "partial_support")
    all_supported = strict_all_supported + sum(0.5 for n in all_nuggets if n["assignment"] == "partial_support")
    return {
        "nugget_vital_strict": strict_vital_supported / len(vital_nuggets) if vital_nuggets else 0.0,
        "nugget_all_strict": strict_all_supported / len(all_nuggets) if all_nuggets else 0.0,
        "nugget_vital": vital_supported / len(vital_nuggets) if vital_nuggets else 0.0,
        "nugget_all": all_supported / len(all_nuggets) if all_nuggets else 0.0,
    }


def reference_scores(importance: list[str], labels: list[str]) -> dict[str, float]:
    return calculate_nugget_scores("q", [{"importance": i, "assignment": a} for i, a in zip(importance, labels)])


def test_the_four_scores_equal_the_track_scorer_on_random_labels() -> None:
    """Per answer and in the global mean (the nuggetizer's ``calculate_global_metrics``: the mean over
    every answer), answers without a vital nugget or without any nugget included: they score 0."""
    rng = random.Random(7)
    for _ in range(20):
        sets = []
        for _ in range(50):
            count = rng.randint(0, 8)
            sets.append(
                (
                    [rng.choice(["vital", "okay", "okay"]) for _ in range(count)],
                    [rng.choice(["support", "partial_support", "not_support"]) for _ in range(count)],
                )
            )
        assert any(not importance or "vital" not in importance for importance, _ in sets)
        ours = [nugget_scores(*pair) for pair in sets]
        for scores, pair in zip(ours, sets):
            assert scores == pytest.approx(reference_scores(*pair), abs=1e-12)
        for metric in METRICS:
            assert np.mean([scores[metric] for scores in ours]) == pytest.approx(
                np.mean([reference_scores(*p)[metric] for p in sets]), abs=1e-12
            )
    assert nugget_scores(["vital", "okay"], ["partial_support", "support"]) == pytest.approx(
        {"nugget_all": 0.75, "nugget_all_strict": 0.5, "nugget_vital": 0.5, "nugget_vital_strict": 0.0}
    )
    assert nugget_scores(["okay"], ["support"]) == {
        "nugget_all": 1.0,
        "nugget_all_strict": 1.0,
        "nugget_vital": 0.0,
        "nugget_vital_strict": 0.0,
    }


def toy_data(generated: dict[str, str], system: str = "bm25") -> EvalInput:
    """q1: 7 relevant documents (grades 1-3) and a non-relevant one; q2: none relevant; q3: one whose
    text makes the creator answer prose; q4: its relevant document is not in the corpus."""
    ids = [f"d{i}" for i in range(1, 9)] + ["g1"]
    texts = [f"fact{i} alpha{i} beta{i} gamma{i} delta" for i in range(1, 9)] + ["[garbage-list] one two three"]
    corpus = Corpus(ids, [""] * len(ids), texts, "h")
    qrels = {
        "q1": {"d1": 1, "d2": 3, "d3": 2, "d4": 1, "d5": 1, "d6": 2, "d7": 1, "d8": 0},
        "q2": {"d1": 0},
        "q3": {"g1": 1},
        "q4": {"zz": 2},
    }
    queries = {"q1": "what about facts?", "q2": "no relevant", "q3": "garbage", "q4": "missing"}
    run = Run(system, {qid: {"d1": 1.0} for qid in queries})
    return EvalInput(qrels=qrels, run=run, queries=queries, generated=generated, corpus=corpus)


def test_creation_goes_window_by_window_and_writes_a_reusable_file(
    server: NuggetServer, tmp_path: Path, caplog
) -> None:
    server.vital = {"fact2 alpha2 beta2", "fact6 alpha6 beta6"}
    judge = evaluator(
        server,
        tmp_path,
        max_passages=6,
        passages_per_request=4,
        max_nuggets=5,
        nuggets_per_request=2,
        cache_dir=str(tmp_path / "cache"),
    )
    answers = {qid: f"answer {qid}" for qid in ["q1", "q2", "q3", "q4"]}
    server.labels = {
        ("answer q1", "fact2 alpha2 beta2"): "support",
        ("answer q1", "fact3 alpha3 beta3"): "partial_support",
    }
    with caplog.at_level(logging.WARNING):
        table = judge.evaluate(toy_data(answers))
    # relevant documents best grade first, then by id, capped at 6: d2 d3 d6 d1 | d4 d5 (d7 is the 7th)
    creates = [
        r["body"]["messages"][-1]["content"]
        for r in server.requests
        if "CURRENT LIST:" in r["body"]["messages"][-1]["content"]
    ]
    assert len(creates) == 3  # q1 twice (two windows), q3 once
    second = next(p for p in creates if "[1] fact4" in p)
    assert (
        "[2] fact5" in second
        and 'CURRENT LIST: ["fact2 alpha2 beta2", "fact3 alpha3 beta3", "fact6 alpha6 beta6", "fact1 alpha1 beta1"]'
        in second
    )
    expected = [
        "fact2 alpha2 beta2",
        "fact3 alpha3 beta3",
        "fact6 alpha6 beta6",
        "fact1 alpha1 beta1",
        "fact4 alpha4 beta4",
    ]  # capped at 5
    written = read_nuggets(tmp_path / "nuggets.jsonl")
    assert list(written) == ["q1"] and [n.text for n in written["q1"]] == expected
    assert [n.importance for n in written["q1"]] == ["vital", "okay", "vital", "okay", "okay"]
    assert server.kinds.count("importance") == 3 and server.kinds.count("assign") == 3  # 5 nuggets, 2 per request
    assert table.loc["q1"].tolist() == pytest.approx([1.5 / 5, 1 / 5, 0.5, 0.5])
    assert table.loc[["q2", "q3", "q4"]].isna().all().all()
    records = {
        r["qid"]: r
        for r in map(json.loads, (tmp_path / "systems" / "bm25" / "nugget_scores.jsonl").read_text().splitlines())
    }
    assert records["q1"]["nuggets"][0] == {"text": "fact2 alpha2 beta2", "importance": "vital", "assignment": "support"}
    assert records["q2"]["error"] == "no nuggets: no relevant document (grade >= 1) in the judgments"
    assert records["q3"]["error"].startswith("no nuggets: creation: unparseable reply: no list of strings in the reply")
    assert records["q4"]["error"] == "no nuggets: none of its 1 relevant documents is in the evaluated corpus"
    assert "nuggets bm25: 3 of 4 queries not scored" in caplog.text
    # a second system reuses the nuggets: only its assignment is asked
    sent = server.kinds.copy()
    other = judge.evaluate(toy_data({qid: f"other {qid}" for qid in answers}, "dense"))
    assert server.kinds[len(sent) :] == ["assign"] * 3 and other.loc["q1"].tolist() == [0.0] * 4
    # a new evaluator on the same cache sends nothing at all
    again = evaluator(
        server,
        tmp_path,
        max_passages=6,
        passages_per_request=4,
        max_nuggets=5,
        nuggets_per_request=2,
        cache_dir=str(tmp_path / "cache"),
    )
    assert again.evaluate(toy_data(answers)).equals(table) and again.client.requests_sent == 0


def test_no_request_without_an_answer_and_every_prompt_is_keyed_by_its_query(
    server: NuggetServer, tmp_path: Path
) -> None:
    """Generation failed everywhere: nothing to score, no creation request. Otherwise each call's
    prompt id is a tuple whose first item is a query of the dataset (usage.csv has no other rows)."""
    judge = evaluator(server, tmp_path, max_passages=6, passages_per_request=4, max_nuggets=5, nuggets_per_request=2)
    table = judge.evaluate(toy_data({qid: "" for qid in ["q1", "q2", "q3", "q4"]}))
    assert not server.requests and table.isna().all().all()
    judge.evaluate(toy_data({"q1": "answer q1"}))
    assert server.kinds == ["create", "create", "importance", "importance", "importance", "assign", "assign", "assign"]
    calls = judge.client.take_calls()
    assert calls and all(
        isinstance(call.prompt_id, (str, tuple))
        and (call.prompt_id if isinstance(call.prompt_id, str) else call.prompt_id[0]) == "q1"
        for call in calls
    )


def test_a_given_nuggets_file_skips_creation_and_scores_match_the_reference(
    server: NuggetServer, tmp_path: Path
) -> None:
    rng = random.Random(3)
    nuggets = {
        f"q{i}": [(f"nugget {i}-{j}", rng.choice(["vital", "okay"])) for j in range(rng.randint(1, 7))]
        for i in range(30)
    }
    path = tmp_path / "given.jsonl"
    path.write_text(
        "".join(
            json.dumps({"qid": q, "text": t, "importance": k}) + "\n" for q, found in nuggets.items() for t, k in found
        )
    )
    answers = {qid: f"answer of {qid}" for qid in nuggets}
    labels = {
        (answers[q], t): rng.choice(["support", "partial_support", "not_support"])
        for q, found in nuggets.items()
        for t, _ in found
    }
    server.labels = labels
    judge = evaluator(server, tmp_path / "out", nuggets_file=str(path), nuggets_per_request=3)
    data = EvalInput(
        qrels={}, run=Run("s", {}), queries={q: f"question {q}" for q in nuggets}, generated=answers, corpus=None
    )
    assert judge.applies_to(data)
    table = judge.evaluate(data)
    assert set(server.kinds) == {"assign"} and judge.client.requests_sent == sum(
        math.ceil(len(f) / 3) for f in nuggets.values()
    )
    for qid, found in nuggets.items():
        expected = reference_scores([k for _, k in found], [labels[answers[qid], t] for t, _ in found])
        assert table.loc[qid].tolist() == pytest.approx([expected[m] for m in METRICS], abs=1e-12)
    assert read_nuggets(tmp_path / "out" / "nuggets.jsonl") == read_nuggets(path)  # the run keeps the nuggets it used


def test_unparseable_replies_are_counted_reported_and_left_out(server: NuggetServer, tmp_path: Path, caplog) -> None:
    path = tmp_path / "given.jsonl"
    path.write_text(
        "".join(
            json.dumps({"qid": q, "text": f"n{j}", "importance": "vital"}) + "\n"
            for q in ["a", "b", "c", "d", "e", "f", "x"]
            for j in range(2)
        )
    )
    answers = {
        "a": "fine",
        "b": "[prose]",
        "c": "[short]",
        "d": "[odd]",
        "e": "[down]",
        "f": "",
        "g": "no nuggets for g",
    }
    server.labels = {("fine", "n0"): "support", ("fine", "n1"): "partial_support"}
    judge = evaluator(server, tmp_path, nuggets_file=str(path))
    data = EvalInput(qrels={}, run=Run("s", {}), queries={q: q for q in answers}, generated=answers)
    with caplog.at_level(logging.WARNING):
        table = judge.evaluate(data)
    assert table.loc["a"].tolist() == [0.75, 0.5, 0.75, 0.5] and table.drop(index="a").isna().all().all()
    records = {
        r["qid"]: r
        for r in map(json.loads, (tmp_path / "systems" / "s" / "nugget_scores.jsonl").read_text().splitlines())
    }
    assert (
        records["b"]["error"] == "unparseable reply: no list of strings in the reply 'The answer covers most of them.'"
    )
    assert records["c"]["error"] == "unparseable reply: 1 labels for 2 nuggets"
    assert records["d"]["error"].startswith("unparseable reply: unknown label 'maybe'")
    assert "HTTP 500" in records["e"]["error"] and records["f"]["error"] == "no generated answer"
    assert records["g"]["error"] == f"no nuggets: the query is not in {path}"
    assert (
        "nuggets s: 6 of 7 queries not scored" in caplog.text and "1 of the 7 queries in" in caplog.text
    )  # x is not a query


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"qid": "q1", "text": "a"', "2: malformed JSON: Expecting ',' delimiter (column 26)"),
        ('["q1", "a", "vital"]', "2: expected a JSON object, got list"),
        ('{"qid": "q1", "text": "a", "importance": "vital", "weight": 2}', "2: unknown keys ['weight']"),
        ('{"qid": "q1", "text": "a"}', "2: missing importance"),
        ('{"qid": 7, "text": "a", "importance": "vital"}', "2: qid must be a non-empty string (quote numbers), got 7"),
        ('{"qid": "q1", "text": "  ", "importance": "vital"}', "2: text must be a non-empty string"),
        ('{"qid": "q1", "text": "b", "importance": "ok"}', "2: importance must be 'vital' or 'okay', got 'ok'"),
        (
            '{"qid": "q0", "text": " first  fact ", "importance": "okay"}',
            "2: duplicate nugget for query 'q0' (first on line 1)",
        ),
    ],
)
def test_a_bad_nuggets_file_line_is_named(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "nuggets.jsonl"
    path.write_text('{"qid": "q0", "text": "first fact", "importance": "vital"}\n' + line + "\n")
    with pytest.raises(InputError, match=re.escape(f"{path}:{problem}")):
        read_nuggets(path)
    path.write_text("\n")
    with pytest.raises(InputError, match="no nuggets"):
        read_nuggets(path)


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda p: {k: v for k, v in p.items() if k != "assign"}, "exactly the keys create, importance, assign"),
        (lambda p: p | {"assign": p["assign"] + " {score}"}, "uses unknown fields ['score']"),
        (
            lambda p: p | {"assign": p["assign"].replace("{answer}", "the answer")},
            "the 'assign' prompt must show {answer}",
        ),
    ],
)
def test_a_bad_prompts_file_is_named(tmp_path: Path, edit, problem: str) -> None:
    import yaml

    path = tmp_path / "prompts.yaml"
    path.write_text(yaml.safe_dump(edit(load_prompts())))
    with pytest.raises(InputError, match=re.escape(problem)):
        load_prompts(str(path))
    with pytest.raises(RagtrackError, match="'prompt' is not used"):
        NuggetEvaluator(base_url="http://x/v1", model="m", prompt="{question}")


@pytest.mark.parametrize(
    "text, problem",
    [
        ("create: [1\n", r":2: invalid YAML: expected ',' or ']', but got '<stream end>'$"),
        ("create: |\n  a\n b: c\n", r":3: invalid YAML: expected <block end>, but found '<block mapping start>'$"),
        (b"create: \xff\n", r": not valid UTF-8 \(byte 8\)$"),
    ],
)
def test_a_prompts_file_that_is_not_yaml_is_one_line_at_its_line(tmp_path: Path, text, problem: str) -> None:
    path = tmp_path / "prompts.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(InputError, match=re.escape(str(path)) + problem) as raised:
        load_prompts(str(path))
    assert "\n" not in str(raised.value)


def test_a_list_reply_is_read_for_the_models_own_list() -> None:
    from ragtrack.evaluators.replies import string_list

    assert string_list('The nuggets are ["a", "b"].\nLabels: ["support", "not_support"]') == ["support", "not_support"]
    assert string_list('```json\n["x", "y"]\n```') == ["x", "y"]


def test_a_prompts_file_with_other_keys_is_one_line(tmp_path: Path) -> None:
    """Was a TypeError traceback."""
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("1: a\ncreate: b\n")
    with pytest.raises(
        InputError,
        match=r"prompts\.yaml: nugget prompts are a mapping with exactly the keys create, importance, "
        r"assign; found \['1', 'create'\]$",
    ):
        load_prompts(str(prompts))


def test_a_dry_run_of_the_nuggets_evaluator_bounds_the_requests_of_the_real_run(tmp_path: Path) -> None:
    """Offline, creation's first window failed as not sent and nothing after it was counted: 2 planned
    requests where the real run sends 12 (3 creation, 3 importance, 3 assignments per system)."""
    server = NuggetServer()
    try:
        settings = {
            "base_url": server.url,
            "model": "judge",
            "timeout": 5,
            "max_retries": 0,
            "max_passages": 6,
            "passages_per_request": 4,
            "max_nuggets": 5,
            "nuggets_per_request": 2,
            "cache_dir": str(tmp_path / "cache"),
        }
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
