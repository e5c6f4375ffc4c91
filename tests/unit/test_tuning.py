"""Tuning of a sweep's setting (pipeline/analysis/tuning.py): k-fold choices made without the fold's own queries,
choices on another split that never read the reported queries, the tuned score against the default,
the jobs split by ``--tune-on`` and the tuning run with a child per fold."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.analysis.compare import split_jobs
from ragtrack.pipeline.analysis.comparison import SystemRun, compare_systems
from ragtrack.pipeline.analysis.tuning import folds_of, kfold_tune, log_tuning, split_tune, tune_sweep

QUERIES = [f"q{i}" for i in range(40)]


def sweep(values: dict[str, np.ndarray]) -> list[SystemRun]:
    return [
        SystemRun(
            "hybrid",
            label,
            label,
            label,
            0,
            pd.DataFrame({"ndcg@10": v}, index=pd.Index(QUERIES, name="qid")),
            label=label,
            params={"fusion.rrf.k": label.split("=")[1]},
        )
        for label, v in values.items()
    ]


def random_sweep(seed: int) -> list[SystemRun]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0, 1, len(QUERIES))
    return sweep(
        {
            f"k={k}": np.clip(base + rng.normal(shift, 0.1, len(QUERIES)), 0, 1)
            for k, shift in ((10, -0.02), (30, 0.03), (60, 0.0), (100, 0.01))
        }
    )


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
        s.per_query.loc[held_out, "ndcg@10"] = (
            1.0 if s.label == "k=10" else 0.0
        )  # k=10 best by far on the held-out fold
    again = kfold_tune(rows, rows[2], "ndcg@10", QUERIES, 5, seed=1, resamples=200)
    assert again.chosen[0] == tuning.chosen[0] and again.folds == tuning.folds


def test_ties_go_to_the_default_and_a_non_setting_baseline_is_refused() -> None:
    flat = sweep({f"k={k}": np.full(len(QUERIES), 0.5) for k in (10, 60)})
    tuning = kfold_tune(flat, flat[1], "ndcg@10", QUERIES, 4, resamples=100)
    assert set(tuning.chosen) == {"k=60"} and tuning.p_ttest == 1.0 and tuning.wins_ties_losses == (0, 40, 0)
    bm25 = SystemRun("bm25", "bm25", "j", "j", 0, flat[0].per_query, label="bm25")
    with pytest.raises(RagtrackError, match="not one of a sweep's settings"):
        tune_sweep(compare_systems([bm25, *flat], ["ndcg@10"], bm25, resamples=10), 4)


TRAIN = [f"t{i}" for i in range(6)]
TEST = ["q1", "q2", "q3", "q4"]


def rows_of(queries: list[str], values: dict[str, list[float]], split: str) -> list[SystemRun]:
    """Rows of hybrid with hand-written per-query nDCG@10, one job each (``<split>-k=<k>``)."""
    return [
        SystemRun(
            "hybrid",
            f"{split}-{label}",
            f"hybrid {label}",
            f"{split}-{label}",
            0,
            pd.DataFrame({"ndcg@10": v}, index=pd.Index(queries, name="qid")),
            label=f"hybrid {label}",
            params={"fusion.rrf.k": label.split("=")[1]},
        )
        for label, v in values.items()
    ]


def matched(rows: list[SystemRun]):
    return lambda candidate: next((r for r in rows if r.params == candidate.params), None)


def test_the_choice_on_the_tuning_split_by_hand() -> None:
    """k=30 has the best train mean (0.55 against 0.30 and 0.50): its test row reports, against k=60's."""
    train = rows_of(TRAIN, {"k=10": [0.3] * 6, "k=30": [0.6, 0.5, 0.5, 0.6, 0.5, 0.6], "k=60": [0.5] * 6}, "train")
    test = rows_of(
        TEST, {"k=10": [1.0, 1.0, 1.0, 1.0], "k=30": [0.2, 0.4, 0.6, 0.8], "k=60": [0.2, 0.2, 0.6, 0.6]}, "test"
    )
    tuning = split_tune(
        train,
        TRAIN,
        test,
        test[2],
        "ndcg@10",
        TEST,
        matched(test),
        ("dataset.split=train", "dataset.split=test"),
        resamples=100,
    )
    assert tuning.chosen == ["hybrid k=30"] and tuning.folds == [TEST]
    row = tuning.fold_rows()[0]
    assert (row["tuned_on"], row["tuned_mean"], row["settings"]) == (6, pytest.approx(0.55), {"fusion.rrf.k": "30"})
    assert tuning.scores.mean() == pytest.approx(0.5) and tuning.default_scores.mean() == pytest.approx(0.4)
    assert tuning.delta == pytest.approx(0.1) and tuning.wins_ties_losses == (2, 2, 0)
    assert (
        tuning.title
        == "Tuned on another split (chosen on dataset.split=train, reported on dataset.split=test; objective ndcg@10)"
    )
    assert (
        "  dataset.split=test (4 queries): hybrid k=30, chosen on 6 queries of dataset.split=train (0.5500 there)"
        in " ".join(tuning.text().split("\n    "))
    )
    assert tuning.summary()["held_out"] == pytest.approx(0.5) and "tuning/ndcg_at_10/held_out" in tuning.figures()


