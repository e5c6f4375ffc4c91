"""Every ranking metric that trec_eval has equals pytrec_eval per query, to 1e-9, on 300 random
qrels/run pairs (grades 0-3, ties, empty and short runs, judged non-relevant and unjudged documents,
queries without relevant judgments, queries absent from the run), at relevance thresholds 1 and 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import pytrec_eval

from ragtrack.evaluators.ranking import score_ranking
from ragtrack.pipeline.cli import main as cli_main
from ragtrack.core.runs import Run, write_trec
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
    qrels_file.write_text("".join(f"{qid} 0 {doc} {grade}\n" for qid, judged in qrels.items() for doc, grade in judged.items()))
    write_trec(Run("random", run), run_file)
    for threshold in (1, 2):
        arguments = ["eval", str(qrels_file), str(run_file), "--json", "--per-query", "--relevance-threshold", str(threshold)]
        assert cli_main([*arguments, *(f"--metric={name}" for name in ours_to_trec())]) == 0
        ours = pd.DataFrame.from_dict(json.loads(capsys.readouterr().out)["per_query"], orient="index")
        with open(qrels_file) as q, open(run_file) as r:
            reference = pytrec_reference(pytrec_eval.parse_qrel(q), pytrec_eval.parse_run(r), threshold)
        assert list(ours.index) == list(qrels) and len(reference) == sum(1 for qid in qrels if run.get(qid))
        assert_equal_per_query(ours, reference)
