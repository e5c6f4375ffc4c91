"""Slice attributes: strict parsing of slices files and metadata, the automatic slices' rules, the
wh-word rule behind XQuAD-en's shipped slices file, per-slice summaries and the MLflow key scheme."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragtrack.core.data import load_beir, load_queries
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.pipeline.analysis.slices import (
    Attribute,
    query_attributes,
    query_length_terciles,
    question_type,
    question_types_tsv,
    read_slices_file,
    slice_summaries,
    summarize,
)
from ragtrack.pipeline.configuration.config import datasets_dir
from ragtrack.pipeline.records import layout
from tests.support import TOY

XQUAD = datasets_dir() / "xquad_en"


def toy_copy(tmp_path: Path, queries: list[dict] | None = None) -> Path:
    folder = tmp_path / "toy"
    shutil.copytree(TOY, folder)
    if queries is not None:
        (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return folder


def slices_of(folder: Path, text: str):
    (folder / "slices.tsv").write_text(text)
    return read_slices_file(folder / "slices.tsv", load_beir(folder))


GOOD = "qid\ttopic\tsource\n" + "".join(f"q{i}\t{'bio' if i < 4 else 'phys'}\tx\n" for i in range(1, 7))


def test_slices_file_gives_one_attribute_per_column(tmp_path) -> None:
    topic, source = slices_of(toy_copy(tmp_path), GOOD + "q7\tgeo\tx\n")  # q7: in queries.jsonl, not judged: allowed
    assert (
        topic.name == "topic"
        and topic.order == ("bio", "phys")
        and topic.values["q1"] == "bio"
        and topic.values["q6"] == "phys"
    )
    assert (
        set(topic.values) == {f"q{i}" for i in range(1, 7)} and source.order == ("x",) and topic.source == "slices_file"
    )


@pytest.mark.parametrize(
    "text, problem, line",
    [
        ("", "empty slices file", None),
        ("id\ttopic\n", "header must be 'qid<TAB><attribute>", 1),
        ("qid\n", "header must be", 1),
        ("qid\tto pic\n", "attribute name 'to pic'", 1),
        ("qid\ttopic\ttopic\n", "repeats a column name", 1),
        (GOOD.replace("q3\tbio\tx", "q3\tbio"), "expected 3 tab-separated columns, got 2", 4),
        (GOOD + "q1\tbio\tx\n", "duplicate query id 'q1' (first on line 2)", 8),
        (GOOD + "q99\tbio\tx\n", "unknown query id 'q99' (not in queries.jsonl)", 8),
        (GOOD.replace("q2\tbio\tx", "q2\t \tx"), "empty 'topic' value for query 'q2'", 3),
        ("qid\ttopic\tsource\nq1\tbio\tx\n", "no line for 5 queries of the run, the first: 'q2'", None),
    ],
)
def test_slices_file_defects_are_one_line_errors_naming_file_and_line(tmp_path, text, problem, line) -> None:
    with pytest.raises(InputError) as error:
        slices_of(toy_copy(tmp_path), text)
    message = str(error.value)
    assert "slices.tsv" in message and problem in message and "\n" not in message
    assert f"slices.tsv:{line}: " in message if line else "slices.tsv: " in message


def test_metadata_slices_and_their_errors(tmp_path) -> None:
    queries = [json.loads(line) for line in (TOY / "queries.jsonl").read_text().splitlines()]
    for i, query in enumerate(queries):
        query["metadata"] = {"level": i % 2, "hard": i > 3, "notes": {"free": "text"}}
    folder = toy_copy(tmp_path, queries)
    dataset = load_beir(folder)
    config = {"dataset": {"path": str(folder), "slice_metadata": ["level", "hard"]}}
    level, hard = query_attributes(config, dataset)
    assert (
        level.order == ("0", "1")
        and level.values["q1"] == "0"
        and hard.values["q5"] == "true"
        and hard.source == "metadata"
    )
    with pytest.raises(InputError, match=r"queries.jsonl:1: query 'q1' has a dict .* metadata 'notes'"):
        query_attributes({"dataset": {"path": str(folder), "slice_metadata": ["notes"]}}, dataset)
    with pytest.raises(InputError, match=r"queries.jsonl:1: query 'q1' has no metadata 'missing'"):
        query_attributes({"dataset": {"path": str(folder), "slice_metadata": ["missing"]}}, dataset)
    queries[2]["metadata"] = ["not", "an", "object"]
    with pytest.raises(InputError, match=r"queries.jsonl:3: 'metadata' of query 'q3' must be a JSON object, got list"):
        load_queries(toy_copy(tmp_path / "bad", queries) / "queries.jsonl")


def test_config_errors_name_the_key(tmp_path) -> None:
    dataset = load_beir(TOY)
    with pytest.raises(
        RagtrackError, match="slices: unknown automatic slice 'length'; known: query_length, relevant_docs"
    ):
        query_attributes({"slices": ["length"]}, dataset)
    with pytest.raises(RagtrackError, match="dataset.slice_metadata must be a list of names"):
        query_attributes({"dataset": {"path": str(TOY), "slice_metadata": "level"}}, dataset)
    with pytest.raises(RagtrackError, match="'query_length' is defined twice"):
        query_attributes({"slices": ["query_length", "query_length"]}, dataset)


def test_query_length_terciles_keep_ties_together() -> None:
    queries = {f"q{i}": " ".join(["w"] * n) for i, n in enumerate([1, 2, 2, 2, 3, 5, 8, 8, 9])}
    attribute = query_length_terciles(queries)
    # sorted lengths 1 2 2 2 3 5 8 8 9: c1 = 3rd = 2, c2 = 6th = 5
    assert [attribute.values[f"q{i}"] for i in range(9)] == ["short"] * 4 + ["medium"] * 2 + ["long"] * 3
    assert "short <= 2 < medium <= 5 < long" in attribute.rule
    same = query_length_terciles({"a": "x y", "b": "x y", "c": "x y"})
    assert same.order == ("short",) and set(same.values.values()) == {"short"}  # empty slices are left out


def test_relevant_docs_counts_judgments_at_the_threshold() -> None:
    dataset = load_beir(TOY)
    attribute = query_attributes({"slices": ["relevant_docs"]}, dataset)[0]
    assert attribute.values == {"q1": "1", "q2": "2", "q3": "2", "q4": "2", "q5": "1", "q6": "1"}
    strict = query_attributes({"slices": ["relevant_docs"]}, dataset, threshold=2)[0]
    assert strict.values["q6"] == "0" and strict.order == ("0", "1")


@pytest.mark.parametrize(
    "question, kind",
    [
        ("How many points did the Panthers defense surrender?", "how_many"),
        ("How much did it cost?", "how_many"),
        ("How did the war end?", "how"),
        ("In what year was it built?", "what"),
        ("Whose idea was it?", "who"),
        ("The Panthers beat whom?", "who"),
        ("Which team won?", "which"),
        ("Why-not?", "other"),
        ("Why did it fail?", "why"),
        ("Name a luxury division of Toyota.", "other"),
        ("When, and where?", "when"),
    ],
)
def test_question_type_rule(question, kind) -> None:
    assert question_type(question) == kind


def test_shipped_xquad_slices_file_is_the_documented_rule_and_loads() -> None:
    queries = load_queries(XQUAD / "queries.jsonl")[0]
    assert (XQUAD / "slices.tsv").read_text() == question_types_tsv(queries)
    (attribute,) = read_slices_file(XQUAD / "slices.tsv", load_beir(XQUAD))
    counts = {value: sum(v == value for v in attribute.values.values()) for value in attribute.order}
    assert counts == {
        "how": 47,
        "how_many": 93,
        "other": 16,
        "what": 675,
        "when": 86,
        "where": 45,
        "which": 83,
        "who": 130,
        "why": 15,
    }
    assert f"{sum(counts.values()):,}" in (XQUAD / "SOURCE.md").read_text()


def test_slice_summary_is_the_mean_over_the_slices_counted_rows() -> None:
    rng = np.random.default_rng(0)
    qids = [f"q{i}" for i in range(40)]
    per_query = pd.DataFrame({"ndcg@10": rng.random(40), "answer_f1": rng.random(40)}, index=qids)
    counted = pd.DataFrame({"ndcg@10": rng.random(40) < 0.8, "answer_f1": rng.random(40) < 0.6}, index=qids)
    per_query.loc[~counted["answer_f1"], "answer_f1"] = np.nan
    attribute = Attribute("kind", {q: "ab"[i % 2] for i, q in enumerate(qids)}, ("a", "b"), "automatic", "")
    for value, summary in slice_summaries(per_query, counted, attribute, seed=0).items():
        rows = [q for q in qids if attribute.values[q] == value]
        for metric in per_query.columns:
            kept = [q for q in rows if counted.loc[q, metric]]
            assert summary.loc[metric, "mean"] == pytest.approx(per_query.loc[kept, metric].mean(), abs=1e-12)
            assert (
                summary.loc[metric, "n"] == len(kept)
                and summary.loc[metric, "ci_low"] <= summary.loc[metric, "mean"] <= summary.loc[metric, "ci_high"]
            )


def test_key_scheme_and_findings() -> None:
    assert layout.slice_key("ndcg@10", "question_type", "how many") == "ndcg_at_10/slice/question_type/how_many"
    assert layout.drop_key("recall@100", "typos_10") == "recall_at_100/drop/typos_10"
    assert layout.latency_key("retrieval", 95) == "latency/retrieval_p95_ms"
    assert layout.key_part("..") == "__" and layout.key_part("3+/x") == "3__x"
    qids = ["q1", "q2", "q3"]
    per_query = pd.DataFrame({"mrr": [1.0, 0.5, 0.0]}, index=qids)
    counted = pd.DataFrame({"mrr": [True, True, False]}, index=qids)
    attribute = Attribute("kind", {"q1": "a b", "q2": "a b", "q3": "c"}, ("a b", "c"), "slices_file", "column 'kind'")
    found = summarize({"bm25": (per_query, counted)}, [attribute], seed=0)
    assert found.parent_metrics == {"bm25/mrr/slice/kind/a_b": 0.75}  # slice c: no counted query, no metric
    assert found.system_metrics["bm25"]["mrr/slice/kind/a_b_ci_high"] <= 1.0
    assert found.results["slices"]["attributes"]["kind"] == {
        "source": "slices_file",
        "rule": "column 'kind'",
        "queries": {"a b": 2, "c": 1},
    }
    assert found.results["slices"]["systems"]["bm25"]["kind"]["c"]["mrr"] == {
        "mean": None,
        "std": None,
        "ci_low": None,
        "ci_high": None,
        "n": 0,
    }
    clash = Attribute("kind", {"q1": "a b", "q2": "a_b", "q3": "c"}, ("a b", "a_b", "c"), "slices_file", "")
    with pytest.raises(RagtrackError, match="values 'a b' and 'a_b' map to the same MLflow key 'a_b'"):
        summarize({"bm25": (per_query, counted)}, [clash], seed=0)
