"""BM25 with two backends: ``bm25s`` (default; sparse precomputed scores, Lucene variant) and
``rank_bm25`` (BM25Okapi, the implementation many RAG projects use).

Lucene BM25 (Robertson et al. 1994; Lin et al. 2016 variant):
score(q, d) = Σ_{t ∈ q} idf(t) · tf(t,d) / (tf(t,d) + k1 · (1 − b + b·|d|/avgdl)),
idf(t) = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5)).
Defaults k1=0.9, b=0.4 are Anserini/Pyserini's BEIR settings.

Search with the bm25s backend scores a whole batch of queries at once: bm25s precomputes the
per-(term, document) scores as a sparse term × document matrix S, so the scores of all queries are
one sparse product Q · S (Q: queries × terms, term counts), and each query's top ``depth`` is picked
from its non-zero scores only (documents sharing no term with the query are not returned).
"""

from __future__ import annotations

import logging
import time
from importlib.metadata import version

import numpy as np
from tqdm.auto import tqdm

from ragtrack.core.cache import Cache, folder_size
from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.retrievers.base import Retriever
from ragtrack.core.text import Tokenizer

log = logging.getLogger(__name__)  # bm25s, rank_bm25 and scipy load on first use: a cached run needs none of them

BACKENDS = ("bm25s", "rank_bm25")
PROGRESS_FROM_DOCUMENTS = 100_000  # bm25s's four indexing bars, only where indexing takes seconds


class BM25Retriever(Retriever):
    def __init__(self, name: str = "bm25", backend: str = "bm25s", k1: float = 0.9, b: float = 0.4,
                 method: str = "lucene", tokenizer: dict | None = None):
        super().__init__(name)
        if backend not in BACKENDS:
            raise RagtrackError(f"unknown BM25 backend {backend!r}; known: {', '.join(BACKENDS)}")
        self.backend, self.k1, self.b, self.method = backend, float(k1), float(b), method
        self.tokenizer = Tokenizer(**(tokenizer or {}))
        self._doc_ids = np.empty(0, dtype=object)
        self._model = None
        self._term_scores = None  # scipy.sparse.csr_matrix of terms × documents (bm25s backend)
        self._vocabulary: dict[str, int] = {}

    def index_settings(self) -> dict:
        settings = {"class": f"{type(self).__module__}.{type(self).__qualname__}", "backend": self.backend,
                    "k1": self.k1, "b": self.b, "tokenizer": self.tokenizer.settings()}
        if self.backend == "bm25s":
            settings |= {"method": self.method, "bm25s": version("bm25s")}
        return settings

    def index(self, corpus: Corpus, cache: Cache) -> None:
        import bm25s
        from scipy import sparse

        started = time.perf_counter()
        self._doc_ids = np.asarray(corpus.ids, dtype=object)
        if self.backend == "rank_bm25":  # its index can only be pickled, so it is rebuilt (seconds)
            from rank_bm25 import BM25Okapi

            tokens = self.tokenizer(corpus.full_texts())
            self._model = BM25Okapi(tokens, k1=self.k1, b=self.b)
            self.stats.build_seconds = time.perf_counter() - started
            return

        def build(folder):
            log.info("%s: indexing %d documents", self.name, len(corpus))
            model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
            model.index(self.tokenizer(corpus.full_texts()), show_progress=len(corpus) >= PROGRESS_FROM_DOCUMENTS, leave_progress=False)
            model.save(str(folder), allow_pickle=False)

        builds_before = len(cache.builds)
        folder = cache.entry("bm25", {"corpus": corpus.hash, **self.index_settings()}, build, label=self.name)
        model = bm25s.BM25.load(str(folder), allow_pickle=False)
        if model.nonoccurrence_array is not None:  # bm25l / bm25+ add a per-term constant to every document
            self._model = model
        else:
            matrix = model.scores
            self._term_scores = sparse.csr_matrix((matrix["data"], matrix["indices"], matrix["indptr"]),
                                                  shape=(len(matrix["indptr"]) - 1, matrix["num_docs"]))
            self._vocabulary = model.vocab_dict
        self.stats.from_cache = len(cache.builds) == builds_before
        self.stats.build_seconds = time.perf_counter() - started
        self.stats.size_bytes = folder_size(folder)

    def search(self, queries: dict[str, str], depth: int) -> Run:
        if self._model is None and self._term_scores is None:
            raise RuntimeError("index() must be called before search()")
        qids = list(queries)
        tokens = self.tokenizer(queries[qid] for qid in qids)
        k = min(depth, len(self._doc_ids))
        if self._term_scores is not None:
            return Run(self.name, dict(zip(qids, self._sparse_top(tokens, k))))
        if self.backend == "bm25s":
            found, scores = self._model.retrieve(tokens, k=k, show_progress=False)
        else:
            found, scores = self._rank_bm25_top(tokens, k)
        return Run(self.name, {
            qid: dict(zip(self._doc_ids[found[row]].tolist(), scores[row].astype(float).tolist()))
            for row, qid in enumerate(qids)
        })

    def _sparse_top(self, tokens: list[list[str]], k: int, batch: int = 4096) -> list[dict[str, float]]:
        """Top ``k`` of Q · S per query (see module docstring), in batches of queries to bound memory."""
        from scipy import sparse

        vocabulary = self._vocabulary
        results = []
        for start in range(0, len(tokens), batch):
            rows, columns = [], []
            for row, query in enumerate(tokens[start:start + batch]):
                ids = [vocabulary[t] for t in query if t in vocabulary]
                rows += [row] * len(ids)
                columns += ids
            counts = sparse.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, columns)),
                                       shape=(min(batch, len(tokens) - start), self._term_scores.shape[0]))
            scores = (counts @ self._term_scores).tocsr()
            for row in range(scores.shape[0]):
                begin, end = scores.indptr[row], scores.indptr[row + 1]
                values, docs = scores.data[begin:end], scores.indices[begin:end]
                if len(values) > k:
                    top = np.argpartition(-values, k - 1)[:k]
                    values, docs = values[top], docs[top]
                results.append(dict(zip(self._doc_ids[docs].tolist(), values.astype(float).tolist())))
        return results

    def _rank_bm25_top(self, tokens: list[list[str]], k: int) -> tuple[np.ndarray, np.ndarray]:
        found = np.empty((len(tokens), k), dtype=np.int64)
        scores = np.empty((len(tokens), k))
        for row, query in enumerate(tqdm(tokens, desc=f"{self.name}: search", unit="query", leave=False, delay=1)):
            all_scores = self._model.get_scores(query)
            top = np.argpartition(-all_scores, k - 1)[:k] if k < len(all_scores) else np.arange(len(all_scores))
            found[row], scores[row] = top, all_scores[top]
        return found, scores
