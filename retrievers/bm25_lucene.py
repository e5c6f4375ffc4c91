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
from pathlib import Path

import numpy as np

from ragtrack.core.text import EncodedTexts
from ragtrack.retrievers.postings import PairCounts, PostingValue, load_rows, save_rows, term_rows

F32 = np.float32
INDEX_FORMAT = 2  # bump when the saved index changes for the same settings (2: id ranks saved)
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


LENGTH_TABLE = np.array([_byte4_to_int(code) for code in range(256)], dtype=F32)  # BM25Similarity.LENGTH_TABLE: SmallFloat.byte4ToInt


def norm_inverses(k1: float, b: float, avgdl: F32) -> np.ndarray:
    """inv(n) for the 256 length bytes, in Lucene's float32 order of operations."""
    k1, b = F32(k1), F32(b)
    return (F32(1) / (k1 * ((F32(1) - b) + b * LENGTH_TABLE / avgdl))).astype(F32)


def idf(df: int, doc_count: int) -> F32:
    return F32(math.log(1 + (doc_count - df + 0.5) / (df + 0.5)))


def adjust_ties(scores: np.ndarray) -> np.ndarray:
    """Anserini's ``ScoreTiesAdjusterReranker`` on float32 ``scores`` in rank order: each rounded to
    4 decimals in double (``(float) (Math.round(s * 1e4d) / 1e4d)``); then, going down the ranking, a score no more than
    1e-4 below the previous (adjusted) one is lowered by ``dup`` · 1e-6, ``dup`` counting such scores
    in a row. Only where rounded scores are that close, or just after a lowered one, can a score be
    lowered, so only those places are visited."""
    rounded = (np.floor(scores.astype(np.float64) * 1e4 + 0.5) / 1e4).astype(F32)  # Math.round: half up
    close = (np.flatnonzero(rounded[:-1] - rounded[1:] <= F32(1e-4)) + 1).tolist()
    adjusted, dup, n, following = rounded, 0, len(rounded), iter(close)
    i = next(following, n)
    while i < n:
        if adjusted[i - 1] - adjusted[i] > F32(1e-4):
            dup = 0
        else:
            dup += 1
            adjusted[i] = adjusted[i] - F32(1e-6) * F32(dup)
        if dup:
            i += 1
        else:
            i = next((j for j in following if j > i), n)
    return adjusted


@dataclass
class FieldIndex:
    """One field's postings: per term row, documents ascending with r = 1 + tf · inv(n) (float32)."""

    boost: float
    vocabulary: dict[str, int]
    idf: np.ndarray  # float32 per term
    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray

    def clauses(self, weights: dict[str, float]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each weighted term's documents and float32 clause scores w − w / r, w = float32(weight ·
        field boost) · idf (terms the field lacks score nothing)."""
        documents, scores = [], []
        for term, weight in weights.items():
            if (row := self.vocabulary.get(term)) is None:
                continue
            boost = F32(weight) if self.boost == 1.0 else F32(weight) * F32(self.boost)
            w = boost * self.idf[row]
            begin, end = self.indptr[row], self.indptr[row + 1]
            documents.append(self.indices[begin:end])
            scores.append(w - w / self.data[begin:end])
        return documents, scores


def build_field(encoded: EncodedTexts, folder: Path, k1: float, b: float) -> dict:
    """The postings of one field (``encoded``: its tokens per document) saved in ``folder``; returns
    its statistics (N, Σ|d|, avgdl), saved beside them as ``stats.json``."""
    lengths = encoded.lengths()
    doc_count, total = int(np.count_nonzero(lengths)), int(lengths.sum())
    avgdl = F32(total / doc_count) if doc_count else F32(1)
    inverses = norm_inverses(k1, b, avgdl)

    def normalized_frequency(counts: PairCounts) -> PostingValue:
        norm_inverse = inverses[int_to_byte4(counts.lengths)]
        return lambda terms, tf, documents: (F32(1) + tf.astype(F32) * norm_inverse[documents]).astype(F32)

    terms = encoded.terms
    save_rows(folder, term_rows(encoded, folder / "pairs", normalized_frequency), terms)
    stats = {"documents": doc_count, "tokens": total, "avgdl": float(avgdl)}
    (folder / "stats.json").write_text(json.dumps(stats))
    return stats


def load_field(folder: Path, boost: float) -> FieldIndex:
    arrays, terms = load_rows(folder)
    data, indices, indptr = (np.asarray(array) for array in arrays)  # still memory-mapped; slices as plain arrays (cheaper)
    doc_count = json.loads((folder / "stats.json").read_text())["documents"]
    df = np.diff(indptr)
    distinct, position = np.unique(df, return_inverse=True)
    idf_of_term = np.array([idf(int(d), doc_count) for d in distinct.tolist()], dtype=F32)[position]
    return FieldIndex(boost, {term: i for i, term in enumerate(terms)}, idf_of_term, data, indices, indptr)


def document_scores(fields: list[FieldIndex], weights: dict[str, float], n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """The documents (of ``n_docs``) matching any weighted term in any field, positions ascending, and
    their float32 scores: the float64 sum of their clause scores, cast to float32; per field first
    where a field boost is not 1 (module docstring)."""
    nested = any(field.boost != 1.0 for field in fields)
    documents, scores = [], []
    for field in fields:
        field_documents, field_scores = field.clauses(weights)
        if nested and field_documents:
            summed = _summed(field_documents, field_scores, n_docs)
            field_documents, field_scores = [summed[0]], [summed[1]]
        documents += field_documents
        scores += field_scores
    if not documents:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=F32)
    return _summed(documents, scores, n_docs)


def _summed(documents: list[np.ndarray], scores: list[np.ndarray], n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """Per matched document the float64 sum of its ``scores``, as float32: summed into an array of
    every document where the postings are many (a bincount), else over the distinct ones (a sort)."""
    every_document, values = np.concatenate(documents), np.concatenate(scores).astype(np.float64)
    if len(every_document) * 16 >= n_docs:
        matched = np.flatnonzero(np.bincount(every_document, minlength=n_docs))
        return matched, np.bincount(every_document, weights=values, minlength=n_docs)[matched].astype(F32)
    matched, position = np.unique(every_document, return_inverse=True)
    return matched, np.bincount(position, weights=values, minlength=len(matched)).astype(F32)


ID_RANKS = "id_ranks.npy"  # per document, the rank of its id in string order (saved with the index)


def id_ranks(doc_ids: np.ndarray) -> np.ndarray:
    """Per document the rank of its id among all ids in string order (Lucene compares ids as UTF-8
    bytes, which order as code points do)."""
    ranks = np.empty(len(doc_ids), dtype=np.int64)
    ranks[np.argsort(doc_ids, kind="stable")] = np.arange(len(doc_ids))
    return ranks


def ranked(doc_ids: np.ndarray, ranks: np.ndarray, documents: np.ndarray, scores: np.ndarray, k: int) -> tuple[list[str], np.ndarray]:
    """The top ``k`` of ``documents`` (positions into ``doc_ids``) by float32 score, ties by id
    ascending (``ranks``: :func:`id_ranks`), as (ids, scores) in rank order."""
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = np.flatnonzero(scores >= kth)
        documents, scores = documents[keep], scores[keep]
    order = np.lexsort((ranks[documents], -scores))[:k]
    return doc_ids[documents[order]].tolist(), scores[order]


def query_weights(tokens: list[str]) -> dict[str, float]:
    """Anserini's bag of words: each distinct term with its count as the boost, terms in sorted order."""
    return {term: float(count) for term, count in sorted(Counter(tokens).items())}
