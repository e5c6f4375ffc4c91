"""Judge agreement: kappa and alpha equal scikit-learn's and the krippendorff package's on random labels,
the bootstrap CIs are the percentiles of the figures recomputed on ragtrack's seeded resamples, the PPI
mean equals its formula and covers the truth at the nominal rate, the labels reader names
file, line and problem, and labels that cannot be compared are counted and warned about."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import krippendorff
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from ragtrack.core.errors import InputError
from ragtrack.evaluators import agreement as ag
from ragtrack.evaluators.human_labels import OUTCOMES, read_human_labels
from ragtrack.evaluators.judge import LLMJudge
from ragtrack.pipeline.execution.agreement import figures, rubric_agreement


def _random_labels(seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """A person's and a judge's categories (positions) of n items: the judge agrees half the time."""
    rng = np.random.default_rng(seed)
    k, n = int(rng.integers(2, 7)), int(rng.integers(5, 80))
    human = rng.integers(0, k, n)
    judge = np.where(rng.random(n) < 0.5, human, rng.integers(0, k, n))
    return judge, human, k


@pytest.mark.parametrize("weights", ["none", "linear", "quadratic"])
def test_kappa_equals_scikit_learn_on_random_labels(weights: str) -> None:
    for seed in range(100):
        judge, human, k = _random_labels(seed)
        expected = cohen_kappa_score(
            human, judge, labels=list(range(k)), weights=None if weights == "none" else weights
        )
        assert ag.kappa(ag.confusion(judge, human, k), weights) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_alpha_equals_the_krippendorff_package_on_random_labels(level: str) -> None:
    for seed in range(300):
        judge, human, k = _random_labels(seed)
        values = np.sort(np.random.default_rng(seed).choice(20, k, replace=False)).astype(float)  # an uneven scale
        expected = krippendorff.alpha(
            reliability_data=np.array([values[judge], values[human]]), level_of_measurement=level, value_domain=values
        )
        assert ag.alpha(ag.confusion(judge, human, k), level, values) == pytest.approx(expected, abs=1e-9)


def test_bootstrap_cis_are_percentiles_over_the_seeded_resamples() -> None:
    """The CI is the 2.5/97.5 percentile of the figure recomputed (by scikit-learn and krippendorff) on
    each resample ragtrack's bootstrap draws: bootstrap_means' generator, one block of (300, n) draws."""
    judge, human = (
        np.array([0, 1, 2, 3, 4, 2, 3, 1, 0, 4, 3, 3, 2, 1, 4, 0, 2, 2]),
        np.array([0, 1, 3, 3, 4, 2, 2, 1, 1, 4, 4, 3, 2, 0, 3, 0, 2, 1]),
    )
    found = ag.agreement(judge, human, 5, "quadratic", "ordinal", resamples=300, seed=7)
    draws = np.random.default_rng(7).integers(0, len(judge), size=(300, len(judge)))
    reference = {"kappa": [], "alpha": [], "accuracy": []}
    for rows in draws:
        reference["kappa"].append(
            cohen_kappa_score(human[rows], judge[rows], labels=list(range(5)), weights="quadratic")
        )
        reference["alpha"].append(
            krippendorff.alpha(
                reliability_data=np.array([judge[rows], human[rows]]),
                level_of_measurement="ordinal",
                value_domain=list(range(5)),
            )
        )
        reference["accuracy"].append(np.mean(judge[rows] == human[rows]))
    for name, values in reference.items():
        low, high = np.nanpercentile(values, [2.5, 97.5])
        assert (found.figures[f"{name}_ci_low"], found.figures[f"{name}_ci_high"]) == pytest.approx(
            (low, high), abs=1e-9
        )
    assert found.figures["kappa"] == pytest.approx(cohen_kappa_score(human, judge, weights="quadratic"), abs=1e-12)
    again = ag.agreement(judge, human, 5, "quadratic", "ordinal", resamples=300, seed=7)
    assert json.dumps(again.figures) == json.dumps(found.figures)  # same seed, same bytes
    assert found.confusion.tolist() == pd.crosstab(judge, human).to_numpy().tolist()


def test_graded_scales_get_quadratic_kappa_and_ordinal_alpha_pairwise_nominal() -> None:
    graded = figures([1, 2, 5, 4, 4], [1, 3, 5, 5, 4], [1, 2, 3, 4, 5], seed=0)
    assert (graded["kappa_weights"], graded["alpha_level"]) == ("quadratic", "ordinal")
    assert graded["kappa"] == pytest.approx(
        cohen_kappa_score([1, 3, 5, 5, 4], [1, 2, 5, 4, 4], labels=[1, 2, 3, 4, 5], weights="quadratic")
    )
    pairwise = figures(["win", "tie", "loss", "win"], ["win", "loss", "loss", "tie"], OUTCOMES, seed=0)
    assert (pairwise["kappa_weights"], pairwise["alpha_level"]) == ("none", "nominal")
    assert pairwise["confusion"] == {"categories": ["win", "tie", "loss"], "counts": [[1, 1, 0], [0, 0, 1], [0, 0, 1]]}
    assert pairwise["accuracy"] == 0.5


def _ppi_by_formula(f_all: np.ndarray, labelled: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """θ = mean_N(f) + mean_n(y − f); with λ = N_u/N, se² = λ² var_u(f)/N_u + var_n(y − λf)/n (divisor N_u, n)."""
    f_lab, f_unl = f_all[labelled], np.delete(f_all, labelled)
    share = len(f_unl) / len(f_all)
    estimate = f_all.mean() + (y - f_lab).mean()
    se = np.sqrt(share**2 * f_unl.var() / len(f_unl) + (y - share * f_lab).var() / len(y))
    return estimate, estimate - 1.959963984540054 * se, estimate + 1.959963984540054 * se


def test_ppi_mean_equals_the_formula() -> None:
    for seed in range(50):
        rng = np.random.default_rng(seed)
        n_all, n = int(rng.integers(20, 300)), int(rng.integers(2, 20))
        f_all = rng.integers(1, 6, n_all).astype(float)
        labelled = rng.choice(n_all, n, replace=False)
        y = np.clip(f_all[labelled] + rng.integers(-1, 2, n), 1, 5)
        unlabelled = np.delete(f_all, labelled)
        found = ag.ppi_mean(f_all[labelled], y, unlabelled)
        assert (found.estimate, found.ci_low, found.ci_high) == pytest.approx(
            _ppi_by_formula(f_all, labelled, y), abs=1e-9
        )
        assert found.judge_mean == pytest.approx(f_all.mean()) and found.rectifier == pytest.approx(
            (y - f_all[labelled]).mean()
        )


def test_ppi_mean_edge_cases() -> None:
    y = np.array([1.0, 3.0, 4.0, 4.0])
    everything = ag.ppi_mean([2.0, 2.0, 5.0, 1.0], y, [])  # all labelled: the labels' mean and its CLT interval
    half = 1.959963984540054 * y.std() / 2
    assert (everything.estimate, everything.ci_low, everything.ci_high) == pytest.approx((3.0, 3.0 - half, 3.0 + half))
    one = ag.ppi_mean([2.0], [3.0], [1.0, 2.0, 3.0])
    assert one.estimate == pytest.approx(2.0 + 1.0) and np.isnan(one.ci_low) and np.isnan(one.ci_high)
    none = ag.ppi_mean([], [], [1.0, 2.0])
    assert np.isnan(none.estimate) and none.judge_mean == 1.5


def test_ppi_ci_covers_the_truth_at_the_nominal_rate_and_the_judge_mean_does_not() -> None:
    """500 draws of 400 queries, 80 of them labelled at random: the people's scores y are 1-5 with a known
    mean, the judge over-scores by one grade a third of the time. The 95% PPI interval covers the true
    mean in 95% ± 3 binomial standard deviations of the draws; the judge's own mean misses it."""
    grades, probabilities = np.arange(1, 6), np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    truth = float(grades @ probabilities)
    rng = np.random.default_rng(2023)
    covered, biased = 0, []
    draws = 500
    for _ in range(draws):
        y_all = rng.choice(grades, 400, p=probabilities).astype(float)
        f_all = np.minimum(5, y_all + (rng.random(400) < 1 / 3))
        labelled = rng.choice(400, 80, replace=False)
        found = ag.ppi_mean(f_all[labelled], y_all[labelled], np.delete(f_all, labelled))
        covered += found.ci_low <= truth <= found.ci_high
        biased.append(found.judge_mean)
    tolerance = 3 * np.sqrt(0.95 * 0.05 / draws)
    assert abs(covered / draws - 0.95) <= tolerance, covered / draws
    assert np.mean(biased) - truth > 0.2


