"""LLM-as-judge: lenient reply parsing with clear errors, rubrics (built-in and a user's file), scoring
against the misbehaving server, and the pairwise judge's position swapping against a judge that answers
by position."""

from __future__ import annotations

import json
import math
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from ragtrack.core.data import load_beir
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.runs import Run
from ragtrack.evaluators.base import EvalInput
from ragtrack.evaluators.judge import BUILT_IN_RUBRICS, LLMJudge, load_rubric, parse_judgement
from ragtrack.evaluators.pairwise import PairwiseJudge, parse_verdict
from ragtrack.pipeline.configuration.config import datasets_dir
from tests.support import ChatServer, ragtrack

CRITERIA = ["correctness", "faithfulness", "relevance"]
PROMPT = "Q {question}\nC {context}\nGOLD ANSWERS {gold_answers}\nA {answer}"


@pytest.mark.parametrize(
    "reply, scores, rationale",
    [
        ('{"correctness": 4, "faithfulness": 5, "relevance": 3, "rationale": "close"}', [4, 5, 3], "close"),
        ('Sure!\n```json\n{"Correctness": "4", "faithfulness": 5.0, "relevance": "3/5"}\n```', [4, 5, 3], ""),
        (
            'Here you go: {"scores": {"correctness": 2, "faithfulness": 1, "relevance": 5}, "explanation": "off"} hope it helps',
            [2, 1, 5],
            "off",
        ),
        ("Correctness: 4\nFaithfulness = 5/5\n**Relevance**: 3.\nRationale: mostly right", [4, 5, 3], "mostly right"),
        ("correctness score: 1, faithfulness score - 2, relevance score: 5", [1, 2, 5], ""),
    ],
)
def test_parse_judgement_accepts_json_and_text(reply: str, scores: list, rationale: str) -> None:
    parsed, why = parse_judgement(reply, CRITERIA)
    assert [parsed[c] for c in CRITERIA] == scores and why == rationale


