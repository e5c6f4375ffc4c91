"""Answer generation from each system's retrieved passages: the ``ragtrack.generators`` plugins.

A generator gets, per query, the question and the texts of the system's top-``top_k`` passages (in
ranking order) and returns an answer per query; queries it could not answer are in ``failures``
(query id -> reason) and get the empty answer, so answer metrics score them 0. Built-ins:

- ``none``: no generation (retrieval-only runs; answer metrics that need an answer are skipped);
- ``extractive``: offline, no model - see :class:`ExtractiveGenerator`;
- ``openai``: any OpenAI-compatible chat-completions endpoint through :class:`ChatClient`.

:func:`answer_questions` is what the experiment calls once per system: it hands the passages over,
adds ``question``, ``gold_answers``, ``generated_answer`` and ``generation_error`` to the per-query table
and writes ``generation.json`` (failure count and the failed queries) into the system's output folder.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from bm25s.stopwords import STOPWORDS_EN
from tqdm.auto import tqdm

from pipeline.cache import cache_key
from pipeline.data import Corpus, Dataset
from pipeline.errors import RagtrackError
from pipeline.runs import Run, write_atomically
from retrievers.text import Tokenizer

log = logging.getLogger(__name__)


class Generator(ABC):
    """``generate(queries, contexts)`` -> answer per query id; unanswerable queries go to ``failures``."""

    top_k: int = 0  # passages per query handed to generate()

    def __init__(self) -> None:
        self.failures: dict[str, str] = {}

    @abstractmethod
    def generate(self, queries: Mapping[str, str], contexts: Mapping[str, list[str]]) -> dict[str, str]:
        """Answers by query id; ``contexts[qid]`` are the passage texts, best first."""


class NoGenerator(Generator):
    """Generates nothing: retrieval-only runs stay as fast as before."""

    def generate(self, queries: Mapping[str, str], contexts: Mapping[str, list[str]]) -> dict[str, str]:
        return {}


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_WORD = re.compile(r"\S+")
_CLAUSE_END = (",", ";", ":")
_EDGE_PUNCTUATION = "\"'()[]{},.;:!?"


class ExtractiveGenerator(Generator):
    """Offline extractive reader: the best-matching sentence of the top-k passages, or a span of it.

    1. Split each of the top-``top_k`` passages into sentences (after ``.!?`` followed by white space
       and an upper-case letter, digit or opening quote/bracket).
    2. Score each sentence by the summed idf of the distinct question terms it contains (terms: the
       BM25 tokenizer's stemmed words without stopwords; idf = ln(1 + N/df) over all sentences handed
       over in the call); ties go to the better-ranked passage, then the earlier sentence.
    3. ``unit: sentence`` answers that sentence. ``unit: span`` answers the part of it that does not
       repeat the question: the sentence is cut into runs of words that are not question terms (a run
       also ends after a word ending in ``, ; :``). If the question asks for a number (how many/much/
       long/..., when, what year/percentage/...) or a name (who, whom, whose, where, which person/...),
       each stretch of numbers (digits or number words) or capitalized words inside a run is a
       candidate too. Stopwords and punctuation are trimmed from the edges; the winner is a stretch of
       the asked-for kind if any, then the candidate nearest to a question term, then the longer, then
       the earlier. If every word is a question term the whole sentence is answered.

    On XQuAD-en given the *gold* passage (top_k=1): span F1 0.280 / EM 0.153, sentence F1 0.161 / EM 0.
    A heuristic baseline that needs no model, not a reader: plug in ``openai`` for real answers.
    """

    def __init__(self, top_k: int = 1, unit: str = "span", tokenizer: dict | None = None):
        super().__init__()
        if unit not in ("sentence", "span"):
            raise RagtrackError(f"extractive generator: unit must be 'sentence' or 'span', got {unit!r}")
        if top_k < 1:
            raise RagtrackError(f"extractive generator: top_k must be >= 1, got {top_k}")
        self.top_k, self.unit = int(top_k), unit
        self.tokenize = Tokenizer(**(tokenizer or {}))

    def generate(self, queries: Mapping[str, str], contexts: Mapping[str, list[str]]) -> dict[str, str]:
        self.failures = {}
        sentences = {qid: [s for passage in contexts.get(qid, [])[:self.top_k] for s in _SENTENCE_END.split(passage) if s.strip()]
                     for qid in queries}
        unique = list(dict.fromkeys(s for found in sentences.values() for s in found))
        terms = dict(zip(unique, map(set, self.tokenize(unique))))
        frequency = Counter(t for words in terms.values() for t in words)
        idf = {t: math.log(1 + len(unique) / df) for t, df in frequency.items()}
        answers = {}
        for qid, question in queries.items():
            if not sentences[qid]:
                self.failures[qid] = "no retrieved passage"
                continue
            asked = set(self.tokenize([question])[0])
            best = max(enumerate(sentences[qid]), key=lambda item: (sum(idf.get(t, 0.0) for t in asked & terms[item[1]]), -item[0]))[1]
            answers[qid] = best.strip() if self.unit == "sentence" else self._span(best, question, asked)
        return answers

    def _span(self, sentence: str, question: str, asked: set[str]) -> str:
        words = _WORD.findall(sentence)
        marked = [bool(asked & set(tokens)) for tokens in self.tokenize(words)]
        hits = [i for i, is_question in enumerate(marked) if is_question]
        runs = _question_free_runs(words, marked)
        wanted = _expected_type(question)
        typed = _stretches(words, runs, wanted) if wanted else []
        candidates = []
        for is_typed, piece in [*((False, run) for run in runs), *((True, stretch) for stretch in typed)]:
            while piece and self._is_filler(words[piece[0]]):
                piece = piece[1:]
            while piece and self._is_filler(words[piece[-1]]):
                piece = piece[:-1]
            if piece:
                distance = min((abs(i - h) for i in piece for h in hits), default=0)
                candidates.append((not is_typed, distance, -len(piece), piece[0], piece))
        if not candidates:
            return sentence.strip()
        chosen = min(candidates)[-1]
        return " ".join(words[chosen[0]:chosen[-1] + 1]).strip(_EDGE_PUNCTUATION)

    @staticmethod
    def _is_filler(word: str) -> bool:
        bare = word.strip(_EDGE_PUNCTUATION).lower()
        return not bare or bare in STOPWORDS_EN


def _question_free_runs(words: list[str], marked: list[bool]) -> list[list[int]]:
    """Indices of the runs of words that are not question terms; a run also ends after ``, ; :``."""
    runs, current = [], []
    for i, word in enumerate(words):
        if not marked[i]:
            current.append(i)
        if marked[i] or word.endswith(_CLAUSE_END):
            runs.append(current)
            current = []
    return [run for run in [*runs, current] if run]


def _stretches(words: list[str], runs: list[list[int]], wanted) -> list[list[int]]:
    """Maximal stretches of consecutive words of the asked-for kind inside each run."""
    found = []
    for run in runs:
        stretch: list[int] = []
        for i in run:
            if wanted(words[i].strip(_EDGE_PUNCTUATION)):
                stretch.append(i)
            elif stretch:
                found.append(stretch)
                stretch = []
        if stretch:
            found.append(stretch)
    return found


_NUMBER_WORDS = frozenset("one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty "
                          "hundred thousand million billion trillion half dozen".split())
_NUMBER_QUESTION = re.compile(r"^\s*(how (many|much|long|old|far|large|big|tall|often)|when|what (year|percentage|decade|century|date))\b", re.I)
_NAME_QUESTION = re.compile(r"^\s*(who|whom|whose|where|which (person|team|company|country|city))\b", re.I)


def _is_number(word: str) -> bool:
    return any(ch.isdigit() for ch in word) or word.lower() in _NUMBER_WORDS


def _is_name(word: str) -> bool:
    return word[:1].isupper()


def _expected_type(question: str):
    """A test for words of the answer type a question asks for: numbers (how many, when, what year)
    or capitalized names (who, where); ``None`` when the question does not say."""
    if _NUMBER_QUESTION.search(question):
        return _is_number
    if _NAME_QUESTION.search(question):
        return _is_name
    return None


class ChatError(RagtrackError):
    """A chat-completions request that failed for good (after retries where retrying made sense)."""


@dataclass
class ChatClient:
    """A small OpenAI-compatible chat-completions client (vLLM, llama.cpp server, Ollama, hosted APIs).

    ``POST {base_url}/chat/completions`` with ``{"model", "messages", **parameters}``; the key is read
    from the environment variable named ``api_key_env`` (never from the config) and sent only as the
    ``Authorization: Bearer`` header. HTTP 429, 5xx, time-outs, connection errors and malformed replies
    are retried ``max_retries`` times after ``backoff · 2^attempt`` seconds (or the server's
    ``Retry-After``, capped at ``max_backoff``); other 4xx fail at once. Up to ``concurrency`` requests
    run in parallel. Replies are cached under ``cache_dir/chat/`` by sha256(model, messages, parameters):
    a rerun sends nothing. Cache files hold the reply only, written atomically (temp file + rename).
    """

    base_url: str
    model: str
    api_key_env: str | None = None
    timeout: float = 60.0
    max_retries: int = 4
    backoff: float = 1.0
    max_backoff: float = 30.0
    concurrency: int = 4
    parameters: dict = field(default_factory=dict)
    system_prompt: str | None = None
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        self.parameters = dict(self.parameters or {})
        if not self.base_url or not self.model:
            raise RagtrackError("chat client: 'base_url' and 'model' are required")
        if self.concurrency < 1 or self.max_retries < 0 or self.timeout <= 0:
            raise RagtrackError("chat client: concurrency >= 1, max_retries >= 0 and timeout > 0 are required")
        self._key = None
        if self.api_key_env:
            self._key = os.environ.get(self.api_key_env)
            if not self._key:
                raise RagtrackError(f"chat client: environment variable {self.api_key_env} (api_key_env) is not set")
        self.requests_sent = 0
        self._count_lock = threading.Lock()

    def _messages(self, prompt: str) -> list[dict]:
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": prompt}]

    def _cache_file(self, prompt: str) -> Path | None:
        if not self.cache_dir:
            return None
        key = cache_key("chat", {"model": self.model, "messages": self._messages(prompt), "parameters": self.parameters})
        return Path(self.cache_dir) / "chat" / key[:2] / f"{key}.json"

    def complete_all(self, prompts: Mapping[str, str], label: str = "chat") -> tuple[dict[str, str], dict[str, str]]:
        """Replies by id and failures by id (reason); never raises for one failed prompt."""
        import httpx

        replies, failures = {}, {}
        with httpx.Client(timeout=self.timeout) as http, ThreadPoolExecutor(self.concurrency) as pool:
            futures = {pool.submit(self.complete, prompt, http): pid for pid, prompt in prompts.items()}
            for future in tqdm(futures, desc=label, unit="request", leave=False):
                pid = futures[future]
                try:
                    replies[pid] = future.result()
                except ChatError as exc:
                    failures[pid] = str(exc)
        return replies, failures

    def complete(self, prompt: str, http) -> str:
        """The reply to one prompt, from the cache or the server."""
        cached = self._cache_file(prompt)
        if cached is not None and cached.exists():
            try:
                return json.loads(cached.read_text(encoding="utf-8"))["reply"]
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("unreadable cached reply %s is replaced", cached)
        reply = self._request(prompt, http)
        if cached is not None:
            write_atomically(cached, json.dumps({"model": self.model, "reply": reply}))
        return reply

    def _request(self, prompt: str, http) -> str:
        import httpx

        url = self.base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        body = {"model": self.model, "messages": self._messages(prompt), **self.parameters}
        problem = "no attempt"
        for attempt in range(self.max_retries + 1):
            wait = min(self.backoff * 2 ** attempt, self.max_backoff)
            with self._count_lock:
                self.requests_sent += 1
            try:
                response = http.post(url, json=body, headers=headers)
            except httpx.TimeoutException:
                problem = f"timed out after {self.timeout:g} s"
            except httpx.TransportError as exc:
                problem = f"connection failed: {type(exc).__name__}: {exc}"
            else:
                status = response.status_code
                if status == 429 or status >= 500:
                    problem = f"HTTP {status}: {self._excerpt(response.text)}"
                    wait = min(_retry_after(response.headers.get("retry-after"), wait), self.max_backoff)
                elif status >= 400:
                    raise ChatError(f"{url}: HTTP {status}: {self._excerpt(response.text)}")
                else:
                    try:
                        return _reply_text(response.json())
                    except (ValueError, KeyError, IndexError, TypeError) as exc:
                        problem = f"malformed reply ({type(exc).__name__}): {self._excerpt(response.text)}"
            if attempt < self.max_retries:
                time.sleep(wait)
        raise ChatError(f"{url}: {problem} (gave up after {self.max_retries + 1} attempts)")

    def _excerpt(self, text: str) -> str:
        """First 200 characters on one line, with the key masked should a server echo it."""
        text = " ".join(text.split())[:200]
        return text.replace(self._key, "***") if self._key else text


def _retry_after(value: str | None, default: float) -> float:
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


def _reply_text(payload: dict) -> str:
    content = payload["choices"][0]["message"]["content"]
    if not isinstance(content, str):
        raise TypeError(f"message content is {type(content).__name__}, not a string")
    return content


def numbered_passages(passages: list[str]) -> str:
    """Passages as ``[1] text`` blocks separated by blank lines (the ``{context}`` of prompts)."""
    return "\n\n".join(f"[{i}] {text}" for i, text in enumerate(passages, start=1))


class OpenAIGenerator(Generator):
    """Answers with an OpenAI-compatible chat model; ``prompt`` has ``{question}`` and ``{context}``;
    the other settings (``base_url``, ``model``, ``api_key_env``, ...) are :class:`ChatClient`'s."""

    def __init__(self, prompt: str, top_k: int = 3, **client):
        super().__init__()
        check_template(prompt, {"question", "context"}, "openai generator")
        self.prompt, self.top_k = prompt, int(top_k)
        self.client = ChatClient(**client)

    def generate(self, queries: Mapping[str, str], contexts: Mapping[str, list[str]]) -> dict[str, str]:
        prompts = {qid: self.prompt.format(question=question, context=numbered_passages(contexts.get(qid, [])[:self.top_k]))
                   for qid, question in queries.items()}
        replies, self.failures = self.client.complete_all(prompts, label="generate")
        return {qid: reply.strip() for qid, reply in replies.items()}