# --------------------------------------------------------------------------- the labels file

SCALES = {"correctness": [1, 2, 3, 4, 5], "relevance": [1, 2, 3, 4, 5]}


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_labels_read_from_jsonl_and_tsv(tmp_path: Path) -> None:
    jsonl = _file(
        tmp_path,
        "labels.jsonl",
        '{"qid": "q1", "system": "bm25", "criterion": "correctness", "label": 4}\n\n'
        '{"qid": "q2", "system": "bm25", "criterion": "relevance", "label": "2", "answer": "x", "note": "hm"}\n',
    )
    labels = read_human_labels(jsonl, SCALES, "system")
    assert [(x.qid, x.item, x.criterion, x.label, x.line, x.answer) for x in labels.labels] == [
        ("q1", "bm25", "correctness", 4, 1, None),
        ("q2", "bm25", "relevance", 2, 3, "x"),
    ]
    tsv = _file(tmp_path, "labels.tsv", "qid\tpair\tlabel\nq1\tdense vs bm25\tWin\nq2\tbm25 vs dense\ttie\n")
    pairs = read_human_labels(tsv, {"correctness": OUTCOMES}, "pair")
    assert [(x.qid, x.item, x.criterion, x.label) for x in pairs.labels] == [
        ("q1", "dense vs bm25", "correctness", "win"),
        ("q2", "bm25 vs dense", "correctness", "tie"),
    ]


