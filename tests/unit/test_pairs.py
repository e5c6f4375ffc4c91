"""The pair-score store: exact float64 round trip, one file per scorer, whole batches only (a failed
batch and a killed process leave none of theirs), two processes on one file, one line for a corrupt file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ragtrack.core.cache import Cache
from ragtrack.core.errors import RagtrackError
from ragtrack.core.pairs import PairScores

IDENTITY = {"class": "test", "weights": "abc"}


def test_scores_round_trip_exactly_per_scorer(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    scores = {("q one", "doc a"): 0.1 + 0.2, ("q one", "doc b"): -1e-300, ("q two", "doc a"): 12345.678901234567}
    store = PairScores(cache, IDENTITY)
    store.store(scores)
    assert store.lookup([*scores, ("q one", "doc c"), ("q three", "doc a")]) == scores
    assert PairScores(cache, {**IDENTITY, "weights": "fp16"}).lookup(scores) == {}  # other weights: another file
    assert store.path.parent == tmp_path / "pairs"


def test_two_stores_on_one_file(tmp_path: Path) -> None:
    first, second = PairScores(Cache(tmp_path), IDENTITY), PairScores(Cache(tmp_path), IDENTITY)
    before = PairScores.scored
    first.store({("q", "a"): 1.0})
    second.store({("q", "b"): 2.0, ("q", "a"): 1.0})
    assert first.path == second.path and first.lookup([("q", "a"), ("q", "b")]) == {("q", "a"): 1.0, ("q", "b"): 2.0}
    assert PairScores.scored - before == 3


def test_a_failed_batch_stores_nothing_of_itself(tmp_path: Path) -> None:
    store = PairScores(Cache(tmp_path), IDENTITY)
    store.store({("q", "kept"): 1.0})
    with pytest.raises(RagtrackError, match="nothing of the batch was stored"):
        store.store({("q", "a"): 1.0, ("q", "b"): float("nan"), ("q", "c"): 3.0})
    assert store.lookup([("q", "kept"), ("q", "a"), ("q", "b"), ("q", "c")]) == {("q", "kept"): 1.0}


def _python(script: str, tmp_path: Path) -> subprocess.Popen:
    prelude = f"from ragtrack.core.cache import Cache\nfrom ragtrack.core.pairs import PairScores\nstore = PairScores(Cache({str(tmp_path)!r}), {IDENTITY!r})\n"
    return subprocess.Popen(
        [sys.executable, "-c", prelude + textwrap.dedent(script)], stderr=subprocess.PIPE, text=True
    )


def test_a_process_killed_while_storing_leaves_whole_batches(tmp_path: Path) -> None:
    killed = _python(
        """
        import os, signal
        store.store({("q", f"first {i}"): float(i) for i in range(100)})

        class DiesHalfway(dict):
            def items(self):
                for number, item in enumerate(super().items()):
                    if number == 5000:
                        os.kill(os.getpid(), signal.SIGKILL)
                    yield item

        store.store(DiesHalfway({("q", f"second {i}"): float(i) for i in range(10000)}))
        """,
        tmp_path,
    )
    assert killed.wait(timeout=60) == -9, killed.stderr.read()
    store = PairScores(Cache(tmp_path), IDENTITY)
    found = store.lookup([("q", f"{batch} {i}") for batch in ("first", "second") for i in range(10000)])
    assert found == {("q", f"first {i}"): float(i) for i in range(100)}


def test_two_processes_store_into_one_file_at_once(tmp_path: Path) -> None:
    writers = [
        _python(
            f"""
        for batch in range(40):
            store.store({{("q", f"{name} {{batch}} {{i}}"): float(i) for i in range(50)}})
        """,
            tmp_path,
        )
        for name in ("left", "right")
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0], [w.stderr.read() for w in writers]
    pairs = [("q", f"{name} {batch} {i}") for name in ("left", "right") for batch in range(40) for i in range(50)]
    assert len(PairScores(Cache(tmp_path), IDENTITY).lookup(pairs)) == 4000


def test_a_corrupt_store_is_one_line_naming_the_file(tmp_path: Path) -> None:
    store = PairScores(Cache(tmp_path), IDENTITY)
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(b"not a database at all, " * 100)
    for use in (lambda: store.lookup([("q", "a")]), lambda: store.store({("q", "a"): 1.0})):
        with pytest.raises(RagtrackError) as failure:
            use()
        message = str(failure.value)
        assert "\n" not in message and str(store.path) in message and "file is not a database" in message


def test_a_full_disk_does_not_advise_deleting_valid_scores(tmp_path: Path) -> None:
    import sqlite3

    store = PairScores(Cache(tmp_path), IDENTITY)
    message = str(store._connection()._unreadable(sqlite3.OperationalError("database or disk is full")))
    assert (
        message
        == f"{store.path}: the pair-score store cannot be used: disk full (SQLite: database or disk is full) (its stored scores are kept)"
    )
