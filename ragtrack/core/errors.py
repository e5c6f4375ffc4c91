"""User-facing errors: one line, no traceback, exit code 2."""

from __future__ import annotations

import difflib
import errno
import re
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


# Faults of the environment (disk, permissions, network, databases) as one line each. The table is the
# one place that decides which exceptions are faults: the Hydra app and every CLI command report an
# exception it describes as one line with exit code 2, and let any other exception (a bug) show its
# traceback. Third-party classes are recognized by module and name, so the core imports none of them.
FAULT_ERRNOS = {
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOSPC: "no space left on the device (disk full)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large for this file system or process limit",
    errno.ENOTDIR: "a file is in the way where a folder is needed",
    errno.EISDIR: "is a folder, not a file",
    errno.EEXIST: "exists and is not a folder (a file is in the way?)",
    errno.ENAMETOOLONG: "file name too long",
    errno.ELOOP: "symbolic link loop",
    errno.EIO: "input/output error (failing disk?)",
    errno.EMFILE: "too many open files (raise ulimit -n)",
    errno.ECONNREFUSED: "connection refused (nothing listens there)",
    errno.ECONNRESET: "connection reset by the server",
    errno.ETIMEDOUT: "connection timed out",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
}
SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")  # numpy's tofile when the disk fills up (no errno)
SQLITE_FAULTS = {  # sqlite3's messages (also inside SQLAlchemy's and Chroma's errors) -> what they mean
    "database or disk is full": "disk full (SQLite: database or disk is full)",
    "attempt to write a readonly database": "read-only database (SQLite: attempt to write a readonly database)",
    "unable to open database file": "cannot open the SQLite database file (missing folder or no permission)",
    "disk i/o error": "input/output error (SQLite: disk I/O error)",
    "database is locked": "the database is locked by another process",
}
CONNECTION_FAULTS = {  # (module root, class name) -> meaning; requests, urllib3 and httpx
    ("requests", "ConnectTimeout"): "connection timed out",
    ("requests", "ReadTimeout"): "no answer within the time-out",
    ("requests", "Timeout"): "timed out",
    ("requests", "ConnectionError"): "cannot connect",
    ("urllib3", "MaxRetryError"): "cannot connect",
    ("urllib3", "NewConnectionError"): "cannot connect",
    ("urllib3", "ConnectTimeoutError"): "connection timed out",
    ("urllib3", "ReadTimeoutError"): "no answer within the time-out",
    ("httpx", "ConnectError"): "cannot connect",
    ("httpx", "ConnectTimeout"): "connection timed out",
    ("httpx", "ReadTimeout"): "no answer within the time-out",
    ("httpx", "TimeoutException"): "timed out",
    ("httpx", "DecodingError"): "the server's reply could not be decoded",
}


def describe_fault(exc: BaseException) -> str | None:
    """One line for an exception that is a user mistake (:class:`RagtrackError`) or a fault of the
    environment (full or read-only disk, missing permission, a file where a folder belongs, an
    unreachable server, text that cannot be encoded); ``None`` for anything else (a bug). The chain
    of causes is searched too, so a fault wrapped by a library (SQLAlchemy, MLflow, Chroma) is found."""
    for cause in _causes(
        exc
    ):  # the nearest described cause: a fault raised while handling an error is this fault, not that error
        if isinstance(cause, RagtrackError):
            return _first_line(cause) or type(cause).__name__
        for describe in (_os_fault, _sqlite_fault, _connection_fault, _unicode_fault):
            if message := describe(cause):
                return message
    return None


def _causes(exc: BaseException):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "orig", None)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else ""


def _os_fault(exc: BaseException) -> str | None:
    if isinstance(exc, OSError) and exc.errno is None and SHORT_WRITE.fullmatch(str(exc)):
        return f"disk full? a write was cut short ({exc})"
    if not isinstance(exc, OSError) or exc.errno not in FAULT_ERRNOS:
        return None
    where = " -> ".join(str(name) for name in (exc.filename, exc.filename2) if name is not None)
    return f"{where}: {FAULT_ERRNOS[exc.errno]}" if where else FAULT_ERRNOS[exc.errno]


def _sqlite_fault(exc: BaseException) -> str | None:
    text = str(exc).lower()
    for needle, meaning in SQLITE_FAULTS.items():
        if needle in text and type(exc).__module__.split(".")[0] in (
            "sqlite3",
            "sqlalchemy",
            "chromadb",
            "mlflow",
            "builtins",
        ):
            return meaning
    return None


def _connection_fault(exc: BaseException) -> str | None:
    package = type(exc).__module__.split(".")[0]
    for cls in type(exc).__mro__:
        if (package, cls.__name__) in CONNECTION_FAULTS:
            return f"{CONNECTION_FAULTS[package, cls.__name__]}: {_short(exc)}"
    return None


def _unicode_fault(exc: BaseException) -> str | None:
    if isinstance(exc, UnicodeError):
        return f"text that cannot be encoded or decoded: {_short(exc)}"
    return None


def _short(exc: BaseException, limit: int = 300) -> str:
    line = " ".join(str(exc).split())
    return line if len(line) <= limit else line[:limit] + " ..."
