"""Retrieval runs are cached by their chain key (corpus, index settings, queries, depth) with their efficiency."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ragtrack.core.cache import Cache
from ragtrack.core.data import Dataset, load_beir
from ragtrack.core.runs import Run
from ragtrack.core.stages import StageContext
from ragtrack.retrievers.base import Retriever
from ragtrack.retrievers.bm25 import BM25Retriever
from tests.support import TOY_JOB, ragtrack

EFFICIENCY = {
    "index_seconds",
    "index_bytes",
    "search_seconds",
    "queries_per_second",
    "latency_mean_seconds",
    "latency_p50_seconds",
    "latency_p95_seconds",
    "peak_memory_bytes",
    "run_from_cache",
}


def _search(retriever: Retriever, dataset: Dataset, cache: Cache, depth: int) -> tuple[Run, dict, dict[str, float]]:
    """The retriever's stage output as (run, efficiency, per-query latency in ms)."""
    output = retriever.produce({}, StageContext(dataset, dataset.corpus, cache, depth, depth))
    return output.run, output.efficiency, output.latency_ms


class CountingBM25(BM25Retriever):
    calls = 0

    def search(self, queries, depth):
        CountingBM25.calls += 1
        return super().search(queries, depth)


def test_a_hit_returns_the_same_run_without_searching(toy_path: Path, tmp_path: Path) -> None:
    dataset, cache = load_beir(toy_path), Cache(tmp_path)
    first, efficiency, latency = _search(CountingBM25(), dataset, cache, depth=5)
    searched = 1 + efficiency["latency_queries"]  # the batch, then the latency sample one query per call
    assert CountingBM25.calls == searched and 5 <= efficiency["latency_queries"] <= len(dataset.queries)
    assert EFFICIENCY <= efficiency.keys() and efficiency["run_from_cache"] == 0.0
    assert (
        efficiency["latency_p50_seconds"] <= efficiency["latency_p95_seconds"] and efficiency["peak_memory_bytes"] > 0
    )
    second, again, cached_latency = _search(CountingBM25(), dataset, cache, depth=5)
    assert CountingBM25.calls == searched and second.scores == first.scores and second.name == "bm25"
    assert again["run_from_cache"] == 1.0 and again["latency_p95_seconds"] == efficiency["latency_p95_seconds"]
    assert (
        set(latency) == set(dataset.queries) and cached_latency == latency
    )  # per-query ms, measured when the run was built


def test_depth_settings_and_queries_are_in_the_key(toy_path: Path, tmp_path: Path) -> None:
    dataset, cache = load_beir(toy_path), Cache(tmp_path)
    _search(BM25Retriever(), dataset, cache, depth=5)
    _search(BM25Retriever(), dataset, cache, depth=3)
    _search(BM25Retriever(k1=1.2), dataset, cache, depth=3)
    dataset = dataclasses.replace(dataset, queries=dict(list(dataset.queries.items())[:2]))
    _search(BM25Retriever(k1=1.2), dataset, cache, depth=3)
    assert len([b for b in cache.builds if b.startswith("run/")]) == 4


def test_jobs_in_two_folders_share_the_users_cache(tmp_path: Path) -> None:
    """The cache is the user's ($XDG_CACHE_HOME/ragtrack), not the launch folder's: a job started in a
    second folder builds nothing the first one built."""
    shared = {"XDG_CACHE_HOME": str(tmp_path / "user-cache")}
    builds = []
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
        done = ragtrack(tmp_path / folder, *TOY_JOB, "tracking=none", env=shared)
        assert done.returncode == 0, done.stderr[-3000:]
        builds.append(re.findall(r"cache build: (.+?) [0-9a-f]{12} ", done.stdout + done.stderr))
    assert (
        sorted(builds[0]) == ["bm25", "bm25 run", "dense embeddings", "dense run", "hybrid run"][: len(builds[0])]
        and len(builds[0]) >= 4
    )
    assert builds[1] == [] and (tmp_path / "user-cache" / "ragtrack").is_dir()
    assert not (tmp_path / "first" / ".cache").exists() and not (tmp_path / "second" / ".cache").exists()
