"""A client for OpenAI-compatible chat-completions endpoints and the prompt helpers that the
``openai`` generator and the ``llm_judge`` evaluator share.

Every LLM stage (generator, judges, rerankers, rewriters, nuggets) asks through :class:`ChatClient`, so
each gets token accounting for free: the client records a :class:`ChatCall` per prompt (the server's
``usage.prompt_tokens`` / ``usage.completion_tokens``, whether the reply came from the cache, the wall
time of the request); the job takes them with :meth:`ChatClient.take_calls` (``pipeline.execution.usage``).
An ``offline`` client (``ragtrack run --dry-run``) sends nothing: it answers from the cache and records
the prompts it would send with estimated tokens (:func:`estimate_tokens`).

Secrets: the API key is read from the environment variable named by ``api_key_env`` and sent only as
the ``Authorization`` header; it never enters a config, a cache entry, a log line or an error message.
Error messages name the endpoint without the ``user:password@`` a ``base_url`` may carry.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Hashable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ragtrack.core.cache import cache_key, inside
from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import write_atomically
from ragtrack.core.progress import track
from ragtrack.core.runs import Run
from ragtrack.core.secrets import check_variable_name, mask, without_credentials
from ragtrack.core.words import counted

log = logging.getLogger(__name__)


class ChatError(RagtrackError):
    """A chat-completions request that failed for good (after retries where retrying made sense)."""


class NotSent(RagtrackError):
    """A dry run's stage whose result needs replies that are not in the cache (it is not stored)."""


