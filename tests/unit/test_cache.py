"""The shared cache: keyed entries, atomic builds, crashed builds never trusted, one builder per key."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from ragtrack.core.cache import MANIFEST, Cache, cache_key


def test_key_depends_on_every_part() -> None:
    assert cache_key("bm25", {"a": 1, "b": 2}) == cache_key("bm25", {"b": 2, "a": 1})
    assert cache_key("bm25", {"a": 1}) != cache_key("bm25", {"a": 2})
    assert cache_key("bm25", {"a": 1}) != cache_key("dense", {"a": 1})


def test_build_once_then_hit(tmp_path: Path) -> None:
    cache, built = Cache(tmp_path), []

    def build(folder: Path) -> None:
        built.append(folder)
        (folder / "data.txt").write_text("x")

    first = cache.entry("k", {"v": 1}, build)
    second = cache.entry("k", {"v": 1}, build)
    assert first == second and len(built) == 1 and (first / MANIFEST).exists()
    assert (first / "data.txt").read_text() == "x"


def test_failed_build_leaves_nothing(tmp_path: Path) -> None:
    cache = Cache(tmp_path)

    def explode(folder: Path) -> None:
        (folder / "half.bin").write_text("partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        cache.entry("k", {"v": 1}, explode)
    assert [p.name for p in (tmp_path / "k").iterdir() if not p.name.endswith(".lock")] == []


def test_incomplete_entries_are_rebuilt(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    final = tmp_path / "k" / cache_key("k", {"v": 1})
    final.mkdir(parents=True)
    (final / "garbage").write_text("from a killed job")  # no manifest: not trusted
    stale = final.parent / f".{final.name}.tmp-1-dead"
    stale.mkdir()
    folder = cache.entry("k", {"v": 1}, lambda f: (f / "ok").write_text("ok"))
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, "ok"]
    assert not stale.exists()


def _slow_builder(root: str, results) -> None:
    cache = Cache(root)

    def build(folder: Path) -> None:
        time.sleep(0.5)
        (folder / "value").write_text("built")

    cache.entry("k", {"v": 1}, build)
    results.put(len(cache.builds))


def test_concurrent_builders_build_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [context.Process(target=_slow_builder, args=(str(tmp_path), results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert sorted(results.get(timeout=5) for _ in workers) == [0, 0, 1]