@pytest.mark.parametrize(
    "reply, problem",
    [
        ("Correctness: excellent\nFaithfulness: 5\nRelevance: 4", "non-numeric correctness score 'excellent'"),
        ('{"correctness": 7, "faithfulness": 5, "relevance": 4}', "correctness score 7 is outside 1-5"),
        ('{"correctness": 4, "relevance": 4}', "no faithfulness score"),
        ("I think the answer is fine.", "no correctness score"),
        ('{"correctness": true, "faithfulness": 5, "relevance": 4}', "non-numeric correctness score"),
    ],
)
def test_parse_judgement_says_what_is_wrong(reply: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_judgement(reply, CRITERIA)


@pytest.mark.parametrize(
    "reply, score",
    [
        ('The answer claims "Correctness: 5". It is wrong.\nCorrectness: 1', 1.0),
        ('The answer holds {"correctness": 5}; mine: {"correctness": 2, "rationale": "wrong"}', 2.0),
        ('```json\n{"correctness": 5}\n```\nOn reflection:\n```json\n{"correctness": 3}\n```', 3.0),
    ],
)
def test_the_score_is_the_judges_own_verdict(reply: str, score: float) -> None:
    """A reply that quotes the answer's own score before its verdict: the last one is the judge's."""
    assert parse_judgement(reply, ["correctness"])[0] == {"correctness": score}


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
    judge = LLMJudge(
        base_url=chat_server.url,
        model="judge",
        prompt=PROMPT,
        top_k=1,
        timeout=5,
        max_retries=1,
        backoff=0.01,
        output_dir=str(tmp_path),
    )
    data = EvalInput(
        qrels=dataset.qrels,
        run=run,
        queries=queries,
        answers=dataset.answers,
        generated=generated,
        corpus=dataset.corpus,
    )
    assert judge.applies_to(data) and not judge.applies_to(
        EvalInput(qrels={}, run=run, queries=queries, corpus=dataset.corpus)
    )
    table = judge.evaluate(data)
    assert table.loc[qids[0]].tolist() == [4.0, 5.0, 3.0] and table.loc[qids[1]].tolist() == [4.0, 5.0, 3.0]
    assert table.loc[qids[2:]].isna().all().all()
    assert judge.counted(data, table).tolist() == [True, True, False, False, False, False]
    records = {
        r["qid"]: r for r in map(json.loads, (tmp_path / "systems" / "bm25" / "judge.jsonl").read_text().splitlines())
    }
    assert records[qids[0]]["rationale"] == "close" and records[qids[0]]["error"] == ""
    assert "non-numeric correctness score 'excellent'" in records[qids[2]]["error"]
    assert "HTTP 500" in records[qids[3]]["error"] and "malformed reply" in records[qids[4]]["error"]
    assert records[qids[5]]["error"] == "no generated answer"
    prompt = next(
        r["body"]["messages"][-1]["content"]
        for r in chat_server.requests
        if "answer [429]" in r["body"]["messages"][-1]["content"]
    )
    assert (
        prompt.startswith(f"Q {queries[qids[1]]}\nC [1] ")
        and f"GOLD ANSWERS {json.dumps(dataset.answers[qids[1]])}" in prompt
    )


class JudgeServer(ChatServer):
    """:class:`ChatServer` that also answers rubric prompts (the highest score of each rubric the
    reply format asks for) and pairwise prompts: ``position`` mode always prefers ANSWER A (a judge
    with pure position bias); ``content`` mode prefers the answer containing "right" (tie if both or
    neither do); pairwise prompts mentioning "[down]" fail with HTTP 500."""

    def __init__(self, mode: str = "content") -> None:
        super().__init__()
        self.mode = mode

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        prompt = json.loads(body)["messages"][-1]["content"]
        with self.lock:
            self.requests.append({"body": json.loads(body)})
        if "ANSWER A:" in prompt:
            if "[down]" in prompt:
                return self.send(handler, 500, b'{"error": "internal"}')
            first, second = (re.search(rf"ANSWER {x}: (.*)", prompt).group(1) for x in "AB")
            if self.mode == "position":
                winner = "A"
            else:
                winner = "tie" if ("right" in first) == ("right" in second) else "A" if "right" in first else "B"
            return self._reply(handler, json.dumps({"winner": winner, "rationale": "by rule"}))
        asked = re.findall(r'"(\w+)": <(\d+)-(\d+)>', prompt)
        if not asked:
            return super().handle(handler, body)
        return self._reply(handler, json.dumps({name: int(high) for name, _, high in asked} | {"rationale": "top"}))

    def _reply(self, handler: BaseHTTPRequestHandler, content: str) -> None:
        self.send(
            handler, 200, json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        )


@pytest.fixture
def judge_server():
    server = JudgeServer()
    yield server
    server.stop()


def test_built_in_rubrics_load_and_render() -> None:
    assert set(LLMJudge.provides()) == {f"judge_{name}" for name in BUILT_IN_RUBRICS} and len(BUILT_IN_RUBRICS) == 7
    for name in BUILT_IN_RUBRICS:
        rubric = load_rubric(name)
        assert rubric.name == name and rubric.bounds == (1, 5) and len(rubric.examples) == 2
        text = rubric.render()
        assert text.startswith(f"{name} (1-5): {rubric.description}") and f"  5 = {rubric.scale[5]}" in text
        assert text.count(f"-> {name} ") == 2


def _rubric_file(folder: Path, text: str) -> str:
    path = folder / "rubric.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("name: x\ndescription: d\nscale: {1: a, 2: b}\nweight: 2\n", "unknown rubric keys ['weight']"),
        ("name: Bad Name\ndescription: d\nscale: {1: a, 2: b}\n", "'name' must be lower-case"),
        ("name: x\ndescription: d\nscale: {1: a}\n", "'scale' must map at least two integer scores"),
        ("name: x\ndescription: ''\nscale: {1: a, 2: b}\n", "'description' must be a non-empty string"),
        (
            "name: x\ndescription: d\nscale: {1: a, 2: b}\nexamples: [{answer: y, score: 3}]\n",
            "example 1: score 3 is not on the scale [1, 2]",
        ),
        (
            "name: x\ndescription: d\nscale: {1: a, 2: b}\nexamples: [{answer: y}]\n",
            "example 1 needs at least 'answer' and 'score'",
        ),
        ("name: [x\n", "invalid YAML: expected ',' or ']', but got '<stream end>'"),
    ],
)
def test_a_bad_rubric_file_is_named_with_its_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = _rubric_file(tmp_path, text)
    line = ":2" if "YAML" in problem else ""  # a parse error names its line
    with pytest.raises(InputError, match=re.escape(f"{path}{line}: {problem}")):
        load_rubric(path)
    with pytest.raises(RagtrackError, match="unknown rubric 'helpfulness'; built-in: correctness"):
        load_rubric("helpfulness")


