"""Generators: the extractive reader on hand cases; the OpenAI-compatible client against a real
chat-completions server on 127.0.0.1 that misbehaves on purpose; the API key never lands anywhere;
``experiment=qa_xquad`` end to end."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from ragtrack.core.errors import RagtrackError
from ragtrack.retrievers.generation import ChatClient, ExtractiveGenerator, OpenAIGenerator
from tests.support import ChatServer

SECRET = "sk-test-3f9c2a7e51d04b8c9e6a"
KEY_ENV = "RAGTRACK_TEST_CHAT_KEY"


def test_extractive_answers_from_the_best_sentence() -> None:
    passages = [
        "The Panthers defense gave up just 308 points, ranking sixth in the league. "
        "Pro Bowl defensive tackle Kawann Short led the team in sacks with 11. The weather was mild."
    ]
    queries = {
        "n": "How many points did the Panthers defense give up?",
        "who": "Who led the team in sacks?",
        "none": "What?",
    }
    span = ExtractiveGenerator(top_k=1, unit="span").generate(queries, {"n": passages, "who": passages, "none": []})
    assert span["n"] == "308"
    assert span["who"] == "Kawann Short"
    sentence = ExtractiveGenerator(top_k=1, unit="sentence")
    answers = sentence.generate({"who": queries["who"], "none": "What?"}, {"who": passages, "none": []})
    assert answers == {"who": "Pro Bowl defensive tackle Kawann Short led the team in sacks with 11."}
    assert sentence.failures == {"none": "no retrieved passage"}
    with pytest.raises(RagtrackError, match="unit"):
        ExtractiveGenerator(unit="word")


def _generator(url: str, **overrides) -> OpenAIGenerator:
    settings = {
        "base_url": url,
        "model": "test-model",
        "prompt": "{question}\n{context}",
        "top_k": 2,
        "timeout": 1.5,
        "max_retries": 2,
        "backoff": 0.01,
        "concurrency": 3,
        "parameters": {"temperature": 0},
    } | overrides
    return OpenAIGenerator(**settings)


def test_openai_generator_retries_and_reports_failures(chat_server: ChatServer, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    tags = ["ok", "[429]", "[500]", "[slow]", "[garbage]", "[down]", "[401]"]
    queries = {tag: f"question {tag}" for tag in tags}
    generator = _generator(chat_server.url, api_key_env=KEY_ENV, cache_dir=str(tmp_path))
    answers = generator.generate(queries, {tag: ["passage one", "passage two", "passage three"] for tag in tags})
    assert answers == {tag: f"answer to question {tag}" for tag in ["ok", "[429]", "[500]", "[slow]"]}
    failures = generator.failures
    assert set(failures) == {"[garbage]", "[down]", "[401]"}
    assert "malformed reply" in failures["[garbage]"] and "gave up after 3 attempts" in failures["[garbage]"]
    assert "HTTP 500" in failures["[down]"] and "gave up after 3 attempts" in failures["[down]"]
    assert "HTTP 401" in failures["[401]"] and "invalid api key" in failures["[401]"]
    attempts = {prompt.splitlines()[0].removeprefix("question "): n for prompt, n in chat_server.attempts.items()}
    assert attempts == {"ok": 1, "[429]": 2, "[500]": 2, "[slow]": 2, "[garbage]": 3, "[down]": 3, "[401]": 1}
    request = chat_server.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == f"Bearer {SECRET}"
    assert request["body"]["model"] == "test-model" and request["body"]["temperature"] == 0
    assert "[1] passage one\n\n[2] passage two" in request["body"]["messages"][-1]["content"]
    assert "passage three" not in request["body"]["messages"][-1]["content"]  # top_k = 2

    sent = len(chat_server.requests)
    sorted(tmp_path.rglob("*.json"))[0].write_text("{half-written")  # an unreadable entry is asked again
    again = _generator(chat_server.url, api_key_env=KEY_ENV, cache_dir=str(tmp_path))
    assert again.generate(queries, {tag: ["passage one", "passage two"] for tag in tags}) == answers
    assert len(chat_server.requests) - sent == 1 + 3 + 3 + 1  # cached replies cost nothing; failures are retried
    cached = list(tmp_path.rglob("*.json"))
    assert len(cached) == 4 and all(SECRET not in file.read_text() for file in cached)


def test_chat_client_settings_are_checked(monkeypatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(RagtrackError, match=f"environment variable {KEY_ENV}"):
        ChatClient(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=KEY_ENV)
    with pytest.raises(RagtrackError, match="unknown fields"):
        _generator("http://127.0.0.1:9/v1", prompt="{question} {passages}")
    client = ChatClient(base_url="http://127.0.0.1:9/v1", model="m", max_retries=1, backoff=0.01, timeout=0.5)
    replies, failures = client.complete_all({"a": "hello"})
    assert replies == {} and "connection failed" in failures["a"] and "gave up after 2 attempts" in failures["a"]


class HostileChatServer(ChatServer):
    """:class:`ChatServer` plus hostile replies chosen by a word in the prompt (always, every attempt):
    ``[echo-error]`` / "ATP" a 500 whose body echoes the key across the 200-character excerpt edge,
    ``[echo-reply]`` / "earthquakes" a reply that echoes the key, ``[gzip]`` / "vaccines" a body declared
    gzip that is not, ``[truncated]`` / "black hole" a body shorter than its Content-Length,
    ``[drip]`` a reply sent one byte every 0.2 s, ``[not-utf8]``, ``[no-choices]``, ``[number]``; ``[abstain]``
    answers " Unanswerable. "."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        prompt = json.loads(body)["messages"][-1]["content"]
        behaviour = next((b for words, b in self.BEHAVIOURS if any(w in prompt for w in words)), None)
        if behaviour is None:
            return super().handle(handler, body)
        with self.lock:
            self.attempts[prompt] = self.attempts.get(prompt, 0) + 1
        reply = {"choices": [{"message": {"content": f"your key is {self.secret}, keep it safe"}}]}
        if behaviour == "echo-error":
            return self.send(handler, 500, ("x" * 180 + f" invalid key {self.secret} for this model").encode())
        if behaviour == "abstain":
            return self.send(
                handler, 200, json.dumps({"choices": [{"message": {"content": " Unanswerable. "}}]}).encode()
            )
        if behaviour == "echo-reply":
            return self.send(handler, 200, json.dumps(reply).encode())
        if behaviour == "gzip":
            return self.send(handler, 200, b"this is not gzip at all", {"Content-Encoding": "gzip"})
        if behaviour == "not-utf8":
            return self.send(handler, 200, b'{"choices": [{"message": {"content": "caf\xe9"}}]}')
        if behaviour == "no-choices":
            return self.send(handler, 200, b'{"id": "x", "object": "chat.completion"}')
        if behaviour == "number":
            return self.send(handler, 200, b'{"choices": [{"message": {"content": 42}}]}')
        payload = json.dumps(reply).encode()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(payload) + (100 if behaviour == "truncated" else 0)))
            handler.end_headers()
            if behaviour == "truncated":
                handler.wfile.write(payload)
                return
            for byte in payload:  # drip
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(0.2)

    BEHAVIOURS = [
        (("[abstain]",), "abstain"),
        (("[echo-error]", "ATP"), "echo-error"),
        (("[echo-reply]", "earthquakes"), "echo-reply"),
        (("[gzip]", "vaccines"), "gzip"),
        (("[truncated]", "black hole"), "truncated"),
        (("[drip]",), "drip"),
        (("[not-utf8]",), "not-utf8"),
        (("[no-choices]",), "no-choices"),
        (("[number]",), "number"),
    ]


