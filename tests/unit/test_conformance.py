"""Every ranking metric that trec_eval has equals pytrec_eval per query, to 1e-9, on 300 random
qrels/run pairs (grades 0-3, ties, empty and short runs, judged non-relevant and unjudged documents,
queries without relevant judgments, queries absent from the run), at relevance thresholds 1 and 2;
and with negative grades (-2..2), which trec_eval reads as "in the pool but unjudged", at 0, 1 and 2.
Means are over every judged query, as trec_eval 10 averages: checked on its own test files
(tests/data/trec_eval) and against pytrec_eval's per-query values. trec_eval's other all_trec measures
equal pytrec_eval's too, except iprec_at_recall and 11pt_avg, whose recall cutoffs trec_eval 10 rounds."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest
import pytrec_eval

import ragtrack
from ragtrack.core.runs import Run, write_trec
from ragtrack.evaluators.ranking import score_ranking
from ragtrack.pipeline.commands.cli import main as cli_main
from tests.support import assert_equal_per_query, ours_to_trec, pytrec_reference, random_pairs

PAIRS_PER_CHUNK = 75


@pytest.mark.parametrize("threshold", [1, 2])
@pytest.mark.parametrize("chunk", range(4))
def test_equals_pytrec_eval_per_query(chunk: int, threshold: int) -> None:
    qrels, run = random_pairs(range(chunk * PAIRS_PER_CHUNK, (chunk + 1) * PAIRS_PER_CHUNK))
    ours, _ = score_ranking(run, qrels, list(ours_to_trec()), threshold=threshold)
    reference = pytrec_reference(qrels, run, threshold)
    assert len(reference) > 1000 and (reference["map"] > 0).any() and (reference["map"] == 0).any()
    assert_equal_per_query(ours, reference)
    unevaluated = [qid for qid in qrels if qid not in reference.index]  # absent or empty: every metric is 0
    assert unevaluated and (ours.loc[unevaluated] == 0).all().all()


def with_negative_grades(qrels: dict, seed: int) -> dict:
    """``qrels`` regraded uniformly from -2..2."""
    rng = random.Random(seed)
    return {qid: {doc: rng.choice([-2, -1, 0, 1, 2]) for doc in judged} for qid, judged in qrels.items()}


@pytest.mark.parametrize("threshold", [1, 2])
def test_negative_grades_equal_trec_eval_per_query(threshold: int) -> None:
    """trec_eval (form_res_rels.c) gives a document judged with a negative grade the value "in the pool
    but unjudged": never relevant, no gain, left out of the judged non-relevant count, skipped by bpref;
    for every measure here that is the same as no judgment. pytrec_eval 0.5.11 itself corrupts its heap
    on negative grades (segfaults or hangs on these qrels), so the reference reads the qrels without
    them, while ours reads them with them."""
    qrels, run = random_pairs(range(400, 550))
    qrels = with_negative_grades(qrels, seed=threshold)
    ours, _ = score_ranking(run, qrels, list(ours_to_trec()), threshold=threshold)
    nonnegative = {
        qid: kept for qid, judged in qrels.items() if (kept := {doc: g for doc, g in judged.items() if g >= 0})
    }
    reference = pytrec_reference(nonnegative, run, threshold)
    assert len(reference) > 1000 and (reference["bpref"] > 0).any()
    assert_equal_per_query(ours, reference)
    unevaluated = [qid for qid in qrels if qid not in reference.index]
    assert unevaluated and (ours.loc[unevaluated] == 0).all().all()


def test_threshold_zero_equals_pytrec_eval_on_grades_raised_by_one() -> None:
    """At threshold 0 every judged document with a grade >= 0 is relevant and a negative grade still is
    not. pytrec_eval refuses level 0 ("should be positive"), so the reference reads the same judgments
    without the negative ones, each grade raised by 1, at level 1: the same relevant documents and no
    judged non-relevant ones, hence the same binary measures and bpref (nDCG's gains differ)."""
    qrels, run = random_pairs(range(550, 650))
    qrels = with_negative_grades(qrels, seed=0)
    binary = [name for name in ours_to_trec() if not name.startswith("ndcg")]
    ours, _ = score_ranking(run, qrels, binary, threshold=0)
    raised = {
        qid: kept for qid, judged in qrels.items() if (kept := {doc: g + 1 for doc, g in judged.items() if g >= 0})
    }
    reference = pytrec_reference(raised, run, 1)[binary]
    assert len(reference) > 1000 and (reference["map"] > 0).any() and (reference["bpref"] > 0).any()
    assert_equal_per_query(ours, reference)
    unevaluated = [qid for qid in qrels if qid not in reference.index]
    assert unevaluated and (ours.loc[unevaluated] == 0).all().all()
    with pytest.raises(TypeError, match="should be positive"):
        pytrec_eval.RelevanceEvaluator(raised, {"map"}, relevance_level=0)


def test_bpref_skips_a_negative_grade() -> None:
    """A relevant document under one graded -1: trec_eval (and pytrec_eval on this small input) gives
    bpref 1 where counting the -1 as judged non-relevant would give 0 (auc counts it among the
    retrieved non-relevant documents, like an unjudged one: 2/3)."""
    qrels = {"q": {"a": -1, "b": 1, "c": 0}}
    run = {"q": {"a": 3.0, "b": 2.0, "c": 1.0, "x": 0.5}}
    ours, _ = score_ranking(run, qrels, ["bpref", "map", "ndcg", "auc"])
    assert ours.loc["q"].to_dict() == pytest.approx(
        {"bpref": 1.0, "map": 0.5, "ndcg": 0.6309297535714575, "auc": 2 / 3}
    )


def test_empty_run_scores_zero() -> None:
    qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
    ours, num_rel = score_ranking({}, qrels, list(ours_to_trec()))
    assert (ours == 0).all().all() and list(num_rel) == [1, 1]


def test_eval_cli_equals_pytrec_eval_on_trec_files(tmp_path: Path, capsys) -> None:
    """``ragtrack eval --json --per-query`` on qrels and run files (graded, ties, queries missing from
    the run, a run query without judgments) against pytrec_eval reading the same files."""
    qrels, run = random_pairs(range(300, 400))
    run["unjudged-query"] = {"d1": 1.0}
    qrels_file, run_file = tmp_path / "qrels.txt", tmp_path / "run.trec"
    qrels_file.write_text(
        "".join(f"{qid} 0 {doc} {grade}\n" for qid, judged in qrels.items() for doc, grade in judged.items())
    )
    write_trec(Run("random", run), run_file)
    for threshold in (1, 2):
        arguments = [
            "eval",
            str(qrels_file),
            str(run_file),
            "--json",
            "--per-query",
            "--relevance-threshold",
            str(threshold),
        ]
        assert cli_main([*arguments, *(f"--metric={name}" for name in ours_to_trec())]) == 0
        ours = pd.DataFrame.from_dict(json.loads(capsys.readouterr().out)["per_query"], orient="index")
        with open(qrels_file) as q, open(run_file) as r:
            reference = pytrec_reference(pytrec_eval.parse_qrel(q), pytrec_eval.parse_run(r), threshold)
        assert list(ours.index) == list(qrels) and len(reference) == sum(1 for qid in qrels if run.get(qid))
        assert_equal_per_query(ours, reference)


TREC_EVAL_TESTS = Path(__file__).parents[1] / "data" / "trec_eval"  # trec_eval 10.0's test/ files (SOURCE.md there)


def trec_eval_all_line(path: Path) -> dict[str, str]:
    """The ``all`` values of a trec_eval output file, as printed (4 decimals)."""
    return {
        name: value for name, qid, value in (line.split() for line in path.read_text().splitlines()) if qid == "all"
    }


@pytest.mark.parametrize("how", ["api", "cli"])
def test_all_line_equals_trec_eval_10_with_a_topic_judged_without_relevant_document(how: str, capsys) -> None:
    """trec_eval 10's qrels.comment.test judges topic 2024-36302 with grade 0 only; trec_eval averages
    over all 31 topics (num_q 31), that one included with its values (0), and so does ragtrack by
    default. ``without_relevant="exclude"`` averages over the other 30 (the figures of issue 36)."""
    qrels, run = TREC_EVAL_TESTS / "qrels.comment.test.gz", TREC_EVAL_TESTS / "results.comment.test.gz"
    expected = trec_eval_all_line(TREC_EVAL_TESTS / "out.comment.test")
    names = {
        "map": "map",
        "p@5": "P_5",
        "p@10": "P_10",
        "p@100": "P_100",
        "mrr": "recip_rank",
        "bpref": "bpref",
        "r-precision": "Rprec",
        "num_rel_ret": "num_rel_ret",
    }
    if how == "api":
        result = ragtrack.evaluate(qrels, run, list(names))
        means, n = result.aggregate, int(result.summary["n"].max())
        assert result.no_relevant == ("2024-36302",) and (result.per_query.loc["2024-36302"] == 0).all()
    else:
        assert cli_main(["eval", str(qrels), str(run), "--json", *(f"-m{name}" for name in names)]) == 0
        printed = json.loads(capsys.readouterr().out)
        means, n = printed["aggregate"], printed["queries"]
    assert n == int(expected["num_q"]) == 31
    assert {trec: f"{means[ours]:.4f}" for ours, trec in names.items() if trec != "num_rel_ret"} == {
        trec: expected[trec] for ours, trec in names.items() if trec != "num_rel_ret"
    }
    assert round(means["num_rel_ret"] * n) == int(expected["num_rel_ret"])  # trec_eval prints the sum
    excluded = ragtrack.evaluate(qrels, run, ["map", "p@10", "mrr", "bpref"], without_relevant="exclude")
    assert {name: round(value, 4) for name, value in excluded.aggregate.items()} == {
        "map": 0.2779,
        "p@10": 0.7967,
        "mrr": 0.8881,
        "bpref": 0.3339,
    }
    assert int(excluded.summary["n"].max()) == 30


def test_means_equal_pytrec_eval_over_every_judged_query() -> None:
    """Random qrels and runs with judged queries without a relevant document and judged queries absent
    from the run: every mean is pytrec_eval's per-query values (it returns the judged queries without a
    relevant document, with their values) summed over the queries it returns, divided by all judged
    queries (trec_eval -c: an absent query scores 0)."""
    qrels, run = random_pairs(range(650, 750))
    for threshold in (1, 2):
        ours = ragtrack.evaluate(qrels, run, list(ours_to_trec()), relevance_threshold=threshold)
        reference = pytrec_reference(qrels, run, threshold)
        without_relevant = [qid for qid in reference.index if all(g < threshold for g in qrels[qid].values())]
        assert len(without_relevant) > 10 and len(reference) < len(qrels)
        assert ours.aggregate == pytest.approx((reference.sum() / len(qrels)).to_dict(), rel=0, abs=1e-12)
        assert set(ours.summary["n"]) == {len(qrels)}


TREC_EVAL_MEASURES = {  # ragtrack's names of trec_eval's other all_trec measures -> pytrec_eval's (trec_eval 9.0.8)
    "gm_map": "gm_map",
    "gm_bpref": "gm_bpref",
    "infAP": "infAP",
    "utility": "utility",
    "binG": "binG",
    "G": "G",
    "ndcg_rel": "ndcg_rel",
    "Rndcg": "Rndcg",
    "set_P": "set_P",
    "set_recall": "set_recall",
    "set_map": "set_map",
    "set_F": "set_F",
    "set_relative_P": "set_relative_P",
    "num_ret": "num_ret",
    "num_rel": "num_rel",
    "num_nonrel_judged_ret": "num_nonrel_judged_ret",
    "relative_P@5": "relative_P_5",
    "relative_P@100": "relative_P_100",
    "Rprec_mult@0.2": "Rprec_mult_0.20",
    "Rprec_mult@1.4": "Rprec_mult_1.40",
}
RECALL_LEVELS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def pytrec_all(qrels: dict, run: dict, threshold: int) -> pd.DataFrame:
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, set(pytrec_eval.supported_measures), relevance_level=threshold)
    return pd.DataFrame.from_dict(evaluator.evaluate({qid: docs for qid, docs in run.items() if docs}), orient="index")


