"""Lucene's BM25, float for float as Anserini and Pyserini score BEIR ("flat" and "multifield").

Lucene 9 ``BM25Similarity`` with Anserini's bag-of-words query (a term occurring c times in the
query is one clause with boost c):

- a field's length |d| is its token count stored in one byte (``SmallFloat.intToByte4``: exact up to
  23, then 4 significant bits), decoded through Lucene's 256-entry length table L;
- N = documents with at least one token in the field, avgdl = float32(Σ|d| / N) (per field);
- idf(t) = float32(ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))), in float64 before the cast;
- per document byte n: inv(n) = 1 / (k1 · ((1 − b) + b · L[n] / avgdl)), in float32;
- a posting holds r = 1 + tf · inv(n) (float32); a clause of weight w = boost · idf scores
  w − w / r (float32), boost = c · field boost;
- a document's score is the float64 sum of its clauses' float32 scores, rounded to float32 (Lucene's
  disjunction scorers sum in double). With several fields of boost 1 the query is one disjunction
  (Lucene flattens nested ones); with other boosts each field's sum is rounded first.

Documents are ranked by score, ties by id ascending (Anserini sorts on the id field). With
``score_ties: anserini`` the written scores are Anserini's (``ScoreTiesAdjusterReranker``): rounded
to 4 decimals, and within a run of scores less than 1e-4 apart each next one lowered by 1e-6 more,
so trec_eval (which breaks ties by id descending) scores the ranking Lucene made. A document whose id
is the query's is dropped afterwards with ``remove_query`` (Pyserini's ``--remove-query``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path

import numpy as np

from ragtrack.core.text import EncodedTexts
from ragtrack.retrievers.postings import (
    PairCounts,
    PostingValue,
    by_document_frequency,
    load_rows,
    save_rows,
    term_rows,
)

F32 = np.float32
INDEX_FORMAT = 3  # bump when the saved index changes for the same settings (3: boost-1 clause scores saved)
UNIT_FILE = "unit.npy"  # per posting, the score of a clause of boost 1
NUM_FREE_VALUES = 24  # SmallFloat: 255 - longToInt4(Integer.MAX_VALUE); lengths below it are exact


def _int_to_byte4(value: int) -> int:
    if value < NUM_FREE_VALUES:
        return value
    rest = value - NUM_FREE_VALUES
    bits = rest.bit_length()
    if bits < 4:  # longToInt4's subnormal values
        return NUM_FREE_VALUES + rest
    shift = bits - 4  # keep 4 significant bits, the leading one implicit
    return NUM_FREE_VALUES + (((rest >> shift) & 0x07) | ((shift + 1) << 3))


def _byte4_to_int(code: int) -> int:
    if code < NUM_FREE_VALUES:
        return code
    rest = code - NUM_FREE_VALUES
    shift = (rest >> 3) - 1
    return NUM_FREE_VALUES + (rest & 0x07 if shift == -1 else ((rest & 0x07) | 0x08) << shift)


def int_to_byte4(values: np.ndarray) -> np.ndarray:
    """Lucene's ``SmallFloat.intToByte4`` of non-negative integers (document lengths), as uint8."""
    distinct, position = np.unique(np.asarray(values, dtype=np.int64), return_inverse=True)
    return np.array([_int_to_byte4(value) for value in distinct.tolist()], dtype=np.uint8)[position]


LENGTH_TABLE = np.array(
    [_byte4_to_int(code) for code in range(256)], dtype=F32
)  # BM25Similarity.LENGTH_TABLE: SmallFloat.byte4ToInt


def norm_inverses(k1: float, b: float, avgdl: F32) -> np.ndarray:
    """inv(n) for the 256 length bytes, in Lucene's float32 order of operations."""
    k1, b = F32(k1), F32(b)
    return (F32(1) / (k1 * ((F32(1) - b) + b * LENGTH_TABLE / avgdl))).astype(F32)


