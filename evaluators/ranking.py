"""Ranking metrics with trec_eval semantics, computed on a queries × depth matrix of grades.

Conventions (trec_eval's, reproduced by pytrec_eval to 1e-9; see tests/unit/test_conformance.py):
documents are ranked by score descending, ties by document id descending; a document is *relevant*
when judged with grade >= ``relevance_threshold`` (trec_eval ``-l``, default 1); recall, AP and
R-precision divide by all judged-relevant documents of the query; P@k divides by k even when fewer
than k documents were retrieved; nDCG uses the grade as linear gain and an ideal ranking built from
every judged document. A mean is over every judged query, as ``trec_eval -c`` averages (its ``num_q``;
a judged query missing from the run scores 0): a judged query without any relevant document
counts with the value its metric gives it, as trec_eval's does: 0 for the binary metrics, the graded
ones from its grades (nDCG > 0 where a grade is positive but below the threshold), ``mean_rank`` a
miss. ``without_relevant="exclude"`` leaves such queries out of the means instead (as some BEIR
scripts do): a named option, never the default (:func:`counted_rows`). Variants from other sources
carry their own names: ``ndcg_retrieved`` (ideal ranking of the retrieved list), ``p_retrieved``
(divides by the documents retrieved), BEIR's ``r_cap`` and ``hole``, ``judged`` and ragas'
``context_precision``. Metrics that sum over the relevant documents use the matrix's relevant cells
(``RankedGrades.hits``) rather than whole rows. ERR's g_max, AUC's treatment of unretrieved documents
and mean_rank's value for a miss are decided in their docstrings.
Metric names: ``name`` or ``name@k`` (cutoff k), e.g. ``ndcg@10``, ``map``, ``map@100``.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np

from ragtrack.core.errors import RagtrackError, did_you_mean
from ragtrack.core.runs import RunColumns
from ragtrack.evaluators import trec_measures as trec
from ragtrack.evaluators.common import Qrels, divide, parse_cutoff

RELEVANCE_THRESHOLD = 1  # trec_eval's -l: a judged grade at least this is relevant; the default everywhere

if TYPE_CHECKING:
    import pandas as pd  # imported where a table is built: `ragtrack eval` scores without pandas


@dataclass(frozen=True)
class RankedGrades:
    """Judgments laid along each query's ranking: row = query, column = rank - 1."""

    qids: list[str]
    grades: np.ndarray  # (queries, width) grade of the document at each rank; 0 if unjudged or past the end
    judged: np.ndarray  # (queries, width) whether that document is judged
    retrieved: np.ndarray  # (queries,) number of documents retrieved
    ideal: np.ndarray  # (queries, judged width) positive grades of the judged documents, descending
    num_rel: np.ndarray  # (queries,) judged documents with grade >= threshold
    num_nonrel: np.ndarray  # (queries,) judged documents with 0 <= grade < threshold (negative: in the pool, unjudged)
    threshold: int
    max_grade: int  # top grade of the scale (ERR's g_max)
    pooled: np.ndarray | None = (
        None  # (queries, width) whether that document is judged for any query (BEIR's hole); built on request
    )

    @property
    def depth(self) -> int:
        """The run's depth: the most documents retrieved for any query."""
        return int(self.retrieved.max(initial=0))

    @cached_property
    def ranks(self) -> np.ndarray:
        return np.arange(1, self.grades.shape[1] + 1, dtype=float)

    @cached_property
    def relevant(self) -> np.ndarray:
        return self.judged & (self.grades >= self.threshold)

    @cached_property
    def nonrelevant(self) -> np.ndarray:
        """Judged non-relevant: 0 <= grade < threshold. A negative grade is trec_eval's "in the pool but
        unjudged" (form_res_rels.c): not relevant, and skipped like an unjudged document by bpref."""
        return self.judged & ~self.relevant & (self.grades >= 0)

    @cached_property
    def hits(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The relevant cells, row-major: (row, column = rank - 1, how many relevant up to and including it).
        Metrics that sum over relevant documents work on these instead of whole rows."""
        rows, columns = np.nonzero(self.relevant)
        return rows, columns, np.arange(1, len(rows) + 1) - np.searchsorted(rows, rows)

    def per_row(self, rows: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Sum of ``weights`` (default 1) per query."""
        return np.bincount(rows, weights, minlength=len(self.qids)).astype(float)


def _judged_positions(docs: Mapping[str, float], found: list[str]) -> np.ndarray:
    """0-based trec_eval ranks of the documents ``found`` among one query's ``docs``: the number of
    documents scored higher, plus the tied ones with a larger id (trec_eval breaks ties by id,
    descending). Costs one sort of the scores; ids are compared only for tied documents."""
    scores = np.fromiter(docs.values(), dtype=float, count=len(docs))
    ordered = np.sort(scores)
    values = np.fromiter((docs[doc] for doc in found), dtype=float, count=len(found))
    not_above = np.searchsorted(ordered, values, side="right")
    positions = len(ordered) - not_above
    tied = not_above - np.searchsorted(ordered, values, side="left") > 1
    if tied.any():
        ids = list(docs)
        for i in np.flatnonzero(tied):
            positions[i] += sum(ids[j] > found[i] for j in np.flatnonzero(scores == values[i]))
    return positions


def _pooled(
    run: Mapping[str, Mapping[str, float]], qids: list[str], pool: set[str], shape: tuple[int, int]
) -> np.ndarray:
    """(queries, width) whether the document at each rank is in ``pool`` (judged for some query)."""
    pooled = np.zeros(shape, dtype=bool)
    for row, qid in enumerate(qids):
        docs = run.get(qid)
        found = sorted(pool.intersection(docs)) if docs else []
        if found:
            pooled[row, _judged_positions(docs, found)] = True
    return pooled


def _locate_judged(run: Mapping[str, Mapping[str, float]], qrels: Qrels, qids: list[str]) -> tuple:
    """Per query the number retrieved; per judged document retrieved its row, grade and 0-based rank
    (as :meth:`RunColumns.judged_positions` gives them for a run read as columns)."""
    retrieved = np.fromiter((len(run.get(qid) or ()) for qid in qids), dtype=np.int64, count=len(qids))
    hit_rows: list[int] = []
    hit_grades: list[int] = []
    hit_positions = [np.zeros(0, dtype=np.int64)]
    for row, qid in enumerate(qids):
        docs = run.get(qid)
        if not docs:
            continue
        judgments = qrels[qid]
        found = [doc for doc in judgments if doc in docs]
        if found:
            hit_rows += [row] * len(found)
            hit_grades += [judgments[doc] for doc in found]
            hit_positions.append(_judged_positions(docs, found))
    return retrieved, hit_rows, hit_grades, np.concatenate(hit_positions)


def rank_grades(
    run: Mapping[str, Mapping[str, float]] | RunColumns,
    qrels: Qrels,
    threshold: int = RELEVANCE_THRESHOLD,
    min_width: int = 1,
    max_grade: int | None = None,
    pool: bool = False,
) -> RankedGrades:
    """Build the grade matrix of ``run`` (a mapping, or :class:`RunColumns` as ``ragtrack eval`` reads
    a file) against ``qrels``; rows follow the qrels' query order. Only judged documents are located
    in the ranking (one sort per query, see ``_judged_positions``); every other cell stays 0 /
    unjudged. ``max_grade`` (ERR's g_max) defaults to the largest grade in the qrels, at least 1.
    ``pool`` also locates every document judged for any query (``pooled``; mappings only)."""
    threshold = checked_threshold(threshold)
    qids = list(qrels)
    n = len(qids)
    located = run.judged_positions(qids, qrels) if isinstance(run, RunColumns) else _locate_judged(run, qrels, qids)
    retrieved, hit_rows, hit_grades, positions = located
    width = max(int(retrieved.max(initial=0)), min_width)
    grades = np.zeros((n, width))
    judged = np.zeros((n, width), dtype=bool)
    grades[hit_rows, positions] = hit_grades
    judged[hit_rows, positions] = True

    per_query = np.fromiter((len(qrels[qid]) for qid in qids), dtype=np.int64, count=n)
    judged_rows = np.repeat(np.arange(n), per_query)
    judged_grades = np.fromiter(
        chain.from_iterable(qrels[qid].values() for qid in qids), dtype=np.int64, count=len(judged_rows)
    )
    ideal_order = np.lexsort((-judged_grades, judged_rows))
    ideal = np.zeros((n, max(int(per_query.max(initial=0)), 1)))
    ideal_positions = np.arange(len(judged_rows)) - (np.cumsum(per_query) - per_query)[judged_rows[ideal_order]]
    ideal[judged_rows[ideal_order], ideal_positions] = np.maximum(judged_grades[ideal_order], 0)

    relevant = judged_grades >= threshold
    nonrelevant = (judged_grades >= 0) & ~relevant
    return RankedGrades(
        qids=qids,
        grades=grades,
        judged=judged,
        retrieved=retrieved,
        ideal=ideal,
        num_rel=np.bincount(judged_rows[relevant], minlength=n),
        num_nonrel=np.bincount(judged_rows[nonrelevant], minlength=n),
        threshold=threshold,
        max_grade=max_grade or max(int(judged_grades.max(initial=1)), 1),
        pooled=_pooled(run, qids, {doc for judged in qrels.values() for doc in judged}, grades.shape) if pool else None,
    )


# --- metrics: one small function each, (grades, cutoff k or None) -> per-query values -------------


def precision(m: RankedGrades, k: int) -> np.ndarray:
    """P@k = |relevant in top k| / k (trec_eval ``P_k``; van Rijsbergen 1979)."""
    return m.relevant[:, :k].sum(axis=1) / k


def recall(m: RankedGrades, k: int | None) -> np.ndarray:
    """R@k = |relevant in top k| / |relevant judged| (trec_eval ``recall_k``)."""
    return divide(m.relevant[:, :k].sum(axis=1), m.num_rel)


def f1(m: RankedGrades, k: int) -> np.ndarray:
    """F1@k = 2·P@k·R@k / (P@k + R@k), 0 when both are 0 (harmonic mean; ranx ``f1``)."""
    p, r = precision(m, k), recall(m, k)
    return divide(2 * p * r, p + r)


def hit(m: RankedGrades, k: int) -> np.ndarray:
    """Hit@k (success@k) = 1 if any relevant document is in the top k, else 0 (trec_eval ``success_k``)."""
    return m.relevant[:, :k].any(axis=1).astype(float)


def reciprocal_rank(m: RankedGrades, k: int | None) -> np.ndarray:
    """RR@k = 1 / rank of the first relevant document within the top k, 0 if none (Voorhees 1999;
    trec_eval ``recip_rank`` without cutoff)."""
    relevant = m.relevant[:, :k]
    return np.where(relevant.any(axis=1), 1.0 / (relevant.argmax(axis=1) + 1), 0.0)


def average_precision(m: RankedGrades, k: int | None) -> np.ndarray:
    """AP@k = Σ_{i ≤ k, d_i relevant} P@i / |relevant judged| (trec_eval ``map`` / ``map_cut_k``;
    Buckley & Voorhees 2000)."""
    rows, columns, nth = m.hits
    keep = columns < (k or m.grades.shape[1])
    return divide(m.per_row(rows[keep], nth[keep] / (columns[keep] + 1)), m.num_rel)


def r_precision(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """R-precision = |relevant in top R| / R with R = |relevant judged| (trec_eval ``Rprec``)."""
    rows, columns, _ = m.hits
    return divide(m.per_row(rows, columns < m.num_rel[rows]), m.num_rel)


def _discounted(gains: np.ndarray) -> np.ndarray:
    return (gains / np.log2(np.arange(2, gains.shape[1] + 2))).sum(axis=1)


def dcg(m: RankedGrades, k: int | None) -> np.ndarray:
    """DCG@k = Σ_{i ≤ k} g_i / log2(i + 1), linear gain g = grade (Järvelin & Kekäläinen 2002)."""
    return _discounted(np.maximum(m.grades[:, :k], 0))


def ndcg(m: RankedGrades, k: int | None) -> np.ndarray:
    """nDCG@k = DCG@k / IDCG@k, linear gain; the ideal ranking sorts every judged document by grade
    (trec_eval ``ndcg_cut_k``; Järvelin & Kekäläinen 2002)."""
    return divide(dcg(m, k), _discounted(m.ideal[:, :k]))


def ndcg_exp(m: RankedGrades, k: int | None) -> np.ndarray:
    """nDCG@k with exponential gain 2^grade − 1 (Burges et al. 2005; ranx ``ndcg_burges``)."""
    return divide(_discounted(np.exp2(np.maximum(m.grades[:, :k], 0)) - 1), _discounted(np.exp2(m.ideal[:, :k]) - 1))


def err(m: RankedGrades, k: int | None) -> np.ndarray:
    """ERR@k = Σ_{r ≤ k} (1/r)·R_r·Π_{i<r}(1 − R_i), R_i = (2^{g_i} − 1) / 2^{g_max} (Expected Reciprocal
    Rank, Chapelle et al. 2009, eq. 4 with the cascade model). g_max is the top grade of the scale: the
    evaluator's ``max_grade`` when set, else the largest grade anywhere in the qrels (one value for
    every query, so per-query scores do not depend on which documents a query happens to have)."""
    stop = (np.exp2(np.maximum(m.grades[:, :k], 0)) - 1) / 2.0**m.max_grade
    reach = np.cumprod(np.hstack([np.ones((len(stop), 1)), 1 - stop[:, :-1]]), axis=1)
    return (stop * reach / m.ranks[: stop.shape[1]]).sum(axis=1)


def mean_rank(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """Rank of the first relevant document (its mean over queries is the mean rank); lower is better.
    A query whose relevant documents are all missed scores one past the cutoff: k + 1 for
    ``mean_rank@k``, else depth + 1 with depth = the most documents the run retrieved for any query,
    so a miss is worse than any hit and the value stays finite."""
    relevant = m.relevant[:, :k]
    miss = (k if k is not None else m.depth) + 1.0
    return np.where(relevant.any(axis=1), relevant.argmax(axis=1) + 1.0, miss)


def auc(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """ROC AUC of the ranking = P(a relevant document is ranked above a non-relevant one), ties ½
    (Bamber 1975; Hanley & McNeil 1982; Fawcett 2006):
    AUC = (Σ_{relevant retrieved r} |N below r| + ½·|relevant unretrieved|·|N unretrieved|) / (R·|N|).
    N, the non-relevant documents, are the retrieved non-relevant ones (judged or not: unjudged counts
    as non-relevant, as everywhere in trec_eval) plus the judged non-relevant ones (grade ≥ 0) not retrieved;
    unretrieved documents rank below every retrieved one and tie with each other. The unretrieved,
    unjudged rest of the corpus is left out (its size is unknown). When N is empty the value is the
    same for any number of unretrieved non-relevant documents: (R_retrieved + ½·R_unretrieved) / R.
    So an empty ranking scores ½ (chance), not 0."""
    rows, columns, nth = m.hits
    relevant_retrieved = m.per_row(rows)
    unretrieved_rel = m.num_rel - relevant_retrieved
    retrieved_nonrel = m.retrieved - relevant_retrieved
    unretrieved_nonrel = m.num_nonrel - m.nonrelevant.sum(axis=1)
    nonrel_below = (m.retrieved[rows] - 1 - columns) - (
        relevant_retrieved[rows] - nth
    )  # retrieved below r, minus relevant below r
    pairs_right = m.per_row(rows, nonrel_below + unretrieved_nonrel[rows]) + 0.5 * unretrieved_rel * unretrieved_nonrel
    nonrel = retrieved_nonrel + unretrieved_nonrel
    no_negatives = divide(m.num_rel - 0.5 * unretrieved_rel, m.num_rel)
    return np.where(nonrel > 0, divide(pairs_right, m.num_rel * nonrel), no_negatives)


def bpref(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """bpref = (1/R) Σ_{relevant retrieved r} (1 − min(n_r, R) / min(R, N)), n_r = judged non-relevant
    ranked above r, N = judged non-relevant (0 <= grade < threshold); unjudged documents and those with
    a negative grade are skipped (Buckley & Voorhees 2004; trec_eval ``bpref``, which gives 1 per relevant
    retrieved document when N = 0)."""
    rows, columns, _ = m.hits
    width = m.grades.shape[1]
    nonrel_rows, nonrel_columns = np.nonzero(m.nonrelevant)
    nonrel_keys = nonrel_rows * width + nonrel_columns  # sorted: nonzero is row-major
    above = np.searchsorted(nonrel_keys, rows * width + columns) - np.searchsorted(nonrel_keys, rows * width)
    scale = np.minimum(m.num_rel, m.num_nonrel)[rows]
    penalty = divide(np.minimum(above, m.num_rel[rows]), scale)
    return divide(m.per_row(rows, 1.0 - penalty), m.num_rel)


def num_rel_ret(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """Number of relevant documents retrieved (in the top k) (trec_eval ``num_rel_ret``)."""
    return m.relevant[:, :k].sum(axis=1).astype(float)


def ndcg_retrieved(m: RankedGrades, k: int | None) -> np.ndarray:
    """nDCG@k whose ideal ranking sorts the *retrieved* documents by grade (unjudged = 0), linear gain:
    DCG@k / DCG@k(retrieved grades in descending order). The textbook variant (Manning et al. 2008,
    ch. 8.4; scikit-learn ``ndcg_score`` on the retrieved list); it ignores relevant documents that were
    not retrieved, so it is not comparable with trec_eval's ``ndcg@k``."""
    gains = np.maximum(m.grades, 0)
    return divide(dcg(m, k), _discounted(-np.sort(-gains, axis=1)[:, :k]))


def precision_retrieved(m: RankedGrades, k: int) -> np.ndarray:
    """P@k over the documents actually retrieved: |relevant in top k| / min(k, |retrieved|), 0 when
    nothing was retrieved (trec_eval's ``set_P`` when k ≥ the depth)."""
    return divide(m.relevant[:, :k].sum(axis=1), np.minimum(k, m.retrieved))


def capped_recall(m: RankedGrades, k: int) -> np.ndarray:
    """R_cap@k = |relevant in top k| / min(k, |relevant judged|): recall that reaches 1 when the top k
    is all relevant although more relevant documents exist (Thakur et al. 2021, BEIR ``recall_cap``)."""
    return divide(m.relevant[:, :k].sum(axis=1), np.minimum(k, m.num_rel))


def hole(m: RankedGrades, k: int) -> np.ndarray:
    """Hole@k = |top-k documents judged for no query| / k (Thakur et al. 2021, BEIR ``hole``: the pool
    is every document that appears anywhere in the qrels, with any grade)."""
    retrieved = m.ranks[:k] <= m.retrieved[:, None]  # ranks past the end of a short ranking are no holes
    return (retrieved & ~m.pooled[:, :k]).sum(axis=1) / k


def judged(m: RankedGrades, k: int) -> np.ndarray:
    """Judged@k = |top-k documents judged for this query (any grade)| / k (Sakai 2007; ir_measures
    ``Judged@k``): how far the other metrics can be trusted for a run outside the judged pool."""
    return m.judged[:, :k].sum(axis=1) / k


def context_precision(m: RankedGrades, k: int | None) -> np.ndarray:
    """Context precision@k = Σ_{i ≤ k} P@i · rel_i / |relevant in top k|, 0 when none is relevant: AP
    over the retrieved list only (ragas ``context_precision``, Es et al. 2024; relevance from the qrels)."""
    rows, columns, nth = m.hits
    keep = columns < (k or m.grades.shape[1])
    return divide(m.per_row(rows[keep], nth[keep] / (columns[keep] + 1)), m.per_row(rows[keep]))


def log_average_precision(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """log(max(AP, 1e-5)): the mean of these over queries is the log of trec_eval's ``gm_map``
    (geometric mean AP, Robertson 2006), which ``ragtrack trec_eval`` prints as exp(mean)."""
    return np.log(np.maximum(average_precision(m, None), trec.MIN_GEO_MEAN))


def log_bpref(m: RankedGrades, k: int | None = None) -> np.ndarray:
    """log(max(bpref, 1e-5)): the log of trec_eval's ``gm_bpref`` is the mean of these over queries."""
    return np.log(np.maximum(bpref(m), trec.MIN_GEO_MEAN))


@dataclass(frozen=True)
class MetricSpec:
    function: Callable[[RankedGrades, int | float | None], np.ndarray]
    cutoff: str  # "required", "optional" or "none": whether ``name@x`` takes the parameter
    description: str
    needs_pool: bool = False  # reads ``RankedGrades.pooled``
    parameter: str = "cutoff"  # what follows @: "cutoff" (a positive integer k) or "fraction" (a number >= 0)


METRICS: dict[str, MetricSpec] = {
    "p": MetricSpec(precision, "required", "precision at k (divides by k)"),
    "recall": MetricSpec(recall, "required", "recall at k (divides by all judged-relevant documents)"),
    "f1": MetricSpec(f1, "required", "harmonic mean of p@k and recall@k"),
    "hit": MetricSpec(hit, "required", "hit rate / success: 1 if a relevant document is in the top k"),
    "mrr": MetricSpec(reciprocal_rank, "optional", "reciprocal rank of the first relevant document"),
    "map": MetricSpec(average_precision, "optional", "average precision (mean over queries = MAP)"),
    "r-precision": MetricSpec(r_precision, "none", "precision at R, the number of judged-relevant documents"),
    "dcg": MetricSpec(dcg, "optional", "discounted cumulative gain, linear gain"),
    "ndcg": MetricSpec(ndcg, "optional", "normalized DCG, linear gain (trec_eval ndcg_cut)"),
    "ndcg_exp": MetricSpec(ndcg_exp, "optional", "normalized DCG, exponential gain 2^rel - 1 (Burges)"),
    "err": MetricSpec(err, "optional", "expected reciprocal rank (Chapelle et al. 2009), graded"),
    "mean_rank": MetricSpec(
        mean_rank, "optional", "rank of the first relevant document (k+1 or depth+1 if none); lower is better"
    ),
    "auc": MetricSpec(auc, "none", "ROC AUC: share of (relevant, non-relevant) pairs ordered correctly, ties 1/2"),
    "bpref": MetricSpec(bpref, "none", "binary preference (Buckley & Voorhees 2004), ignores unjudged documents"),
    "num_rel_ret": MetricSpec(num_rel_ret, "optional", "number of relevant documents retrieved"),
    "ndcg_retrieved": MetricSpec(
        ndcg_retrieved, "optional", "nDCG whose ideal ranking sorts the retrieved documents (textbook variant)"
    ),
    "p_retrieved": MetricSpec(
        precision_retrieved, "required", "precision at k over the documents retrieved (divides by min(k, retrieved))"
    ),
    "r_cap": MetricSpec(capped_recall, "required", "capped recall (BEIR): relevant in top k / min(k, judged relevant)"),
    "hole": MetricSpec(hole, "required", "share of the top k documents judged for no query (BEIR)", needs_pool=True),
    "judged": MetricSpec(judged, "required", "share of the top k documents judged for the query (any grade)"),
    "context_precision": MetricSpec(
        context_precision, "optional", "ragas context precision: AP over the top k, relevance from the qrels"
    ),
    # trec_eval 10's other measures, under its names (trec_measures.py)
    "gm_map": MetricSpec(
        log_average_precision, "none", "log(max(AP, 1e-5)); exp of its mean is trec_eval's gm_map (geometric mean AP)"
    ),
    "gm_bpref": MetricSpec(log_bpref, "none", "log(max(bpref, 1e-5)); exp of its mean is trec_eval's gm_bpref"),
    "infAP": MetricSpec(trec.infap, "none", "inferred AP (Yilmaz & Aslam 2006): AP estimated from a sampled pool"),
    "iprec_at_recall": MetricSpec(
        trec.iprec_at_recall,
        "required",
        "interpolated precision at recall x, e.g. iprec_at_recall@0.1",
        parameter="fraction",
    ),
    "11pt_avg": MetricSpec(trec.eleven_point_average, "none", "mean interpolated precision at recall 0, 0.1, ..., 1"),
    "Rprec_mult": MetricSpec(
        trec.r_precision_multiple,
        "required",
        "precision at x times R documents, e.g. Rprec_mult@0.2",
        parameter="fraction",
    ),
    "relative_P": MetricSpec(
        trec.relative_precision, "required", "relevant in top k / min(k, R): precision up to R, recall after"
    ),
    "utility": MetricSpec(
        trec.utility, "none", "relevant retrieved minus non-relevant retrieved (trec_eval utility 1,-1,0,0)"
    ),
    "binG": MetricSpec(trec.binary_g, "none", "mean over relevant documents of 1 / log2(2 + non-relevant above it)"),
    "G": MetricSpec(
        trec.g_measure, "none", "trec_eval's G: gain discounted by the gain still missing (between MAP and nDCG)"
    ),
    "ndcg_rel": MetricSpec(trec.ndcg_at_relevant, "none", "nDCG averaged over the documents of positive gain"),
    "Rndcg": MetricSpec(trec.r_ndcg, "none", "nDCG averaged over the ranks where the ideal gain changes"),
    "set_P": MetricSpec(trec.set_precision, "none", "relevant retrieved / retrieved"),
    "set_recall": MetricSpec(trec.set_recall, "none", "relevant retrieved / judged relevant"),
    "set_map": MetricSpec(trec.set_map, "none", "set_P times set_recall"),
    "set_F": MetricSpec(trec.set_f, "none", "harmonic mean of set_P and set_recall"),
    "set_relative_P": MetricSpec(
        trec.set_relative_precision, "none", "relevant retrieved / min(retrieved, judged relevant)"
    ),
    "num_ret": MetricSpec(trec.num_ret, "none", "documents retrieved"),
    "num_rel": MetricSpec(trec.num_rel, "none", "documents judged relevant"),
    "num_nonrel_judged_ret": MetricSpec(trec.num_nonrel_judged_ret, "none", "retrieved documents judged non-relevant"),
    "rbp": MetricSpec(trec.rbp, "none", "rank-biased precision, persistence 0.9 (Moffat & Zobel 2008)"),
    "rbp_resid": MetricSpec(
        trec.rbp_residual, "none", "how far rbp could rise if the unjudged documents were relevant"
    ),
    "unj": MetricSpec(trec.unjudged, "required", "share of the top k documents without a judgment (or judged < 0)"),
}

DEFAULT_METRICS = [
    "ndcg@1",
    "ndcg@5",
    "ndcg@10",
    "ndcg@100",
    "recall@1",
    "recall@5",
    "recall@10",
    "recall@100",
    "p@1",
    "p@5",
    "p@10",
    "hit@1",
    "hit@5",
    "hit@10",
    "mrr",
    "mrr@10",
    "map",
    "map@100",
]


def parse_metric(name: str) -> tuple[MetricSpec, int | None]:
    """``ndcg@10`` -> (spec, 10); unknown names and bad cutoffs raise a one-line error."""
    base, at, _ = name.partition("@")
    spec = METRICS.get(base)
    if spec is None:
        problem = (
            f"unknown metric {name!r}; known: {', '.join(describe_metrics())}{did_you_mean(name, describe_metrics())}"
        )
    elif at and spec.cutoff == "none":
        problem = f"metric {base!r} takes no cutoff (got {name!r})"
    elif not at and spec.cutoff == "required":
        problem = f"metric {base!r} needs a cutoff, e.g. {base}@10"
    elif not at:
        return spec, None
    else:
        return spec, parse_fraction(name) if spec.parameter == "fraction" else parse_cutoff(name)
    raise RagtrackError(problem)


FRACTION = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")


def parse_fraction(name: str) -> float:
    """The number x of a metric name ``name@x`` whose parameter is a fraction (``iprec_at_recall@0.25``):
    a decimal number >= 0 in ASCII digits."""
    text = name.partition("@")[2]
    if not FRACTION.fullmatch(text):
        raise RagtrackError(f"metric {name!r}: the parameter must be a number >= 0 such as 0.25")
    return float(text)


def describe_metrics() -> dict[str, str]:
    """Every ranking metric name (``@k`` where a cutoff is taken) with its one-line description."""
    names = {}
    for base, spec in METRICS.items():
        x = "k" if spec.parameter == "cutoff" else "x"
        names[{"required": f"{base}@{x}", "optional": f"{base}[@{x}]", "none": base}[spec.cutoff]] = spec.description
    return names


def ranking_values(
    run: Mapping[str, Mapping[str, float]] | RunColumns,
    qrels: Qrels,
    metrics: Sequence[str],
    threshold: int = RELEVANCE_THRESHOLD,
    max_grade: int | None = None,
) -> tuple[RankedGrades, dict[str, np.ndarray]]:
    """The grade matrix and the per-query values of ``metrics`` (rows in qrels order)."""
    parsed = {name: parse_metric(name) for name in metrics}
    width = max([k for spec, k in parsed.values() if k and spec.parameter == "cutoff"] + [1])
    m = rank_grades(
        run,
        qrels,
        threshold,
        min_width=width,
        max_grade=max_grade,
        pool=any(spec.needs_pool for spec, _ in parsed.values()),
    )
    return m, {name: spec.function(m, k) for name, (spec, k) in parsed.items()}


def score_ranking(
    run: Mapping[str, Mapping[str, float]],
    qrels: Qrels,
    metrics: Sequence[str],
    threshold: int = RELEVANCE_THRESHOLD,
    max_grade: int | None = None,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Per-query values of ``metrics`` (DataFrame indexed by query id, qrels order) and the number of
    relevant judgments per query."""
    import pandas as pd

    m, values = ranking_values(run, qrels, metrics, threshold, max_grade)
    return pd.DataFrame(values, index=pd.Index(m.qids, name="qid")), m.num_rel


WithoutRelevant = Literal["count", "exclude"]
COUNT_WITHOUT_RELEVANT: WithoutRelevant = "count"  # trec_eval's averaging: the default everywhere
COUNTED_QUERIES: dict[str, str] = {
    "count": "judged queries (trec_eval)",
    "exclude": "queries with a relevant judgment",
}  # what n counts


def counted_rows(num_rel: np.ndarray, without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT) -> np.ndarray:
    """Which judged queries (rows, ``num_rel`` relevant documents each) enter a mean: all of them
    (``count``: trec_eval's ``num_q``, pytrec_eval returns them too), or those with num_rel > 0
    (``exclude``); any other value is a one-line error."""
    num_rel = np.asarray(num_rel)
    return (
        num_rel > 0 if checked_without_relevant(without_relevant) == "exclude" else np.ones(num_rel.shape, dtype=bool)
    )


def counted_queries(
    qrels: Qrels, threshold: int = RELEVANCE_THRESHOLD, without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT
) -> list[str]:
    """The judged queries of ``qrels`` that enter a mean (:func:`counted_rows`), in qrels order."""
    num_rel = np.fromiter(
        (sum(grade >= threshold for grade in judged.values()) for judged in qrels.values()),
        dtype=np.int64,
        count=len(qrels),
    )
    return [qid for qid, counted in zip(qrels, counted_rows(num_rel, without_relevant)) if counted]


def checked_threshold(value: object, name: str = "relevance_threshold") -> int:
    """``value`` if ``relevance_threshold`` allows it: an integer >= 0, as trec_eval's ``-l``; so a
    negative grade, trec_eval's "in the pool but unjudged", is relevant at no threshold. Anything else
    is the setting's one-line error (``RankingSettings``, loaded only then)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)  # numpy's integers too
        if value >= 0:
            return value
    from ragtrack.evaluators.ranking_evaluator import checked_setting

    return checked_setting("relevance_threshold", value, name)


def checked_without_relevant(value: object, name: str = "without_relevant") -> WithoutRelevant:
    """``value`` if ``without_relevant`` allows it: ``count`` or ``exclude``; else the setting's error."""
    if isinstance(value, str) and value in get_args(WithoutRelevant):
        return value
    from ragtrack.evaluators.ranking_evaluator import checked_setting

    return checked_setting("without_relevant", value, name)


def __getattr__(name: str) -> object:
    """``RankingEvaluator`` and ``RankingSettings`` are in ``ranking_evaluator.py`` (pydantic models),
    loaded when first asked for here, so scoring with the functions above imports no pydantic."""
    if name in ("RankingEvaluator", "RankingSettings"):
        from ragtrack.evaluators import ranking_evaluator

        return getattr(ranking_evaluator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CURVE_CUTOFFS = (1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 500, 1000)


def cutoff_curves(
    scores: Mapping[str, Mapping[str, float]],
    qrels: Qrels,
    depth: int,
    threshold: int = RELEVANCE_THRESHOLD,
    bases: Sequence[str] = ("recall", "ndcg"),
    without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT,
) -> dict[str, dict[int, float]]:
    """``{base: {k: mean base@k}}`` for the cutoffs in :data:`CURVE_CUTOFFS` up to ``depth``, means over
    the counted queries (:func:`counted_rows`; what a plot of recall or nDCG against k draws)."""
    cutoffs = [k for k in CURVE_CUTOFFS if k <= depth] or [depth]
    names = [f"{base}@{k}" for base in bases for k in cutoffs]
    table, num_rel = score_ranking(scores, qrels, names, threshold)
    means = table[counted_rows(num_rel, without_relevant)].mean()
    return {base: {k: float(means[f"{base}@{k}"]) for k in cutoffs} for base in bases}
