"""How well a reproduction reproduced: Breuer et al. 2020, "How to Measure the Reproducibility of
System-oriented IR Experiments" (SIGIR), whose ``repro_eval`` package is the reference.

Per metric, with per-query scores x (original) and y (reproduced) of one system over the same n queries,
and the per-query improvements Δx = x_adv − x_base, Δy = y_adv − y_base over a baseline system:

- RMSE = √(Σ_i (x_i − y_i)² / n)  (0: every query reproduced exactly);
- effect ratio ER = mean(Δy) / mean(Δx)  (1: the same improvement; < 1 smaller; < 0 reversed);
- delta relative improvement ΔRI = RI_x − RI_y, RI = (mean(adv) − mean(base)) / mean(base)  (0: the same
  relative improvement; > 0 a smaller one);
- equivalence within a margin δ (:func:`equivalence_p`): two one-sided paired t-tests (TOST), whose
  small p says the mean difference lies within ±δ (not only that no difference was found).

Per query, between the original ranking A and the reproduced ranking B:

- Kendall's tau union, KTU, as ``repro_eval`` computes it (Breuer et al. 2020; its
  ``measure/document_order._KTU``): of the top 1000 ranks of each list (repro_eval's RUN_LENGTH), U =
  the union of their documents sorted by id, and τ_b (scipy's ``kendalltau``) between the sequences
  (position in U of the document at rank i of A)_i and (the same for B)_i, rank by rank; where the lists
  differ in length (repro_eval then stops with an error) both are cut to the shorter one;
- Kendall's τ_b (Kendall 1945) between the two rankings themselves: over the union of both lists'
  documents, each ranked by its position, a document missing from a list tied at rank |list| + 1
  (scipy's ``kendalltau``). It equals KTU only when both rank the same documents and the ids sort in
  the original's order;
- rank-biased overlap as ``repro_eval`` computes it (Webber et al. 2010, truncated and normalized as in
  Clarke et al. 2020): RBO = Σ_{d=1}^{D} p^{d−1} |A_{:d} ∩ B_{:d}| / d  /  Σ_{d=1}^{D} p^{d−1}, p = 0.95
  (repro_eval's). D defaults to the longer list's length, so identical rankings score 1; repro_eval's
  fixed D = 1000 scores identical lists of 100 documents 0.9991.

:func:`measures_table` and :func:`rankings_table` give these per system for a set of systems, each with
its original and reproduced values (``ragtrack reproduce``, ``ragtrack compare --reference``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from ragtrack.core.runs import Run

RBO_P = 0.95  # repro_eval's RBO_P: the weight of rank d is p^(d−1)
KTU_DEPTH = 1000  # repro_eval's RUN_LENGTH: the ranks KTU compares


def _pair(original, reproduced) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(original, dtype=float), np.asarray(reproduced, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(
            f"reproduction measures need two equally long 1-d score vectors, got shapes {x.shape} and {y.shape}"
        )
    return x, y


def rmse(original, reproduced) -> float:
    """√(mean((x − y)²)) over the queries."""
    x, y = _pair(original, reproduced)
    return float(np.sqrt(np.mean((x - y) ** 2)))


def effect_ratio(original, original_baseline, reproduced, reproduced_baseline) -> float:
    """ER = mean(y_adv − y_base) / mean(x_adv − x_base); ±inf or NaN where the original improvement is 0."""
    x, x_base = _pair(original, original_baseline)
    y, y_base = _pair(reproduced, reproduced_baseline)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(np.mean(y - y_base)) / np.mean(x - x_base))


def delta_relative_improvement(original, original_baseline, reproduced, reproduced_baseline) -> float:
    """ΔRI = RI_orig − RI_rep, RI = (mean(adv) − mean(base)) / mean(base)."""
    x, x_base = _pair(original, original_baseline)
    y, y_base = _pair(reproduced, reproduced_baseline)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(
            (x.mean() - x_base.mean()) / np.float64(x_base.mean())
            - (y.mean() - y_base.mean()) / np.float64(y_base.mean())
        )


def equivalence_p(original, reproduced, margin: float) -> float:
    """TOST (Schuirmann 1987), paired: H0 |mean(d)| ≥ δ against H1 −δ < mean(d) < δ, d = y − x per query,
    δ = ``margin``. With se = sd(d) / √n (n − 1 degrees of freedom), p = max(P(T ≥ (d̄ + δ) / se),
    P(T ≤ (d̄ − δ) / se)), as statsmodels' ``ttost_paired``. Every d equal (se = 0): p = 0 where
    |d̄| < δ, else 1; fewer than two queries: NaN."""
    x, y = _pair(original, reproduced)
    d = y - x
    if len(d) < 2:
        return math.nan
    mean, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d))
    if se == 0:
        return 0.0 if abs(mean) < margin else 1.0
    return float(max(stats.t.sf((mean + margin) / se, len(d) - 1), stats.t.cdf((mean - margin) / se, len(d) - 1)))


def kendall_tau_union(original: Sequence[str], reproduced: Sequence[str], depth: int = KTU_DEPTH) -> float:
    """KTU between two rankings (document ids, best first) as repro_eval computes it (module docstring);
    NaN when fewer than two ranks are compared."""
    length = min(len(original), len(reproduced), depth)
    a, b = original[:length], reproduced[:length]
    union = {doc: index for index, doc in enumerate(sorted({*a, *b}))}
    return (
        float(stats.kendalltau([union[doc] for doc in a], [union[doc] for doc in b]).statistic)
        if length > 1
        else float("nan")
    )


def kendall_tau_b(original: Sequence[str], reproduced: Sequence[str]) -> float:
    """τ_b between two rankings (document ids, best first) over their union; NaN when either has fewer than two ranks."""
    union = list(dict.fromkeys([*original, *reproduced]))
    ranks = [{doc: rank for rank, doc in enumerate(ranking, start=1)} for ranking in (original, reproduced)]
    a, b = ([r.get(doc, len(r) + 1) for doc in union] for r in ranks)
    return float(stats.kendalltau(a, b).statistic) if min(len(original), len(reproduced)) > 1 else float("nan")


def rank_biased_overlap(
    original: Sequence[str], reproduced: Sequence[str], p: float = RBO_P, depth: int | None = None
) -> float:
    """Truncated, normalized RBO of the top ``depth`` ranks (default: the longer list's length; see module
    docstring); NaN for two empty lists."""
    depth = depth or max(len(original), len(reproduced))
    if depth == 0:
        return float("nan")
    first = {doc: rank for rank, doc in enumerate(original[:depth], start=1)}
    shared = [max(first[doc], rank) for rank, doc in enumerate(reproduced[:depth], start=1) if doc in first]
    overlap = np.cumsum(
        np.bincount(np.asarray(shared, dtype=int), minlength=depth + 1)[1:]
    )  # |A_:d ∩ B_:d|, d = 1..depth
    weights = p ** np.arange(depth)
    return float(np.sum(weights * overlap / np.arange(1, depth + 1)) / weights.sum())


def ranking_agreement(
    original: Run, reproduced: Run, p: float = RBO_P, depth: int | None = None, queries: Collection[str] | None = None
) -> tuple[float, float, float]:
    """Mean KTU, mean Kendall's τ_b and mean RBO (``depth`` as in :func:`rank_biased_overlap`) over the
    original's queries (those of them in ``queries`` when given), each over the queries where it is defined."""
    unions, taus, overlaps = [], [], []
    for qid, ranking in original.rankings():
        if queries is not None and qid not in queries:
            continue
        a, b = [doc for doc, _ in ranking], [doc for doc, _ in reproduced.ranking(qid)]
        unions.append(kendall_tau_union(a, b))
        taus.append(kendall_tau_b(a, b))
        overlaps.append(rank_biased_overlap(a, b, p, depth))
    return _mean_defined(unions), _mean_defined(taus), _mean_defined(overlaps)


