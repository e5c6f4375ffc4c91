"""ndcg_exp@k, f1@k and hit@k equal ranx (ndcg_burges, f1, hit_rate) per query, to 1e-9, on 300 random
qrels/run pairs. ranx compiles its numba kernels on first use (tens of seconds on a cold cache), so the
whole comparison is one call per metric and cutoff, in this one module."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ragtrack.core.runs import rank_documents
from ragtrack.evaluators.ranking import score_ranking
from tests.support import assert_equal_per_query, random_pairs

ranx_metrics = pytest.importorskip("ranx.metrics")
numba_typed = pytest.importorskip("numba.typed")

CUTOFFS = (1, 3, 5, 10, 20, 100)
RANX = {"ndcg_exp": ranx_metrics.ndcg_burges, "f1": ranx_metrics.f1, "hit": ranx_metrics.hit_rate}


def as_ranx(qrels: dict, run: dict, qids: list[str]):
    """ranx's low-level input: per query a (documents, 2) array of (document code, grade or score),
    sorted best first. The run is passed in trec_eval order (ranx breaks ties arbitrarily)."""
    code = {
        doc: float(n)
        for n, doc in enumerate(
            {doc for judged in qrels.values() for doc in judged} | {doc for ranked in run.values() for doc in ranked}
        )
    }

    def table(pairs: list[tuple[str, float]]) -> np.ndarray:
        return np.array([[code[doc], value] for doc, value in pairs], dtype=np.float64).reshape(-1, 2)

    judged = numba_typed.List([table(sorted(qrels[qid].items(), key=lambda item: -item[1])) for qid in qids])
    ranked = numba_typed.List([table(rank_documents(run[qid])) for qid in qids])
    return judged, ranked


def test_equals_ranx_per_query() -> None:
    qrels, run = random_pairs(range(300))
    qids = [qid for qid in qrels if run.get(qid)]  # ranx needs a ranking per query
    names = [f"{metric}@{k}" for metric in RANX for k in CUTOFFS]
    ours, _ = score_ranking(run, qrels, names)
    judged, ranked = as_ranx(qrels, run, qids)
    reference = pd.DataFrame(
        {name: RANX[name.split("@")[0]](judged, ranked, int(name.split("@")[1]), 1) for name in names}, index=qids
    )
    assert (reference["ndcg_exp@10"] > 0).sum() > 1000
    assert_equal_per_query(ours, reference)
    unevaluated = [qid for qid in qrels if not run.get(qid)]
    assert (ours.loc[unevaluated] == 0).all().all()
