"""Defects found in the review of issues 28 and 29's code, each pinned by a test that failed before its fix."""

from __future__ import annotations

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