def _mean_defined(values: list[float]) -> float:
    defined = [v for v in values if not np.isnan(v)]
    return float(np.mean(defined)) if defined else float("nan")


MEASURE_COLUMNS = ["system", "metric", "queries", "rmse", "effect_ratio", "delta_ri", "equivalence_p"]
RANKING_COLUMNS = ["system", "ktu", "kendall_tau_b", "rbo"]


def measures_table(
    pairs: Sequence[tuple[str, pd.DataFrame, pd.DataFrame]],
    metrics: Sequence[str],
    baseline: str | None,
    margin: float | None = None,
) -> pd.DataFrame:
    """Per system and metric (columns :data:`MEASURE_COLUMNS`): RMSE and, given a ``margin``, the
    equivalence test's p over the queries both tables scored (non-blank), and effect ratio and ΔRI against the pair labelled ``baseline`` over the queries all four
    tables scored (NaN for the baseline itself, or without it). ``pairs``: (label, original per-query
    table, reproduced per-query table), tables indexed by query id with a column per metric."""
    base = next(((original, reproduced) for label, original, reproduced in pairs if label == baseline), None)
    rows = []
    for label, original, reproduced in pairs:
        for metric in metrics:
            pair = pd.concat([original[metric], reproduced[metric]], axis=1, join="inner").dropna().to_numpy(float).T
            four = (
                np.empty((4, 0))
                if base is None or label == baseline
                else pd.concat(
                    [original[metric], base[0][metric], reproduced[metric], base[1][metric]], axis=1, join="inner"
                )
                .dropna()
                .to_numpy(float)
                .T
            )
            against = four.shape[1] > 0
            rows.append(
                {
                    "system": label,
                    "metric": metric,
                    "queries": pair.shape[1],
                    "rmse": rmse(*pair) if pair.shape[1] else math.nan,
                    "effect_ratio": effect_ratio(*four) if against else math.nan,
                    "delta_ri": delta_relative_improvement(*four) if against else math.nan,
                    "equivalence_p": equivalence_p(*pair, margin) if margin is not None and pair.shape[1] else math.nan,
                }
            )
    return pd.DataFrame(rows, columns=MEASURE_COLUMNS)


def rankings_table(pairs: Sequence[tuple[str, Run, Run]], queries: Collection[str] | None = None) -> pd.DataFrame:
    """Per system (columns :data:`RANKING_COLUMNS`): :func:`ranking_agreement` of its original and
    reproduced runs, over ``queries`` when given. ``pairs``: (label, original run, reproduced run)."""
    return pd.DataFrame(
        [
            {
                "system": label,
                **dict(zip(RANKING_COLUMNS[1:], ranking_agreement(original, reproduced, queries=queries))),
            }
            for label, original, reproduced in pairs
        ],
        columns=RANKING_COLUMNS,
    )