def idf(df: int, doc_count: int) -> F32:
    return F32(math.log(1 + (doc_count - df + 0.5) / (df + 0.5)))


def adjust_ties(scores: np.ndarray) -> np.ndarray:
    """Anserini's ``ScoreTiesAdjusterReranker`` on float32 ``scores`` in rank order: one ranking, or
    one per row (a shorter ranking padded at its end; the padding's values come out unused). Each
    score is rounded to 4 decimals in double (``(float) (Math.round(s * 1e4d) / 1e4d)``); then, going
    down a ranking, a score no more than 1e-4 below the previous (adjusted) one is lowered by
    ``dup`` · 1e-6, ``dup`` counting such scores in a row. Rank by rank, all rankings at once."""
    rounded = (np.floor(scores.astype(np.float64) * 1e4 + 0.5) / 1e4).astype(F32)  # Math.round: half up
    adjusted = rounded.reshape(-1, rounded.shape[-1]) if rounded.size else rounded.reshape(0, 0)
    dup = np.zeros(len(adjusted), dtype=F32)
    for rank in range(1, adjusted.shape[1]):
        dup = np.where(adjusted[:, rank - 1] - adjusted[:, rank] <= F32(1e-4), dup + F32(1), F32(0))
        adjusted[:, rank] -= F32(1e-6) * dup  # less 0 where dup is 0: unchanged
    return rounded


@dataclass
class FieldIndex:
    """One field's postings: per term row, documents ascending with r = 1 + tf · inv(n) (``data``)
    and, as a terms × documents matrix, the score of a clause of boost 1 on it, idf − idf / r
    (``unit``), both float32."""

    boost: float
    vocabulary: dict[str, int]
    idf: np.ndarray  # float32 per term
    data: np.ndarray
    unit: object  # scipy CSR, terms × documents, over the same indices and indptr
    indices: np.ndarray
    indptr: np.ndarray
    n_docs: int

    def clause_matrix(self, weights: dict[str, float]):
        """One query's clauses in this field as a clauses × documents matrix of their clause scores
        (scipy CSR, float64 data, each a float32 value), the rows in the order :meth:`scores` sums them
        (boost 1 by term row, then the others in query order). Its transpose times a vector of ones
        adds them row after row, document by document, in float64: the sparse product's sums, dense."""
        from scipy import sparse

        clauses = [
            (row, F32(weight) * F32(self.boost) if self.boost != 1.0 else F32(weight))
            for term, weight in weights.items()
            if (row := self.vocabulary.get(term)) is not None
        ]
        unit = sorted({row for row, boost in clauses if boost == F32(1)})
        spans = [(int(self.indptr[row]), int(self.indptr[row + 1]), None) for row in unit]
        spans += [
            (int(self.indptr[row]), int(self.indptr[row + 1]), boost * self.idf[row])
            for row, boost in clauses
            if boost != F32(1)
        ]
        if not spans:
            return sparse.csr_matrix((0, self.n_docs))
        documents = np.concatenate([self.indices[begin:end] for begin, end, _ in spans])
        values = np.concatenate(  # cast as copied: no float32 copy between
            [self.unit.data[begin:end] if w is None else w - w / self.data[begin:end] for begin, end, w in spans],
            dtype=np.float64,
        )
        offsets = np.cumsum([0] + [end - begin for begin, end, _ in spans], dtype=np.int64)
        if offsets[-1] <= np.iinfo(documents.dtype).max:  # the documents' type: scipy keeps them uncopied
            offsets = offsets.astype(documents.dtype)
        return sparse.csr_matrix((values, documents, offsets), shape=(len(spans), self.n_docs))

    def scores(self, queries: list[dict[str, float]]):
        """Queries × documents (scipy CSR, float64): each query's clause scores in this field summed,
        as one product of a queries × clauses selection and a clauses × documents matrix. A clause of
        boost 1 (weight · field boost, in float32) is its term's row of ``unit``; another is a row of
        w − w / r with w = boost · idf. Products by 1.0 and float64 sums of float32 values: the same
        figures as summing clause by clause (a document whose every clause scores exactly 0 is left out)."""
        from scipy import sparse

        lengths = [len(weights) for weights in queries]
        row = np.fromiter(
            map(self.vocabulary.get, chain.from_iterable(queries), repeat(-1)), dtype=np.int64, count=sum(lengths)
        )
        boost = np.fromiter(
            chain.from_iterable(weights.values() for weights in queries), dtype=np.float64, count=len(row)
        ).astype(F32)
        known = row >= 0  # terms of the index
        number, row, boost = np.repeat(np.arange(len(queries)), lengths)[known], row[known], boost[known]
        if self.boost != 1.0:
            boost = boost * F32(self.boost)
        unit = boost == F32(1)
        used, clause = np.unique(row[unit], return_inverse=True)
        clauses, columns = [self.unit[used]], np.empty(len(row), dtype=np.int64)
        columns[unit] = clause
        if not unit.all():
            spans = [
                (self.indptr[term], self.indptr[term + 1], weight * self.idf[term])
                for term, weight in zip(row[~unit], boost[~unit])
            ]
            values = np.concatenate([w - w / self.data[begin:end] for begin, end, w in spans])
            indices = np.concatenate([self.indices[begin:end] for begin, end, _ in spans])
            indptr = np.concatenate([[0], np.cumsum([end - begin for begin, end, _ in spans])])
            clauses.append(sparse.csr_matrix((values, indices, indptr), shape=(len(spans), self.n_docs)))
            columns[~unit] = len(used) + np.arange(len(spans))
        stacked = sparse.vstack(clauses, format="csr", dtype=np.float64)
        pick = sparse.csr_matrix((np.ones(len(row)), (number, columns)), shape=(len(queries), stacked.shape[0]))
        return (pick @ stacked).tocsr()


