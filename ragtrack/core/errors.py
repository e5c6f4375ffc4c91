"""User-facing errors: one line, no traceback, exit code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
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


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'ndcg@10'?"`` (to end a message) for the known name closest to a misspelled one, else ``""``.
    Names with a cutoff (``ndcg@k``, ``mrr[@k]``) are matched on the part before ``@`` and keep the given cutoff."""
    base, at, cutoff = name.partition("@")
    by_base = {candidate.partition("@")[0].rstrip("[]"): candidate for candidate in known}
    close = difflib.get_close_matches(base, list(by_base), n=1, cutoff=0.6)
    if not close or close[0] == name:
        return ""
    candidate = by_base[close[0]]
    if at and "@" in candidate:
        suggestion = f"{close[0]}@{cutoff}"
    else:
        suggestion = close[0] if "[@" in candidate else candidate
    return f"; did you mean {suggestion!r}?"