@pytest.mark.parametrize("threshold", [1, 2])
def test_trec_eval_measures_equal_pytrec_eval_per_query(threshold: int) -> None:
    """The measures of trec_eval's all_trec that trec_eval 9.0.8 (pytrec_eval) computes as 10.0 does."""
    qrels, run = random_pairs(range(750, 850))
    ours, _ = score_ranking(run, qrels, list(TREC_EVAL_MEASURES), threshold=threshold)
    reference = pytrec_all(qrels, run, threshold)[list(TREC_EVAL_MEASURES.values())].set_axis(
        list(TREC_EVAL_MEASURES), axis=1
    )
    assert len(reference) > 1000 and (reference["infAP"] > 0).any() and (reference["Rndcg"] > 0).any()
    assert_equal_per_query(ours, reference)


def test_interpolated_precision_differs_from_trec_eval_9_only_by_its_rounding() -> None:
    """trec_eval 10 turns recall level x into lround(x·R) relevant documents, 9.0.8 into (long)(x·R + 0.9):
    where the two agree for every level, so do iprec_at_recall and 11pt_avg; elsewhere they may not."""
    qrels, run = random_pairs(range(850, 950))
    names = [f"iprec_at_recall@{level:g}" for level in RECALL_LEVELS]
    ours, num_rel = score_ranking(run, qrels, [*names, "11pt_avg"])
    reference = pytrec_all(qrels, run, 1)
    same = [
        qid
        for qid, relevant in zip(ours.index, num_rel)
        if qid in reference.index
        and all(math.floor(x * relevant + 0.5) == int(x * relevant + 0.9) for x in RECALL_LEVELS)
    ]
    assert 0 < len(same) < len(reference)
    expected = reference.loc[same, [f"iprec_at_recall_{level:.2f}" for level in RECALL_LEVELS] + ["11pt_avg"]]
    assert_equal_per_query(ours, expected.set_axis([*names, "11pt_avg"], axis=1))