def test_the_reported_queries_never_reach_the_choice() -> None:
    """However the test rows change, and whatever a tuning row holds for a reported query, the choice stays."""
    rng = np.random.default_rng(5)
    train = rows_of(TRAIN + ["q1"], {f"k={k}": list(rng.uniform(0, 1, 7)) for k in (10, 30, 60)}, "train")
    test = rows_of(TEST, {f"k={k}": list(rng.uniform(0, 1, 4)) for k in (10, 30, 60)}, "test")
    first = split_tune(
        train, TRAIN + ["q1"], test, test[2], "ndcg@10", TEST, matched(test), ("train", "test"), resamples=10
    )
    loser = next(s for s in train if s.label != first.chosen[0] and s.params != {"fusion.rrf.k": "60"})
    loser.per_query.loc["q1", "ndcg@10"] = 100.0  # a reported query held on the tuning split: left out of the choice
    for s in test:
        s.per_query["ndcg@10"] = (
            1.0 if s.params == loser.params else 0.0
        )  # the loser best by far on the reported queries
    again = split_tune(
        train, TRAIN + ["q1"], test, test[2], "ndcg@10", TEST, matched(test), ("train", "test"), resamples=10
    )
    assert again.chosen == first.chosen and again.fold_rows()[0]["tuned_on"] == 6


def test_split_ties_go_to_the_default_and_a_missing_setting_is_refused() -> None:
    train = rows_of(TRAIN, {"k=10": [0.5] * 6, "k=30": [0.5] * 6, "k=60": [0.5] * 6}, "train")
    test = rows_of(TEST, {"k=10": [0.9] * 4, "k=60": [0.5] * 4}, "test")
    assert split_tune(
        train, TRAIN, test, test[1], "ndcg@10", TEST, matched(test), ("train", "test"), resamples=10
    ).chosen == ["hybrid k=60"]
    train[1].per_query["ndcg@10"] = 0.7  # k=30 best on train, never run on test
    with pytest.raises(
        RagtrackError, match="'hybrid k=30', chosen on train, has no row on test: run its setting there too"
    ):
        split_tune(train, TRAIN, test, test[1], "ndcg@10", TEST, matched(test), ("train", "test"), resamples=10)
    with pytest.raises(RagtrackError, match="train has no query of its own"):
        split_tune(train, TEST, test, test[1], "ndcg@10", TEST, matched(test), ("train", "test"), resamples=10)


def job(run_id: str, overrides: str) -> SimpleNamespace:
    return SimpleNamespace(
        info=SimpleNamespace(run_id=run_id), data=SimpleNamespace(tags={"ragtrack.overrides": overrides})
    )


