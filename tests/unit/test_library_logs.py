"""Third-party loggers stay quiet unless asked (pipeline/records/library_logs.py): no ``HTTP Request: POST``
line per chat request from httpx, no ir_datasets INFO lines; a logger given a level is left as it is."""

from __future__ import annotations

import logging

from ragtrack.core.llm import ChatClient
from ragtrack.pipeline.records.library_logs import LIBRARY_LOGGERS, WARNINGS_ONLY, quiet_libraries
from tests.support import ChatServer


def test_http_requests_and_ir_datasets_progress_are_not_logged(chat_server: ChatServer, caplog, capfd) -> None:
    import ir_datasets.log

    quiet_libraries()
    with caplog.at_level(logging.INFO):
        ChatClient(base_url=chat_server.url, model="m").complete_all({"q1": "hello", "q2": "there"})
        ir_datasets.log.easy().info("[downloading] 3 GB")
    assert len(chat_server.requests) == 2
    assert not [r for r in caplog.records if r.name.split(".")[0] in LIBRARY_LOGGERS]
    assert "downloading" not in capfd.readouterr().err


def test_a_library_logger_given_a_level_is_left_as_it_is(caplog) -> None:
    logger = logging.getLogger("urllib3.asked")
    parent = logging.getLogger("urllib3")
    level, filters = parent.level, list(parent.filters)
    try:
        parent.setLevel(logging.NOTSET)
        parent.filters.clear()
        parent.setLevel(logging.DEBUG)  # the user asked for urllib3's lines
        quiet_libraries()
        assert WARNINGS_ONLY not in parent.filters
        with caplog.at_level(logging.DEBUG):
            logger.info("retrying")
        assert "retrying" in caplog.text
    finally:
        parent.setLevel(level)
        parent.filters[:] = filters
