"""Exact dense search: the top k of fixed-order cosine scores, the same bits however queries are
batched and however many BLAS threads run; ties by document id descending. The Chroma collection is
built only when something uses it."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from ragtrack.core.cache import Cache
from ragtrack.core.data import load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import rank_documents
from ragtrack.retrievers import dense
from ragtrack.retrievers.base import top_documents
from ragtrack.retrievers.dense import DenseRetriever, ExactIndex, normalized, row_blocks
from ragtrack.retrievers.encoders import HashingEncoder
from tests.support import TOY


def vectors(count: int, dimension: int = 48, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, dimension)).astype(np.float32)


def index_of(documents: np.ndarray) -> ExactIndex:
    return ExactIndex(documents.copy(), np.array([f"d{i:05d}" for i in range(len(documents))], dtype=object))


def test_same_bits_for_any_batching_and_thread_count() -> None:
    documents, queries = vectors(3000), vectors(40, seed=1)
    index = index_of(documents)
    together = index.search(queries, 25)
    with threadpool_limits(1):
        one_by_one = [index.search(query[None], 25)[0] for query in queries]
    with threadpool_limits(2):
        in_pairs = [
            found for start in range(0, len(queries), 2) for found in index.search(queries[start : start + 2], 25)
        ]
    assert together == one_by_one == in_pairs  # dicts of floats: equal means equal bits


def test_top_k_equals_scoring_every_document() -> None:
    """Candidates from BLAS lose nothing: the top k equals the top k of the fixed-order score of
    every document, and the scores are cosine similarities."""
    documents, queries = vectors(2000), vectors(30, seed=2)
    index = index_of(documents)
    for query, found in zip(queries, index.search(queries, 10)):
        unit = normalized(query[None].copy())[0]
        every = (normalized(documents.copy()) * unit).sum(axis=1)
        assert found == top_documents(index.doc_ids, every, 10)
        cosine = documents.astype(np.float64) @ query / np.linalg.norm(documents, axis=1) / np.linalg.norm(query)
        assert np.allclose([found[d] for d in found], cosine[[int(d[1:]) for d in found]], atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2, None])
def test_every_block_shape_and_thread_count_gives_the_top_k_of_every_document(threads, monkeypatch) -> None:
    """The batched path jobs use (one BLAS product per block of rows and pass of queries, candidates
    cut back block after block) against the fixed-order score of every document: block sizes from
    seven rows to the whole array, passes of 1, 7 and all queries, k below and above a block's rows and
    the corpus size, ties across blocks, with 1, 2 and all BLAS threads."""
    documents, queries = (
        vectors(800, dimension=16, seed=5),
        vectors(23, dimension=16, seed=6),
    )  # passes of 23 normalize rows
    documents[400:460] = documents[3]  # ties of document 3, spread over blocks
    queries[0] = documents[3]
    ids = np.array([f"d{i:05d}" for i in range(len(documents))], dtype=object)
    every = normalized(documents.copy())
    for pass_size in (1, 7, 4096):
        monkeypatch.setattr(dense, "QUERIES_PER_PASS", pass_size)
        monkeypatch.setattr(dense, "POOL_FACTOR", 1 if pass_size == 7 else 4)  # pools cut back often
        for rows in (7, 50, 333, 65_536):
            index = ExactIndex(documents.copy(), ids, rows=rows)
            for k in (1, 10, 61, 1000):
                with threadpool_limits(threads):
                    found = index.search(queries, k)
                assert found == [
                    top_documents(ids, (every * query).sum(axis=1), k) for query in normalized(queries.copy())
                ]
    assert [d for d, _ in rank_documents(found[0])][:61] == [f"d{i:05d}" for i in range(459, 399, -1)] + ["d00003"]


def test_no_documents_asked_for_or_held_none_returned() -> None:
    assert index_of(vectors(10)).search(vectors(3, seed=1), 0) == [{}, {}, {}]
    assert index_of(vectors(0)).search(vectors(2, seed=1), 5) == [{}, {}]


def test_equal_vectors_tie_by_document_id_descending() -> None:
    documents = np.repeat(vectors(1), 6, axis=0)
    documents[5] *= -1  # the one document pointing away
    found = index_of(documents).search(documents[:1], 3)[0]
    assert [d for d, _ in rank_documents(found)] == ["d00004", "d00003", "d00002"]


def test_blocks_of_a_memory_mapped_file_give_the_whole_array_search(tmp_path) -> None:
    """Vectors read from a memory-mapped file a few rows at a time give the ids and score bits of
    the whole array in memory, ties at the cut and a zero vector included."""
    documents = vectors(500, dimension=24, seed=3)
    documents[100:110] = documents[7]  # ten ties of document 7
    documents[200] = 0
    np.save(tmp_path / "e.npy", documents)
    ids = np.array([f"d{i:05d}" for i in range(len(documents))], dtype=object)
    queries = np.concatenate([documents[[7, 200]], vectors(20, dimension=24, seed=4)])
    whole = ExactIndex(documents.copy(), ids).search(queries, 5)
    for rows in (1, 3, 64):
        mapped = ExactIndex(np.load(tmp_path / "e.npy", mmap_mode="r"), ids, rows=rows)
        assert mapped.search(queries, 5) == whole
    assert list(whole[0]) == ["d00109", "d00108", "d00107", "d00106", "d00105"]  # score 1, ids descending
    every = normalized(documents.copy())
    for query, found in zip(normalized(queries.copy()), whole):
        assert found == top_documents(ids, (every * query).sum(axis=1), 5)


def test_row_blocks_read_a_saved_array_back_in_pieces(tmp_path) -> None:
    """Chroma is filled from the embeddings file block by block: the blocks join to the array saved."""
    for count, rows in ((10, 3), (10, 10), (10, 64), (0, 4)):
        saved = vectors(count, dimension=5)
        np.save(tmp_path / "e.npy", saved)
        blocks = list(row_blocks(tmp_path / "e.npy", rows))
        assert [len(block) for block in blocks] == [min(rows, count - start) for start in range(0, count, rows)]
        assert np.array_equal(np.concatenate(blocks) if blocks else np.empty((0, 5), np.float32), saved)


def _indexed(cache_dir, **options) -> tuple[list[str], dict]:
    """The cache entries a toy-corpus dense index builds, and its run's scores."""
    dataset, cache = load_beir(TOY), Cache(cache_dir)
    retriever = DenseRetriever(HashingEncoder(), **options)
    retriever.index(dataset.corpus, cache)
    try:
        return sorted(entry.split("/")[0] for entry in cache.builds), retriever.search(dataset.queries, 10).scores
    finally:
        retriever.close()


