"""User-facing errors: one line, no traceback, exit code 2."""

from __future__ import annotations

from pathlib import Path


class RagtrackError(Exception):
    """A mistake in the user's input or configuration, reported as one line and exit code 2."""

    exit_code = 2


class InputError(RagtrackError):
    """A defect in an input file, located by path and (when known) 1-based line number."""

    def __init__(self, path: str | Path, problem: str, line: int | None = None):
        self.path, self.problem, self.line = str(path), problem, line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")
