"""The Python API (``ragtrack.evaluate``, ``evaluate_answers``, ``compare``): equal to pytrec_eval per
query on random runs given as dicts, DataFrames and files, equal to ``ragtrack eval`` to the last bit,
clear one-line errors for malformed input, and docs/api.md's examples run."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ragtrack
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run, write_trec
from ragtrack.pipeline.commands import api
from ragtrack.pipeline.commands.cli import main as cli_main
from tests.support import TOY, assert_equal_per_query, ours_to_trec, pytrec_reference, random_pairs

REPO = Path(__file__).resolve().parents[2]
METRICS = list(ours_to_trec())


def as_frames(qrels: dict, run: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    judged = pd.DataFrame(
        [(q, d, g) for q, docs in qrels.items() for d, g in docs.items()], columns=["qid", "docid", "grade"]
    )
    ranked = pd.DataFrame(
        [(q, d, s) for q, docs in run.items() for d, s in docs.items()], columns=["qid", "docid", "score"]
    )
    return judged, ranked


def as_files(qrels: dict, run: dict, folder: Path) -> tuple[Path, Path]:
    qrels_file = folder / "qrels.tsv"
    qrels_file.write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}\t{g}\n" for q, docs in qrels.items() for d, g in docs.items())
    )
    return qrels_file, write_trec(Run("r", {q: docs for q, docs in run.items() if docs}), folder / "run.trec")


@pytest.mark.parametrize("form", ["dicts", "frames", "files"])
@pytest.mark.parametrize("threshold", [1, 2])
def test_evaluate_equals_pytrec_eval_per_query(form: str, threshold: int, tmp_path: Path) -> None:
    qrels, run = random_pairs(range(40))
    given = {"dicts": (qrels, run), "frames": as_frames(qrels, run), "files": as_files(qrels, run, tmp_path)}[form]
    result = ragtrack.evaluate(*given, metrics=METRICS, relevance_threshold=threshold)
    reference = pytrec_reference(qrels, run, threshold)
    assert len(reference) > 500
    assert_equal_per_query(result.per_query, reference)
    relevant = [q for q, docs in qrels.items() if any(g >= threshold for g in docs.values())]
    assert len(relevant) < len(
        qrels
    )  # judged queries without a relevant document: counted, as trec_eval -c counts them
    assert result.aggregate["ndcg@10"] == pytest.approx(reference["ndcg@10"].sum() / len(qrels), abs=1e-12)
    assert int(result.summary.loc["map", "n"]) == len(qrels)
    assert set(result.missing) == {q for q in qrels if not run.get(q)}
    excluded = ragtrack.evaluate(*given, metrics=METRICS, relevance_threshold=threshold, without_relevant="exclude")
    assert excluded.aggregate["ndcg@10"] == pytest.approx(result.per_query.loc[relevant, "ndcg@10"].mean(), abs=1e-15)
    assert int(excluded.summary.loc["map", "n"]) == len(relevant) and set(excluded.missing) == {
        q for q in relevant if not run.get(q)
    }


def test_every_input_form_gives_the_same_bits(tmp_path: Path) -> None:
    qrels, run = random_pairs(range(5))
    results = [
        ragtrack.evaluate(*given, metrics=METRICS)
        for given in ((qrels, run), as_frames(qrels, run), as_files(qrels, run, tmp_path))
    ]
    for other in results[1:]:
        pd.testing.assert_frame_equal(results[0].per_query, other.per_query, check_exact=True)
        pd.testing.assert_frame_equal(results[0].summary, other.summary, check_exact=True)


def test_evaluate_equals_ragtrack_eval_to_the_last_bit(tmp_path: Path, capsys) -> None:
    qrels, run = random_pairs(range(10))
    qrels_file, run_file = as_files(qrels, run, tmp_path)
    metrics = ["ndcg@10", "map", "recall@100", "mrr@10", "p@5"]
    assert (
        cli_main(
            ["eval", str(qrels_file), str(run_file), "--json", "--per-query", *[a for m in metrics for a in ("-m", m)]]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(ragtrack.evaluate(qrels_file, run_file, metrics).to_dict(per_query=True)))
    assert printed["aggregate"] == ragtrack.evaluate(qrels, run, metrics).aggregate


def test_evaluate_answers_uses_squad_semantics() -> None:
    result = ragtrack.evaluate_answers(
        {"q1": ["Denver Broncos", "Broncos"], "q2": "Santa Clara", "q3": ["x"]},
        {"q1": "the Broncos!", "q2": "Levi's Stadium in Santa Clara"},
        ["answer_f1", "exact_match"],
    )
    assert result.per_query.loc["q1"].tolist() == [1.0, 1.0]  # best over the golds, normalized
    assert result.per_query.loc["q2", "answer_f1"] == pytest.approx(2 * (2 / 5) * 1 / (2 / 5 + 1))
    assert result.per_query.loc["q3"].tolist() == [0.0, 0.0]  # no prediction scores 0
    assert result.aggregate["exact_match"] == pytest.approx(1 / 3)
    with pytest.raises(RagtrackError, match="predictions for questions without gold answers: q9"):
        ragtrack.evaluate_answers({"q1": "a"}, {"q9": "a"})


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ragtrack.evaluate({"q": {"d": 1.5}}, {"q": {"d": 1.0}}), "grade 1.5 is not an integer"),
        (lambda: ragtrack.evaluate({"q": {"d": 1}}, {"q": {"d": float("nan")}}), "score nan is not a finite number"),
        (lambda: ragtrack.evaluate({"q": {"d": 1}}, {"q": ["d"]}), "query 'q' must map document ids to scores"),
        (
            lambda: ragtrack.evaluate(pd.DataFrame({"qid": ["q"], "doc": ["d"], "grade": [1]}), {"q": {"d": 1.0}}),
            "missing: docid",
        ),
        (
            lambda: ragtrack.evaluate(
                {"q": {"d": 1}}, pd.DataFrame({"qid": ["q", "q"], "docid": ["d", "d"], "score": [1.0, 2.0]})
            ),
            "document 'd' appears twice for query 'q'",
        ),
        (lambda: ragtrack.evaluate({}, {"q": {"d": 1.0}}), "qrels: no judgments"),
        (
            lambda: ragtrack.evaluate({"q": {"d": 1}}, {"q": {"d": 1.0}}, ["ndcg@x"]),
            "the cutoff must be a positive integer",
        ),
        (
            lambda: ragtrack.evaluate({"q": {"d": 1}}, {"q": {"d": 1.0}}, ["answer_f1"]),
            "need data that a qrels and a run file do not have",
        ),
        (lambda: ragtrack.evaluate({"q": {"d": 1}}, "/no/such/run.trec"), "run.trec: file not found"),
        (
            lambda: ragtrack.evaluate(
                pd.DataFrame({"qid": ["q1", "q2", "q3", None], "docid": ["d"] * 4, "grade": [1] * 4}),
                {"q1": {"d": 1.0}},
            ),
            "qrels row 3: query id is missing",
        ),
        (
            lambda: ragtrack.evaluate(
                pd.DataFrame({"qid": ["q1", np.nan], "docid": ["d"] * 2, "grade": [1, 1]}), {"q1": {"d": 1.0}}
            ),
            "qrels row 1: query id is missing",
        ),
        (
            lambda: ragtrack.evaluate(
                pd.DataFrame({"qid": ["q1", "q1"], "docid": ["d", " "], "grade": [1, 1]}), {"q1": {"d": 1.0}}
            ),
            "qrels row 1: document id is missing",
        ),
        (
            lambda: ragtrack.evaluate(
                pd.DataFrame({"qid": ["q1", "q1"], "docid": ["d", "e"], "grade": [1, None]}), {"q1": {"d": 1.0}}
            ),
            "qrels row 1: grade is missing",
        ),
        (
            lambda: ragtrack.evaluate(
                pd.DataFrame({"qid": ["q1", "q1"], "docid": ["d", "e"], "grade": pd.Series([1, 2.5], dtype=object)}),
                {"q1": {"d": 1.0}},
            ),
            "qrels row 1: grade 2.5 is not an integer",
        ),
        (
            lambda: ragtrack.evaluate(
                pd.DataFrame({"qid": ["q1", "q1"], "docid": ["d", "e"], "grade": [1.0, 2.0]}), {"q1": {"d": 1.0}}
            ),
            "qrels row 0: grade 1.0 is not an integer (a float column: .astype(int) makes its grades integers)",
        ),  # as '1.0' in a qrels file
        (
            lambda: ragtrack.evaluate(
                {"q1": {"d": 1}}, pd.DataFrame({"qid": ["q1", None], "docid": ["d", "e"], "score": [1.0, 2.0]})
            ),
            "run row 1: query id is missing",
        ),
        (
            lambda: ragtrack.evaluate(
                {"q1": {"d": 1}}, pd.DataFrame({"qid": ["q1", "q1"], "docid": ["d", "e"], "score": [1.0, np.nan]})
            ),
            "run row 1: score is missing",
        ),
        (lambda: ragtrack.evaluate({None: {"d": 1}}, {"q": {"d": 1.0}}), "qrels: query id is missing (got None)"),
        (
            lambda: ragtrack.evaluate({"q": {"": 1}}, {"q": {"d": 1.0}}),
            "qrels: query 'q': document id is missing (got '')",
        ),
        (
            lambda: ragtrack.evaluate({"q": {"d": None}}, {"q": {"d": 1.0}}),
            "qrels: query 'q', document 'd': grade is missing",
        ),
        (lambda: ragtrack.evaluate({"q": {"d": 1}}, {float("nan"): {"d": 1.0}}), "run: query id is missing (got nan)"),
        (
            lambda: ragtrack.evaluate_answers({"q1": "a"}, {"q1": 42}),
            "predictions: the prediction for question 'q1' must be a string, got int",
        ),
        (
            lambda: ragtrack.evaluate_answers({"q1": "a"}, {"q1": None}),
            "predictions: the prediction for question 'q1' must be a string, got NoneType",
        ),
        (lambda: ragtrack.compare({}, {"q": {"d": 1}}), "compare needs at least one run"),
        (
            lambda: ragtrack.compare({"a": {"q": {"d": 1.0}}}, {"q": {"d": 1}}, baseline="zz"),
            "baseline 'zz' is not a compared system",
        ),
    ],
)
def test_bad_input_fails_in_one_line(call, message: str) -> None:
    with pytest.raises(RagtrackError, match=message.replace("(", r"\(").replace(")", r"\)")) as failure:
        call()
    assert "\n" not in str(failure.value)


def test_iterables_of_pairs_are_runs_and_qrels_and_anything_else_a_type_error() -> None:
    qrels, run = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}, {"q1": {"d1": 0.5, "d2": 0.9}, "q2": {"d3": 1.0}}
    expected = ragtrack.evaluate(qrels, run, metrics=["ndcg@10", "map"]).per_query
    pairs = ragtrack.evaluate(
        (item for item in qrels.items()), (item for item in run.items()), metrics=["ndcg@10", "map"]
    ).per_query
    assert pairs.equals(expected)
    for given in ((row for row in [("q1", "d1", 0.5)]), 5):
        with pytest.raises(
            TypeError,
            match=r"^run: expected a \{qid: \{docid: score\}\} mapping or an iterable of \(qid, \{docid: score\}\) pairs",
        ):
            ragtrack.evaluate(qrels, given)


def test_compare_gives_the_statistics_of_ragtrack_compare() -> None:
    qrels, run = random_pairs(range(3))
    rng = np.random.default_rng(0)
    other = {q: {d: s + float(rng.normal(0, 1)) for d, s in docs.items()} for q, docs in run.items()}
    table = ragtrack.compare({"bm25": run, "dense": other}, qrels, ["ndcg@10", "mrr"], seed=3, resamples=2000)
    assert table.attrs["baseline"] == "bm25" and list(table.index.get_level_values("system").unique()) == [
        "bm25",
        "dense",
    ]
    from ragtrack.evaluators.significance import paired_t_test, randomization_test, win_tie_loss

    assert any(all(g < 1 for g in docs.values()) for docs in qrels.values())  # counted, as trec_eval counts them
    ours = ragtrack.evaluate(qrels, other, ["ndcg@10"]).per_query.loc[list(qrels), "ndcg@10"].to_numpy()
    base = ragtrack.evaluate(qrels, run, ["ndcg@10"]).per_query.loc[list(qrels), "ndcg@10"].to_numpy()
    row = table.loc[("dense", "ndcg@10")]
    assert row["n"] == len(qrels)
    relevant = [q for q, docs in qrels.items() if any(g >= 1 for g in docs.values())]
    excluded = ragtrack.compare(
        {"bm25": run, "dense": other}, qrels, ["ndcg@10"], seed=3, resamples=2000, without_relevant="exclude"
    )
    assert excluded.loc[("dense", "ndcg@10"), "n"] == len(relevant)
    assert row["mean"] == ours.mean() and row["delta"] == ours.mean() - base.mean()
    assert row["p_ttest"] == paired_t_test(ours, base).p_value
    assert row["p_randomization"] == randomization_test(ours, base, resamples=2000, seed=3).p_value
    assert (row["wins"], row["ties"], row["losses"]) == win_tie_loss(ours, base)
    assert table.loc[("bm25", "mrr"), "baseline"] and np.isnan(table.loc[("bm25", "mrr"), "delta"])


def test_api_docstrings_and_docs_api_examples_run() -> None:
    assert doctest.testmod(api, raise_on_error=False).failed == 0
    page = REPO / "docs" / "api.md"
    outcome = doctest.testfile(
        str(page),
        module_relative=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        extraglobs={"TOY": TOY},
    )
    assert outcome.attempted >= 10 and outcome.failed == 0


def test_import_ragtrack_loads_no_layer_until_an_api_name_is_used() -> None:
    import subprocess
    import sys

    probe = "import sys, ragtrack; print(any(m.startswith(('ragtrack.pipeline', 'ragtrack.core', 'pandas')) for m in sys.modules))"
    assert (
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ragtrack.nope  # noqa: B018


def test_metric_names_read_as_the_cli_reads_them() -> None:
    qrels, run = {"q1": {"d1": 1, "d2": 0}}, {"q1": {"d2": 0.9, "d1": 0.5}}
    assert ragtrack.evaluate(qrels, run, "ndcg@10").aggregate == ragtrack.evaluate(qrels, run, ["ndcg@10"]).aggregate
    assert (
        ragtrack.evaluate(qrels, run, ["NDCG@10", "MRR"]).aggregate
        == ragtrack.evaluate(qrels, run, ["ndcg@10", "mrr"]).aggregate
    )
    with pytest.raises(RagtrackError, match=r"unknown metric 'ndcg10'; .*; did you mean 'ndcg@10'\?$"):
        ragtrack.evaluate(qrels, run, "ndcg10")
    with pytest.raises(TypeError, match=r"^metrics: a metric name or a list of them"):
        ragtrack.evaluate(qrels, run, 10)
    with pytest.raises(TypeError, match=r"^runs: a dict of runs by system name"):
        ragtrack.compare([run, run], qrels)