@pytest.mark.parametrize(
    "name, text, item, problem",
    [
        (
            "l.jsonl",
            '{"qid": "q1", "system": "bm25", "criterion": "correctness", "label": 6}\n',
            "system",
            "l.jsonl:1: label 6 is outside the correctness scale [1, 2, 3, 4, 5]",
        ),
        (
            "l.jsonl",
            '{"qid": "q1", "system": "bm25", "criterion": "correctness", "label": 4.5}\n',
            "system",
            "l.jsonl:1: label 4.5 is not an integer on the correctness scale",
        ),
        (
            "l.jsonl",
            '{"qid": "q1", "system": "bm25", "criterion": "correctness", "label": true}\n',
            "system",
            "l.jsonl:1: label True is not an integer",
        ),
        (
            "l.jsonl",
            '{"qid": "q1", "system": "bm25", "label": 3}\n',
            "system",
            "l.jsonl:1: missing field 'criterion': the judge has several rubrics (correctness, relevance)",
        ),
        (
            "l.jsonl",
            '{"qid": "q1", "system": "bm25", "criterion": "corectness", "label": 3}\n',
            "system",
            "l.jsonl:1: unknown criterion 'corectness'; the judge's rubrics: correctness, relevance; did you mean 'correctness'?",
        ),
        (
            "l.jsonl",
            '{"qid": "q1", "sytem": "bm25", "criterion": "correctness", "label": 3}\n',
            "system",
            "l.jsonl:1: unknown field 'sytem'",
        ),
        (
            "l.jsonl",
            '{"qid": "q1", "criterion": "correctness", "label": 3}\n',
            "system",
            "l.jsonl:1: missing field 'system'",
        ),
        (
            "l.jsonl",
            '\n{"qid": "q1", "system": "bm25", "criterion": "correctness", "label": 3\n',
            "system",
            "l.jsonl:2: malformed JSON: Expecting ',' delimiter (column 71)",
        ),
        ("l.jsonl", "[1, 2]\n", "system", "l.jsonl:1: expected a JSON object, got list"),
        (
            "l.jsonl",
            '{"qid": "q 1", "system": "bm25", "criterion": "correctness", "label": 3}\n',
            "system",
            "l.jsonl:1: id 'q 1' contains whitespace",
        ),
        (
            "l.jsonl",
            '{"qid": "q1", "system": "bm25", "criterion": "correctness", "label": 3}\n{"qid": "q1", "system": "bm25", "criterion": "correctness", '
            '"label": 4}\n',
            "system",
            "l.jsonl:2: a second label for query 'q1', system 'bm25', criterion 'correctness' (first on line 1)",
        ),
        (
            "l.tsv",
            "qid\tpair\tlabel\nq1\tbm25 vs dense\twin\nq1\tdense vs bm25\tloss\n",
            "pair",
            "l.tsv:3: a second label for query 'q1', pair",
        ),
        (
            "l.tsv",
            "qid\tpair\tlabel\nq1\tbm25 vs dense\tbetter\n",
            "pair",
            "l.tsv:2: label 'better' is not one of win, tie, loss",
        ),
        ("l.tsv", "qid\tpair\tlabel\nq1\tbm25\twin\n", "pair", "l.tsv:2: pair 'bm25' must be '<first> vs <second>'"),
        ("l.tsv", "qid\tpair\tlabel\nq1\tbm25 vs dense\n", "pair", "l.tsv:2: expected 3 tab-separated columns, got 2"),
        ("l.tsv", "qid\tlabel\n", "pair", "l.tsv:1: the header must name each of qid, pair, label once"),
        ("l.tsv", "qid\tpair\tlabel\n", "pair", "l.tsv: no labels in the file"),
        ("l.csv", "qid,pair,label\n", "pair", "l.csv: human labels must be a .jsonl or .tsv file"),
    ],
)
def test_a_bad_labels_file_is_one_line_naming_file_line_and_problem(
    tmp_path: Path, name: str, text: str, item: str, problem: str
) -> None:
    path = _file(tmp_path, name, text)
    scales = SCALES if item == "system" else {"correctness": OUTCOMES}
    with pytest.raises(InputError, match=re.escape(f"{tmp_path}/{problem}")):
        read_human_labels(path, scales, item)


