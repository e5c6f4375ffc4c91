"""A retriever's stage searches every query in one call (throughput), and measures the latency of one
query alone on a seeded sample of queries searched one at a time; a query's results are the same bits
whichever way it is searched (BM25 with either backend, exact dense search)."""

from __future__ import annotations

import logging

import pytest

from ragtrack.core import stages
from ragtrack.core.cache import Cache
from ragtrack.core.data import load_beir
from ragtrack.core.runs import Run
from ragtrack.core.stages import LATENCY_MIN_QUERIES, StageContext, latency_sample
from ragtrack.retrievers.bm25 import BM25Retriever
from ragtrack.retrievers.dense import DenseRetriever
from ragtrack.retrievers.encoders import HashingEncoder
from tests.support import TOY, datasets_dir


class Recording(BM25Retriever):
    """BM25 that records the queries of each search call."""

    def __init__(self, **values):
        super().__init__(**values)
        self.calls: list[list[str]] = []

    def search(self, queries, depth):
        self.calls.append(list(queries))
        return super().search(queries, depth)


def test_one_call_searches_every_query_and_a_sample_is_timed_alone(tmp_path) -> None:
    dataset = load_beir(TOY)
    retriever = Recording()
    output = retriever.produce({}, StageContext(dataset, dataset.corpus, Cache(tmp_path), 5, 5))
    batch, *alone = retriever.calls
    assert batch == list(dataset.queries) and all(len(call) == 1 for call in alone)
    assert [call[0] for call in alone] == latency_sample(dataset.queries)[: len(alone)]
    assert LATENCY_MIN_QUERIES <= len(alone) == output.efficiency["latency_queries"]
    efficiency = output.efficiency
    assert efficiency["queries_per_second"] == pytest.approx(len(dataset.queries) / efficiency["search_seconds"])
    assert 0 < efficiency["latency_p50_seconds"] <= efficiency["latency_p95_seconds"]
    share = (
        efficiency["search_seconds"] * 1000 / len(dataset.queries)
    )  # each query's latency_ms: the batch's time per query
    assert output.latency_ms == pytest.approx(dict.fromkeys(dataset.queries, share))


def test_the_sample_is_seeded_and_bounded() -> None:
    queries = {f"q{i}": "text" for i in range(300)}
    sample = latency_sample(queries)
    assert len(sample) == stages.LATENCY_QUERIES == len(set(sample)) and set(sample) <= queries.keys()
    assert latency_sample(dict(reversed(queries.items()))) == sample  # whatever the order the queries come in
    assert sorted(latency_sample({"b": "", "a": ""})) == ["a", "b"]


def test_a_ranking_that_depends_on_batching_is_a_warning(tmp_path, caplog) -> None:
    class Batched(BM25Retriever):
        def search(self, queries, depth):
            run = super().search(queries, depth)
            return run if len(queries) > 1 else Run(self.name, {q: {"other": 1.0} for q in queries})

    dataset = load_beir(TOY)
    with caplog.at_level(logging.WARNING):
        Batched().produce({}, StageContext(dataset, dataset.corpus, Cache(tmp_path), 5, 5))
    assert "searched alone gives another ranking than in the batch" in caplog.text


@pytest.fixture(scope="module")
def scifact():
    return load_beir(datasets_dir() / "scifact")


@pytest.mark.parametrize(
    "make",
    [
        lambda: BM25Retriever(backend="lucene"),
        lambda: BM25Retriever(backend="bm25s"),
        lambda: DenseRetriever(HashingEncoder()),
    ],
    ids=["bm25-lucene", "bm25-bm25s", "dense-exact"],
)
def test_batch_and_one_query_at_a_time_give_the_same_bits(make, scifact, tmp_path) -> None:
    """Every SciFact query (300) over its 5,183 documents: the same ids and float scores in one call
    and one query per call."""
    retriever = make()
    retriever.index(scifact.corpus, Cache(tmp_path))
    together = retriever.search(scifact.queries, 100).scores
    alone = {qid: retriever.search({qid: text}, 100).scores.get(qid, {}) for qid, text in scifact.queries.items()}
    assert {qid: ranked for qid, ranked in alone.items() if ranked} == {
        qid: ranked for qid, ranked in together.items() if ranked
    }
    assert sum(map(len, together.values())) > 100 * len(scifact.queries) * 0.9
