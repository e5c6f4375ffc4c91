"""BM25 with three backends: ``lucene`` (default: Lucene's BM25 float for float, as Anserini and
Pyserini score BEIR; ragtrack.retrievers.bm25_lucene), ``bm25s`` (sparse precomputed scores) and
``rank_bm25`` (BM25Okapi, the implementation many RAG projects use).

Lucene BM25 (Robertson et al. 1994; Lin et al. 2016 variant):
score(q, d) = Σ_{t ∈ q} idf(t) · tf(t,d) / (tf(t,d) + k1 · (1 − b + b·|d|/avgdl)),
idf(t) = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5)).
The defaults (:class:`BM25Settings`) are Anserini/Pyserini's BEIR settings.

The index is bm25s's: per (term, document) the precomputed score idf(t) · tfc(t, d) as a sparse term
× document matrix S (float32). For ``method`` lucene and robertson ragtrack builds S itself on whole
arrays (the same float operations as bm25s, so the same bits; tests compare them), from the token
ids of ``Tokenizer.encode``; the other variants are built by bm25s from those ids. Terms are numbered
in sorted order. The build holds little beside S (docs/scale.md): each block of token ids is freed
once its (document, term) pairs are counted, the counts wait on disk in the build folder, and S is
filled term row by term row with a counting sort (no transposition). A loaded index is memory-mapped
from its cache files, so a search reads only the rows of its query terms.

Search with the bm25s backend scores a whole batch of queries at once: the scores of all queries are
one sparse product Q · S (Q: queries × terms, term counts), and each query's top ``depth`` is picked
from its non-zero scores only (documents sharing no term with the query are not returned). A
document's score sums its terms in term-id order, which is sorted term order, so the sum never
depends on hash seeds; ties at the cut go by ``top_documents``'s rule.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from typing import Literal

import numpy as np
from pydantic import field_validator, model_validator

from ragtrack.core.cache import Cache, folder_size
from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError
from ragtrack.core.processes import physical_cores
from ragtrack.core.progress import bars_shown, track
from ragtrack.core.runs import Run
from ragtrack.core.settings import Count, Flag, Fraction, NonNegative, Positive, TokenizerSettings, validated
from ragtrack.core.text import EncodedTexts, Tokenizer
from ragtrack.core.words import counted
from ragtrack.retrievers import bm25_lucene as lucene_bm25
from ragtrack.retrievers.base import Retriever, RetrieverSettings, top_documents
from ragtrack.retrievers.postings import (
    PairCounts,
    PostingValue,
    by_document_frequency,
    load_rows,
    save_rows,
    term_rows,
)

log = logging.getLogger(__name__)  # bm25s, rank_bm25 and scipy load on first use: a cached run needs none of them

PROGRESS_FROM_DOCUMENTS = 100_000  # bm25s's four indexing bars, only where indexing takes seconds and on a terminal
INDEX_FORMAT = 2  # 2: terms numbered in sorted order; ragtrack's own arrays for lucene and robertson
OWN_BUILD = {  # method -> idf(df, N); both use tfc = tf / (tf + k1 · (1 − b + b·|d|/avgdl))
    "lucene": lambda df, n: math.log(1 + (n - df + 0.5) / (df + 0.5)),
    "robertson": lambda df, n: math.log(max((n - df + 0.5) / (df + 0.5), 1.0)),  # bm25s clamps negative idf to 0
}


ANSERINI_ANALYZER = TokenizerSettings(
    analyzer="lucene", normalize="none", stopwords="lucene", stemmer="lucene"
)  # DefaultEnglishAnalyzer


class BM25Settings(RetrieverSettings, extra="forbid"):
    """BM25; the defaults are Anserini/Pyserini's BEIR "flat" run: Lucene's BM25 with k1=0.9, b=0.4
    over title and text as one field, Lucene's English analyzer, Anserini's tie adjustment, the
    query's own id removed; ``threads`` (lucene backend) the threads a search of many queries runs
    on (null: one per physical core; the results do not depend on it). ``fields`` (lucene backend): title and text as separate fields with these
    boosts (Anserini's "multifield"); ``method``: the bm25s backend's BM25 variant."""

    backend: Literal["lucene", "bm25s", "rank_bm25"] = "lucene"
    k1: NonNegative = 0.9
    b: Fraction = 0.4
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    fields: dict[Literal["title", "text"], Positive] | None = None
    score_ties: Literal["anserini", "raw"] = "anserini"
    remove_query: Flag = True
    threads: Count | None = None
    tokenizer: TokenizerSettings = ANSERINI_ANALYZER

    @field_validator("tokenizer", mode="before")
    @classmethod
    def _over_anserini_analyzer(cls, value):
        """Tokenizer keys not given keep BM25's defaults (:data:`ANSERINI_ANALYZER`), as in the YAML."""
        return {**ANSERINI_ANALYZER.model_dump(), **value} if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _backend_settings(self) -> "BM25Settings":
        if self.backend != "lucene" and self.fields is not None:
            raise ValueError(f"fields needs backend lucene (this retriever: backend {self.backend})")
        if self.backend != "bm25s" and self.method != "lucene":
            raise ValueError(
                f"method {self.method} is a variant of the bm25s backend (this retriever: backend {self.backend})"
            )
        if self.backend != "lucene" and self.threads is not None:
            raise ValueError(
                f"threads needs backend lucene (this retriever: backend {self.backend}; the others search on one thread)"
            )
        if self.fields is not None and not self.fields:
            raise ValueError("fields: name title, text or both (or null: one field of title and text)")
        return self


class BM25Retriever(Retriever):
    """BM25 over the corpus; ``values`` are :class:`BM25Settings` (validated here, defaults there)."""

    settings_schema = BM25Settings

    def __init__(self, name: str = "bm25", **values):
        super().__init__(name)
        settings = validated(self.settings_schema, values, f"BM25 retriever {name!r}")
        self.backend, self.k1, self.b, self.method = settings.backend, settings.k1, settings.b, settings.method
        self.fields, self.score_ties, self.remove_query = settings.fields, settings.score_ties, settings.remove_query
        self.threads = settings.threads
        self.tokenizer = Tokenizer(**settings.tokenizer.model_dump())
        self._fields: list[lucene_bm25.FieldIndex] = []  # lucene backend
        self._tie_keys = np.empty(0, dtype=np.uint64)  # lucene backend: lucene_bm25.tie_keys
        self._doc_ids = np.empty(0, dtype=object)
        self._ids_by_rank = self._doc_ids  # lucene backend: the ids in string order
        self._model = None
        self._term_scores = None  # scipy.sparse.csr_matrix of terms × documents (bm25s backend)
        self._vocabulary: dict[str, int] = {}

    def index_settings(self) -> dict:
        settings = {
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            "backend": self.backend,
            "k1": self.k1,
            "b": self.b,
            "tokenizer": self.tokenizer.settings(),
        }
        if self.backend == "bm25s":
            settings |= {"method": self.method, "bm25s": version("bm25s"), "format": INDEX_FORMAT}
        if self.backend == "lucene":
            settings |= {"fields": self.fields, "format": lucene_bm25.INDEX_FORMAT}
        return settings

    def identity(self) -> dict:
        identity = super().identity()
        if self.backend == "lucene":  # what changes the run, beyond the index
            identity |= {"score_ties": self.score_ties, "remove_query": self.remove_query}
        return identity

    def index(self, corpus: Corpus, cache: Cache) -> None:
        started = time.perf_counter()
        if self.backend == "rank_bm25":  # its index can only be pickled, so it is rebuilt (seconds)
            from rank_bm25 import BM25Okapi

            self._doc_ids = corpus.id_array()
            self._model = BM25Okapi(self.tokenizer(corpus.full_texts()), k1=self.k1, b=self.b)
            self.stats.build_seconds = time.perf_counter() - started
            return

        def build(folder):
            log.info("%s: indexing %s", self.name, counted(len(corpus), "document"))
            if self.backend == "lucene":
                for field, texts in self._field_texts(corpus).items():
                    lucene_bm25.build_field(self.tokenizer.encode(texts), folder / field, self.k1, self.b)
                np.save(folder / lucene_bm25.ID_RANKS, lucene_bm25.id_ranks(corpus.id_array()), allow_pickle=False)
                return
            encoded = self.tokenizer.encode(corpus.full_texts())
            if self.method in OWN_BUILD:
                save_rows(folder, term_rows(encoded, folder / "pairs", self._bm25s_values, folder), encoded.terms)
            else:
                self._bm25s_build(encoded, len(corpus)).save(str(folder), allow_pickle=False)

        builds_before = len(cache.builds)
        folder = cache.entry("bm25", {"corpus": corpus.hash, **self.index_settings()}, build, label=self.name)
        self._doc_ids = corpus.id_array()  # after the build: not in memory beside it
        self._load(folder)
        self.stats.from_cache = len(cache.builds) == builds_before
        self.stats.build_seconds = time.perf_counter() - started
        self.stats.size_bytes = folder_size(folder)

    def _field_texts(self, corpus: Corpus) -> dict:
        """The lucene backend's fields: ``contents`` (title and text joined) or the ``fields`` named."""
        if self.fields is None:
            return {"contents": corpus.full_texts()}
        return {field: corpus.titles if field == "title" else corpus.texts for field in sorted(self.fields)}

    def _bm25s_values(self, counts: PairCounts) -> PostingValue:
        """S[t, d] as bm25s computes it: tfc in float64 from float32 term counts, idf with
        ``math.log`` stored as float32, their product rounded to float32."""
        lengths = counts.lengths
        n_docs = len(lengths)
        norms = self.k1 * ((1 - self.b) + self.b * lengths / lengths.mean()) if n_docs else lengths.astype(float)
        idf_of = OWN_BUILD[self.method]
        idf = by_document_frequency(counts.df, lambda df: idf_of(df, n_docs))
        return lambda terms, tf, documents: (idf[terms].astype(np.float64) * (tf / (norms[documents] + tf))).astype(
            np.float32
        )

    def _bm25s_build(self, encoded: EncodedTexts, n_docs: int):
        import bm25s

        model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        every_id = encoded.ids
        ids = [
            every_id[start:end].tolist()
            for start, end in zip(encoded.offsets[:-1].tolist(), encoded.offsets[1:].tolist())
        ]
        model.index(
            (ids, {term: i for i, term in enumerate(encoded.terms)}),
            show_progress=n_docs >= PROGRESS_FROM_DOCUMENTS and bars_shown(),
            leave_progress=False,
        )
        return model

    def _load(self, folder) -> None:
        from scipy import sparse

        if self.backend == "lucene":
            boosts = self.fields or {"contents": 1.0}
            self._fields = [
                lucene_bm25.load_field(folder / field, boosts[field], len(self._doc_ids)) for field in sorted(boosts)
            ]
            ranks = np.load(folder / lucene_bm25.ID_RANKS, mmap_mode="r", allow_pickle=False)
            self._tie_keys = lucene_bm25.tie_keys(ranks)
            self._ids_by_rank = np.empty_like(self._doc_ids)
            self._ids_by_rank[ranks] = self._doc_ids
            return
        if self.method in OWN_BUILD:
            (data, indices, indptr), terms = load_rows(folder)
            self._term_scores = sparse.csr_matrix((data, indices, indptr), shape=(len(terms), len(self._doc_ids)))
            self._vocabulary = {term: i for i, term in enumerate(terms)}
            return
        import bm25s

        model = bm25s.BM25.load(str(folder), allow_pickle=False)
        if model.nonoccurrence_array is not None:  # bm25l / bm25+ add a per-term constant to every document
            self._model = model
        else:
            matrix = model.scores
            self._term_scores = sparse.csr_matrix(
                (matrix["data"], matrix["indices"], matrix["indptr"]),
                shape=(len(matrix["indptr"]) - 1, matrix["num_docs"]),
            )
            self._vocabulary = model.vocab_dict

    def search(self, queries: dict[str, str], depth: int) -> Run:
        if self._model is None and self._term_scores is None and not self._fields:
            raise RuntimeError("index() must be called before search()")
        qids = list(queries)
        tokens = self.tokenizer(queries[qid] for qid in qids)
        k = min(depth, len(self._doc_ids))
        if self._fields:
            return self._lucene_search(dict(zip(qids, map(lucene_bm25.query_weights, tokens))), k)
        if self._term_scores is not None:
            return Run(self.name, dict(zip(qids, self._sparse_top(tokens, k))))
        if self.backend == "bm25s":
            score_all = lambda query: self._model.get_scores([t for t in query if t in self._model.vocab_dict])  # noqa: E731
        else:
            score_all = self._model.get_scores
        everything = np.arange(len(self._doc_ids))
        return Run(
            self.name,
            {
                qid: top_documents(self._doc_ids[everything], score_all(query), k)
                for qid, query in zip(qids, track(tokens, f"{self.name}: search", "queries"))
            },
        )

    def _lucene_search(self, queries: dict[str, dict[str, float]], k: int) -> Run:
        """Top ``k`` per query of weighted terms with the lucene backend (ragtrack.retrievers.bm25_lucene):
        the scores of a batch of queries computed together, batches on ``threads`` threads (each query's
        figures are the same whichever batch it is in)."""
        qids = list(queries)
        weights = [queries[qid] for qid in qids]
        threads = self.threads or physical_cores()
        clauses = lucene_bm25.clause_arrays(self._fields, weights)
        batches = lucene_bm25.query_batches(clauses.postings(), threads)
        with ThreadPoolExecutor(min(threads, len(batches) or 1)) as pool:  # the compiled search lets go of the GIL
            tops = list(pool.map(lambda batch: self._lucene_top(clauses.of_queries(*batch), k), batches))
        results = {}
        for (begin, _), (ids, values, ends) in zip(batches, tops):
            for qid, first, last in zip(qids[begin:], [0] + ends, ends):
                results[qid] = dict(zip(ids[first:last], values[first:last]))
                if self.remove_query:
                    results[qid].pop(qid, None)
        return Run(self.name, results)

    def _lucene_top(self, clauses: lucene_bm25.Clauses, k: int) -> tuple[list[str], list[float], list[int]]:
        """The top ``k`` of each query of ``clauses`` (one batch): ids and
        scores, one query after the other, and where each query's end."""
        ranks, values, lengths = lucene_bm25.ranked(self._fields, clauses, self._tie_keys, k)
        if self.score_ties == "anserini":  # a row per query, padded at its end
            filled = np.arange(lengths.max(initial=0)) < lengths[:, None]
            padded = np.zeros(filled.shape, dtype=np.float32)
            padded[filled] = values
            values = lucene_bm25.adjust_ties(padded)[filled]
        return self._ids_by_rank[ranks].tolist(), values.astype(float).tolist(), np.cumsum(lengths).tolist()

    def _sparse_top(self, tokens: list[list[str]], k: int, batch: int = 4096) -> list[dict[str, float]]:
        """Top ``k`` of Q · S per query (see module docstring), in batches of queries to bound memory."""
        from scipy import sparse

        vocabulary = self._vocabulary
        results = []
        for start in range(0, len(tokens), batch):
            rows, columns = [], []
            for row, query in enumerate(tokens[start : start + batch]):
                ids = [vocabulary[t] for t in query if t in vocabulary]
                rows += [row] * len(ids)
                columns += ids
            counts = sparse.csr_matrix(
                (np.ones(len(rows), dtype=np.float32), (rows, columns)),
                shape=(min(batch, len(tokens) - start), self._term_scores.shape[0]),
            )
            counts.sum_duplicates()  # canonical: each row's terms in id order, the order the product sums them in
            results += self._top_of_product(counts, k)
        return results

    def _top_of_product(self, queries, k: int) -> list[dict[str, float]]:
        """Top ``k`` of ``queries · S`` per row of ``queries`` (a sparse queries × terms matrix), from
        each row's non-zero scores."""
        scores = (queries @ self._term_scores).tocsr()
        return [
            top_documents(self._doc_ids[scores.indices[begin:end]], scores.data[begin:end], k)
            for begin, end in zip(scores.indptr[:-1].tolist(), scores.indptr[1:].tolist())
        ]

    def _weighted_index(self):
        """S, for searches with weighted terms (RM3); only the bm25s backend keeps it."""
        if self._model is None and self._term_scores is None:
            raise RuntimeError("index() must be called before search()")
        if self._term_scores is None:
            raise RagtrackError(
                f"{self.name}: weighted-term search (RM3) needs backend bm25s with a method other than bm25l or bm25+ "
                f"(this index: backend {self.backend}, method {self.method})"
            )
        return self._term_scores

    def term_counts(self, texts: Iterable[str]) -> list[dict[str, int]]:
        """Each text's analyzed terms (this index's tokenizer, as documents are indexed) and their
        counts, terms in sorted order."""
        return [dict(sorted(Counter(tokens).items())) for tokens in self.tokenizer(texts)]

    def document_frequencies(self, terms: Iterable[str]) -> dict[str, int]:
        """df(t), the indexed documents containing ``t`` (entries of its row), per term; 0 for a term
        the index does not know. The lucene backend answers for one field only (not multifield)."""
        if self._fields:
            if len(self._fields) > 1:
                raise RagtrackError(
                    f"{self.name}: weighted-term search (RM3) needs one field (this index: fields {', '.join(sorted(self.fields))})"
                )
            rows, vocabulary = self._fields[0].indptr, self._fields[0].vocabulary
        else:
            rows, vocabulary = self._weighted_index().indptr, self._vocabulary
        return {term: int(rows[i + 1] - rows[i]) if (i := vocabulary.get(term)) is not None else 0 for term in terms}

    def search_weighted(self, queries: dict[str, dict[str, float]], depth: int, batch: int = 4096) -> Run:
        """Top ``depth`` documents per query of weighted terms: score(d) = Σ_t w(t) · S[t, d] in float64
        (terms the index does not know score nothing), in batches of queries as :meth:`search`;
        documents sharing no term with the query are not returned, ties at the cut by ``top_documents``'s rule.
        The lucene backend takes each weight as its term's boost (as Anserini's RM3 query)."""
        from scipy import sparse

        if self._fields:
            return self._lucene_search(queries, min(depth, len(self._doc_ids)))
        index, vocabulary = self._weighted_index(), self._vocabulary
        qids, k, results = list(queries), min(depth, len(self._doc_ids)), []
        for start in range(0, len(qids), batch):
            rows, columns, weights = [], [], []
            for row, qid in enumerate(qids[start : start + batch]):
                for term, weight in queries[qid].items():
                    if term in vocabulary:
                        rows.append(row)
                        columns.append(vocabulary[term])
                        weights.append(float(weight))
            matrix = sparse.csr_matrix(
                (np.array(weights, dtype=np.float64), (rows, columns)),
                shape=(min(batch, len(qids) - start), index.shape[0]),
            )
            matrix.sum_duplicates()  # canonical: each row's terms in id order, the order the product sums them in
            results += self._top_of_product(matrix, k)
        return Run(self.name, dict(zip(qids, results)))
