"""What a job's final summary (terminal and report.html) tells beyond its table: the answer
generations that failed (and the judge and citation metrics then present but blank, not skipped), and
the robustness study's drops. Jobs on the toy set, in this process, without tracking."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pandas as pd

from ragtrack.pipeline.analysis.comparison import SystemRun, compare_systems
from ragtrack.pipeline.analysis.comparison_report import detectability
from ragtrack.pipeline.execution.experiment import run_experiment
from tests.support import ChatServer, toy_config


def _config(tmp_path: Path, *overrides: str):
    return toy_config(tmp_path, "retriever=[bm25]", "fusion=[]", "tracking=none", *overrides)


def _report(tmp_path: Path) -> str:
    return (tmp_path / "out" / "comparison" / "report.html").read_text()


def test_when_every_generation_fails_the_judge_and_citations_are_blank_and_the_summary_says_why(
    tmp_path: Path, capsys, caplog
) -> None:
    server = ChatServer(atp_fails=False)
    try:
        cfg = _config(
            tmp_path,
            "generator=openai",
            "generator.model=g",
            f"generator.base_url={server.url}",
            "generator.max_retries=0",
            "generator.prompt='[down] {question} {context}'",
            "evaluator=[ranking,answer,llm_judge,citations]",
            "evaluator.llm_judge.model=j",
            f"evaluator.llm_judge.base_url={server.url}",
        )
        with caplog.at_level(logging.INFO):
            results = run_experiment(cfg)
    finally:
        server.stop()
    assert all(
        "GOLD ANSWERS" not in r["body"]["messages"][-1]["content"] for r in server.requests
    )  # nothing to judge: nothing sent
    assert not [r for r in caplog.records if "does not apply" in r.getMessage()]
    assert [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "no answers: 6 of 6 generations failed" in r.getMessage()
    ]
    means = results["systems"]["bm25"]
    judged = [m for m in means if m.startswith(("judge_", "citation_"))]
    assert {"judge_correctness", "citation_recall", "citation_precision"} <= set(judged)
    assert all(pd.isna(means[m]) for m in judged) and results["efficiency"]["bm25"]["generation_failures"] == 6
    per_query = results["per_query_table"]
    assert set(judged) <= set(per_query.columns) and per_query[judged].isna().all().all()
    records = [
        json.loads(line) for line in (tmp_path / "out" / "systems" / "bm25" / "judge.jsonl").read_text().splitlines()
    ]
    assert len(records) == 6 and {r["error"] for r in records} == {"no generated answer"}
    printed = capsys.readouterr().out
    assert "Answer generation failed:\nbm25: 6 of 6 queries (errors: systems/bm25/generation.json)" in printed
    assert printed.index("Answer generation failed:") > printed.index("* best of each metric")
    assert '<h2 id="generation">Answer generation failed</h2><ul><li>bm25: 6 of 6 queries' in _report(tmp_path)


def test_the_robustness_drops_are_in_the_final_summary_and_the_report(tmp_path: Path, capsys) -> None:
    study = (
        "robustness={seed: 0, metrics: [ndcg@10, mrr], perturbations: {typos_20: {kind: typos, rate: 0.2}, "
        "lowercase: {kind: lowercase}}}"
    )
    results = run_experiment(_config(tmp_path, study))
    printed = capsys.readouterr().out
    summary = printed[printed.index("* best of each metric") :]  # after the main table
    assert "Robustness (metric drop, clean - perturbed):" in summary and max(map(len, summary.splitlines())) <= 100
    report = _report(tmp_path)
    assert '<h2 id="robustness">Robustness to perturbed queries</h2>' in report
    drops = results["robustness"]["drops"]["bm25"]
    for perturbation in ("typos_20", "lowercase"):
        for metric in ("ndcg@10", "mrr"):
            found = drops[perturbation][metric]
            cell = f"{found['drop']:+.4f} [{found['ci_low']:+.4f}, {found['ci_high']:+.4f}]"
            assert re.search(rf"bm25 +{perturbation} +{re.escape(metric)} .*{re.escape(cell)} +6", summary)
            assert f"<td>{perturbation}</td>\n      <td>{metric}</td>" in report and cell in report
    assert "typos_20: typos at rate 0.2, 6 queries changed; lowercase: lowercase, 1 query changed" in " ".join(
        summary.split()
    )


def test_identical_systems_read_as_no_difference_in_the_power_table() -> None:
    """Two systems tied on every query: "no difference", not "not significant, although |Δ| ≥ MDD 0.0000"."""
    frame = pd.DataFrame({"ndcg@10": [0.2, 0.5, 0.9, 0.1]}, index=pd.Index(["q1", "q2", "q3", "q4"], name="qid"))
    systems = [SystemRun(name, name, name, "job", 0, frame, label=name) for name in ("bm25", "copy")]
    comparison = compare_systems(systems, ["ndcg@10"], systems[0])
    (row,) = [r for _, r in comparison.table.iterrows() if not r["baseline"]]
    assert detectability(row) == "no difference: tied on every query"
    other = SystemRun(
        "dense",
        "dense",
        "dense",
        "job",
        0,
        frame.assign(**{"ndcg@10": frame["ndcg@10"] + [0.1, -0.05, 0.02, 0.0]}),
        label="dense",
    )
    (row,) = [
        r
        for _, r in compare_systems([systems[0], other], ["ndcg@10"], systems[0]).table.iterrows()
        if not r["baseline"]
    ]
    assert not detectability(row).startswith("no difference")