def test_tune_on_splits_the_jobs_by_a_setting_value() -> None:
    jobs = {
        f"{split}{k}": job(f"{split}{k}", f"experiment=rrf_k fusion.rrf.k={k} dataset.split={split}")
        for split in ("train", "test")
        for k in (10, 60)
    }
    tuning, reported, splits = split_jobs(jobs, "train")
    assert sorted(tuning) == ["train10", "train60"] and sorted(reported) == ["test10", "test60"]
    assert (
        splits == ("dataset.split=train", "dataset.split=test")
        and split_jobs(jobs, "dataset.split=test")[0].keys() == reported.keys()
    )
    with pytest.raises(
        RagtrackError,
        match=r"--tune-on dev: no setting that differs between the jobs has this value; the settings that differ: fusion.rrf.k: 10, 60; "
        r"dataset.split: train, test",
    ):
        split_jobs(jobs, "dev")
    jobs["dev10"] = job("dev10", "experiment=rrf_k fusion.rrf.k=10 dataset.split=dev")
    with pytest.raises(RagtrackError, match=r"the other jobs have 2 values of dataset.split \(dev, test\)"):
        split_jobs(jobs, "train")
    jobs = {"a": job("a", "x=1 y=2"), "b": job("b", "x=2 y=1")}
    with pytest.raises(
        RagtrackError, match="several settings that differ between the jobs have this value: give KEY=VALUE"
    ):
        split_jobs(jobs, "1")
    assert list(split_jobs(jobs, "y=1")[0]) == ["b"]


class Recorder:
    """An MLflow client that records what is logged."""

    def __init__(self) -> None:
        self.runs: dict[str, dict] = {}

    def create_run(self, experiment_id: str, run_name: str, tags: dict) -> SimpleNamespace:
        run_id = f"child{len(self.runs)}"
        self.runs[run_id] = {"name": run_name, "tags": tags, "params": {}, "metrics": {}}
        return SimpleNamespace(info=SimpleNamespace(run_id=run_id))

    def log_param(self, run_id: str, key: str, value: object) -> None:
        self.runs.setdefault(run_id, {"params": {}, "metrics": {}})["params"][key] = value

    def log_batch(self, run_id: str, metrics: list) -> None:
        self.runs.setdefault(run_id, {"params": {}, "metrics": {}})["metrics"].update({m.key: m.value for m in metrics})

    def set_terminated(self, run_id: str, status: str) -> None:
        self.runs[run_id]["status"] = status


def test_the_tuning_run_has_a_child_per_fold() -> None:
    rows = random_sweep(2)
    tuning = kfold_tune(rows, rows[2], "ndcg@10", QUERIES, 4, seed=0, resamples=50)
    client = Recorder()
    log_tuning(client, "1", "parent", tuning)
    parent, children = client.runs.pop("parent"), client.runs
    assert parent["params"] == {
        "tuning_protocol": "4-fold cross-validation",
        "tuning_metric": "ndcg@10",
        "tuning_default": "k=60",
    }
    assert parent["metrics"]["tuning/ndcg_at_10/cross_validated"] == pytest.approx(tuning.scores.mean())
    assert [c["name"] for c in children.values()] == [f"fold {n + 1}: {label}" for n, label in enumerate(tuning.chosen)]
    for child, fold, label in zip(children.values(), tuning.folds, tuning.chosen):
        assert (
            child["tags"] == {"mlflow.parentRunId": "parent", "ragtrack.comparison": "true"}
            and child["status"] == "FINISHED"
        )
        assert child["params"]["chosen"] == label and child["params"]["fusion.rrf.k"] == label.split("=")[1]
        assert child["metrics"]["ndcg_at_10"] == pytest.approx(tuning.scores[fold].mean())
        assert child["metrics"]["default/ndcg_at_10"] == pytest.approx(tuning.default_scores[fold].mean())
