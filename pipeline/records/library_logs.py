"""Third-party libraries' own log lines stay out of the terminal and ``ragtrack.log`` unless asked for:
httpx's ``HTTP Request: POST ...`` line per chat request, ir_datasets' download and progress lines,
urllib3's retries. A library logger that nobody configured shows warnings and errors only; one given a
level (``hydra.job_logging.loggers.httpx.level=INFO``, or ``logging.getLogger("httpx").setLevel`` in
Python) is left as it is. MLflow's own output is quieted apart (``pipeline.records.tracking.quiet_mlflow_logs``).
"""

from __future__ import annotations

import logging

LIBRARY_LOGGERS = ("httpx", "httpcore", "urllib3", "ir_datasets", "filelock")


class _WarningsOnly(logging.Filter):
    """Records at WARNING and above (a filter as well as a level: ir_datasets sets its logger's level to
    INFO itself when it first logs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


WARNINGS_ONLY = _WarningsOnly()


def quiet_libraries() -> None:
    """Warnings and errors only from each of :data:`LIBRARY_LOGGERS` that nobody gave a level."""
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
            logger.addFilter(WARNINGS_ONLY)
