"""Reproduction measures against repro_eval (Breuer et al. 2020's package) on the same inputs, and a
worked example (docs/metrics.md)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from scipy.stats import kendalltau

from ragtrack.core.runs import Run
from ragtrack.evaluators.reproduction import (
    delta_relative_improvement,
    effect_ratio,
    equivalence_p,
    kendall_tau_b,
    kendall_tau_union,
    measures_table,
    rank_biased_overlap,
    ranking_agreement,
    rankings_table,
    rmse,
)

repro_eval = pytest.importorskip("repro_eval")
from repro_eval.measure.document_order import KTU, RBO  # noqa: E402
from repro_eval.measure.effectiveness import RMSE  # noqa: E402
from repro_eval.measure.overall_effects import DRI, ER  # noqa: E402


def topic_scores(values) -> dict:
    return {f"q{i}": {"ndcg": float(v)} for i, v in enumerate(values)}


@pytest.mark.parametrize("seed", range(8))
def test_effect_measures_equal_repro_eval(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 200))
    base, adv = rng.uniform(0.1, 1, n), rng.uniform(0.1, 1, n) + 0.1
    base_rep, adv_rep = base + rng.normal(0, 0.05, n), adv + rng.normal(0, 0.1, n)
    orig_b, orig_a, rep_b, rep_a = map(topic_scores, (base, adv, base_rep, adv_rep))
    assert rmse(adv, adv_rep) == pytest.approx(RMSE(orig_a, rep_a)["ndcg"], rel=1e-12)
    assert effect_ratio(adv, base, adv_rep, base_rep) == pytest.approx(
        ER(orig_a, orig_b, rep_a, rep_b)["ndcg"], rel=1e-10
    )
    assert delta_relative_improvement(adv, base, adv_rep, base_rep) == pytest.approx(
        DRI(orig_a, orig_b, rep_a, rep_b)["ndcg"], rel=1e-10, abs=1e-14
    )


def random_rankings(rng, queries: int, depth: int, names, same_length: bool = False) -> tuple[dict, dict]:
    """Two runs over overlapping document pools, scores distinct, as repro_eval's nested dicts (with
    ``same_length``, both lists of a query equally long)."""
    original, reproduced = {}, {}
    for q in range(queries):
        pool = [names(i) for i in range(2 * depth)]
        a = rng.choice(pool, size=int(rng.integers(1, depth + 1)), replace=False)
        b = rng.choice(pool, size=len(a) if same_length else int(rng.integers(1, depth + 1)), replace=False)
        original[f"q{q}"] = OrderedDict((doc, float(len(a) - i)) for i, doc in enumerate(a))
        reproduced[f"q{q}"] = OrderedDict((doc, float(len(b) - i)) for i, doc in enumerate(b))
    return original, reproduced


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("depth", [5, 30, 1000])
def test_rbo_equals_repro_eval(seed: int, depth: int) -> None:
    original, reproduced = random_rankings(np.random.default_rng(seed), 40, 30, lambda i: f"d{i}")
    ours = ranking_agreement(Run("a", original), Run("b", reproduced), depth=depth)[2]
    assert ours == pytest.approx(RBO(original, reproduced, p=0.95, depth=depth, pbar=False, per_topic=False), rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_ktu_equals_repro_eval(seed: int) -> None:
    """repro_eval's KTU (repro_eval/measure/document_order.py) on random runs of overlapping pools; its
    lists of one query must be equally long (else scipy stops it), so those are; per query and mean."""
    original, reproduced = random_rankings(np.random.default_rng(seed), 40, 30, lambda i: f"d{i}", same_length=True)
    per_topic = KTU(
        {q: OrderedDict(d) for q, d in original.items()},
        {q: OrderedDict(d) for q, d in reproduced.items()},
        per_topic=True,
    )
    for qid in original:
        ours = kendall_tau_union(list(original[qid]), list(reproduced[qid]))
        assert ours == pytest.approx(per_topic[qid], abs=1e-12) or (np.isnan(ours) and np.isnan(per_topic[qid]))
    defined = [v for v in per_topic.values() if not np.isnan(v)]
    assert ranking_agreement(Run("a", original), Run("b", reproduced))[0] == pytest.approx(np.mean(defined), abs=1e-12)


def test_ktu_compares_the_shorter_length_and_the_top_1000() -> None:
    # repro_eval stops on lists of different lengths; ragtrack cuts both to the shorter (and to 1000 ranks)
    assert kendall_tau_union(list("abcd"), list("bac")) == kendall_tau_union(list("abc"), list("bac"))
    long = [f"d{i:04d}" for i in range(1500)]
    assert kendall_tau_union(long, long[:1000] + long[1000:][::-1]) == 1.0
    assert np.isnan(kendall_tau_union(["a"], list("ab")))


@pytest.mark.parametrize("seed", range(6))
def test_kendall_tau_b_equals_repro_eval_ktu_where_its_definition_agrees(seed: int) -> None:
    # repro_eval's KTU correlates, rank by rank, the documents' positions in the id-sorted union. That is
    # the rankings' τ when both rank the same documents and the ids sort in the original's order.
    rng = np.random.default_rng(seed)
    depth = int(rng.integers(3, 40))
    original = {"q": OrderedDict((f"d{i:03d}", float(depth - i)) for i in range(depth))}
    shuffled = list(original["q"])
    rng.shuffle(shuffled)
    reproduced = {"q": OrderedDict((doc, float(depth - i)) for i, doc in enumerate(shuffled))}
    ours = ranking_agreement(Run("a", original), Run("b", reproduced))[1]
    assert ours == pytest.approx(KTU(original, reproduced), abs=1e-12)


def test_kendall_tau_over_the_union_by_hand() -> None:
    # A = a b c, B = b a d: union a b c d; ranks A: 1 2 3 4(missing), B: 2 1 4(missing) 3
    assert kendall_tau_b(list("abc"), list("bad")) == pytest.approx(kendalltau([1, 2, 3, 4], [2, 1, 4, 3]).statistic)
    assert kendall_tau_b(list("abc"), list("bad")) == pytest.approx(1 / 3)  # 4 concordant, 2 discordant of 6 pairs
    assert kendall_tau_b(list("abc"), list("abc")) == 1.0 and kendall_tau_b(list("abc"), list("cba")) == -1.0
    assert np.isnan(kendall_tau_b(["a"], list("ab")))
    # KTU, rank by rank: union a b c d -> A = 0 1 2, B = 1 0 3: pairs (0,1)- (0,2)+ (1,2)+ -> (2 - 1) / 3
    assert kendall_tau_union(list("abc"), list("bad")) == pytest.approx(1 / 3)


def test_worked_example() -> None:
    # docs/metrics.md: baseline 0.4 0.6, system 0.5 0.9 (original); 0.4 0.5 and 0.5 0.7 (reproduced)
    assert rmse([0.5, 0.9], [0.5, 0.7]) == pytest.approx(np.sqrt(0.02))
    assert effect_ratio([0.5, 0.9], [0.4, 0.6], [0.5, 0.7], [0.4, 0.5]) == pytest.approx(0.15 / 0.2)
    assert delta_relative_improvement([0.5, 0.9], [0.4, 0.6], [0.5, 0.7], [0.4, 0.5]) == pytest.approx(
        0.4 - 0.15 / 0.45
    )
    # RBO of a b c / b a d at depth 3, p = 0.5: overlaps 0, 2, 2 -> (0 + 0.5·2/2 + 0.25·2/3) / 1.75
    assert rank_biased_overlap(list("abc"), list("bad"), p=0.5) == pytest.approx((0.5 + 0.5 / 3) / 1.75)
    assert rank_biased_overlap(list("abc"), list("abc")) == 1.0
    hundred = [f"d{i}" for i in range(100)]  # repro_eval's fixed depth 1000 scores identical lists below 1
    assert rank_biased_overlap(hundred, hundred, depth=1000) == pytest.approx(0.9991, abs=5e-5)


def test_measures_table_per_system_and_metric() -> None:
    import pandas as pd

    def table(values, qids=("q1", "q2")):
        return pd.DataFrame({"ndcg@10": values}, index=pd.Index(list(qids), name="qid"))

    pairs = [
        ("bm25", table([0.4, 0.6]), table([0.4, 0.5])),
        ("dense", table([0.5, 0.9]), table([0.5, 0.7, 0.1], ("q1", "q2", "q3"))),
    ]
    measures = measures_table(pairs, ["ndcg@10"], "bm25").set_index("system")
    assert measures.loc["dense", ["queries", "rmse", "effect_ratio", "delta_ri"]].tolist() == pytest.approx(
        [2, np.sqrt(0.02), 0.75, 0.4 - 0.15 / 0.45]
    )
    assert measures.loc["bm25", "rmse"] == pytest.approx(np.sqrt(0.01 / 2)) and np.isnan(
        measures.loc["bm25", "effect_ratio"]
    )
    assert measures_table(pairs, ["ndcg@10"], None)["effect_ratio"].isna().all()  # no baseline: no ER, no ΔRI
    run = Run("a", {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"a": 2.0, "b": 1.0}})
    other = Run("b", {"q1": {"b": 3.0, "a": 2.0, "d": 1.0}, "q2": {"a": 2.0, "b": 1.0}})
    rankings = rankings_table([("x", run, other)], queries={"q1"}).set_index("system")
    assert rankings.loc["x"].tolist() == pytest.approx(
        [
            kendall_tau_union(list("abc"), list("bad")),
            kendall_tau_b(list("abc"), list("bad")),
            rank_biased_overlap(list("abc"), list("bad")),
        ]
    )


@pytest.mark.parametrize("seed", range(12))
def test_equivalence_p_equals_statsmodels_tost(seed: int) -> None:
    """The paired TOST p against statsmodels' ttost_paired, on differences near, inside and beyond the margin."""
    from statsmodels.stats.weightstats import ttost_paired

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    x = rng.uniform(0, 1, n)
    y = x + rng.normal(rng.choice([0.0, 1e-4, 1e-3, 0.05]), rng.choice([1e-5, 1e-3, 0.05]), n)
    margin = float(rng.choice([5e-4, 1e-2, 0.1]))
    assert equivalence_p(x, y, margin) == pytest.approx(ttost_paired(y, x, -margin, margin)[0], rel=1e-9, abs=1e-300)


def test_equivalence_p_without_spread_or_queries() -> None:
    assert equivalence_p([0.5, 0.7], [0.5, 0.7], 5e-4) == 0.0  # reproduced exactly: equivalent
    assert equivalence_p([0.5, 0.75], [0.625, 0.875], 5e-4) == 1.0  # every query 0.125 higher: not within ±0.0005
    assert np.isnan(equivalence_p([0.5], [0.5], 5e-4))