def check_template(template: str, fields: set[str], owner: str) -> None:
    """Fail early when a prompt template names a field that will not be filled (or is malformed)."""
    import string

    try:
        named = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise RagtrackError(f"{owner}: malformed prompt template: {exc}") from None
    unknown = named - fields
    if unknown:
        raise RagtrackError(f"{owner}: prompt template uses unknown fields {sorted(unknown)}; available: {sorted(fields)} "
                            "(write literal braces as {{ }})")


@dataclass
class Answers:
    """One system's generated answers and the queries that failed."""

    texts: dict[str, str]
    failures: dict[str, str]

    @property
    def efficiency(self) -> dict[str, float]:
        return {"generation_failures": float(len(self.failures))}

    def annotate(self, per_query: pd.DataFrame, dataset: Dataset) -> pd.DataFrame:
        """The per-query table with question, gold answers (JSON list), answer and error in front."""
        qids = per_query.index
        text = pd.DataFrame({
            "question": [dataset.queries.get(q, "") for q in qids],
            "gold_answers": [json.dumps(dataset.answers.get(q, []), ensure_ascii=False) for q in qids],
            "generated_answer": [self.texts.get(q, "") for q in qids],
            "generation_error": [self.failures.get(q, "") for q in qids],
        }, index=qids)
        return pd.concat([text, per_query], axis=1)


