"""trec_eval 10's measures that ragtrack's core set (``ranking.py``) lacks, on the same queries × depth
grade matrix (:class:`~ragtrack.evaluators.ranking.RankedGrades`), each a small vectorised function
that follows its ``m_<name>.c`` step for step, so that the floating-point operations, their order
included, are trec_eval's (sums along a ranking are ``cumsum``, which adds in rank order as its
loops do).

trec_eval's view of a ranking (form_res_rels.c): each retrieved document has a *level*: its grade
when judged with a grade >= 0, :data:`UNJUDGED` when judged with a negative grade ("in the pool but
unjudged"), :data:`NONPOOL` when not judged at all. Gains (``G``, ``ndcg``, ``ndcg_rel``, ``Rndcg``,
``rbp``) default to the level itself and may be set per level (``-m ndcg.1=3,2=9``: a ``{level:
gain}`` mapping here); an unjudged document gains 0. The ideal ranking sorts the gains of every
document judged with a grade >= 0, keeping the positive ones.

Where trec_eval 9.0.8 (pytrec_eval) and 10.0 differ, these follow 10.0: ``iprec_at_recall`` and
``11pt_avg`` turn a recall level into a number of relevant documents by rounding (``lround``), where
9.0.8 added 0.9 and truncated. ``rbp`` rescales gains into [0, 1] from the least and largest gain of
the query's gain table (trec_eval 10 reads those two from uninitialised variables; this is what its
comment means and what its test outputs show).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ragtrack.evaluators.common import divide

if TYPE_CHECKING:
    from ragtrack.evaluators.ranking import RankedGrades

NONPOOL = -1  # trec_eval's RELVALUE_NONPOOL: retrieved, never judged
UNJUDGED = -2  # trec_eval's RELVALUE_UNJUDGED: judged with a negative grade
MIN_GEO_MEAN = 1e-5  # trec_eval's floor under a value that enters a geometric mean
INFAP_EPSILON = 1e-5
Gains = Mapping[int, float]  # relevance level -> gain; a level not given gains its own value
NO_GAINS: Gains = {}


def retrieved_cells(m: RankedGrades) -> np.ndarray:
    """(queries, width) whether a document was retrieved at that rank."""
    return m.ranks[None, :] <= m.retrieved[:, None]


def levels(m: RankedGrades) -> np.ndarray:
    """(queries, width) trec_eval's relevance value at each retrieved rank: the grade, :data:`UNJUDGED`
    or :data:`NONPOOL` (past the end of a ranking: :data:`NONPOOL` too)."""
    return np.where(m.judged, np.where(m.grades < 0, UNJUDGED, m.grades), NONPOOL).astype(np.int64)


def _gain(values: np.ndarray, gains: Gains) -> np.ndarray:
    """The gain of each level in ``values``: ``gains[level]`` where given, else the level if >= 0, else 0."""
    result = np.where(values >= 0, values, 0).astype(float)
    for level, gain in gains.items():
        result[values == level] = gain
    return result


def result_gains(m: RankedGrades, gains: Gains = NO_GAINS) -> np.ndarray:
    """(queries, width) the gain of each retrieved document (0 past the end of a ranking)."""
    return np.where(retrieved_cells(m), _gain(levels(m), gains), 0.0)


def ideal_gains(m: RankedGrades, gains: Gains = NO_GAINS) -> np.ndarray:
    """(queries, n) the gains of the ideal ranking, descending, 0-padded, at least one 0 at the end of
    each row. Without ``gains``: the positive grades of the judged documents. With ``gains``: trec_eval's
    walk down its sorted gain table (:func:`gain_table`)."""
    if gains:
        return _walked_ideal(m, gains)
    return np.hstack([-np.sort(-np.maximum(m.ideal, 0.0), axis=1), np.zeros((len(m.qids), 1))])


def _glibc_merge_sort(items: list, before: Callable[[object, object], bool]) -> list:
    """glibc 2.36's ``qsort`` (msort.c): a top-down merge sort taking the left item unless ``before``
    puts the right one first; it decides the order of items trec_eval's comparator calls equal."""
    if len(items) <= 1:
        return list(items)
    left, right = (
        _glibc_merge_sort(items[: len(items) // 2], before),
        _glibc_merge_sort(items[len(items) // 2 :], before),
    )
    merged = []
    while left and right:
        merged.append(right.pop(0) if before(right[0], left[0]) else left.pop(0))
    return merged + left + right


def gain_table(top_level: int, gains: Gains) -> list[tuple[int, float]]:
    """(level, gain) as trec_eval's setup_gains orders them for a query whose judged grades reach
    ``top_level``: the levels given, then the levels 0 .. top_level not given (gaining their own value),
    sorted by gain with trec_eval's comparator, ``(int)(a − b)``: gains less than 1 apart compare equal."""
    table = [*gains.items(), *((level, float(level)) for level in range(top_level + 1) if level not in gains)]
    return _glibc_merge_sort(table, lambda right, left: int(left[1] - right[1]) > 0)


def _walked_ideal(m: RankedGrades, gains: Gains) -> np.ndarray:
    """The ideal gains as trec_eval walks its gain table from the top: each level's gain once per
    document judged at that level, stopping at the first judged level whose gain is not positive."""
    zeros = m.num_rel + m.num_nonrel - (m.ideal > 0).sum(axis=1)
    rows = []
    for row in range(len(m.qids)):
        counts = np.bincount(m.ideal[row][m.ideal[row] > 0].astype(np.int64), minlength=1)
        counts[0] = zeros[row]
        top = len(counts) - 1 if counts.any() else -1
        walked = []
        for level, gain in reversed(gain_table(top, gains)):
            if 0 <= level <= top and counts[level]:
                if gain <= 0:
                    break
                walked += [gain] * int(counts[level])
        rows.append(walked)
    table = np.zeros((len(rows), max(map(len, rows), default=0) + 1))
    for row, walked in enumerate(rows):
        table[row, : len(walked)] = walked
    return table


def _discount(width: int) -> np.ndarray:
    """log2(rank + 1) for ranks 1..width."""
    return np.log2(np.arange(2, width + 2, dtype=float))


def _cumulative(gains: np.ndarray) -> np.ndarray:
    """(queries, width + 1) DCG of the first t documents for t = 0..width, summed in rank order."""
    terms = np.where(gains != 0, gains / _discount(gains.shape[1]), 0.0)
    return np.hstack([np.zeros((len(gains), 1)), np.cumsum(terms, axis=1)])


def _last(values: np.ndarray) -> np.ndarray:
    """The last column of a (queries, n) matrix: a row's sum when ``values`` is its cumulative sum."""
    return values[:, -1] if values.shape[1] else np.zeros(len(values))


def _widened(values: np.ndarray, width: int) -> np.ndarray:
    """The first ``width`` columns of ``values``, its last column repeated where it has fewer."""
    return np.hstack([values, np.repeat(values[:, -1:], max(width - values.shape[1], 0), axis=1)])[:, :width]


def _count_before(mask: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """For each cell (row, column), how many cells of ``mask`` in the same row lie before it."""
    width = mask.shape[1]
    mask_rows, mask_columns = np.nonzero(mask)
    keys = mask_rows * width + mask_columns  # sorted: nonzero is row-major
    return np.searchsorted(keys, rows * width + columns) - np.searchsorted(keys, rows * width)


def _relevant_so_far(m: RankedGrades, upto: np.ndarray) -> np.ndarray:
    """Per query, the relevant documents in its top ``upto`` (an integer per query, >= 0)."""
    cumulative = np.hstack([np.zeros((len(m.qids), 1)), np.cumsum(m.relevant, axis=1)])
    return cumulative[np.arange(len(m.qids)), np.minimum(upto, m.relevant.shape[1])]


# --- counts -------------------------------------------------------------------------------------


def num_ret(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """Documents retrieved (trec_eval ``num_ret``; its ``all`` line is the sum over queries)."""
    return m.retrieved.astype(float)


def num_rel(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """Documents judged relevant (grade >= threshold) (trec_eval ``num_rel``)."""
    return m.num_rel.astype(float)


def num_nonrel_judged_ret(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """Retrieved documents judged non-relevant, 0 <= grade < threshold (trec_eval ``num_nonrel_judged_ret``)."""
    return m.nonrelevant.sum(axis=1).astype(float)


def unjudged(m: RankedGrades, k: int) -> np.ndarray:
    """unj@k = |top-k documents not judged, or judged with a negative grade| / k (trec_eval 10 ``unj_k``)."""
    return (retrieved_cells(m)[:, :k] & ~(m.judged[:, :k] & (m.grades[:, :k] >= 0))).sum(axis=1) / k


# --- set measures (the retrieved documents as a set) --------------------------------------------


def _relevant_retrieved(m: RankedGrades) -> np.ndarray:
    return m.relevant.sum(axis=1).astype(float)


def set_precision(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """set_P = |relevant retrieved| / |retrieved| (trec_eval ``set_P``)."""
    return divide(_relevant_retrieved(m), m.retrieved)


def set_recall(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """set_recall = |relevant retrieved| / |relevant judged| (trec_eval ``set_recall``)."""
    return divide(_relevant_retrieved(m), m.num_rel)


def set_map(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """set_map = |rel ret|² / (|retrieved| · |relevant|) = set_P · set_recall (trec_eval ``set_map``)."""
    found = _relevant_retrieved(m)
    return divide(found * found, m.retrieved.astype(float) * m.num_rel.astype(float))


def set_relative_precision(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """set_relative_P = |relevant retrieved| / min(|retrieved|, |relevant|) (trec_eval ``set_relative_P``)."""
    return divide(_relevant_retrieved(m), np.minimum(m.retrieved, m.num_rel))


def set_f(m: RankedGrades, k: int | None = None, beta: float = 1.0) -> np.ndarray:
    """set_F = (β + 1)·P·R / (β·P + R) over the retrieved set, P = set_P, R = set_recall, β = 1 unless
    given (trec_eval ``set_F``; van Rijsbergen's F)."""
    p, r = set_precision(m), set_recall(m)
    return np.where(_relevant_retrieved(m) > 0, divide((beta + 1.0) * p * r, beta * p + r), 0.0)


def utility(
    m: RankedGrades, k: int | None = None, weights: Sequence[float] = (1.0, -1.0, 0.0, 0.0), collection: int = 0
) -> np.ndarray:
    """utility = w1·a + w2·b + w3·c + w4·d over the contingency table of the retrieved set: a relevant
    retrieved, b non-relevant retrieved, c relevant missed, d = N + a − retrieved − relevant the rest of
    a collection of N documents (trec_eval ``utility``, default weights 1, −1, 0, 0; ``-N`` gives N)."""
    found, retrieved, relevant = m.relevant.sum(axis=1), m.retrieved, m.num_rel
    w1, w2, w3, w4 = weights
    return (
        w1 * found
        + w2 * (retrieved - found)
        + w3 * (relevant - found)
        + w4 * (collection + found - retrieved - relevant)
    )


# --- rank measures ------------------------------------------------------------------------------


def relative_precision(m: RankedGrades, k: int) -> np.ndarray:
    """relative_P@k = |relevant in top k| / min(k, |relevant|): precision up to R, recall after it
    (trec_eval ``relative_P_k``)."""
    return divide(m.relevant[:, :k].sum(axis=1), np.minimum(k, m.num_rel))


def r_precision_multiple(m: RankedGrades, x: float) -> np.ndarray:
    """Rprec_mult@x = P@c with c = ⌊x·R + 0.9⌋ documents (R relevant judged), 0 when c = 0
    (trec_eval ``Rprec_mult_x``)."""
    cutoff = np.trunc(x * m.num_rel + 0.9).astype(np.int64)
    return divide(_relevant_so_far(m, cutoff), cutoff)


def _recall_cutoffs(m: RankedGrades, recall_levels: Sequence[float]) -> np.ndarray:
    """(queries, levels) the number of relevant documents at each recall level: lround(level · R)."""
    exact = np.asarray(recall_levels, dtype=float)[None, :] * m.num_rel[:, None]
    floor = np.floor(exact)
    return np.where(exact - floor >= 0.5, floor + 1, floor).astype(np.int64)


def interpolated_precision(m: RankedGrades, recall_levels: Sequence[float], empty: float = 0.0) -> np.ndarray:
    """(queries, levels) interpolated precision at each recall level: the largest P@j for j at or after
    the rank where the c-th relevant document is found, c = lround(level · R) (trec_eval 10
    ``iprec_at_recall``); c = 0 takes the largest P@j of all, ``empty`` for a query that retrieved
    nothing (trec_eval's 0/0, NaN, where ``-J`` leaves a ranking empty); 0 when fewer than c are found."""
    precision = np.where(retrieved_cells(m), np.cumsum(m.relevant, axis=1) / m.ranks, 0.0)
    best = np.maximum.accumulate(precision[:, ::-1], axis=1)[:, ::-1]  # best[i, j] = max P@(j'+1) for j' >= j
    rows, columns, _ = m.hits
    found = np.bincount(rows, minlength=len(m.qids))
    wanted = _recall_cutoffs(m, recall_levels)
    reached = (wanted >= 1) & (wanted <= found[:, None])
    cell = np.where(reached, (np.cumsum(found) - found)[:, None] + wanted - 1, 0)
    at_cell = best[rows[cell], columns[cell]] if len(rows) else np.zeros(wanted.shape)
    return np.where(
        reached, at_cell, np.where(wanted == 0, np.where(m.retrieved[:, None] > 0, best[:, :1], empty), 0.0)
    )


def iprec_at_recall(m: RankedGrades, level: float) -> np.ndarray:
    """Interpolated precision at one recall level (trec_eval ``iprec_at_recall_level``)."""
    return interpolated_precision(m, [level])[:, 0]


ELEVEN_POINTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def eleven_point_average(
    m: RankedGrades, k: int | None = None, recall_levels: Sequence[float] = ELEVEN_POINTS, empty: float = 0.0
) -> np.ndarray:
    """11pt_avg = mean interpolated precision at recall 0, 0.1, ..., 1 (or the levels given), summed
    from the highest level down as trec_eval does (trec_eval ``11pt_avg``)."""
    values = interpolated_precision(m, recall_levels, empty)
    return _last(np.cumsum(values[:, ::-1], axis=1)) / len(recall_levels)


def infap(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """infAP (Yilmaz & Aslam 2006) = (1/R) Σ_{relevant r at 0-based rank j} e_r, e_r = 1 at j = 0, else
    1/(j+1) + (j/(j+1)) · ((r' + n + u)/j) · ((r' + ε)/(r' + n + 2ε)), with r', n, u the relevant,
    judged non-relevant and pooled-unjudged (negative grade) documents above it, ε = 1e-5 (trec_eval
    ``infAP``)."""
    rows, columns, nth = m.hits
    above = (nth - 1).astype(float)
    nonrel = _count_before(m.nonrelevant, rows, columns)
    pooled = _count_before(m.judged & (m.grades < 0), rows, columns)
    j = columns.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        term = 1.0 / (j + 1.0) + (j / (j + 1.0)) * ((above + nonrel + pooled) / j) * (
            (above + INFAP_EPSILON) / (above + nonrel + 2 * INFAP_EPSILON)
        )
    return divide(m.per_row(rows, np.where(columns == 0, 1.0, term)), m.num_rel)


def binary_g(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """binG = (1/R) Σ_{relevant retrieved r} 1 / log2(2 + documents not relevant above r) (trec_eval ``binG``)."""
    rows, columns, nth = m.hits
    return divide(m.per_row(rows, 1.0 / np.log2(3 + columns - nth)), m.num_rel)


def g_measure(m: RankedGrades, k: int | None = None, gains: Gains = NO_GAINS) -> np.ndarray:
    """G = Σ_i g_i / log2(2 + C_i − S_i) / Σ ideal gains, with g_i the gain at rank i, S_i the gains up to
    and including i, C_i = Σ_{j<=i} max(ideal gain at j, 1) (trec_eval ``G``, an experimental measure
    between MAP and nDCG)."""
    results = result_gains(m, gains)
    ideal = ideal_gains(m, gains)  # 0 past the positive gains
    cost = np.cumsum(np.maximum(_widened(ideal, results.shape[1]), 1.0), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(results != 0, results / np.log2(2 + cost - np.cumsum(results, axis=1)), 0.0)
    return divide(_last(np.cumsum(terms, axis=1)), _last(np.cumsum(ideal, axis=1)))


def gain_dcg(m: RankedGrades, k: int | None = None, gains: Gains = NO_GAINS) -> np.ndarray:
    """DCG over the whole ranking with trec_eval's gains: Σ_i g_i / log2(i + 1) (trec_eval ``dcg``)."""
    return _last(_cumulative(result_gains(m, gains)))


def ideal_dcg(m: RankedGrades, k: int | None = None, gains: Gains = NO_GAINS) -> np.ndarray:
    """The DCG of the ideal ranking of every judged document (trec_eval ``ideal_dcg``)."""
    return _last(_cumulative(ideal_gains(m, gains)))


def gain_ndcg(m: RankedGrades, k: int | None = None, gains: Gains = NO_GAINS) -> np.ndarray:
    """nDCG over the whole ranking with trec_eval's gains (trec_eval ``ndcg``; ``ndcg.1=3,2=9`` sets
    gains; a negative gain counts in the DCG, never in the ideal)."""
    return divide(gain_dcg(m, None, gains), ideal_dcg(m, None, gains))


def ndcg_at_relevant(m: RankedGrades, k: int | None = None, gains: Gains = NO_GAINS) -> np.ndarray:
    """ndcg_rel = (1/R⁺) (Σ_{retrieved i with g_i > 0} DCG_i / IDCG_i + (R⁺ − found) · DCG / IDCG):
    nDCG averaged over the documents of positive gain, R⁺ of them, one not retrieved counting the
    final nDCG (trec_eval ``ndcg_rel``, experimental)."""
    results, ideal_table = result_gains(m, gains), ideal_gains(m, gains)
    dcg, ideal = _cumulative(results)[:, 1:], _cumulative(ideal_table)[:, 1:]
    positive, count = results > 0, (ideal_table > 0).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        at_relevant = _last(np.cumsum(np.where(positive, dcg / _widened(ideal, dcg.shape[1]), 0.0), axis=1))
        total = at_relevant + (count - positive.sum(axis=1)) * _last(dcg) / _last(ideal)
        return np.where(total > 0, total / count, 0.0)


def r_ndcg(m: RankedGrades, k: int | None = None, gains: Gains = NO_GAINS) -> np.ndarray:
    """Rndcg = mean nDCG at each rank where the ideal gain changes (the R-levels: after the documents
    of the top gain, of the next one, ...), plus at the end of a ranking longer than R⁺ + 1 (trec_eval
    ``Rndcg``, experimental); 0 without relevant documents, NaN (trec_eval's 0/0) where the relevant ones
    have no positive gain (``-l 0``)."""
    ideal = ideal_gains(m, gains)
    dcg_first, ideal_first = _cumulative(result_gains(m, gains)), _cumulative(ideal)  # of the first t documents
    change = np.hstack([np.zeros((len(ideal), 1), dtype=bool), ideal[:, 1:] != ideal[:, :-1]])  # at t = 1..R⁺
    t = np.arange(ideal.shape[1])[None, :]
    results_at = np.take_along_axis(dcg_first, np.minimum(t, m.retrieved[:, None]), axis=1)
    ideal_at = ideal_first[:, : ideal.shape[1]]
    counted = change & (ideal_at > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        total = _last(np.cumsum(np.where(counted, results_at / ideal_at, 0.0), axis=1))
        positives = (ideal > 0).sum(axis=1)
        final = (m.retrieved > positives + 1) & (ideal_first[:, -1] > 0)
        total = total + np.where(final, _last(dcg_first) / ideal_first[:, -1], 0.0)
        return np.where(
            m.num_rel > 0, total / (counted.sum(axis=1) + final), 0.0
        )  # 0/0 (relevant, no positive gain): NaN


def _persistence_powers(p: float, width: int) -> np.ndarray:
    """p^0, p^1, ..., p^width, each the previous one times p (as trec_eval multiplies)."""
    return np.cumprod(np.concatenate([[1.0], np.full(width, p)]))


def _rbp_gains(m: RankedGrades, gains: Gains) -> np.ndarray:
    """The gains ``rbp`` uses. A query's gain table holds the levels 0 .. its top judged grade (each
    gaining its own value unless given) and the levels given; when a gain there is below 0 or above 1,
    a level of the table gains (g − min) / (max − min), any other level 0."""
    judged_levels = np.where(m.num_rel + m.num_nonrel > 0, m.ideal[:, 0], -1)  # top level >= 0 (-1: none)
    own = np.arange(int(judged_levels.max(initial=-1)) + 1)
    own = np.where((own[None, :] <= judged_levels[:, None]) & ~np.isin(own, list(gains))[None, :], own[None, :], np.nan)
    table = np.hstack([own, np.tile(np.array(list(gains.values()), dtype=float), (len(own), 1))])
    low, high = (
        np.where(np.isnan(table), np.inf, table).min(axis=1),
        np.where(np.isnan(table), -np.inf, table).max(axis=1),
    )
    values = levels(m)
    in_table = retrieved_cells(m) & (
        ((values >= 0) & (values <= judged_levels[:, None])) | np.isin(values, list(gains))
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(in_table, (_gain(values, gains) - low[:, None]) / (high - low)[:, None], 0.0)
    return np.where(((low < 0) | (high > 1))[:, None], scaled, result_gains(m, gains))


def rbp(m: RankedGrades, k: int | None = None, p: float = 0.9, gains: Gains = NO_GAINS) -> np.ndarray:
    """Rank-biased precision (Moffat & Zobel 2008) = (1 − p) Σ_i g_i · p^(i−1), persistence p (default
    0.9), gains in [0, 1] (trec_eval 10 ``rbp``)."""
    results = _rbp_gains(m, gains)
    powers = _persistence_powers(p, results.shape[1])[:-1]
    return (1.0 - p) * _last(np.cumsum(np.where(results != 0, results * powers, 0.0), axis=1))


def rbp_residual(m: RankedGrades, k: int | None = None, p: float = 0.9) -> np.ndarray:
    """rbp_resid = p^n + (1 − p) Σ_{unjudged i} p^(i−1): how much RBP would rise if every unjudged one of
    the n retrieved documents had gain 1 and the ranking went on with such documents; 0 when every
    retrieved document is judged (trec_eval 10 ``rbp_resid``)."""
    width = m.grades.shape[1]
    powers = _persistence_powers(p, width)
    unknown = retrieved_cells(m) & (levels(m) < 0)
    tail = powers[np.minimum(m.retrieved, width)]
    total = tail + (1 - p) * _last(np.cumsum(np.where(unknown, powers[:-1], 0.0), axis=1))
    return np.where(unknown.any(axis=1), total, 0.0)


def relevance_strings(m: RankedGrades, length: int = 10) -> list[str]:
    """trec_eval's ``relstring``: per query the levels of its first ``length`` documents, one character
    each: the grade 0-9, '>' above 9, '-' not judged, '.' judged with a negative grade."""
    codes = levels(m)[:, : max(length, 0)]
    table = {NONPOOL: "-", UNJUDGED: "."} | {level: str(level) for level in range(10)}
    return [
        "".join(table.get(int(value), ">") for value in row[: min(length, int(size))])
        for row, size in zip(codes, m.retrieved)
    ]