BATCH_POSTINGS = 1 << 19  # postings a batch of queries reads, about: bounds its scores (≈ 12 bytes a matched document)
DENSE_SHARE = 0.25  # a query reading at least this many postings per document is scored on a dense array (dense_top),
DENSE_POSTINGS = 1 << 16  # and at least this many (below, a batch's sparse product costs less than a query's arrays)


def postings_read(fields: list[FieldIndex], weights: dict[str, float]) -> int:
    """The postings a query reads: the document frequencies of its terms in every field."""
    return sum(
        int(field.indptr[row + 1] - field.indptr[row])
        for field in fields
        for term in weights
        if (row := field.vocabulary.get(term)) is not None
    )


def query_batches(postings: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Runs of consecutive queries, (begin, end), that each read about 1/``parts`` of the postings all
    of them read (``postings``: per query, :func:`postings_read`), and no more than about
    :data:`BATCH_POSTINGS` (a query alone may read more)."""
    if not len(postings):
        return []
    size = max(1, min(BATCH_POSTINGS, -(-int(postings.sum()) // parts)))
    batch = (np.cumsum(postings) - postings) // size  # each query goes with the batch where its postings begin
    cuts = [0, *(np.flatnonzero(np.diff(batch)) + 1).tolist(), len(postings)]
    return list(zip(cuts[:-1], cuts[1:]))


def dense_top(
    fields: list[FieldIndex], weights: dict[str, float], ties: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ranked`'s answer for one query (id ranks and float32 scores of its top ``k``), from its
    scores summed on a dense array: per field the transposed :meth:`FieldIndex.clause_matrix` times
    ones (scipy's matrix-vector product: the clause scores added document by document in float64, in
    the order the sparse product adds them, outside Python's lock), rounded per field where a field
    boost is not 1 (:func:`document_scores`); the fields' sums added.
    The top k lie at or above the k-th largest of the maxima of ``n/2k``-document blocks (k blocks hold
    a document that high); rounding to float32 keeps that order, so the float64 sums pick the
    candidates: those above the float32 just below the threshold (none of which ranks below a
    document at the threshold), only those rounded to float32 and ranked, by :func:`ranked`'s keys."""
    n_docs = fields[0].n_docs
    nested = any(field.boost != 1.0 for field in fields)
    total = None
    for field in fields:
        clauses = field.clause_matrix(weights)
        summed = clauses.T @ np.ones(clauses.shape[0])
        if nested:
            summed = summed.astype(F32).astype(np.float64)
        total = summed if total is None else total + summed
    block = max(1, n_docs // (2 * k)) if k else n_docs
    maxima = np.maximum.reduceat(total, np.arange(0, n_docs, block)).astype(F32) if n_docs else total.astype(F32)
    threshold = (
        np.partition(maxima, len(maxima) - min(k, len(maxima)))[len(maxima) - min(k, len(maxima))]
        if k and len(maxima)
        else F32(np.inf)
    )
    candidates = np.flatnonzero(total > max(float(np.nextafter(threshold, F32(0))), 0.0))
    scores = total[candidates].astype(F32)
    keys = scores.view(np.uint32).astype(np.uint64)
    keys <<= np.uint64(32)
    keys |= ties[candidates]
    top = np.sort(keys[scores > 0])[::-1][:k]  # a sum that rounds to a float32 0 is no match
    return (np.uint64(LOW_HALF) - (top & np.uint64(LOW_HALF))).astype(np.int64), (top >> np.uint64(32)).astype(
        np.uint32
    ).view(F32)


def term_idf(indptr: np.ndarray, doc_count: int) -> np.ndarray:
    """idf per term row of a field (df: the entries of its row), float32."""
    return by_document_frequency(np.diff(indptr), lambda df: idf(df, doc_count))


UNIT_STEP = 1 << 24  # postings per step of save_unit_scores: bounds its working memory (about 200 MB)


def save_unit_scores(path: Path, data: np.ndarray, indptr: np.ndarray, term_weights: np.ndarray) -> None:
    """Per posting the score of a clause of boost 1, idf − idf / r (float32), written into the
    ``.npy`` file ``path`` a few whole term rows (about :data:`UNIT_STEP` postings) at a time, so the
    build never holds a second copy of the postings."""
    unit = np.lib.format.open_memmap(path, mode="w+", dtype=F32, shape=data.shape)
    cuts = np.unique(
        np.concatenate(
            [np.searchsorted(indptr, np.arange(0, len(data), UNIT_STEP), side="right") - 1, [len(indptr) - 1]]
        )
    )
    for first, last in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        begin, end = int(indptr[first]), int(indptr[last])
        weights = np.repeat(term_weights[first:last], np.diff(indptr[first : last + 1]))
        unit[begin:end] = weights - weights / data[begin:end]
    unit.flush()
    del unit


def build_field(encoded: EncodedTexts, folder: Path, k1: float, b: float) -> dict:
    """The postings of one field (``encoded``: its tokens per document) saved in ``folder`` (r as the
    CSR data, the boost-1 clause scores as ``unit.npy``); returns its statistics (N, Σ|d|, avgdl),
    saved beside them as ``stats.json``."""
    lengths = encoded.lengths()
    doc_count, total = int(np.count_nonzero(lengths)), int(lengths.sum())
    avgdl = F32(total / doc_count) if doc_count else F32(1)
    inverses = norm_inverses(k1, b, avgdl)

    def normalized_frequency(counts: PairCounts) -> PostingValue:
        norm_inverse = inverses[int_to_byte4(counts.lengths)]
        return lambda terms, tf, documents: (F32(1) + tf.astype(F32) * norm_inverse[documents]).astype(F32)

    terms = encoded.terms
    data, indices, indptr = term_rows(encoded, folder / "pairs", normalized_frequency, folder)
    save_rows(folder, (data, indices, indptr), terms)
    del indices  # saved; not needed for the clause scores
    save_unit_scores(folder / UNIT_FILE, data, indptr, term_idf(indptr, doc_count))
    stats = {"documents": doc_count, "tokens": total, "avgdl": float(avgdl)}
    (folder / "stats.json").write_text(json.dumps(stats))
    return stats


def load_field(folder: Path, boost: float, n_docs: int) -> FieldIndex:
    from scipy import sparse

    arrays, terms = load_rows(folder)
    data, indices, indptr = (
        np.asarray(array) for array in arrays
    )  # still memory-mapped; slices as plain arrays (cheaper)
    unit = sparse.csr_matrix(
        (np.load(folder / UNIT_FILE, mmap_mode="r", allow_pickle=False), indices, indptr), shape=(len(terms), n_docs)
    )
    doc_count = json.loads((folder / "stats.json").read_text())["documents"]
    return FieldIndex(
        boost,
        {term: i for i, term in enumerate(terms)},
        term_idf(indptr, doc_count),
        data,
        unit,
        indices,
        indptr,
        n_docs,
    )


def document_scores(fields: list[FieldIndex], queries: list[dict[str, float]]):
    """Queries × documents (scipy CSR, float32 data): per query the documents matching any weighted
    term in any field and their scores, the float64 sum of their clause scores cast to float32; per
    field first where a field boost is not 1 (module docstring)."""
    nested = any(field.boost != 1.0 for field in fields)
    total = None
    for field in fields:
        part = field.scores(queries)
        if nested:
            part.data = part.data.astype(F32).astype(np.float64)
        total = part if total is None else (total + part).tocsr()
    total.data = total.data.astype(F32)
    return total


ID_RANKS = "id_ranks.npy"  # per document, the rank of its id in string order (saved with the index)


def id_ranks(doc_ids: np.ndarray) -> np.ndarray:
    """Per document the rank of its id among all ids in string order (Lucene compares ids as UTF-8
    bytes, which order as code points do)."""
    ranks = np.empty(len(doc_ids), dtype=np.int64)
    ranks[np.argsort(doc_ids, kind="stable")] = np.arange(len(doc_ids))
    return ranks


LOW_HALF = (1 << 32) - 1


def tie_keys(ranks: np.ndarray) -> np.ndarray:
    """Per document 2³² − 1 − the rank of its id (``ranks``: :func:`id_ranks`), the low half of its
    ranking key (:func:`ranked`): higher for ids earlier in string order."""
    return np.uint64(LOW_HALF) - ranks.astype(np.uint64)


def ranked(scores, ties: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top ``k`` of each row of ``scores`` (queries × documents, scipy CSR, float32 data ≥ 0, as
    Lucene's scores are) by score, ties by id ascending (``ties``: :func:`tie_keys`): the id ranks and
    scores of every row's top in rank order, one row after the other, and the length of each row's top.
    Each document is ranked by one uint64, its score's bits (which order as non-negative floats do) in
    the high half and its tie key in the low half."""
    keys = scores.data.astype(F32).view(np.uint32).astype(np.uint64)
    keys <<= np.uint64(32)
    keys |= ties[scores.indices]
    tops = []
    for begin, end in zip(scores.indptr[:-1].tolist(), scores.indptr[1:].tolist()):
        row = keys[begin:end]
        if end - begin > k:
            row.partition(end - begin - k)  # in place: the keys are this call's own
            row = row[end - begin - k :]
        tops.append(np.sort(row)[::-1])
    lengths = np.fromiter(map(len, tops), dtype=np.int64, count=len(tops))
    top = np.concatenate(tops) if tops else np.empty(0, dtype=np.uint64)
    id_ranks = (np.uint64(LOW_HALF) - (top & np.uint64(LOW_HALF))).astype(np.int64)
    return id_ranks, (top >> np.uint64(32)).astype(np.uint32).view(F32), lengths


def query_weights(tokens: list[str]) -> dict[str, float]:
    """Anserini's bag of words: each distinct term with its count as the boost, terms in sorted order."""
    return {term: float(count) for term, count in sorted(Counter(tokens).items())}