def retrieved_passages(run: Run, corpus: Corpus, qids: Iterable[str], top_k: int) -> dict[str, list[str]]:
    """Texts of each query's top-``top_k`` documents in ranking order."""
    texts = dict(zip(corpus.ids, corpus.texts))
    return {qid: [texts[doc_id] for doc_id, _ in run.ranking(qid)[:top_k]] for qid in qids}


def answer_questions(generator: Generator | None, run: Run, dataset: Dataset, folder: Path) -> Answers | None:
    """Generate one system's answers from its run; ``None`` without a generator (``generator=none``).

    Writes ``folder/generation.json`` (``failed``, ``queries``, ``errors`` by query id) and logs a
    warning with the count when some queries failed; the sweep goes on either way.
    """
    if generator is None or isinstance(generator, NoGenerator):
        return None
    started = time.perf_counter()
    texts = generator.generate(dataset.queries, retrieved_passages(run, dataset.corpus, dataset.queries, generator.top_k))
    answers = Answers({qid: texts.get(qid, "") for qid in dataset.queries}, dict(generator.failures))
    folder.mkdir(parents=True, exist_ok=True)
    report = {"system": run.name, "generator": type(generator).__name__, "queries": len(dataset.queries),
              "failed": len(answers.failures), "seconds": time.perf_counter() - started, "errors": answers.failures}
    write_atomically(folder / "generation.json", json.dumps(report, indent=2, ensure_ascii=False))
    if answers.failures:
        log.warning("%s: answer generation failed for %d of %d queries (they score 0); see %s",
                    run.name, len(answers.failures), len(dataset.queries), folder / "generation.json")
    return answers
