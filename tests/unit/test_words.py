"""Counts in messages read right in the singular and the plural (``ragtrack.core.words``)."""

from __future__ import annotations

import logging

import pytest

from ragtrack.core.data import load_beir
from ragtrack.core.llm import ChatClient
from ragtrack.core.words import counted, plural
from tests.support import TOY, ChatServer


@pytest.mark.parametrize(
    "noun, many",
    [
        ("query", "queries"),
        ("attempt", "attempts"),
        ("judgment", "judgments"),
        ("day", "days"),
        ("pass", "passes"),
        ("box", "boxes"),
        ("match", "matches"),
        ("system", "systems"),
    ],
)
def test_plural_of_regular_nouns(noun: str, many: str) -> None:
    assert plural(noun) == many
    assert counted(1, noun) == f"1 {noun}" and counted(0, noun) == f"0 {many}" and counted(2, noun) == f"2 {many}"
    assert counted(1190, noun) == f"1,190 {many}" and counted(3, noun, "others") == "3 others"


def test_a_request_tried_once_gave_up_after_1_attempt(chat_server: ChatServer) -> None:
    client = ChatClient(base_url=chat_server.url, model="m", max_retries=0)
    replies, failures = client.complete_all({"a": "[down] question"})
    assert replies == {} and failures["a"].endswith("(gave up after 1 attempt)")


def test_the_dataset_line_counts_in_the_singular(caplog) -> None:
    """The tester's "1 queries without judgments": the toy set has one query its qrels do not judge."""
    with caplog.at_level(logging.INFO):
        load_beir(TOY)
    line = next(m for m in caplog.messages if m.startswith("dataset toy"))
    assert (
        line
        == "dataset toy/test: 12 documents, 6 queries, 12 judgments; 1 query without judgments in this split: not run"
    )
