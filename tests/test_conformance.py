"""Every ranking metric that trec_eval has equals pytrec_eval per query, to 1e-9, on random runs."""

from __future__ import annotations

import pytest
import pytrec_eval

from evaluators.ranking import score_ranking
from tests.conftest import random_qrels_and_run

CUTOFFS = (1, 3, 5, 10, 20, 100)
TREC_MEASURES = {"P", "recall", "map", "map_cut", "ndcg_cut", "ndcg", "recip_rank", "Rprec", "success", "bpref", "num_rel_ret"}


def _ours_to_trec() -> dict[str, str]:
    names = {"map": "map", "mrr": "recip_rank", "r-precision": "Rprec", "bpref": "bpref", "num_rel_ret": "num_rel_ret", "ndcg": "ndcg"}
    for k in CUTOFFS:
        names |= {f"p@{k}": f"P_{k}", f"recall@{k}": f"recall_{k}", f"map@{k}": f"map_cut_{k}",
                  f"ndcg@{k}": f"ndcg_cut_{k}", f"hit@{k}": f"success_{k}"}
    return names


@pytest.mark.parametrize("threshold", [1, 2])
@pytest.mark.parametrize("seed", range(150))
def test_equals_pytrec_eval_per_query(seed: int, threshold: int) -> None:
    qrels, run = random_qrels_and_run(seed)
    names = _ours_to_trec()
    ours, _ = score_ranking(run, qrels, list(names), threshold=threshold)
    measures = {f"{m}.{','.join(map(str, CUTOFFS))}" if m in {"P", "recall", "map_cut", "ndcg_cut", "success"} else m for m in TREC_MEASURES}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=threshold)
    reference = evaluator.evaluate({qid: docs for qid, docs in run.items() if docs})
    assert reference, "the generator must produce evaluable queries"
    for qid, values in reference.items():
        for ours_name, trec_name in names.items():
            assert ours.loc[qid, ours_name] == pytest.approx(values[trec_name], abs=1e-9), (qid, ours_name)
    missing = [qid for qid in qrels if qid not in reference]
    for qid in missing:  # absent or empty: every metric is 0
        assert (ours.loc[qid, list(names)] == 0).all()
