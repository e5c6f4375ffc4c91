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
    """One field's postings: per term row, documents ascending (``indices``) with r = 1 + tf · inv(n)
    (``data``) and the score of a clause of boost 1 on it, idf − idf / r (``unit``), both float32."""

    boost: float
    vocabulary: dict[str, int]
    idf: np.ndarray  # float32 per term
    data: np.ndarray
    unit: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    n_docs: int


BATCHES_PER_THREAD = 4  # a search's queries in this many batches per thread, of about equal postings
BLOCK = 1 << 17  # documents summed at a time: one float64 per document and field, in the core's cache
WALK_SHARE = 0.25  # a block with fewer postings read than this share of its documents is ranked from them


def query_batches(postings: np.ndarray, threads: int) -> list[tuple[int, int]]:
    """Runs of consecutive queries, (begin, end), that each read about 1/(``threads`` ·
    :data:`BATCHES_PER_THREAD`) of the postings all of them read (``postings``: per query,
    :meth:`Clauses.postings`; a query alone may read more): a thread that finishes early takes the next."""
    if not len(postings):
        return []
    size = max(1, -(-int(postings.sum()) // (threads * BATCHES_PER_THREAD)))
    batch = (np.cumsum(postings) - postings) // size  # each query goes with the batch where its postings begin
    cuts = [0, *(np.flatnonzero(np.diff(batch)) + 1).tolist(), len(postings)]
    return list(zip(cuts[:-1], cuts[1:]))


@dataclass(frozen=True)
class Clauses:
    """Queries' clauses in the order their scores are summed (:func:`clause_arrays`), one entry per
    clause: its field, the begin and end of its term's postings, its weight w = boost · idf (float32;
    0 for boost 1, whose scores are the field's ``unit``), whether its boost is 1; ``starts``: where
    each query's clauses begin (one more entry: the end)."""

    field: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    weight: np.ndarray
    is_unit: np.ndarray
    starts: np.ndarray

    def postings(self) -> np.ndarray:
        """Per query, the postings its clauses read."""
        read = np.concatenate([[0], np.cumsum(self.end - self.begin)])
        return read[self.starts[1:]] - read[self.starts[:-1]]

    def of_queries(self, first: int, last: int) -> Clauses:
        """The clauses of queries ``first`` to ``last`` (not included)."""
        begin, end = self.starts[first], self.starts[last]
        return Clauses(
            self.field[begin:end],
            self.begin[begin:end],
            self.end[begin:end],
            self.weight[begin:end],
            self.is_unit[begin:end],
            self.starts[first : last + 1] - begin,
        )


def clause_arrays(fields: list[FieldIndex], queries: list[dict[str, float]]) -> Clauses:
    """Every query's clauses, in the order their scores are summed: per query, field after field; in a
    field, the clauses of boost 1 (weight · field boost, in float32) by term row, then the others in
    query order; terms a field does not know have none there. Each term is looked up once per field."""
    terms = list(chain.from_iterable(queries))
    query = np.repeat(np.arange(len(queries)), [len(weights) for weights in queries])
    boosts = np.fromiter(
        chain.from_iterable(weights.values() for weights in queries), dtype=np.float64, count=len(terms)
    ).astype(F32)
    parts = []
    for number, field in enumerate(fields):
        row = np.fromiter(map(field.vocabulary.get, terms, repeat(-1)), dtype=np.int64, count=len(terms))
        known = np.flatnonzero(row >= 0)  # positions of the terms this field knows
        row = row[known]
        boost = boosts[known] * F32(field.boost) if field.boost != 1.0 else boosts[known]
        unit = boost == F32(1)
        order = np.where(unit, row, len(field.indptr) + known)  # boost 1 by row, then the others by position
        weight = np.where(unit, F32(0), boost * field.idf[row]).astype(F32)
        parts.append(
            (query[known], np.full(len(row), number), order, field.indptr[row], field.indptr[row + 1], weight, unit)
        )
    query, field_of, order, begins, ends, weights, is_unit = (np.concatenate(column) for column in zip(*parts))
    sort = np.lexsort((order, field_of, query))
    starts = np.concatenate([[0], np.cumsum(np.bincount(query, minlength=len(queries)))])
    return Clauses(
        field_of[sort].astype(np.int64),
        begins[sort].astype(np.int64),
        ends[sort].astype(np.int64),
        weights[sort],
        is_unit[sort],
        starts.astype(np.int64),
    )


def ranked(fields: list[FieldIndex], clauses: Clauses, ties: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """The top ``k`` of each query of ``clauses`` (:func:`clause_arrays`) by score, ties by id ascending
    (``ties``: :func:`tie_keys`): the id ranks and float32 scores of every query's top in rank order,
    one query after the other, and the length of each query's top. A document's score is the float64
    sum of its clause scores (field after field; each field's sum rounded to float32 first where a
    field boost is not 1), rounded to float32; a document scoring 0 is no match. Each document is
    ranked by one uint64, its score's bits (which order as non-negative floats do) in the high half
    and its tie key in the low half, so the top is the same whatever order documents are met in.
    Compiled (:func:`ragtrack.retrievers.bm25_compiled.top_keys`), outside Python's lock: threads may
    search batches at once."""
    from ragtrack.retrievers.bm25_compiled import top_keys  # numba loads on first search

    keys, lengths = top_keys(
        tuple(field.indices for field in fields),
        tuple(field.unit for field in fields),
        tuple(field.data for field in fields),
        clauses.field,
        clauses.begin,
        clauses.end,
        clauses.weight,
        clauses.is_unit,
        clauses.starts,
        any(field.boost != 1.0 for field in fields),
        ties,
        fields[0].n_docs,
        k,
        BLOCK,
        WALK_SHARE,
    )
    top = keys.reshape(len(lengths), k)[np.arange(k) < lengths[:, None]]  # each row's first lengths[row]
    id_ranks = (np.uint64(LOW_HALF) - (top & np.uint64(LOW_HALF))).astype(np.int64)
    return id_ranks, (top >> np.uint64(32)).astype(np.uint32).view(F32), lengths


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
    arrays, terms = load_rows(folder)
    data, indices, indptr = (
        np.asarray(array) for array in arrays
    )  # still memory-mapped; as plain arrays (cheaper slices, and what the compiled search takes)
    unit = np.asarray(np.load(folder / UNIT_FILE, mmap_mode="r", allow_pickle=False))
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


def query_weights(tokens: list[str]) -> dict[str, float]:
    """Anserini's bag of words: each distinct term with its count as the boost, terms in sorted order."""
    return {term: float(count) for term, count in sorted(Counter(tokens).items())}