def test_labels_that_cannot_be_compared_are_counted_and_warned(tmp_path: Path, caplog) -> None:
    """An unknown query, an unknown system, a stale answer, a query the judge failed on (NaN) and a
    score between the scale's points are each counted, warned about and left out; the rest agree."""
    lines = [
        {"qid": "q1", "system": "bm25", "label": 4},
        {"qid": "q2", "system": "bm25", "label": 2},
        {"qid": "q3", "system": "bm25", "label": 5, "answer": "an  old\nanswer"},
        {"qid": "q4", "system": "bm25", "label": 1},
        {"qid": "q5", "system": "bm25", "label": 3, "answer": "answer five"},
        {"qid": "q6", "system": "bm25", "label": 3},
        {"qid": "q99", "system": "bm25", "label": 3},
        {"qid": "q1", "system": "colbert", "label": 3},
        {"qid": "q1", "system": "dense", "label": 3},
    ]  # dense: the judge did not apply (no answers)
    path = _file(tmp_path, "labels.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    judge = LLMJudge(
        prompt="{answer}", rubrics=["correctness"], base_url="http://127.0.0.1:9/v1", model="m", human_labels=str(path)
    )
    per_query = pd.DataFrame(
        {
            "judge_correctness": [5.0, 2.0, 4.0, np.nan, 3.0, 3.5, 1.0],
            "generated_answer": ["a1", "a2", "a newer answer", "", "answer  five", "a6", "a7"],
        },
        index=pd.Index([f"q{i}" for i in range(1, 8)], name="qid"),
    )
    dataset = SimpleNamespace(queries={f"q{i}": "?" for i in range(1, 8)})
    (tmp_path / "systems" / "bm25").mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        found = rubric_agreement(
            [judge],
            {"bm25": SimpleNamespace(per_query=per_query), "dense": SimpleNamespace(per_query=per_query[[]])},
            dataset,
            tmp_path,
            seed=0,
        )
    section = found.results["agreement"]
    assert {
        k: section[k] for k in ("labels", "unknown_query", "unknown_system", "stale", "judge_missing", "off_scale")
    } == {"labels": 9, "unknown_query": 1, "unknown_system": 1, "stale": 1, "judge_missing": 2, "off_scale": 1}
    assert section["systems"]["dense"]["judge_correctness"]["judge_missing"] == 1
    figures_ = section["systems"]["bm25"]["judge_correctness"]
    assert (figures_["labels"], figures_["compared"], figures_["ppi_labelled"], figures_["judged"]) == (6, 3, 4, 6)
    assert figures_["kappa"] == pytest.approx(
        cohen_kappa_score([4, 2, 3], [5, 2, 3], labels=[1, 2, 3, 4, 5], weights="quadratic")
    )
    judged = per_query["judge_correctness"].dropna()
    labelled = {"q1": 4.0, "q2": 2.0, "q5": 3.0, "q6": 3.0}
    assert figures_["ppi"] == pytest.approx(judged.mean() + np.mean([labelled[q] - judged[q] for q in labelled]))
    messages = "\n".join(r.getMessage() for r in caplog.records)
    for count, kind, line in (
        (1, "unknown query", 7),
        (1, "unknown system", 8),
        (1, "stale", 3),
        (2, "judge missing", 4),
        (1, "off scale", 6),
    ):
        assert f"{count} label(s) {kind}; first: line {line}" in messages
    metrics = found.system_metrics["bm25"]
    assert {
        "judge_correctness_kappa",
        "judge_correctness_kappa_ci_low",
        "judge_correctness_alpha_ci_high",
        "judge_correctness_accuracy",
        "judge_correctness_ppi",
        "judge_correctness_ppi_ci_low",
        "judge_correctness_human_labels",
    } <= set(metrics)
    csv = (tmp_path / "systems" / "bm25" / "judge_correctness_confusion.csv").read_text().splitlines()
    assert csv[0] == "judge \\ human,1,2,3,4,5" and csv[2] == "2,0,1,0,0,0" and csv[5] == "5,0,0,0,1,0"


def test_a_label_whose_criterion_is_not_a_name_is_one_line(tmp_path: Path) -> None:
    """Each was a TypeError or ValueError traceback."""
    for number, criterion in enumerate(('["correctness"]', '{"a": 1}', "3")):
        labels = tmp_path / f"labels{number}.jsonl"
        labels.write_text(f'{{"qid": "q1", "system": "bm25", "criterion": {criterion}, "label": 3}}\n')
        with pytest.raises(InputError, match=rf"labels{number}\.jsonl:1: 'criterion' must be a rubric's name, got "):
            read_human_labels(labels, {"correctness": [1, 2, 3], "relevance": [1, 2, 3]}, "system")
