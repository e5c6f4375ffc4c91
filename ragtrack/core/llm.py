"""A client for OpenAI-compatible chat-completions endpoints and the prompt helpers that the
``openai`` generator and the ``llm_judge`` evaluator share.

Secrets: the API key is read from the environment variable named by ``api_key_env`` and sent only as
the ``Authorization`` header; it never enters a config, a cache entry, a log line or an error message.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ragtrack.core.cache import cache_key
from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import write_atomically
from ragtrack.core.progress import track
from ragtrack.core.runs import Run
from ragtrack.core.secrets import check_variable_name, mask

log = logging.getLogger(__name__)


class ChatError(RagtrackError):
    """A chat-completions request that failed for good (after retries where retrying made sense)."""


@dataclass
class ChatClient:
    """A small OpenAI-compatible chat-completions client (vLLM, llama.cpp server, Ollama, hosted APIs).

    ``POST {base_url}/chat/completions`` with ``{"model", "messages", **parameters}``; the key is read
    from the environment variable named ``api_key_env`` (never from the config) and sent only as the
    ``Authorization: Bearer`` header; ``api_key_env`` must look like a variable name, not a key. ``timeout``
    bounds a whole request, a server that drips its reply included. HTTP 429, 5xx, time-outs, connection,
    protocol and content-decoding errors and malformed replies (not UTF-8 JSON with a string at
    ``choices[0].message.content``) are retried ``max_retries`` times after ``backoff · 2^attempt`` seconds (or the server's
    ``Retry-After``, capped at ``max_backoff``); other 4xx fail at once. Up to ``concurrency`` requests
    run in parallel. Replies are cached under ``cache_dir/chat/`` by sha256(model, messages, parameters):
    a rerun sends nothing. Cache files hold the reply only, written atomically (temp file + rename). The
    key is masked (``***``) in replies before they are cached or returned, and in error excerpts before
    they are cut, should a server echo it.
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
        check_variable_name("api_key_env", self.api_key_env)
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
            for future in track(futures, label, "requests"):
                pid = futures[future]
                try:
                    replies[pid] = future.result()
                except ChatError as exc:
                    failures[pid] = str(exc)
        return replies, failures

    def complete(self, prompt: str, http) -> str:
        """The reply to one prompt, from the cache or the server; the key is masked in it before it is
        cached or returned, should the server echo it."""
        cached = self._cache_file(prompt)
        if cached is not None and cached.exists():
            try:
                return json.loads(cached.read_text(encoding="utf-8"))["reply"]
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("unreadable cached reply %s is replaced", cached)
        reply = mask(self._request(prompt, http), self._key)
        if cached is not None:
            write_atomically(cached, json.dumps({"model": self.model, "reply": reply}))
        return reply

    def _request(self, prompt: str, http) -> str:
        url = self.base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        body = {"model": self.model, "messages": self._messages(prompt), **self.parameters}
        problem = "no attempt"
        for attempt in range(self.max_retries + 1):
            wait = min(self.backoff * 2 ** attempt, self.max_backoff)
            with self._count_lock:
                self.requests_sent += 1
            status, raw, problem, retry_after = self._attempt(http, url, body, headers)
            text = raw.decode("utf-8", errors="replace")
            if problem is None:
                if 200 <= status < 300:
                    try:
                        return _reply_text(json.loads(raw))
                    except (ValueError, KeyError, IndexError, TypeError) as exc:
                        problem = f"malformed reply ({type(exc).__name__}): {self._excerpt(text)}"
                elif status == 429 or status >= 500:
                    problem = f"HTTP {status}: {self._excerpt(text)}"
                    wait = min(_retry_after(retry_after, wait), self.max_backoff)
                else:
                    raise ChatError(f"{url}: HTTP {status}: {self._excerpt(text)}")
            if attempt < self.max_retries:
                time.sleep(wait)
        raise ChatError(mask(f"{url}: {problem} (gave up after {self.max_retries + 1} attempts)", self._key))

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


def normalized_reply(text: str) -> str:
    """Lower-case words without punctuation, single-spaced: how a reply is compared with the
    configured no-answer string."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def is_abstention(answer: str, no_answer: str | None) -> bool:
    """Whether an answer is the no-answer string (``"Unanswerable."`` is ``unanswerable``), normalized."""
    return bool(no_answer) and bool(normalized_reply(no_answer)) and normalized_reply(answer) == normalized_reply(no_answer)


def numbered_passages(passages: list[str]) -> str:
    """Passages as ``[1] text`` blocks separated by blank lines (the ``{context}`` of prompts)."""
    return "\n\n".join(f"[{i}] {text}" for i, text in enumerate(passages, start=1))


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


def retrieved_passages(run: Run, corpus: Corpus, qids: Iterable[str], top_k: int, full: bool = False) -> dict[str, list[str]]:
    """Texts of each query's top-``top_k`` documents in ranking order (with their titles when ``full``,
    :meth:`Corpus.texts_of`)."""
    tops = {qid: [doc_id for doc_id, _ in run.ranking(qid)[:top_k]] for qid in qids}
    texts = corpus.texts_of((doc_id for docs in tops.values() for doc_id in docs), f"the passages of {run.name}", full)
    return {qid: [texts[doc_id] for doc_id in docs] for qid, docs in tops.items()}