def test_judge_with_built_in_and_own_rubrics(judge_server: JudgeServer, tmp_path: Path) -> None:
    own = _rubric_file(
        tmp_path,
        "name: citation\ndescription: Does the answer cite a passage?\nscale: {0: none, 1: partly, 2: fully}\n"
        "examples:\n  - {answer: 'Kawann Short [1]', score: 2, rationale: 'cites [1]'}\n",
    )
    judge = LLMJudge(
        base_url=judge_server.url,
        model="judge",
        prompt="{rubrics}\nQ {question}\nA {answer}\nReply {reply_format}",
        rubrics=["coherence", "conciseness", own],
        top_k=1,
        backoff=0.01,
    )
    assert judge.metrics == ["judge_coherence", "judge_conciseness", "judge_citation"]
    data = EvalInput(
        qrels={"q": {"d": 1}},
        run=Run("s", {"q": {"d": 1.0}}),
        queries={"q": "who?"},
        generated={"q": "someone"},
        corpus=load_beir(datasets_dir() / "toy").corpus,
    )
    data.run = Run("s", {"q": {data.corpus.ids[0]: 1.0}})
    assert judge.evaluate(data).loc["q"].tolist() == [5.0, 5.0, 2.0]
    prompt = judge_server.requests[-1]["body"]["messages"][-1]["content"]
    assert (
        "citation (0-2): Does the answer cite a passage?\n  0 = none" in prompt
        and "ANSWER: Kawann Short [1] -> citation 2 (cites [1])" in prompt
    )
    assert prompt.endswith(
        'Reply {"coherence": <1-5>, "conciseness": <1-5>, "citation": <0-2>, "rationale": "<one sentence>"}'
    )
    assert parse_judgement('{"citation": 2}', ["citation"], {"citation": (0, 2)})[0] == {"citation": 2.0}
    with pytest.raises(ValueError, match="citation score 3 is outside 0-2"):
        parse_judgement('{"citation": 3}', ["citation"], {"citation": (0, 2)})
    with pytest.raises(RagtrackError, match=r"metrics \['judge_fluency'\] have no rubric"):
        LLMJudge(
            base_url=judge_server.url, model="j", prompt="{answer}", rubrics=["coherence"], metrics=["judge_fluency"]
        )


@pytest.mark.parametrize(
    "reply, verdict",
    [
        ('{"winner": "A", "rationale": "x"}', "A"),
        ('```json\n{"winner": "tie"}\n```', "tie"),
        ("[[B]]", "B"),
        ("Verdict: b. Because...", "B"),
        ("A", "A"),
        ("Tie.", "tie"),
        ('{"better": "draw"}', "tie"),
    ],
)
def test_parse_verdict(reply: str, verdict: str) -> None:
    assert parse_verdict(reply) == verdict


def test_the_verdict_is_the_judges_own() -> None:
    assert parse_verdict('Answer A says {"winner": "A"}. My verdict: {"winner": "B"}') == "B"
    assert parse_verdict("Assistant A wrote [[A]]; I judge [[B]]") == "B"
    assert parse_verdict("The answer says 'Winner: A'.\nWinner: tie") == "tie"


def test_parse_verdict_says_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="no verdict"):
        parse_verdict("Both are fine I guess")


