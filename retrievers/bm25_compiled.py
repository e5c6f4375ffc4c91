"""The compiled part of the lucene BM25 backend's search (ragtrack.retrievers.bm25_lucene.ranked): each
query's top k from its clauses' postings, in numba, outside Python's lock."""

from __future__ import annotations

import numba
import numpy as np

CHUNK = 256  # documents whose largest sum is compared with the heap's smallest score at once


@numba.njit(nogil=True, cache=True)
def top_keys(
    indices, units, rs, field_of, begins, ends, weights, is_unit, starts, nested, ties, n_docs, k, block, walk_share
):
    """:func:`ragtrack.retrievers.bm25_lucene.ranked`'s keys: per query (its clauses
    ``starts[q]:starts[q + 1]``) the keys of its top ``k``, largest first, in a row of ``k``, and their
    number. The documents are taken ``block`` at a time: every clause adds its postings in the block
    to its field's float64 sums (:func:`_add_block`), then the block's sums are offered to a heap of
    the ``k`` largest keys: from the postings read where they are few (``walk_share``), else by
    256-document chunks, skipping a chunk whose largest sum is below the heap's smallest score."""
    n_fields, n_queries = len(indices), len(starts) - 1
    keys, lengths = np.zeros(n_queries * k, np.uint64), np.zeros(n_queries, np.int64)
    if k == 0:
        return keys, lengths
    block = max(1, min(block, n_docs))
    sums, total = np.zeros((n_fields, block), np.float64), np.zeros(block if n_fields > 1 else 0, np.float64)
    heap, score = np.empty(k, np.uint64), np.empty(1, np.float32)
    bits = score.view(np.uint32)  # a float32's bits
    for q in range(n_queries):
        first, last = starts[q], starts[q + 1]
        at, before = begins[first:last].copy(), begins[first:last].copy()
        size, floor = 0, np.float32(0)
        for low in range(0, n_docs, block):
            width = min(block, n_docs - low)
            read = _add_block(indices, units, rs, field_of, ends, weights, is_unit, first, at, before, sums, low, width)
            if read == 0:
                continue
            if read < walk_share * width:  # each document met once: its sums are zeroed when first met
                for c in range(len(at)):
                    documents = indices[field_of[first + c]]
                    for i in range(before[c], at[c]):
                        d = documents[i] - low
                        s = _document_sum(sums, d, nested)
                        for field in range(n_fields):
                            sums[field, d] = 0.0
                        if s != 0.0:
                            size, floor = _offer(heap, size, floor, s, ties[low + d], score, bits)
                continue
            if n_fields == 1:
                summed = sums[0]
            else:
                summed = total
                for d in range(width):
                    summed[d] = _document_sum(sums, d, nested)
                sums[:, :width] = 0.0
            for chunk in range(0, width, CHUNK):
                largest = 0.0
                for d in range(chunk, min(chunk + CHUNK, width)):
                    largest = max(largest, summed[d])
                if largest == 0.0 or (size == k and np.float32(largest) < floor):
                    continue
                for d in range(chunk, min(chunk + CHUNK, width)):
                    if summed[d] != 0.0 and (size < k or np.float32(summed[d]) >= floor):
                        size, floor = _offer(heap, size, floor, summed[d], ties[low + d], score, bits)
            summed[:width] = 0.0
        keys[q * k : q * k + size] = np.sort(heap[:size])[::-1]
        lengths[q] = size
    return keys, lengths


@numba.njit(inline="always")
def _add_block(indices, units, rs, field_of, ends, weights, is_unit, first, at, before, sums, low, width):
    """Each clause's postings among documents ``low`` … ``low + width − 1`` added to its field's sums
    in clause order: a clause of boost 1 adds its ``unit`` score, another w − w / r. A clause's postings
    are sorted, so those are one run, from ``at[c]`` (kept in ``before[c]``; ``at[c]`` moved past it).
    The postings read."""
    read = 0
    for c in range(len(at)):
        field, begin, end = field_of[first + c], at[c], ends[first + c]
        documents, summed = indices[field], sums[field]
        before[c] = begin
        if begin == end or documents[begin] >= low + width:
            continue
        stop = begin + np.searchsorted(documents[begin:end], low + width)
        if is_unit[first + c]:
            unit = units[field]
            for i in range(begin, stop):
                summed[documents[i] - low] += unit[i]
        else:
            r, w = rs[field], weights[first + c]
            for i in range(begin, stop):
                summed[documents[i] - low] += w - w / r[i]
        read += stop - begin
        at[c] = stop
    return read


@numba.njit(inline="always")
def _document_sum(sums, d, nested):
    """Document ``d``'s score in float64: its fields' sums added in field order, each rounded to
    float32 first when ``nested``."""
    s = np.float64(np.float32(sums[0, d])) if nested else sums[0, d]
    for field in range(1, sums.shape[0]):
        s += np.float64(np.float32(sums[field, d])) if nested else sums[field, d]
    return s


@numba.njit(inline="always")
def _offer(heap, size, floor, s, tie, score, bits):
    """The heap (its first ``size`` keys, the smallest on top) with the key of float64 sum ``s`` and tie
    key ``tie`` where it is among the ``len(heap)`` largest; its size and smallest score after."""
    score[0] = np.float32(s)
    k = len(heap)
    if score[0] <= 0 or (size == k and score[0] < floor):
        return size, floor
    key = (np.uint64(bits[0]) << np.uint64(32)) | tie
    if size < k:
        heap[size] = key
        _sift_up(heap, size)
        size += 1
    elif key > heap[0]:
        heap[0] = key
        _sift_down(heap, size)
    else:
        return size, floor
    if size == k:
        bits[0] = np.uint32(heap[0] >> np.uint64(32))
        floor = score[0]
    return size, floor


@numba.njit(inline="always")
def _sift_up(heap, i):
    while i > 0 and heap[(i - 1) // 2] > heap[i]:
        heap[i], heap[(i - 1) // 2] = heap[(i - 1) // 2], heap[i]
        i = (i - 1) // 2


@numba.njit(inline="always")
def _sift_down(heap, size):
    i = 0
    while 2 * i + 1 < size:
        child = 2 * i + 1
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[i] <= heap[child]:
            return
        heap[i], heap[child] = heap[child], heap[i]
        i = child