NOT_SENT = "not sent (dry run)"  # the failure of a prompt an offline client would have sent
CHARS_PER_TOKEN = 4  # the estimate of a dry run: OpenAI's rule of thumb for English text


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` as a dry run estimates them: ⌈characters / 4⌉ (OpenAI's rule of thumb for
    English; a real tokenizer gives fewer for plain prose and more for code, numbers and other
    languages)."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class ChatCall:
    """One prompt's reply as a stage got it. ``prompt_id``: the key the stage gave the prompt (a query
    id, or a tuple whose first item is one); ``prompt_tokens`` / ``completion_tokens``: the server's
    ``usage`` figures (``None``: unknown: the server gave none, or a reply cached before ragtrack
    stored them); ``cached``: the reply came from the cache, so this run spent nothing on it (it keeps
    the tokens of its original request); ``seconds``: wall time of the request, retries included (0
    when cached); ``planned``: a dry run's prompt, not sent, its tokens estimated (prompt:
    :func:`estimate_tokens`, completion: ``max_tokens``)."""

    prompt_id: Hashable
    prompt_tokens: int | None
    completion_tokens: int | None
    cached: bool = False
    seconds: float = 0.0
    planned: bool = False

    def to_json(self) -> dict:
        return asdict(self) | {
            "prompt_id": list(self.prompt_id) if isinstance(self.prompt_id, tuple) else self.prompt_id
        }

    @classmethod
    def from_json(cls, record: dict) -> "ChatCall":
        prompt_id = record["prompt_id"]
        return cls(**record | {"prompt_id": tuple(prompt_id) if isinstance(prompt_id, list) else prompt_id})


MAX_USAGE = 10**9  # the most tokens a usage figure may count: no one request spends more


def _usage(payload: Any) -> tuple[int | None, int | None]:
    """``usage.prompt_tokens`` and ``usage.completion_tokens`` of a reply (or a cache entry); ``None``
    for each that is absent; ``ValueError`` for one that is not an integer in [0, :data:`MAX_USAGE`]."""
    usage = payload.get("usage") if isinstance(payload, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    figures = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
    for value in figures:
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_USAGE):
            raise ValueError(f"usage figure {str(value)[:40]} is not a token count in [0, {MAX_USAGE:,}]")
    return figures


def _checked(text: object) -> str:
    """A reply's text as it may be cached and written: a string that UTF-8 can encode (no lone surrogate);
    ``ValueError`` or ``TypeError`` otherwise."""
    if not isinstance(text, str):
        raise TypeError(f"message content is {type(text).__name__}, not a string")
    text.encode("utf-8")  # UnicodeEncodeError (a ValueError) for a lone surrogate such as "\ud83d"
    return text


@dataclass
class ChatClient:
    """A small OpenAI-compatible chat-completions client (vLLM, llama.cpp server, Ollama, hosted APIs).

    ``POST {base_url}/chat/completions`` with ``{"model", "messages", **parameters}``; the key is read
    from the environment variable named ``api_key_env`` (never from the config) and sent only as the
    ``Authorization: Bearer`` header; ``api_key_env`` must look like a variable name, not a key. ``timeout``
    bounds a whole request, a server that drips its reply included. HTTP 429, 5xx, time-outs, connection,
    protocol and content-decoding errors and malformed replies (not UTF-8 JSON with a string at
    ``choices[0].message.content`` that UTF-8 can encode, or a ``usage`` figure that is not a token count in
    [0, :data:`MAX_USAGE`]) are retried ``max_retries`` times after ``backoff · 2^attempt`` seconds (or the server's
    ``Retry-After``, capped at ``max_backoff``); other 4xx fail at once. Up to ``concurrency`` requests
    run in parallel. Replies are cached under ``cache_dir/chat/`` by sha256(model, messages, parameters):
    a rerun sends nothing. Cache files hold the model, the reply and the server's token ``usage``
    (entries written before usage was stored still load: their usage is unknown), written atomically
    (temp file + rename); only a reply that passed those checks is cached, and a cache entry that fails them is
    sent again. The key is masked (``***``) in replies before they are cached or returned,
    and in error excerpts before they are cut, should a server echo it.

    ``price_prompt`` / ``price_completion``: what the endpoint charges per million prompt and completion
    tokens (any currency; not part of any cache key), for the job's cost figures. ``offline``: send
    nothing (a dry run): see :meth:`complete_all`.
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
    price_prompt: float | None = None
    price_completion: float | None = None
    offline: bool = False

    def __post_init__(self) -> None:
        self.parameters = dict(self.parameters or {})
        if not self.base_url or not self.model:
            raise RagtrackError("chat client: 'base_url' and 'model' are required")
        if self.concurrency < 1 or self.max_retries < 0 or self.timeout <= 0:
            raise RagtrackError("chat client: concurrency >= 1, max_retries >= 0 and timeout > 0 are required")
        self._key = None
        check_variable_name("api_key_env", self.api_key_env)
        if self.api_key_env:
            self._key = os.environ.get(self.api_key_env)
            if not self._key:
                raise RagtrackError(f"chat client: environment variable {self.api_key_env} (api_key_env) is not set")
        self.requests_sent = 0
        self._count_lock = threading.Lock()
        self._calls: list[ChatCall] = []
        self._planned: set[Path] = set()  # an offline client's prompts so far: a repeat would be a cache hit

    @property
    def max_tokens(self) -> int | None:
        """The ``max_tokens`` (or ``max_completion_tokens``) sent with every request: the most
        completion tokens a reply may have (``None``: not set)."""
        value = self.parameters.get("max_tokens", self.parameters.get("max_completion_tokens"))
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def cost(self, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        """price_prompt · prompt_tokens / 10⁶ + price_completion · completion_tokens / 10⁶; ``None``
        without prices or when a token count it needs is unknown (a part whose price is not set
        counts 0)."""
        if self.price_prompt is None and self.price_completion is None:
            return None
        parts = [(self.price_prompt, prompt_tokens), (self.price_completion, completion_tokens)]
        if any(price and tokens is None for price, tokens in parts):
            return None
        return sum((price or 0.0) * (tokens or 0) for price, tokens in parts) / 1e6

    def take_calls(self) -> list[ChatCall]:
        """The calls recorded since the last take (each :meth:`complete_all`'s in the order of its prompts), and forget them."""
        with self._count_lock:
            calls, self._calls = self._calls, []
        return calls

    def record(self, calls: Iterable[ChatCall]) -> None:
        """Add calls to the record (a stage's calls read back from its run cache entry)."""
        with self._count_lock:
            self._calls.extend(calls)

    def _messages(self, prompt: str) -> list[dict]:
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": prompt}]

    def _cache_file(self, prompt: str) -> Path | None:
        if not self.cache_dir:
            return None
        key = cache_key(
            "chat", {"model": self.model, "messages": self._messages(prompt), "parameters": self.parameters}
        )
        return inside(self.cache_dir, "chat", key[:2], f"{key}.json")

    def complete_all(self, prompts: Mapping[Hashable, str], label: str = "chat") -> tuple[dict, dict[Hashable, str]]:
        """Replies by id and failures by id (reason); never raises for one failed prompt. Each prompt
        that got a reply is recorded as a :class:`ChatCall` (:meth:`take_calls`); give prompts the
        query id as their id, or a tuple starting with it, so that their tokens count for that query.

        Identical prompts under several ids (two queries of the same text) are sent once; the repeats
        share the reply and are recorded as cached.

        Offline (a dry run), nothing is sent: cached replies are returned as always, every other
        prompt fails with :data:`NOT_SENT` and is recorded as a planned call with estimated tokens
        (a prompt repeated within the call, or with a cache within the dry run, counts once: the real
        run sends it once)."""
        if self.offline:
            return self._offline(prompts)
        import httpx

        first = {}  # each distinct prompt is sent once; its repeats (other queries' identical prompts) share the reply
        for pid, prompt in prompts.items():
            first.setdefault(prompt, pid)
        replies, failures, calls = {}, {}, {}
        with httpx.Client(timeout=self.timeout) as http, ThreadPoolExecutor(self.concurrency) as pool:
            futures = {pool.submit(self._complete, pid, prompt, http): pid for prompt, pid in first.items()}
            for future in track(futures, label, "requests"):
                pid = futures[future]
                try:
                    replies[pid], calls[pid] = future.result()
                except ChatError as exc:
                    failures[pid] = str(exc)
        for pid, prompt in prompts.items():
            sent = first[prompt]
            if sent in replies and pid != sent:
                replies[pid], calls[pid] = replies[sent], replace(calls[sent], prompt_id=pid, cached=True, seconds=0.0)
            elif sent in failures:
                failures[pid] = failures[sent]
        self.record(
            calls[pid] for pid in prompts if pid in calls
        )  # in the order of ``prompts``: sums over them come out the same
        return replies, failures

    def _offline(self, prompts: Mapping[Hashable, str]) -> tuple[dict, dict[Hashable, str]]:
        replies, failures, calls, asked = {}, {}, [], set()
        for pid, prompt in prompts.items():
            found = self._cached(prompt)
            if found is not None:
                replies[pid] = found[0]
                calls.append(ChatCall(pid, *found[1], cached=True))
                continue
            failures[pid] = NOT_SENT
            identity = self._cache_file(prompt)
            repeat = prompt in asked or identity in self._planned  # sent once per call; across calls only with a cache
            asked.add(prompt)
            if identity is not None:
                self._planned.add(identity)
            tokens = estimate_tokens("\n".join(message["content"] for message in self._messages(prompt)))
            calls.append(ChatCall(pid, tokens, self.max_tokens, cached=repeat, planned=True))
        self.record(calls)
        return replies, failures

    def _complete(self, pid: Hashable, prompt: str, http) -> tuple[str, ChatCall]:
        """The reply to one prompt, from the cache or the server, and its call; the key is masked in it
        before it is cached or returned, should the server echo it."""
        found = self._cached(prompt)
        if found is not None:
            return found[0], ChatCall(pid, *found[1], cached=True)
        started = time.perf_counter()
        text, usage = self._request(prompt, http)
        call = ChatCall(pid, *usage, seconds=time.perf_counter() - started)
        reply = mask(text, self._key)
        cached = self._cache_file(prompt)
        if cached is not None:
            write_atomically(
                cached,
                json.dumps(
                    {
                        "model": self.model,
                        "reply": reply,
                        "usage": {"prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens},
                    }
                ),
            )
        return reply, call

    def _cached(self, prompt: str) -> tuple[str, tuple[int | None, int | None]] | None:
        """The cached reply to ``prompt`` and its usage (unknown in entries written before usage was
        stored); ``None`` when there is none (an unreadable entry is logged and will be replaced)."""
        cached = self._cache_file(prompt)
        if cached is None or not cached.exists():
            return None
        try:
            entry = json.loads(cached.read_text(encoding="utf-8"))
            return _checked(entry["reply"]), _usage(entry)
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            log.warning("unreadable cached reply %s is replaced", cached)
            return None

    def _request(self, prompt: str, http) -> tuple[str, tuple[int | None, int | None]]:
        url = self.base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        body = {"model": self.model, "messages": self._messages(prompt), **self.parameters}
        problem = "no attempt"
        for attempt in range(self.max_retries + 1):
            wait = min(self.backoff * 2**attempt, self.max_backoff)
            with self._count_lock:
                self.requests_sent += 1
            status, raw, problem, retry_after = self._attempt(http, url, body, headers)
            text = raw.decode("utf-8", errors="replace")
            if problem is None:
                if 200 <= status < 300:
                    try:
                        payload = json.loads(raw)
                        return _reply_text(payload), _usage(payload)
                    except (
                        ValueError,
                        KeyError,
                        IndexError,
                        TypeError,
                        RecursionError,
                    ) as exc:  # RecursionError: nested too deep
                        problem = f"malformed reply ({type(exc).__name__}: {self._excerpt(str(exc))[:80]}): {self._excerpt(text)}"
                elif status == 429 or status >= 500:
                    problem = f"HTTP {status}: {self._excerpt(text)}"
                    wait = min(_retry_after(retry_after, wait), self.max_backoff)
                else:
                    raise ChatError(f"{without_credentials(url)}: HTTP {status}: {self._excerpt(text)}")
            if attempt < self.max_retries:
                time.sleep(wait)
        raise ChatError(
            mask(
                f"{without_credentials(url)}: {problem} (gave up after {counted(self.max_retries + 1, 'attempt')})",
                self._key,
            )
        )

    def _attempt(self, http, url: str, body: dict, headers: dict) -> tuple[int, bytes, str | None, str | None]:
        """One POST: status, body bytes, the problem (``None`` when a whole reply arrived) and Retry-After.

        ``timeout`` bounds the whole request: httpx's time-outs bound each connect, write and read, and a
        deadline over the streamed body stops a server that drips bytes (the request then ends at most
        one read wait after the deadline). Transport, protocol and content-decoding errors are problems."""
        import httpx

        deadline = time.monotonic() + self.timeout
        try:
            with http.stream("POST", url, json=body, headers=headers) as response:
                chunks = []
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        return 0, b"", f"timed out after {self.timeout:g} s (reply still arriving)", None
                return response.status_code, b"".join(chunks), None, response.headers.get("retry-after")
        except httpx.TimeoutException:
            return 0, b"", f"timed out after {self.timeout:g} s", None
        except (httpx.HTTPError, httpx.StreamError) as exc:
            return 0, b"", f"connection failed: {type(exc).__name__}: {self._excerpt(str(exc))}", None

    def _excerpt(self, text: str) -> str:
        """First 200 characters on one line; the key is masked before cutting, so no part of it survives."""
        return " ".join(mask(text, self._key).split())[:200]


def chat_clients(component: object) -> list[ChatClient]:
    """The chat clients a component (a stage, generator or evaluator) asks through: those among its
    attributes, so a plugin that keeps its :class:`ChatClient` as an attribute is metered and dry-run
    like the built-ins."""
    return [value for value in vars(component).values() if isinstance(value, ChatClient)]


def _retry_after(value: str | None, default: float) -> float:
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


def _reply_text(payload: dict) -> str:
    return _checked(payload["choices"][0]["message"]["content"])


def json_objects(reply: str) -> list[dict]:
    """The JSON objects of a reply, in order (alone, in code fences or inside prose; objects nested in
    another are part of it). A model states its own verdict after what it quotes, so readers take the
    last object that holds what they look for."""
    decoder, found, position = json.JSONDecoder(), [], 0
    while (start := reply.find("{", position)) != -1:
        try:
            value, position = decoder.raw_decode(reply, start)
        except (ValueError, RecursionError):
            position = start + 1
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def last_match(pattern: re.Pattern, reply: str) -> re.Match | None:
    """The last match of ``pattern`` in a reply: the model's own verdict, after any it quotes."""
    matches = list(pattern.finditer(reply))
    return matches[-1] if matches else None


def normalized_reply(text: str) -> str:
    """Lower-case words without punctuation, single-spaced: how a reply is compared with the
    configured no-answer string."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def is_abstention(answer: str, no_answer: str | None) -> bool:
    """Whether an answer is the no-answer string (``"Unanswerable."`` is ``unanswerable``), normalized."""
    return (
        bool(no_answer)
        and bool(normalized_reply(no_answer))
        and normalized_reply(answer) == normalized_reply(no_answer)
    )


def numbered_passages(passages: list[str]) -> str:
    """Passages as ``[1] text`` blocks separated by blank lines (the ``{context}`` of prompts)."""
    return "\n\n".join(f"[{i}] {text}" for i, text in enumerate(passages, start=1))


CITATION_MARKER = re.compile(r"\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]")  # [2] or [1, 3]: passages of numbered_passages
_SPACE_BEFORE_PUNCTUATION = re.compile(r"\s+([.,;:!?])")


def without_citations(answer: str) -> str:
    """The answer with its citation markers (``[1]``, ``[2, 3]``) taken out and the space before
    punctuation closed, as ALCE scores answers (its ``remove_citations``); unchanged without markers."""
    if not CITATION_MARKER.search(answer):
        return answer
    return " ".join(_SPACE_BEFORE_PUNCTUATION.sub(r"\1", CITATION_MARKER.sub(" ", answer)).split())


def check_template(template: str, fields: set[str], owner: str) -> None:
    """Fail early when a prompt template names a field that will not be filled (or is malformed)."""
    import string

    try:
        named = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise RagtrackError(f"{owner}: malformed prompt template: {exc}") from None
    unknown = named - fields
    if unknown:
        raise RagtrackError(
            f"{owner}: prompt template uses unknown fields {sorted(unknown)}; available: {sorted(fields)} "
            "(write literal braces as {{ }})"
        )


def retrieved_passages(
    run: Run, corpus: Corpus, qids: Iterable[str], top_k: int, full: bool = False
) -> dict[str, list[str]]:
    """Texts of each query's top-``top_k`` documents in ranking order (with their titles when ``full``,
    :meth:`Corpus.texts_of`)."""
    tops = {qid: [doc_id for doc_id, _ in run.ranking(qid)[:top_k]] for qid in qids}
    texts = corpus.texts_of((doc_id for docs in tops.values() for doc_id in docs), f"the passages of {run.name}", full)
    return {qid: [texts[doc_id] for doc_id in docs] for qid, docs in tops.items()}
