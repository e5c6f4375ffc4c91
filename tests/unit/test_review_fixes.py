"""Defects found in the review of issues 28 and 29's code, each pinned by a test that failed before its fix."""

from __future__ import annotations

import time
from pathlib import Path

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
