"""The job's run page description (MLflow's ``mlflow.note.content``): a job without ranking metrics
(``evaluator=[answer,llm_judge]``) shows the metric its comparison uses instead of an empty table, and
the judge-agreement table after it is a table of its own (a blank line before it); the terminal
summary shows the agreement in 100 columns."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
from omegaconf import OmegaConf

from ragtrack.pipeline.execution.agreement import run_page_note, summary_text
from ragtrack.pipeline.execution.job_tracking import summary_note
from ragtrack.pipeline.execution.scoring import shown_metrics


def result(means: dict[str, float]) -> SimpleNamespace:
    summary = pd.DataFrame(
        {
            "mean": means,
            "ci_low": {m: v - 0.1 for m, v in means.items()},
            "ci_high": {m: v + 0.1 for m, v in means.items()},
            "n": dict.fromkeys(means, 6),
        }
    )
    return SimpleNamespace(summary=summary, per_query=pd.DataFrame(columns=list(means)))


def test_a_job_without_ranking_metrics_shows_its_first_metric() -> None:
    cfg = OmegaConf.create({"tracking": {"key_metrics": None}})
    answers = {
        "bm25": result({"answer_f1": 0.25, "judge_correctness": 4.0}),
        "dense": result({"answer_f1": 0.5, "judge_correctness": 3.0}),
    }
    assert shown_metrics(cfg, answers) == ["answer_f1"]
    ranked = {"bm25": result({"ndcg@10": 0.6, "mrr": 0.5, "answer_f1": 0.2})}
    assert shown_metrics(cfg, ranked) == [
        "ndcg@10",
        "mrr",
    ]  # the key metrics the systems have, in the key metrics' order
    dataset = SimpleNamespace(name="toy", corpus=[None] * 12)
    note = summary_note(answers, shown_metrics(cfg, answers), dataset, "job")
    assert note.splitlines()[:4] == [
        "| | bm25 | dense |",
        "|---|---:|---:|",
        "| **answer_f1** | &nbsp;&nbsp;0.2500&nbsp;&nbsp; | &nbsp;&nbsp;**0.5000**&nbsp;&nbsp; |",
        "| 95% CI | &nbsp;&nbsp;[0.1500, 0.3500]&nbsp;&nbsp; | &nbsp;&nbsp;[0.4000, 0.6000]&nbsp;&nbsp; |",
    ]


FOUND = {
    "compared": 4,
    "judge_mean": 4.0,
    **{
        f"{name}{end}": value + (0.25 if end == "_ci_high" else 0)
        for name, value in (("kappa", 0.0), ("alpha", 0.125), ("accuracy", 0.5), ("ppi", 4.0))
        for end in ("", "_ci_low", "_ci_high")
    },
}
RESULTS = {
    "agreement": {
        "file": "/labels/of/people.jsonl",
        "labels": 5,
        "unknown_query": 1,
        "systems": {"bm25": {"judge_correctness": FOUND}, "dense": {"judge_faithfulness": FOUND}},
    }
}


def test_the_agreement_table_follows_a_blank_line() -> None:
    note = "summary paragraph." + run_page_note(RESULTS)
    assert note.startswith("summary paragraph.\n\n| system or pair | judge |")
    assert (
        "| bm25 | judge_correctness | 4 | 0.000 [0.000, 0.250] | 0.125 [0.125, 0.375] | 0.500 [0.500, 0.750] | 4.000 | 4.000 [4.000, 4.250] |"
        in note
    )


def test_the_terminal_shows_the_agreement_in_100_columns() -> None:
    text = summary_text(RESULTS)
    lines = text.splitlines()
    assert lines[0].split() == [
        "system",
        "or",
        "pair",
        "judge",
        "compared",
        "kappa",
        "alpha",
        "accuracy",
        "judge",
        "mean",
        "PPI-corrected",
        "[95%",
        "CI]",
    ]
    assert lines[1].split() == [
        "bm25",
        "judge_correctness",
        "4",
        "0.000",
        "0.125",
        "0.500",
        "4.000",
        "4.000",
        "[4.000,",
        "4.250]",
    ]
    assert lines[3].startswith("llm_judge: 5 labels from people.jsonl (1 unknown query: not compared); kappa: Cohen's")
    assert max(map(len, lines)) <= 100 and summary_text({}) == ""
    long = {
        "agreement": RESULTS["agreement"] | {"systems": {"a-system-with-a-long-name": {"judge_correctness": FOUND}}}
    }
    assert max(map(len, summary_text(long).splitlines())) <= 100  # the columns go on in a second block
