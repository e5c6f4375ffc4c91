"""Scores of (query, document) pairs kept per scorer, so a depth sweep scores each pair once.

One SQLite file per scorer: ``<cache root>/pairs/<key>.sqlite`` with ``key = cache_key("pairs",
identity)``; the identity names everything that changes a score (the model's fingerprint among it), so
scores of different weights or precisions never mix. A row is keyed by sha256 of the query text and
sha256 of the document text and holds the score as a float64 ``REAL`` (an exact round trip).

Each :meth:`PairScores.store` is one transaction: a process killed while storing leaves whole batches
only. Two processes may share a file: a writer waits up to ``BUSY_SECONDS`` for the other's lock.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from ragtrack.core.cache import Cache, cache_key, inside
from ragtrack.core.errors import RagtrackError, describe_fault

Pair = tuple[str, str]  # (query text, document text)

BUSY_SECONDS = 60.0  # how long a writer waits for another process's transaction
SQLITE_SIDE_FILES = ("-journal", "-wal", "-shm")  # the files SQLite makes beside a database
SCHEMA = """
CREATE TABLE IF NOT EXISTS scorer (identity TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS scores (
    query BLOB NOT NULL,
    document BLOB NOT NULL,
    score REAL NOT NULL CHECK (typeof(score) = 'real'),
    PRIMARY KEY (query, document)
) WITHOUT ROWID;
"""


def text_digest(text: str) -> bytes:
    """sha256 of the UTF-8 text (32 bytes): the key of a query or a document."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class PairScores:
    """The stored scores of one scorer (``identity``: what changes a score). ``scored`` counts the
    pairs this process has stored, across every store (tests prove with it that a pair is scored once)."""

    scored = 0

    def __init__(self, cache: Cache, identity: dict):
        self.identity = identity
        self.path = cache.path("pairs", f"{cache_key('pairs', identity)}.sqlite")

    def lookup(self, pairs: Iterable[Pair]) -> dict[Pair, float]:
        """The stored score of each of ``pairs`` that has one."""
        wanted: dict[bytes, dict[bytes, Pair]] = {}
        for pair in pairs:
            wanted.setdefault(text_digest(pair[0]), {})[text_digest(pair[1])] = pair
        found = {}
        with self._connection() as db:
            for query, documents in wanted.items():
                for document, score in db.execute("SELECT document, score FROM scores WHERE query = ?", (query,)):
                    if document in documents:
                        found[documents[document]] = score
        return found

    def store(self, scores: Mapping[Pair, float]) -> None:
        """Add ``scores`` in one transaction: all of them, or (on any failure or a kill) none."""

        def rows() -> Iterator[tuple[bytes, bytes, float]]:
            for (query, document), score in scores.items():
                if not math.isfinite(score):
                    raise RagtrackError(
                        f"{self.path}: the scorer gave {score!r} for a pair; nothing of the batch was stored"
                    )
                yield text_digest(query), text_digest(document), float(score)

        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?, ?)", rows())
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        PairScores.scored += len(scores)

    def _connection(self) -> "_Connection":
        return _Connection(self.path, json.dumps(self.identity, sort_keys=True, default=str))


class _Connection:
    """An open store (created with its schema if new) for one ``with`` block; SQLite's errors become
    one line naming the file."""

    def __init__(self, path: Path, identity: str):
        self.path, self.identity = path, identity

    def __enter__(self) -> sqlite3.Connection:
        for name in (
            self.path.name,
            *(self.path.name + suffix for suffix in SQLITE_SIDE_FILES),
        ):  # SQLite would write through a link
            inside(self.path.parent, name)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise self._unreadable(exc) from None
        try:
            self.db.executescript(SCHEMA)
            self.db.execute("INSERT INTO scorer SELECT ? WHERE NOT EXISTS (SELECT 1 FROM scorer)", (self.identity,))
        except sqlite3.Error as exc:
            self.db.close()
            raise self._unreadable(exc) from None
        return self.db

    def __exit__(self, kind, value, traceback) -> None:
        self.db.close()
        if isinstance(value, sqlite3.Error):
            raise self._unreadable(value) from None

    def _unreadable(self, exc: BaseException) -> RagtrackError:
        """A fault of the disk (full, read-only, locked): one line, the stored scores are valid; else the
        file is damaged: deleting it scores the pairs afresh."""
        if fault := describe_fault(exc):
            return RagtrackError(
                f"{self.path}: the pair-score store cannot be used: {fault} (its stored scores are kept)"
            )
        return RagtrackError(
            f"{self.path}: unusable pair-score store ({' '.join(str(exc).split())}); delete it to score the pairs afresh"
        )