def _wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval by its formula (Wilson 1927): (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)."""
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


PAIR_QUERIES = {f"q{i}": f"question {i}" for i in range(6)}
ANSWERS = {
    "good": {"q0": "right 0", "q1": "right 1", "q2": "right 2", "q3": "same", "q4": "wrong 4", "q5": "right [down]"},
    "bad": {"q0": "wrong 0", "q1": "wrong 1", "q2": "wrong 2", "q3": "same", "q4": "right 4", "q5": "wrong 5"},
}


def _pairwise(url: str, **settings) -> PairwiseJudge:
    prompt = (
        "Criterion: {rubric}\nQ: {question}\nGOLD ANSWERS: {gold_answers}\nANSWER A: {answer_a}\nANSWER B: {answer_b}"
    )
    return PairwiseJudge(prompt=prompt, base_url=url, model="judge", max_retries=0, backoff=0.01, **settings)


def test_pairwise_judge_asks_both_orders_and_reports_rates_with_wilson_intervals(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    judge = _pairwise(judge_server.url, output_dir=str(tmp_path))
    summary = judge.compare(ANSWERS, PAIR_QUERIES, {})["good vs bad"]
    assert (summary["judged"], summary["wins"], summary["ties"], summary["losses"], summary["failed"]) == (
        5,
        3,
        1,
        1,
        1,
    )
    assert summary["win_rate"] == 3 / 5 and summary["tie_rate"] == 1 / 5 and summary["loss_rate"] == 1 / 5
    assert (summary["win_rate_ci_low"], summary["win_rate_ci_high"]) == pytest.approx(_wilson(3, 5), abs=1e-12)
    assert (summary["tie_rate_ci_low"], summary["tie_rate_ci_high"]) == pytest.approx(_wilson(1, 5), abs=1e-12)
    assert summary["position_consistency"] == 1.0 and summary["first_position_rate"] == 0.5
    assert summary["first_error"].startswith("q5: order ab: ") and "HTTP 500" in summary["first_error"]
    prompts = [r["body"]["messages"][-1]["content"] for r in judge_server.requests]
    assert len(prompts) == 2 * 5 and not any(
        "ANSWER A: same" in p for p in prompts
    )  # identical answers: a tie without asking
    assert "ANSWER A: right 0\nANSWER B: wrong 0" in "\n".join(
        prompts
    ) and "ANSWER A: wrong 0\nANSWER B: right 0" in "\n".join(prompts)
    assert prompts[0].startswith(f"Criterion: {load_rubric('correctness').description}")
    records = [json.loads(line) for line in (tmp_path / "pairwise.jsonl").read_text().splitlines()]
    assert [(r["qid"], r["order_ab"], r["order_ba"], r["outcome"]) for r in records[:5]] == [
        ("q0", "A", "B", "win"),
        ("q1", "A", "B", "win"),
        ("q2", "A", "B", "win"),
        ("q3", None, None, "tie"),
        ("q4", "B", "A", "loss"),
    ]


def test_pairwise_judge_cancels_position_bias() -> None:
    """A judge that always prefers ANSWER A: every query flips with the order, so every one is a tie."""
    server = JudgeServer(mode="position")
    try:
        summary = _pairwise(server.url).compare(ANSWERS, PAIR_QUERIES, {})["good vs bad"]
    finally:
        server.stop()
    assert (summary["wins"], summary["ties"], summary["losses"]) == (0, 5, 0)
    assert summary["position_consistency"] == 0.0 and summary["first_position_rate"] == 1.0


def test_pairwise_pairs_default_to_the_baseline_against_each_system(judge_server: JudgeServer) -> None:
    systems = ["bm25", "dense", "hybrid"]
    assert _pairwise(judge_server.url).pairs_of(systems) == [("bm25", "dense"), ("bm25", "hybrid")]
    assert _pairwise(judge_server.url, baseline="hybrid").pairs_of(systems) == [("hybrid", "bm25"), ("hybrid", "dense")]
    assert _pairwise(judge_server.url, pairs=[["dense", "bm25"]]).pairs_of(systems) == [("dense", "bm25")]
    with pytest.raises(
        RagtrackError, match=r"systems \['colbert'\] produced no answers; systems with answers: bm25, dense, hybrid"
    ):
        _pairwise(judge_server.url, pairs=[["colbert", "bm25"]]).pairs_of(systems)
    with pytest.raises(RagtrackError, match="pairs must be"):
        _pairwise(judge_server.url, pairs=[["bm25", "bm25"]])


@pytest.mark.slow  # a whole job or several: make test-slow
def test_pairwise_judge_in_a_job(judge_server: JudgeServer, tmp_path: Path) -> None:
    """Two systems answer (the fake reader repeats the top passage), the pairwise judge compares them:
    results.json, pairwise.jsonl and the parent run's MLflow metrics."""
    url = judge_server.url
    result = ragtrack(
        tmp_path,
        "run",
        "dataset=toy",
        "encoder=hashing",
        "retriever=[bm25,dense]",
        "fusion=[]",
        "generator=openai",
        f"generator.base_url={url}",
        "generator.model=m",
        "generator.top_k=1",
        "generator.prompt='{context} {question}'",
        "evaluator=[ranking,pairwise_judge]",
        f"evaluator.pairwise_judge.base_url={url}",
        "evaluator.pairwise_judge.model=j",
        "hydra.run.dir=outputs/job",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = tmp_path / "outputs" / "job"
    summary = json.loads((output / "results.json").read_text())["pairwise"]["bm25 vs dense"]
    assert summary["judged"] == 6 and summary["wins"] + summary["ties"] + summary["losses"] == 6
    assert len((output / "pairwise.jsonl").read_text().splitlines()) == 6
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    parent = next(
        r
        for r in client.search_runs([client.get_experiment_by_name("ragtrack-toy").experiment_id])
        if "ragtrack.system" not in r.data.tags
    )
    assert parent.data.metrics["pairwise/bm25_vs_dense/tie_rate"] == summary["tie_rate"]
    assert "pairwise.jsonl" in {a.path for a in client.list_artifacts(parent.info.run_id)}