def test_the_chroma_collection_is_built_only_when_used(tmp_path) -> None:
    """Exact search reads the embeddings entry: no collection unless ``chroma.build=always`` asks for
    one, and then the run is the same bits; approximate search builds it."""
    exact_builds, exact = _indexed(tmp_path / "a")
    always_builds, always = _indexed(tmp_path / "b", chroma={"build": "always"})
    approximate_builds, _ = _indexed(tmp_path / "c", search="approximate")
    assert exact_builds == ["embeddings"] and not (tmp_path / "a" / "chroma").exists()
    assert always_builds == approximate_builds == ["chroma", "embeddings"]
    assert always == exact


def test_the_build_mode_decides_the_collection_but_not_the_run_key() -> None:
    """``chroma.build`` changes whether the collection is built, never the run: it is left out of
    ``index_settings`` (the run's cache key). A Chroma server's collection is built to be shared."""
    default, always = DenseRetriever(HashingEncoder()), DenseRetriever(HashingEncoder(), chroma={"build": "always"})
    assert not default.builds_collection and always.builds_collection
    assert DenseRetriever(HashingEncoder(), chroma={"mode": "http"}).builds_collection
    assert default.index_settings() == always.index_settings()


def test_an_unknown_chroma_build_mode_is_refused() -> None:
    with pytest.raises(
        RagtrackError,
        match="dense retriever 'dense': chroma.build: .* is not allowed: input should be 'when_used' or 'always'",
    ):
        DenseRetriever(HashingEncoder(), chroma={"build": "never"})


def test_approximate_recall_is_one_when_every_document_is_returned(tmp_path) -> None:
    """``search_checks`` compares the approximate top ``depth`` with the exact one: with depth at least
    the corpus size both hold every document."""
    dataset = load_beir(TOY)
    retriever = DenseRetriever(HashingEncoder(), search="approximate")
    retriever.index(dataset.corpus, Cache(tmp_path))
    try:
        depth = len(dataset.corpus)
        run = retriever.search(dataset.queries, depth)
        assert retriever.search_checks(dataset.queries, run, depth) == {"approximate_recall": 1.0}
    finally:
        retriever.close()