@pytest.fixture
def hostile_server():
    server = HostileChatServer(SECRET)
    yield server
    server.stop()


def test_malformed_replies_are_retried_and_reported_never_raised(
    hostile_server: HostileChatServer, monkeypatch
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    tags = ["ok", "[echo-error]", "[echo-reply]", "[gzip]", "[truncated]", "[not-utf8]", "[no-choices]", "[number]"]
    generator = _generator(hostile_server.url, api_key_env=KEY_ENV, max_retries=1, concurrency=4)
    answers = generator.generate({tag: f"question {tag}" for tag in tags}, {tag: ["passage"] for tag in tags})
    assert answers == {"ok": "answer to question ok", "[echo-reply]": "your key is ***, keep it safe"}
    failures = generator.failures
    assert set(failures) == set(tags) - {"ok", "[echo-reply]"}
    assert all("gave up after 2 attempts" in reason and SECRET not in reason for reason in failures.values())
    assert "HTTP 500" in failures["[echo-error]"] and "invalid key ***" in failures["[echo-error]"]
    assert "DecodingError" in failures["[gzip]"] and "RemoteProtocolError" in failures["[truncated]"]
    assert "malformed reply (UnicodeDecodeError: " in failures["[not-utf8]"]
    assert (
        "malformed reply (KeyError: " in failures["[no-choices]"]
        and "malformed reply (TypeError: " in failures["[number]"]
    )
    attempts = {prompt.splitlines()[0].removeprefix("question "): n for prompt, n in hostile_server.attempts.items()}
    assert attempts == {tag: 2 for tag in failures} | {"ok": 1, "[echo-reply]": 1}  # failures are retried once


def test_timeout_bounds_a_whole_request_of_a_dripping_server(hostile_server: HostileChatServer) -> None:
    """The reply drips one byte per 0.2 s (about 15 s in all): each request ends about 1 s after it
    started, 1 s past its deadline at most (one read wait), and is reported as timed out."""
    generator = _generator(hostile_server.url, timeout=1.0, max_retries=1, concurrency=3)
    started = time.monotonic()
    answers = generator.generate({f"q{i}": f"[drip] {i}" for i in range(3)}, {})
    elapsed = time.monotonic() - started
    assert answers == {} and all("timed out after 1 s" in reason for reason in generator.failures.values())
    assert len(generator.failures) == 3 and elapsed < 6, elapsed  # 2 attempts of <= 2 s each, in parallel


def test_keys_echoed_by_the_server_reach_no_output_cache_log_or_store(
    hostile_server: HostileChatServer, tmp_path: Path
) -> None:
    """The toy questions meet an error body that echoes the key across the excerpt edge (q2), a reply
    that echoes it (q3, cached), a broken gzip body (q4) and a truncated body (q5)."""
    result = _run_cli(
        tmp_path,
        "dataset=toy",
        "retriever=[bm25]",
        "fusion=[]",
        "generator=openai",
        f"generator.base_url={hostile_server.url}",
        "generator.model=test-model",
        f"generator.api_key_env={KEY_ENV}",
        "generator.backoff=0.01",
        "generator.max_retries=1",
        "evaluator=[ranking,answer]",
        env={KEY_ENV: SECRET},
    )
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert [str(p) for p in written if SECRET.encode() in p.read_bytes()] == []
    assert SECRET not in result.stdout + result.stderr
    cached = [p for p in written if "chat" in p.parts]
    assert (
        any("your key is ***" in p.read_text() for p in cached)
        and list(tmp_path.glob("mlruns/mlflow.db"))
        and list(tmp_path.rglob("*.log"))
    )
    output = next(tmp_path.glob("outputs/runs/*"))
    report = json.loads((output / "systems" / "bm25" / "generation.json").read_text())
    assert report["failed"] == 3 and set(report["errors"]) == {"q2", "q4", "q5"}
    assert report["first_error"] == f"q2: {report['errors']['q2']}" and "invalid key ***" in report["first_error"]
    rows = {row["qid"]: row for row in _read_csv(output / "per_query.csv")}
    assert (
        "DecodingError" in rows["q4"]["generation_error"]
        and rows["q3"]["generated_answer"] == "your key is ***, keep it safe"
    )
    log = result.stdout + result.stderr
    assert "answer generation failed for 3 of 6 queries (they score 0); first: q2: " in log, log[-3000:]


def _run_cli(root: Path, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "RAGTRACK_ROOT": str(root), "XDG_CACHE_HOME": str(root / ".cache"), **(env or {})}
    result = subprocess.run(
        [sys.executable, "-m", "ragtrack", "run", *overrides],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_api_key_reaches_no_output_log_cache_or_mlflow(chat_server: ChatServer, tmp_path: Path) -> None:
    server = chat_server.url
    result = _run_cli(
        tmp_path,
        "dataset=toy",
        "retriever=[bm25]",
        "fusion=[]",
        "generator=openai",
        f"generator.base_url={server}",
        "generator.model=test-model",
        f"generator.api_key_env={KEY_ENV}",
        "generator.backoff=0.01",
        "generator.max_retries=1",
        "evaluator=[ranking,answer,llm_judge]",
        f"evaluator.llm_judge.base_url={server}",
        "evaluator.llm_judge.model=judge-model",
        f"evaluator.llm_judge.api_key_env={KEY_ENV}",
        "evaluator.llm_judge.backoff=0.01",
        "hydra.verbose=true",
        env={KEY_ENV: SECRET},
    )
    assert chat_server.requests and all(r["auth"] == f"Bearer {SECRET}" for r in chat_server.requests)
    leaks = [str(path) for path in tmp_path.rglob("*") if path.is_file() and SECRET.encode() in path.read_bytes()]
    assert leaks == [], f"API key written to {leaks}"
    assert SECRET not in result.stdout + result.stderr
    assert list(tmp_path.glob("mlruns/mlflow.db")) and list(tmp_path.rglob("*.log"))  # what was scanned exists

    output = next(tmp_path.glob("outputs/runs/*"))
    report = json.loads((output / "systems" / "bm25" / "generation.json").read_text())
    assert report["failed"] == 1 and "HTTP 500" in report["errors"]["q2"]  # the ATP question, reported, sweep went on
    rows = {row["qid"]: row for row in _read_csv(output / "per_query.csv")}
    assert (
        rows["q2"]["generation_error"] and rows["q2"]["generated_answer"] == "" and float(rows["q2"]["answer_f1"]) == 0
    )
    assert rows["q1"]["generated_answer"].startswith("answer to") and float(rows["q1"]["judge_correctness"]) == 4
    judged = [json.loads(line) for line in (output / "systems" / "bm25" / "judge.jsonl").read_text().splitlines()]
    assert {r["qid"]: r["error"] for r in judged}["q2"] == "no generated answer"
    assert json.loads((output / "results.json").read_text())["efficiency"]["bm25"]["generation_failures"] == 1


@pytest.mark.slow  # a whole job or several: make test-slow
def test_qa_xquad_end_to_end(tmp_path: Path) -> None:
    _run_cli(tmp_path, "experiment=qa_xquad", "encoder=hashing", "evaluator=[ranking,answer,context_recall]")
    output = next(tmp_path.glob("outputs/runs/*"))
    results = json.loads((output / "results.json").read_text())
    assert set(results["systems"]) == {"bm25", "dense", "hybrid"}
    for system, means in results["systems"].items():
        assert 0.1 < means["answer_f1"] < 0.5 and 0 < means["exact_match"] < means["answer_f1"], system
        assert means["context_recall@1"] <= means["context_recall@3"] <= means["context_recall@5"]
    rows = _read_csv(output / "per_query.csv")
    assert len(rows) == 3 * 1190
    assert list(rows[0])[:6] == ["system", "qid", "question", "gold_answers", "generated_answer", "generation_error"]
    assert json.loads(rows[0]["gold_answers"]) == ["308"] and {"answer_f1", "rougeL", "ndcg@10"} <= set(rows[0])

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    children = [
        r
        for r in client.search_runs([client.get_experiment_by_name("ragtrack-xquad_en").experiment_id])
        if "ragtrack.system" in r.data.tags
    ]
    assert {r.data.tags["ragtrack.system"] for r in children} == {"bm25", "dense", "hybrid"}
    child = children[0]
    assert {"answer_f1", "exact_match", "rougeL", "context_recall_at_3", "generation_failures"} <= set(
        child.data.metrics
    )
    assert {a.path for a in client.list_artifacts(child.info.run_id)} == {
        "generation.json",
        "per_query.csv",
        "run.trec",
        "queries.json",
    }
    twin = _read_csv(Path(client.download_artifacts(child.info.run_id, "per_query.csv", str(tmp_path / "twin"))))
    assert list(twin[0])[:5] == ["system", "qid", "question", "gold_answers", "generated_answer"]
    assert twin[0]["system"] == child.data.tags["ragtrack.system"]


@pytest.mark.slow
def test_qa_xquad_real_minilm(tmp_path: Path) -> None:
    """docs/answers.md's table: experiment=qa_xquad with the shipped MiniLM (a regression fixture). Context
    recall recomputed outside ragtrack from the job's run files (SQuAD's normalize_answer, the answer's words
    as a run of the top-k passages' words, ranks as written): bm25 1101, 1154; dense 1042, 1145; hybrid
    1101, 1161 of 1,190 at k = 1, 3."""
    _run_cli(tmp_path, "experiment=qa_xquad", "tracking=none")
    systems = json.loads((next(tmp_path.glob("outputs/runs/*")) / "results.json").read_text())["systems"]
    expected = {  # answer_f1, exact_match, rougeL, bertscore_f1, context_recall@1, context_recall@3
        "bm25": [0.2617, 0.1445, 0.2668, 0.3871, 0.9252, 0.9697],  # Lucene's BM25 and analyzer (Pyserini's)
        "dense": [0.2486, 0.1378, 0.2534, 0.3756, 0.8756, 0.9622],
        "hybrid": [0.2647, 0.1479, 0.2700, 0.3916, 0.9252, 0.9756],  # default ONNX encoder
    }
    names = ["answer_f1", "exact_match", "rougeL", "bertscore_f1", "context_recall@1", "context_recall@3"]
    got = {system: [systems[system][name] for name in names] for system in expected}
    assert got == {
        system: pytest.approx(values, abs=6e-5) for system, values in expected.items()
    }  # every system told at once


def test_openai_generator_abstains_with_the_no_answer_string(hostile_server: HostileChatServer) -> None:
    generator = _generator(
        hostile_server.url, prompt="{question}\nIf unsure reply {no_answer}.\n{context}", no_answer="unanswerable"
    )
    answers = generator.generate({"a": "[abstain] who?", "b": "who?"}, {"a": ["p"], "b": ["p"]})
    assert answers == {"a": "unanswerable", "b": "answer to who?"}
    assert "If unsure reply unanswerable." in hostile_server.requests[-1]["body"]["messages"][-1]["content"]
    with pytest.raises(RagtrackError, match="uses {no_answer} but no_answer is not set"):
        _generator(hostile_server.url, prompt="{question} {no_answer}", no_answer=None)


def test_unanswerable_xquad_is_rebuilt_byte_for_byte(tmp_path: Path) -> None:
    from ragtrack.pipeline.configuration.config import datasets_dir

    shipped = datasets_dir() / "xquad_en_unanswerable"  # the installed files, rebuilt by the checkout's script
    build = Path(__file__).parents[2] / "data" / "xquad_en_unanswerable" / "build.py"
    done = subprocess.run([sys.executable, str(build), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "seed": 13,
        "passages": 196,
        "passages_removed": 44,
        "questions": 1190,
        "unanswerable": 238,
        "answerable": 952,
    }
    for name in ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"]:
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), name


def test_abstention_beside_answer_metrics_on_unanswerable_xquad(tmp_path: Path) -> None:
    """The extractive reader abstains below half the question's idf: abstention precision and recall equal
    their definitions over per_query.csv, and answer metrics count the answerable queries only."""
    _run_cli(
        tmp_path,
        "dataset=xquad_en_unanswerable",
        "retriever=[bm25]",
        "fusion=[]",
        "generator=extractive",
        "generator.abstain_below=0.5",
        "evaluator=[ranking,answer,abstention]",
        "tracking=none",
    )
    output = next(tmp_path.glob("outputs/runs/*"))
    means = json.loads((output / "results.json").read_text())["systems"]["bm25"]
    rows = _read_csv(output / "per_query.csv")
    unanswerable = {r["qid"] for r in rows if r["answerable"] == "0"}
    abstained = {r["qid"] for r in rows if r["abstained"] == "1"}
    assert (
        len(rows) == 1190
        and len(unanswerable) == 238
        and all(r["generated_answer"] == "unanswerable" for r in rows if r["qid"] in abstained)
    )
    assert means["abstention_precision"] == pytest.approx(len(abstained & unanswerable) / len(abstained), abs=1e-12)
    assert means["abstention_recall"] == pytest.approx(len(abstained & unanswerable) / len(unanswerable), abs=1e-12)
    assert means["abstention_rate"] == pytest.approx(len(abstained) / 1190, abs=1e-12)
    assert all(r["answer_f1"] == "" for r in rows if r["qid"] in unanswerable)
    answerable_f1 = [float(r["answer_f1"]) for r in rows if r["answerable"] == "1"]
    assert means["answer_f1"] == pytest.approx(sum(answerable_f1) / 952, abs=1e-12)
    assert (
        round(means["abstention_precision"], 4),
        round(means["abstention_recall"], 4),
        round(means["answer_f1"], 4),
    ) == (0.3946, 0.9748, 0.1926)
