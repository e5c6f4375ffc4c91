"""The ranking-metric variants from other sources equal an independent implementation per query, to
1e-9, on 100 random qrels/run pairs (3,000 queries (grades 0-3, score ties, empty and short runs, unjudged documents,
queries absent from the run)):

- ``ndcg_retrieved@k``: scikit-learn's ``ndcg_score`` on each query's retrieved list (the first 600
  queries: one scikit-learn call per query and cutoff);
- ``p_retrieved@k``: pytrec_eval's ``set_P`` (k past the depth) and ``P_k`` rescaled by k / min(k, retrieved);
- ``judged@k``: pytrec_eval's ``P_k`` on the qrels with every grade raised by one, so that every
  judged document is relevant (pytrec_eval refuses relevance level 0);
- ``r_cap@k`` and ``hole@k``: BEIR's definitions (``beir/retrieval/custom_metrics.py``), written out
  per query below;
- ``context_precision@k``: ragas' average precision over the top k, written out below.

The references read the run in trec_eval order (score descending, ties by document id descending),
the order every ragtrack metric uses."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import pytrec_eval

from ragtrack.core.runs import rank_documents
from ragtrack.evaluators.ranking import score_ranking
from tests.support import CUTOFFS, assert_equal_per_query, random_pairs

QRELS, RUN = random_pairs(range(100))
EVALUATED = [qid for qid in QRELS if RUN.get(qid)]  # pytrec_eval and BEIR only see queries with results


def ranked_ids(qid: str) -> list[str]:
    return [doc for doc, _ in rank_documents(RUN.get(qid) or {})]


def ours(names: list[str], threshold: int = 1) -> pd.DataFrame:
    return score_ranking(RUN, QRELS, names, threshold=threshold)[0]


def test_ndcg_retrieved_equals_scikit_learn() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    width = max(len(ranked_ids(qid)) for qid in QRELS)
    gains = np.zeros((len(QRELS), width))
    for row, qid in enumerate(QRELS):
        grades = [max(QRELS[qid].get(doc, 0), 0) for doc in ranked_ids(qid)]
        gains[row, : len(grades)] = grades
    scores = np.tile(np.arange(width, 0, -1, dtype=float), (len(QRELS), 1))  # rank order, no ties; padding adds no gain

    def per_query(k: int | None) -> list[float]:
        return [metrics.ndcg_score(gains[[row]], scores[[row]], k=k, ignore_ties=True) for row in range(len(QRELS))]

    reference = pd.DataFrame(
        {f"ndcg_retrieved@{k}": per_query(k) for k in CUTOFFS} | {"ndcg_retrieved": per_query(None)}, index=list(QRELS)
    )
    table = ours(list(reference.columns))
    assert (reference["ndcg_retrieved@10"].between(0.01, 0.99)).sum() > 500
    assert_equal_per_query(table, reference)
    assert (
        table["ndcg_retrieved@10"] >= ours(["ndcg@10"])["ndcg@10"] - 1e-12
    ).all()  # a smaller ideal: never below trec_eval's


@pytest.mark.parametrize("threshold", [1, 2])
def test_p_retrieved_and_judged_equal_pytrec_eval(threshold: int) -> None:
    measures = {f"P.{','.join(map(str, CUTOFFS))}", "set_P"}
    run = {qid: RUN[qid] for qid in EVALUATED}
    reference = pd.DataFrame.from_dict(
        pytrec_eval.RelevanceEvaluator(QRELS, measures, relevance_level=threshold).evaluate(run), orient="index"
    )
    every_judged = {
        qid: {doc: grade + 1 for doc, grade in grades.items()} for qid, grades in QRELS.items()
    }  # grades are 0-3
    judged = pd.DataFrame.from_dict(
        pytrec_eval.RelevanceEvaluator(every_judged, measures, relevance_level=1).evaluate(run), orient="index"
    )
    retrieved = pd.Series({qid: len(RUN[qid]) for qid in EVALUATED})
    expected = pd.DataFrame(
        {"p_retrieved@1000": reference["set_P"]}
        | {f"p_retrieved@{k}": reference[f"P_{k}"] * k / np.minimum(k, retrieved) for k in CUTOFFS}
        | {f"judged@{k}": judged[f"P_{k}"] for k in CUTOFFS}
    )
    table = ours(list(expected.columns), threshold)
    assert_equal_per_query(table, expected)
    assert (table.loc[[q for q in QRELS if q not in EVALUATED]] == 0).all().all()
    assert (
        (table["p_retrieved@10"] > ours(["p@10"], threshold)["p@10"]).sum()
    ) > 20  # short rankings: a real difference


def beir_recall_cap(qid: str, k: int) -> float:
    """BEIR ``recall_cap``: relevant (grade > 0) in the top k / min(|relevant|, k)."""
    relevant = [doc for doc, grade in QRELS[qid].items() if grade > 0]
    found = [doc for doc in ranked_ids(qid)[:k] if QRELS[qid].get(doc, 0) > 0]
    return (
        len(found) / min(len(relevant), k) if relevant else 0.0
    )  # BEIR divides by zero there; ragtrack leaves such queries out of means


ANNOTATED = {doc for judged in QRELS.values() for doc in judged}


def beir_hole(qid: str, k: int) -> float:
    """BEIR ``hole``: top-k documents judged for no query at all (any grade) / k."""
    return len([doc for doc in ranked_ids(qid)[:k] if doc not in ANNOTATED]) / k


def test_r_cap_and_hole_equal_beir() -> None:
    expected = pd.DataFrame(
        {f"r_cap@{k}": [beir_recall_cap(qid, k) for qid in EVALUATED] for k in CUTOFFS}
        | {f"hole@{k}": [beir_hole(qid, k) for qid in EVALUATED] for k in CUTOFFS},
        index=EVALUATED,
    )
    table = ours(list(expected.columns))
    assert (expected["hole@10"] > 0).sum() > 200 and (
        expected["r_cap@5"] > ours(["recall@5"])["recall@5"].loc[EVALUATED]
    ).sum() > 20
    assert_equal_per_query(table, expected)


def ragas_context_precision(qid: str, k: int | None, threshold: int) -> float:
    """ragas ``_calculate_average_precision`` over the top-k contexts, with the qrels as the verdicts."""
    verdicts = [int(QRELS[qid].get(doc, 0) >= threshold) for doc in ranked_ids(qid)[:k]]
    numerator = sum(sum(verdicts[: i + 1]) / (i + 1) * verdicts[i] for i in range(len(verdicts)))
    return numerator / sum(verdicts) if sum(verdicts) else 0.0


@pytest.mark.parametrize("threshold", [1, 2])
def test_context_precision_equals_ragas_formula(threshold: int) -> None:
    expected = pd.DataFrame(
        {f"context_precision@{k}": [ragas_context_precision(qid, k, threshold) for qid in QRELS] for k in CUTOFFS}
        | {"context_precision": [ragas_context_precision(qid, None, threshold) for qid in QRELS]},
        index=list(QRELS),
    )
    table = ours(list(expected.columns), threshold)
    assert expected["context_precision@10"].between(0.01, 0.99).sum() > 100
    assert_equal_per_query(table, expected)
