"""``ragtrack eval QRELS RUN`` at its edges: qrels without a relevant judgment (at the threshold; counted
as trec_eval counts them, or left out with ``--without-relevant exclude``), JSON that strict parsers
read, the range of ``--relevance-threshold`` (the setting's) and ``-m`` comma lists."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

import ragtrack
from ragtrack.core.errors import RagtrackError
from ragtrack.evaluators.ranking import RankingEvaluator, RankingSettings, rank_grades
from ragtrack.pipeline.commands.cli import main as cli_main
from ragtrack.pipeline.run_files import FileEvaluation, evaluate_files

RUN = "q1 Q0 d1 1 1.0 x\nq1 Q0 d2 2 0.5 x\nq2 Q0 d3 1 1.0 x\nq2 Q0 d4 2 0.5 x\n"


def strict_json(text: str) -> dict:
    """``text`` read as strict parsers read JSON: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def files(tmp_path: Path, qrels: str) -> tuple[str, str]:
    (tmp_path / "qrels.txt").write_text(qrels)
    (tmp_path / "run.trec").write_text(RUN)
    return str(tmp_path / "qrels.txt"), str(tmp_path / "run.trec")


@pytest.mark.parametrize(
    ("qrels", "arguments", "threshold"),
    [
        ("q1 0 d1 0\n", ["-m", "map"], 1),  # the user trial's case
        ("q1 0 d1 0\n", ["-m", "map", "--json"], 1),
        ("q1 0 d1 0\nq2 0 d3 -1\n", ["-m", "hole@5", "-m", "map"], 1),  # a metric of the general path (the judged pool)
        (
            "q1 0 d1 2\nq2 0 d3 1\n",
            ["-m", "ndcg@10", "--json", "--relevance-threshold", "3"],
            3,
        ),  # above the highest grade
    ],
)
def test_no_query_to_evaluate_is_an_error_only_when_excluded(
    tmp_path: Path, capsys, qrels: str, arguments: list[str], threshold: int
) -> None:
    """trec_eval averages over such queries (every binary measure 0); excluding them leaves no query."""
    qrels_file, run_file = files(tmp_path, qrels)
    assert cli_main(["eval", qrels_file, run_file, *arguments, "--without-relevant", "exclude"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"ragtrack: error: no query in {qrels_file} has a relevant judgment at relevance threshold {threshold} "
        f"(a grade >= {threshold}), so nothing can be evaluated with without_relevant=exclude\n"
    )
    assert cli_main(["eval", qrels_file, run_file, *arguments]) == 0
    assert "counted in the means, as in trec_eval" in capsys.readouterr().err


@pytest.mark.parametrize("metrics", [["map", "ndcg@10"], ["map", "hole@5"]])  # the fast path and the general path
def test_queries_without_a_relevant_judgment_count_unless_excluded(tmp_path: Path, capsys, metrics: list[str]) -> None:
    qrels_file, run_file = files(tmp_path, "q1 0 d1 0\nq2 0 d4 2\nq3 0 d9 -1\n")
    assert cli_main(["eval", qrels_file, run_file, "--json", *(f"-m{m}" for m in metrics)]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"ragtrack: note: 2 judged queries in {qrels_file} without a relevant judgment (grade >= 1): "
        "counted in the means, as in trec_eval (--without-relevant exclude leaves them out)\n"
        f"ragtrack: note: 1 judged query without results in {run_file} (they score 0)\n"
    )  # q3, counted
    printed = strict_json(captured.out)
    assert printed["queries"] == 3 and printed["aggregate"]["map"] == 0.5 / 3
    assert (
        cli_main(
            ["eval", qrels_file, run_file, "--json", "--without-relevant", "exclude", *(f"-m{m}" for m in metrics)]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.err == (
        f"ragtrack: note: 2 judged queries in {qrels_file} without a relevant judgment (grade >= 1): "
        "left out of the means (--without-relevant exclude; trec_eval counts them)\n"
    )
    printed = strict_json(captured.out)
    assert printed["queries"] == 1 and printed["aggregate"]["map"] == 0.5
    for rule in ("count", "exclude"):
        assert evaluate_files(Path(qrels_file), Path(run_file), metrics, without_relevant=rule).no_relevant == (
            "q1",
            "q3",
        )
        assert ragtrack.evaluate(qrels_file, run_file, metrics, without_relevant=rule).no_relevant == ("q1", "q3")


@pytest.mark.parametrize(
    ("rule", "counted"),
    [("count", "n=3 judged queries (trec_eval)"), ("exclude", "n=1 queries with a relevant judgment")],
)
def test_the_printed_n_says_which_queries_count(tmp_path: Path, capsys, rule: str, counted: str) -> None:
    qrels_file, run_file = files(tmp_path, "q1 0 d1 0\nq2 0 d4 2\nq3 0 d9 -1\n")
    assert cli_main(["eval", qrels_file, run_file, "-m", "map", "--without-relevant", rule]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"{counted})")


def test_json_payloads_are_valid_json_with_null_for_undefined_values() -> None:
    """Both results ``eval`` prints (the API's and the fast path's) turn NaN (a mean over no query, a
    metric that does not apply to a query) into null, so ``allow_nan=False`` never fails."""
    nothing = ragtrack.evaluate({"q1": {"d1": 0}}, {"q1": {"d1": 1.0}}, ["map", "p@1"], without_relevant="exclude")
    assert math.isnan(nothing.aggregate["map"])
    payload = json.loads(json.dumps(nothing.to_dict(per_query=True), allow_nan=False))
    assert payload == {
        "aggregate": {"map": None, "p@1": None},
        "std": {"map": None, "p@1": None},
        "ci95": {"map": [None, None], "p@1": [None, None]},
        "queries": 0,
        "per_query": {"q1": {"map": 0.0, "p@1": 0.0}},
    }
    nan = float("nan")
    result = FileEvaluation(
        ["q1", "q2"],
        {"m": np.array([0.5, nan])},
        {"m": {"mean": 0.5, "std": nan, "ci_low": 0.5, "ci_high": 0.5, "n": 1}},
    )
    payload = json.loads(json.dumps(result.to_dict(per_query=True), allow_nan=False))
    assert payload == {
        "aggregate": {"m": 0.5},
        "std": {"m": None},
        "ci95": {"m": [0.5, 0.5]},
        "queries": 1,
        "per_query": {"q1": {"m": 0.5}, "q2": {"m": None}},
    }


def test_relevance_threshold_has_the_range_of_the_setting(tmp_path: Path, capsys) -> None:
    """``--relevance-threshold`` allows what ``evaluator.ranking.relevance_threshold`` allows (0 and up),
    so a negative grade is relevant at no threshold: ``-1`` used to make the document graded -1 relevant."""
    qrels_file, run_file = files(tmp_path, "q1 0 d1 -1\nq1 0 d2 1\nq2 0 d3 0\n")
    assert cli_main(["eval", qrels_file, run_file, "-m", "map", "--relevance-threshold", "-1"]) == 2
    captured = capsys.readouterr()
    assert (
        captured.out == ""
        and captured.err
        == "ragtrack: error: --relevance-threshold: -1 is not allowed: input should be greater than or equal to 0\n"
    )
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        RankingSettings(relevance_threshold=-1)
    assert (
        cli_main(
            [
                "eval",
                qrels_file,
                run_file,
                "-m",
                "map",
                "-m",
                "p@1",
                "--relevance-threshold",
                "0",
                "--json",
                "--per-query",
            ]
        )
        == 0
    )
    per_query = strict_json(capsys.readouterr().out)["per_query"]
    assert per_query == {
        "q1": {"map": 0.5, "p@1": 0.0},
        "q2": {"map": 1.0, "p@1": 1.0},
    }  # d1 (-1) not relevant; d2 and d3 (0) are


@pytest.mark.parametrize(
    "call",
    [
        lambda: ragtrack.evaluate({"q1": {"d1": -1}}, {"q1": {"d1": 1.0}}, ["map"], relevance_threshold=-1),
        lambda: ragtrack.compare({"a": {"q1": {"d1": 1.0}}}, {"q1": {"d1": -1}}, ["map"], relevance_threshold=-1),
        lambda: RankingEvaluator(["map"], relevance_threshold=-1),
        lambda: importlib.import_module("ragtrack.mlflow").scorers(["map"], relevance_threshold=-1),
        lambda: rank_grades({"q1": {"d1": 1.0}}, {"q1": {"d1": -1}}, threshold=-1),
    ],
)
def test_a_negative_threshold_is_refused_everywhere(call) -> None:
    with pytest.raises(
        RagtrackError, match=r"^relevance_threshold: -1 is not allowed: input should be greater than or equal to 0$"
    ):
        call()


@pytest.mark.parametrize("value", [1.5, True, "1"])
def test_a_threshold_that_is_not_an_integer_is_refused(value: object) -> None:
    with pytest.raises(
        RagtrackError, match=r"^relevance_threshold: .* is not allowed: input should be a valid integer$"
    ):
        RankingEvaluator(["map"], relevance_threshold=value)
    assert RankingEvaluator(["map"], relevance_threshold=np.int64(2)).relevance_threshold == 2


def test_metric_option_takes_a_comma_list(tmp_path: Path, capsys) -> None:
    qrels_file, run_file = files(tmp_path, "q1 0 d1 1\nq2 0 d4 2\n")
    assert cli_main(["eval", qrels_file, run_file, "--json", "-m", "ndcg@10", "-m", "map", "-m", "mrr"]) == 0
    separate = capsys.readouterr().out
    assert cli_main(["eval", qrels_file, run_file, "--json", "-m", "ndcg@10, map", "--metric=mrr"]) == 0
    assert capsys.readouterr().out == separate and list(strict_json(separate)["aggregate"]) == ["ndcg@10", "map", "mrr"]
    with pytest.raises(SystemExit):
        cli_main(["eval", qrels_file, run_file, "-m", "ndcg@10,"])
    assert "argument -m/--metric: an empty name in 'ndcg@10,'" in capsys.readouterr().err


def test_a_count_of_one_skipped_query_is_singular(tmp_path: Path, capsys) -> None:
    qrels_file, run_file = files(tmp_path, "q1 0 d1 0\nq2 0 d4 2\n")
    assert cli_main(["eval", qrels_file, run_file, "-m", "map"]) == 0
    assert capsys.readouterr().err == (
        f"ragtrack: note: 1 judged query in {qrels_file} without a relevant judgment (grade >= 1): "
        "counted in the means, as in trec_eval (--without-relevant exclude leaves them out)\n"
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda: ragtrack.evaluate({"q1": {"d1": 1}}, {"q1": {"d1": 1.0}}, ["map"], without_relevant="skip"),
        lambda: ragtrack.compare({"a": {"q1": {"d1": 1.0}}}, {"q1": {"d1": 1}}, ["map"], without_relevant="skip"),
        lambda: RankingEvaluator(["map"], without_relevant="skip"),
        lambda: importlib.import_module("ragtrack.mlflow").scorers(["map"], without_relevant="skip"),
    ],
)
def test_an_unknown_rule_for_queries_without_relevant_judgment_is_refused(call) -> None:
    with pytest.raises(
        RagtrackError, match=r"^without_relevant: 'skip' is not allowed: input should be 'count' or 'exclude'$"
    ):
        call()
