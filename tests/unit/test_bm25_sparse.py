"""Batched sparse BM25 search returns what bm25s' own retrieval returns."""

from __future__ import annotations

from pathlib import Path

import bm25s
import numpy as np
import pytest

from ragtrack.core.cache import Cache
from ragtrack.core.data import load_beir
from ragtrack.retrievers.bm25 import BM25Retriever


@pytest.mark.parametrize("method", ["lucene", "robertson", "bm25l"])  # bm25l adds scores to every document: bm25s' own path
def test_run_equals_bm25s_retrieve(toy_path: Path, tmp_path: Path, method: str) -> None:
    dataset = load_beir(toy_path)
    retriever = BM25Retriever(method=method)
    retriever.index(dataset.corpus, Cache(tmp_path))
    run = retriever.search(dataset.queries, depth=5)
    reference = bm25s.BM25(k1=retriever.k1, b=retriever.b, method=method)
    reference.index(retriever.tokenizer(dataset.corpus.full_texts()), show_progress=False)
    found, scores = reference.retrieve(retriever.tokenizer(dataset.queries.values()), k=5, show_progress=False)
    for row, qid in enumerate(dataset.queries):
        expected = {dataset.corpus.ids[d]: float(s) for d, s in zip(found[row], scores[row]) if s > 0}
        assert run.scores[qid].keys() == expected.keys()
        assert np.allclose([run.scores[qid][d] for d in expected], list(expected.values()), rtol=1e-6)


def test_queries_without_known_terms_get_no_documents(toy_path: Path, tmp_path: Path) -> None:
    dataset = load_beir(toy_path)
    retriever = BM25Retriever()
    retriever.index(dataset.corpus, Cache(tmp_path))
    run = retriever.search({"unknown": "zzzqqq xxyyzz", "stopwords": "the and of"}, depth=10)
    assert run.scores == {"unknown": {}, "stopwords": {}}
