"""Postings of a tokenized corpus as a term × document CSR matrix, built with little memory: the
(document, term) pairs are counted block by block of token ids (each block freed once counted, the
counts waiting on disk), then each term's row is filled in document order with a counting sort (no
transposition), in memory or straight into the index's memory-mapped files. What a posting holds is
the caller's: a function of its term, term frequency and document (BM25's precomputed score,
Lucene's normalized frequency)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragtrack.core.text import EncodedTexts

CHUNK_DOCUMENTS = (
    16_384  # documents counted per np.unique call, and valued per step of the build: bounds its working memory
)
ARRAYS = ("data", "indices", "indptr")  # of the CSR matrix (rows: terms), as .npy files


@dataclass
class PairCounts:
    """The (document, term) pairs of a corpus and their counts, one entry of ``chunks`` per block of
    token ids: its first document and the ``.npz`` file of its pairs per document (int64), term ids
    (int32) and counts (float32), in document then term order; ``df`` per term."""

    lengths: np.ndarray  # tokens per document
    n_terms: int
    chunks: list
    df: np.ndarray


# value_of(terms int32, tf float64, documents int32) -> float32 values of those postings
PostingValue = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def term_rows(
    encoded: EncodedTexts, scratch: Path, value_of: Callable[[PairCounts], PostingValue], folder: Path | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR arrays (data, indices, indptr; rows: terms, columns: documents ascending) of the
    postings of ``encoded``, each posting's value from ``value_of(counts)``, a function given the pair
    counts (for document lengths and df). The token ids of ``encoded`` are freed as they are counted;
    the pair counts wait in the folder ``scratch`` (removed afterwards), so memory holds the matrix
    and one block of pairs, never the pairs and the matrix together. With ``folder``, data and
    indices are filled in place in the ``.npy`` files :func:`save_rows` writes there, memory-mapped:
    their pages are the page cache's, which the kernel writes back and may drop, so the build's own
    memory is one block of pairs."""
    scratch.mkdir(parents=True)
    try:
        counts = count_pairs(encoded, scratch)
        return fill_rows(counts, value_of(counts), folder)
    finally:
        shutil.rmtree(scratch)


def count_pairs(encoded: EncodedTexts, scratch: Path) -> PairCounts:
    """The (document, term) pairs of ``encoded`` and their counts, :data:`CHUNK_DOCUMENTS`
    documents per ``np.unique``, saved per block of token ids into ``scratch`` (int32 term ids
    and float32 counts: 8 bytes per pair); each block of token ids is freed once counted."""
    n_terms, lengths, offsets = len(encoded.terms), encoded.lengths(), encoded.offsets
    counts = PairCounts(lengths, n_terms, [], np.zeros(n_terms, dtype=np.int64))
    for first, last, block in encoded.release():
        per_document, terms, tf = [], [], []
        for start in range(first, last, CHUNK_DOCUMENTS):
            stop = min(start + CHUNK_DOCUMENTS, last)
            ids = block[offsets[start] - offsets[first] : offsets[stop] - offsets[first]].astype(np.int64)
            ids += np.repeat(np.arange(stop - start, dtype=np.int64) * n_terms, lengths[start:stop])
            pairs, pair_tf = np.unique(ids, return_counts=True)
            per_document.append(np.bincount(pairs // n_terms, minlength=stop - start))
            terms.append((pairs % n_terms).astype(np.int32))
            tf.append(pair_tf.astype(np.float32))
        del block
        if per_document:
            terms = np.concatenate(terms)
            counts.df += np.bincount(terms, minlength=n_terms)
            path = scratch / f"{len(counts.chunks)}.npz"
            np.savez(path, per_document=np.concatenate(per_document), terms=terms, tf=np.concatenate(tf))
            counts.chunks.append((first, path))
    return counts


def fill_rows(
    counts: PairCounts, value_of: PostingValue, folder: Path | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR arrays from the pair counts, written straight into term rows: row ``t`` has ``df[t]``
    entries, and the pairs, taken in document order, are placed by a stable sort on their term after
    the entries already in their row (a counting sort, so documents ascend within a row). Data and
    indices in memory, or with ``folder`` in its memory-mapped ``.npy`` files (:func:`term_rows`)."""
    n_terms = counts.n_terms
    indptr = np.concatenate([[0], np.cumsum(counts.df)])
    values, documents = (
        (np.empty(indptr[-1], dtype=dtype) for dtype in (np.float32, np.int32))
        if folder is None
        else posting_files(folder, int(indptr[-1]))
    )
    filled = indptr[:-1].copy()  # per row, where its next entry goes
    for first, path in counts.chunks:
        with np.load(path, allow_pickle=False) as saved:
            per_document, terms, tf = saved["per_document"], saved["terms"], saved["tf"]
        bounds = np.concatenate([[0], np.cumsum(per_document)])
        for start in range(0, len(per_document), CHUNK_DOCUMENTS):
            stop = min(start + CHUNK_DOCUMENTS, len(per_document))
            step_terms, step_tf = (
                terms[bounds[start] : bounds[stop]],
                tf[bounds[start] : bounds[stop]].astype(np.float64),
            )
            step_documents = np.repeat(np.arange(first + start, first + stop, dtype=np.int32), per_document[start:stop])
            step_values = value_of(step_terms, step_tf, step_documents)
            order = np.argsort(step_terms, kind="stable")
            per_term = np.bincount(step_terms, minlength=n_terms)
            ranked_terms = step_terms[order]
            places = filled[ranked_terms] + np.arange(len(order)) - (np.cumsum(per_term) - per_term)[ranked_terms]
            values[places], documents[places] = step_values[order], step_documents[order]
            filled += per_term
    return (
        values,
        documents,
        indptr.astype(np.int32) if indptr[-1] <= np.iinfo(np.int32).max else indptr,
    )  # scipy's index type


def posting_files(folder: Path, postings: int) -> tuple[np.ndarray, np.ndarray]:
    """Data (float32) and indices (int32) for ``postings`` entries as new ``.npy`` files in ``folder``,
    memory-mapped for writing: the same bytes ``np.save`` writes once they are filled."""
    folder.mkdir(parents=True, exist_ok=True)
    return tuple(
        np.lib.format.open_memmap(folder / f"{name}.npy", mode="w+", dtype=dtype, shape=(postings,))
        for name, dtype in zip(ARRAYS, (np.float32, np.int32))
    )


def by_document_frequency(df: np.ndarray, value_of: Callable[[int], float]) -> np.ndarray:
    """``value_of(df)`` per term as float32, computed once per distinct df (idf of a term row)."""
    distinct, position = np.unique(df, return_inverse=True)
    return np.array([value_of(int(d)) for d in distinct.tolist()], dtype=np.float32)[position]


def save_rows(folder: Path, arrays: tuple[np.ndarray, np.ndarray, np.ndarray], terms: list[str]) -> None:
    """The CSR arrays as ``.npy`` files and the row terms as ``terms.json`` in ``folder``; an array
    already filled in its file there (:func:`term_rows` with ``folder``) is flushed, not written again."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "terms.json").write_text(json.dumps(terms))
    for name, values in zip(ARRAYS, arrays):
        path = folder / f"{name}.npy"
        if isinstance(values, np.memmap) and Path(values.filename).resolve() == path.resolve():
            values.flush()
        else:
            np.save(path, values, allow_pickle=False)


def load_rows(folder: Path) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[str]]:
    """What :func:`save_rows` wrote, the arrays memory-mapped (a search reads only its terms' rows)."""
    arrays = tuple(np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in ARRAYS)
    return arrays, json.loads((folder / "terms.json").read_text())
