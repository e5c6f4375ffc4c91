"""K-fold tuning of a sweep's setting (pipeline/tuning.py): folds, choices made without the fold's
own queries, the cross-validated score against the default."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.comparison import SystemRun
from ragtrack.pipeline.tuning import folds_of, kfold_tune, tune_sweep

QUERIES = [f"q{i}" for i in range(40)]


def sweep(values: dict[str, np.ndarray]) -> list[SystemRun]:
    return [SystemRun("hybrid", label, label, label, 0, pd.DataFrame({"ndcg@10": v}, index=pd.Index(QUERIES, name="qid")),
                      label=label, params={"fusion.rrf.k": label.split("=")[1]}) for label, v in values.items()]


def random_sweep(seed: int) -> list[SystemRun]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0, 1, len(QUERIES))
    return sweep({f"k={k}": np.clip(base + rng.normal(shift, 0.1, len(QUERIES)), 0, 1) for k, shift in ((10, -0.02), (30, 0.03), (60, 0.0), (100, 0.01))})


def test_folds_partition_the_queries_whatever_their_order() -> None:
    parts = folds_of(QUERIES, 5, seed=3)
    assert sorted(q for part in parts for q in part) == sorted(QUERIES) and {len(part) for part in parts} == {8}
    assert folds_of(QUERIES[::-1], 5, seed=3) == parts and folds_of(QUERIES, 5, seed=4) != parts
    with pytest.raises(RagtrackError, match="--folds 1"):
        folds_of(QUERIES, 1, seed=0)


@pytest.mark.parametrize("seed", range(5))
def test_each_fold_is_scored_by_the_setting_best_on_the_other_folds(seed: int) -> None:
    rows = random_sweep(seed)
    default = rows[2]
    tuning = kfold_tune(rows, default, "ndcg@10", QUERIES, 4, seed=seed, resamples=200)
    table = pd.DataFrame({s.label: s.per_query["ndcg@10"] for s in rows})
    for part, chosen in zip(tuning.folds, tuning.chosen):
        others = table.drop(index=part)
        assert others[chosen].mean() == others.mean().max()
        assert tuning.scores[part].tolist() == table.loc[part, chosen].tolist()
    assert tuning.default_scores.tolist() == table["k=60"].tolist()
    assert tuning.delta == pytest.approx(tuning.scores.mean() - table["k=60"].mean())


def test_a_folds_own_queries_never_reach_its_choice() -> None:
    """Changing the queries of one fold, however much, leaves that fold's choice as it was."""
    rows = random_sweep(7)
    tuning = kfold_tune(rows, rows[2], "ndcg@10", QUERIES, 5, seed=1, resamples=200)
    held_out = tuning.folds[0]
    for s in rows:
        s.per_query.loc[held_out, "ndcg@10"] = 1.0 if s.label == "k=10" else 0.0  # k=10 best by far on the held-out fold
    again = kfold_tune(rows, rows[2], "ndcg@10", QUERIES, 5, seed=1, resamples=200)
    assert again.chosen[0] == tuning.chosen[0] and again.folds == tuning.folds


def test_ties_go_to_the_default_and_a_non_setting_baseline_is_refused() -> None:
    flat = sweep({f"k={k}": np.full(len(QUERIES), 0.5) for k in (10, 60)})
    tuning = kfold_tune(flat, flat[1], "ndcg@10", QUERIES, 4, resamples=100)
    assert set(tuning.chosen) == {"k=60"} and tuning.p_ttest == 1.0 and tuning.wins_ties_losses == (0, 40, 0)
    bm25 = SystemRun("bm25", "bm25", "j", "j", 0, flat[0].per_query, label="bm25")
    with pytest.raises(RagtrackError, match="not one of a sweep's settings"):
        tune_sweep([bm25, *flat], bm25, "ndcg@10", QUERIES, 4)
