"""Metrics undefined on some queries (blank/NaN per query: ranking metrics without a relevant judgment,
abstention_precision where a system answered, abstention_recall on answerable questions): each
comparison runs over the queries where every row has a value, with its n; a metric defined nowhere is
blank with a note, never a crash; JSON outputs hold null, never NaN; the sweep summary's best mark is
``comparison.is_best``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragtrack.core.files import json_text
from ragtrack.evaluators.significance import paired_t_test, randomization_test
from ragtrack.pipeline.analysis.comparison import SystemRun, compare_systems, coverage_note
from ragtrack.pipeline.analysis.comparison_report import html_report, verdicts
from ragtrack.pipeline.analysis.comparison_tables import render
from ragtrack.pipeline.execution.terminal_report import counts_text


def strict_json(text: str) -> object:
    """``json.loads`` that refuses NaN, Infinity and -Infinity (what no JSON parser but Python's accepts)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def row(label: str, frame: pd.DataFrame) -> SystemRun:
    return SystemRun(label, label, "job", "", 0, frame, label=label)


def abstaining_systems(seed: int, n: int = 60) -> list[SystemRun]:
    """Three systems on n questions, a quarter unanswerable (no relevant judgment, NaN ranking metric):
    per query ndcg@10 (NaN on unanswerable ones), abstention_rate, abstention_precision (NaN where the
    system answered) and abstention_recall (NaN on answerable ones), computed as the evaluator does."""
    rng = np.random.default_rng(seed)
    unanswerable = rng.random(n) < 0.25
    qids = [f"q{i}" for i in range(n)]
    systems = []
    for label, rate in (("bm25", 0.5), ("dense", 0.65), ("hybrid", 0.55)):
        abstained = rng.random(n) < rate
        frame = pd.DataFrame(
            {
                "ndcg@10": np.where(unanswerable, np.nan, rng.random(n)),
                "abstention_rate": abstained.astype(float),
                "abstention_precision": np.where(abstained, unanswerable, np.nan),
                "abstention_recall": np.where(unanswerable, abstained, np.nan),
            },
            index=pd.Index(qids, name="qid"),
        )
        systems.append(row(label, frame))
    return systems


METRICS = ["ndcg@10", "abstention_rate", "abstention_precision", "abstention_recall"]


@pytest.mark.parametrize("seed", range(5))
def test_each_metric_is_compared_on_the_queries_where_every_row_has_a_value(seed: int) -> None:
    systems = abstaining_systems(seed)
    comparison = compare_systems(systems, METRICS, systems[0], resamples=200)
    table = comparison.table.set_index(["system", "metric"])
    for metric in METRICS:
        frames = [s.per_query[metric] for s in systems]
        defined = np.logical_and.reduce([f.notna().to_numpy() for f in frames])
        assert comparison.paired[metric] == list(frames[0].index[defined])
        base = frames[0][defined].to_numpy()
        for s, frame in zip(systems, frames):
            values = frame[defined].to_numpy()
            got = table.loc[(s.label, metric)]
            assert got["n"] == defined.sum() and got["mean"] == pytest.approx(values.mean(), abs=1e-12)
            if s is not systems[0]:
                assert got["delta"] == pytest.approx(values.mean() - base.mean(), abs=1e-12)
                assert got["p_ttest"] == paired_t_test(values, base).p_value
                assert got["p_randomization"] == randomization_test(values, base, resamples=200).p_value
                assert got["wins"] + got["ties"] + got["losses"] == defined.sum()
    # rows defined on all queries they have (ranking, rate, recall): the comparison's mean is each row's own mean
    for metric in ("ndcg@10", "abstention_rate", "abstention_recall"):
        for s in systems:
            assert table.loc[(s.label, metric), "mean"] == pytest.approx(s.per_query[metric].mean(), abs=1e-12)
    assert "abstention_precision: rows have values on different queries" in coverage_note(comparison)


def test_the_trials_abstention_precision_never_gets_a_spurious_p_value() -> None:
    """Two systems whose abstention_precision is defined on different queries and equal where both are:
    before, NaN pairs made p rand. 1/10001 at W/T/L 0/n/0; now p = 1 on the shared queries."""
    frames = [
        pd.DataFrame({"abstention_precision": values}, index=pd.Index(["a", "b", "c", "d"], name="qid"))
        for values in ([np.nan, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, np.nan])
    ]
    systems = [row("bm25", frames[0]), row("dense", frames[1])]
    dense = compare_systems(systems, ["abstention_precision"], systems[0]).table.iloc[1]
    assert (dense["n"], dense["p_randomization"], dense["p_ttest"], dense["wins"], dense["ties"]) == (2, 1.0, 1.0, 0, 2)


def test_a_metric_undefined_on_every_compared_query_is_blank_with_a_note(tmp_path: Path) -> None:
    """The trial's crash (``idxmax``: all NA) at a job's end and in ``ragtrack compare``."""
    systems = abstaining_systems(0)
    for s in systems:
        s.per_query["abstention_recall"] = np.nan  # no unanswerable question
    comparison = compare_systems(systems, ["abstention_recall", "ndcg@10"], systems[0], resamples=100)
    rows = comparison.table[comparison.table["metric"] == "abstention_recall"]
    assert (rows["n"] == 0).all() and rows["mean"].isna().all() and not rows["best"].any()
    assert rows["p_ttest"].isna().all() and rows["p_randomization"].isna().all()
    assert (
        verdicts(comparison)[0]
        == "abstention_recall: no value, defined on none of the compared queries for every system"
    )
    text = render(comparison, "table")
    assert not re.search(
        r"\bnan\b", text
    ) and "abstention_recall: no query has a value for every row; shown blank" in " ".join(text.split())
    assert strict_json(render(comparison, "json"))["rows"][0]["mean"] is None
    for fmt in ("markdown", "latex", "csv"):
        render(comparison, fmt)
    report = html_report(comparison, "t", [])
    assert not re.search(r"\bnan\b", report, re.IGNORECASE) and "abstention_recall (n = 0)" in report


def test_json_text_writes_null_for_undefined_values_and_refuses_nothing_else() -> None:
    value = {
        "a": float("nan"),
        "b": [1.5, np.float64("nan"), np.float32(0.5), np.int64(3)],
        "c": (float("inf"), "x", None, True),
    }
    assert strict_json(json_text(value)) == {"a": None, "b": [1.5, None, 0.5, 3], "c": [None, "x", None, True]}
    with pytest.raises(ValueError, match="NaN"):
        strict_json(json.dumps({"a": float("nan")}))


def test_the_terminal_says_over_how_many_queries_each_mean_is() -> None:
    same = {"bm25": {"ndcg@10": 6, "mrr": 6}, "dense": {"ndcg@10": 6, "mrr": 6}}
    assert counts_text(same) == "6 queries; mean per query; * best of each metric"
    mixed = {
        "bm25": {"ndcg@10": 952, "answer_f1": 952, "abstention_rate": 1190, "abstention_precision": 587},
        "dense": {"ndcg@10": 952, "answer_f1": 952, "abstention_rate": 1190, "abstention_precision": 775},
    }
    assert " ".join(counts_text(mixed).split()) == (
        "mean per query over 952 queries (ndcg@10, answer_f1), 1190 queries (abstention_rate); "
        "abstention_precision: 587 bm25, 775 dense; * best of each metric"
    )


def test_the_sweep_summary_uses_the_one_best_rule(tmp_path: Path) -> None:
    """Means a float sum left a last bit apart tie (the same in every job, not a varying column); a
    null (undefined) mean is blank and never best."""
    from ragtrack.pipeline.app import sweep_summary

    values = [(0.2266666666666667, 0.5, None), (0.22666666666666668, 0.75, 0.25), (0.2266666666666667, 0.75, 0.5)]
    for job, (ndcg, mrr, precision) in enumerate(values):
        (tmp_path / str(job) / ".hydra").mkdir(parents=True)
        (tmp_path / str(job) / ".hydra" / "overrides.yaml").write_text(f"- fusion.rrf.k={job}\n")
        systems = {"hybrid": {"ndcg@10": ndcg, "mrr": mrr, "abstention_precision": precision}}
        (tmp_path / str(job) / "results.json").write_text(json.dumps({"systems": systems}))
    lines = sweep_summary(tmp_path, ["ndcg@10", "mrr", "abstention_precision"]).splitlines()
    assert lines[0].split() == ["hybrid", "mrr", "hybrid", "abstention_precision"]
    assert [line.split() for line in lines[2:5]] == [
        ["fusion.rrf.k=0", "0.5000"],
        ["fusion.rrf.k=1", "0.7500*", "0.2500"],
        ["fusion.rrf.k=2", "0.7500*", "0.5000*"],
    ]
    assert lines[6] == "the same in every job: hybrid ndcg@10 0.2267"
