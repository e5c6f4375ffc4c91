"""ragtrack's metrics as MLflow GenAI scorers (``ragtrack.mlflow``, pipeline/commands/scorers.py).

Unit part: what a scorer reads from real MLflow traces (RETRIEVER spans, several or none), from the
outputs and from the expectations, and that an unscorable row gives a Feedback with an error instead of
an exception. Integration part: the example app (docs/examples/rag_app.py, hashing encoder) evaluated by
``mlflow.genai.evaluate`` on SciFact questions in a subprocess (Chroma's threads stay out of the test
process); the assessments and run metrics read back from the store equal ragtrack.evaluate on the
retrieved lists read back from the same traces.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow
from mlflow.entities import Document, Feedback, SpanType

import ragtrack
import ragtrack.mlflow
from ragtrack.core.data import load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import rank_documents
from ragtrack.pipeline.configuration.config import datasets_dir
from tests.support import random_qrels_and_run

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "rag_app.py"
QUESTIONS = 24


@pytest.fixture
def tracing(tmp_path, monkeypatch):
    """Traces go to a fresh SQLite store (default experiment, whose artifacts go to ./mlruns: the test
    runs in tmp_path); the previous tracking URI comes back after."""
    monkeypatch.chdir(tmp_path)
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/traces.db")
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)


def traced(function, *args):
    """Call ``function`` (which opens spans) under a root span and return the stored trace."""
    with mlflow.start_span(name="app", span_type=SpanType.CHAIN):
        function(*args)
    return mlflow.get_trace(mlflow.get_last_active_trace_id(), flush=True)


def retriever(name: str, ids: list, nested=None):
    """A function that opens a RETRIEVER span ``name`` returning Documents with ``ids`` (and runs ``nested`` inside)."""

    def run():
        with mlflow.start_span(name=name, span_type=SpanType.RETRIEVER) as span:
            if nested:
                nested()
            span.set_outputs([Document(page_content=f"text of {d}", metadata={"doc_uri": d}, id=d) for d in ids])

    return run


def score(metric: str, **row) -> Feedback:
    [scorer] = ragtrack.mlflow.scorers([metric], **row.pop("options", {}))
    result = scorer.run(**row)  # the call mlflow.genai.evaluate makes
    assert isinstance(result, Feedback)
    return result


def expected(qrels: dict, ranked: list[str], metric: str, threshold: int = 1) -> float:
    run = {"q": {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)}}
    return float(ragtrack.evaluate({"q": qrels}, run, [metric], threshold).per_query.loc["q", metric])


# --------------------------------------------------------------------------- documents and ids


def test_document_id_precedence_id_then_doc_uri_then_chunk_id() -> None:
    document_id = ragtrack.mlflow.document_id
    assert document_id(Document(page_content="x", metadata={"doc_uri": "u", "chunk_id": "c"}, id="d")) == "d"
    assert document_id({"page_content": "x", "metadata": {"doc_uri": "u", "chunk_id": "c"}, "id": None}) == "u"
    assert document_id({"page_content": "x", "metadata": {"chunk_id": "c"}}) == "c"
    assert document_id("d7") == "d7"
    assert document_id({"page_content": "x", "metadata": {}}) is None
    assert document_id({"id": "d", "metadata": {"doc_uri": "u"}}, id_fields=("doc_uri",)) == "u"


def test_the_last_top_level_retriever_span_is_read_and_span_name_picks_any(tracing) -> None:
    qrels = {"a": 1, "b": 1}
    fused = retriever(
        "retrieve", ["x", "b", "a"], nested=lambda: (retriever("bm25", ["a", "b"])(), retriever("dense", ["b", "y"])())
    )
    trace = traced(fused)
    assert [s.name for s in trace.search_spans(span_type=SpanType.RETRIEVER)] == ["retrieve", "bm25", "dense"]
    default = score("mrr", trace=trace, expectations={"relevant_docs": qrels})
    assert default.value == 0.5 and "RETRIEVER span 'retrieve'" in default.rationale  # the parent, not its children
    assert score("mrr", trace=trace, expectations={"relevant_docs": qrels}, options={"span_name": "bm25"}).value == 1.0
    child = score("ndcg@10", trace=trace, expectations={"relevant_docs": qrels}, options={"span_name": "dense"})
    assert child.value == expected(qrels, ["b", "y"], "ndcg@10") and "rank 1" in child.rationale

    sequential = traced(lambda: (retriever("first", ["a", "b"])(), retriever("second", ["y", "x"])()))
    assert score("mrr", trace=sequential, expectations={"relevant_docs": qrels}).value == 0.0  # the last one
    missing = score("mrr", trace=sequential, expectations={"relevant_docs": qrels}, options={"span_name": "bm25"})
    assert missing.value is None and missing.error.error_code == "NO_RETRIEVER_SPAN"
    assert "'first', 'second'" in missing.error.error_message


def test_no_retriever_span_and_no_ids_in_outputs_is_a_feedback_error_not_an_exception(tracing) -> None:
    trace = traced(lambda: None)
    result = score("ndcg@10", trace=trace, outputs="just an answer", expectations={"relevant_docs": {"a": 1}})
    assert result.value is None and result.error.error_code == "NO_RETRIEVED_DOCUMENTS"
    assert "RETRIEVER" in result.error.error_message
    forced = score(
        "ndcg@10", trace=trace, outputs=["a"], expectations={"relevant_docs": {"a": 1}}, options={"source": "trace"}
    )
    assert forced.error.error_code == "NO_RETRIEVER_SPAN"
    assert (
        score("ndcg@10", trace=None, expectations={"relevant_docs": {"a": 1}}).error.error_code
        == "NO_RETRIEVED_DOCUMENTS"
    )


def test_a_document_without_id_or_a_failed_span_is_an_error(tracing) -> None:
    def no_ids():
        with mlflow.start_span(name="retrieve", span_type=SpanType.RETRIEVER) as span:
            span.set_outputs([Document(page_content="a", id="a"), Document(page_content="anonymous")])

    result = score("mrr", trace=traced(no_ids), expectations={"relevant_docs": {"a": 1}})
    assert result.error.error_code == "DOCUMENT_WITHOUT_ID" and "rank 2" in result.error.error_message

    def failed():
        with mlflow.start_span(name="retrieve", span_type=SpanType.RETRIEVER) as span:
            span.set_inputs({"question": "q"})  # and no outputs: the retriever returned nothing

    assert (
        score("mrr", trace=traced(failed), expectations={"relevant_docs": {"a": 1}}).error.error_code
        == "NO_RETRIEVED_DOCUMENTS"
    )


def test_outputs_shapes_when_the_trace_has_no_retriever_span(tracing) -> None:
    trace = traced(lambda: None)
    qrels = {"a": 1, "c": 1}
    want = expected(qrels, ["b", "a", "c"], "map")
    documents = [{"page_content": "b", "metadata": {"doc_uri": "b"}}, Document(page_content="a", id="a"), "c"]
    for outputs in (["b", "a", "c"], {"doc_ids": ["b", "a", "c"], "answer": "x"}, {"retrieved": documents}):
        assert score("map", trace=trace, outputs=outputs, expectations={"relevant_docs": qrels}).value == want
    with_span = traced(retriever("retrieve", ["a", "c"]))
    assert score("map", trace=with_span, outputs=["b", "a", "c"], expectations={"relevant_docs": qrels}).value == 1.0
    assert (
        score(
            "map",
            trace=with_span,
            outputs=["b", "a", "c"],
            expectations={"relevant_docs": qrels},
            options={"source": "outputs"},
        ).value
        == want
    )

    def as_json():
        with mlflow.start_span(name="retrieve", span_type=SpanType.RETRIEVER) as span:
            span.set_outputs(
                json.dumps([{"page_content": "b", "id": "b"}, {"page_content": "a", "metadata": {"doc_uri": "a"}}])
            )

    assert score("map", trace=traced(as_json), expectations={"relevant_docs": qrels}).value == expected(
        qrels, ["b", "a"], "map"
    )
    bad = score("map", outputs={"doc_ids": "a b"}, expectations={"relevant_docs": qrels})
    assert bad.error.error_code == "BAD_RETRIEVED_DOCUMENTS"


# --------------------------------------------------------------------------- expectations and values


def test_grades_threshold_and_both_expectation_fields() -> None:
    ranked = ["n", "b", "a", "z"]
    qrels = {"a": 2, "b": 1, "n": 0, "m": 3}
    for metric in ("ndcg@10", "ndcg_exp@3", "map", "recall@2", "mrr", "bpref", "r-precision"):
        for threshold in (1, 2):
            value = score(
                metric,
                outputs=ranked,
                expectations={"relevant_docs": qrels},
                options={"relevance_threshold": threshold},
            ).value
            assert value == expected(qrels, ranked, metric, threshold), (metric, threshold)
    context = [
        {"doc_uri": "a", "grade": 2, "content": "..."},
        {"doc_uri": "b"},
        {"doc_uri": "n", "grade": 0},
        {"id": "m", "grade": 3},
        {"doc_uri": "b", "grade": 1},
    ]
    assert ragtrack.mlflow.judgments({"expected_retrieved_context": context}) == (qrels, "expected_retrieved_context")
    assert score("ndcg@10", outputs=ranked, expectations={"expected_retrieved_context": context}).value == expected(
        qrels, ranked, "ndcg@10"
    )
    assert ragtrack.mlflow.judgments({"relevant_docs": ["a", "b"], "expected_retrieved_context": ["z"]}) == (
        {"a": 1, "b": 1},
        "relevant_docs",
    )

    feedback = score(
        "ndcg@10", outputs=ranked, expectations={"relevant_docs": qrels}, options={"relevance_threshold": 2}
    )
    assert "Found: a (rank 3, grade 2)" in feedback.rationale and "Missed: m (grade 3)" in feedback.rationale
    assert feedback.name == "ndcg_at_10" and feedback.metadata["retrieved"] == "4"

    none_relevant = score(
        "mrr", outputs=ranked, expectations={"relevant_docs": {"a": 1}}, options={"relevance_threshold": 2}
    )
    assert none_relevant.value == 0.0 and none_relevant.error is None  # counted, as trec_eval counts the query
    excluded = score(
        "mrr",
        outputs=ranked,
        expectations={"relevant_docs": {"a": 1}},
        options={"relevance_threshold": 2, "without_relevant": "exclude"},
    )
    assert excluded.value is None and excluded.error.error_code == "NO_RELEVANT_DOCUMENT"
    assert score("mrr", outputs=ranked, expectations={"expected_response": "x"}).error.error_code == "NO_JUDGMENTS"
    assert score("mrr", outputs=ranked, expectations=None).error.error_code == "NO_JUDGMENTS"
    assert score("mrr", outputs=ranked, expectations="relevant_docs").error.error_code == "NO_JUDGMENTS"
    for bad in ({"a": 1.5}, {"a": True}, {"a": "1"}):
        assert score("mrr", outputs=ranked, expectations={"relevant_docs": bad}).error.error_code == "BAD_JUDGMENTS"


def test_a_repeated_document_counts_once_at_its_first_rank() -> None:
    qrels = {"a": 1, "b": 1}
    assert score("mrr", outputs=["x", "a", "x", "b"], expectations={"relevant_docs": qrels}).value == 0.5
    value = score("p@3", outputs=["x", "x", "a", "b"], expectations={"relevant_docs": qrels}).value
    assert value == expected(qrels, ["x", "a", "b"], "p@3") == 2 / 3


METRICS = [
    "ndcg@10",
    "ndcg@3",
    "recall@20",
    "mrr",
    "mrr@5",
    "map",
    "map@10",
    "p@5",
    "hit@3",
    "r-precision",
    "bpref",
    "auc",
    "ndcg_exp@10",
    "dcg@5",
    "f1@5",
    "num_rel_ret",
]


@pytest.mark.parametrize("seed", range(3))
def test_every_value_equals_ragtrack_evaluate_on_the_same_ranking(seed: int) -> None:
    """Random graded qrels and runs with ties: each scorer on a query's trec_eval-ordered list equals
    ragtrack.evaluate over the whole run, for every per-query metric and threshold."""
    qrels, run = random_qrels_and_run(seed)
    for threshold in (1, 2):
        scorers = {
            s.metric: s
            for s in ragtrack.mlflow.scorers(METRICS + ["err@10", "mean_rank"], relevance_threshold=threshold)
        }
        excluding = ragtrack.mlflow.scorers(["mrr"], relevance_threshold=threshold, without_relevant="exclude")[0]
        reference = ragtrack.evaluate(qrels, run, METRICS, threshold).per_query
        for qid, judged in qrels.items():
            ranked = [doc for doc, _ in rank_documents(run.get(qid, {}))]
            expectations = {"relevant_docs": judged}
            if not any(g >= threshold for g in judged.values()):
                assert (
                    excluding.run(outputs=ranked, expectations=expectations).error.error_code == "NO_RELEVANT_DOCUMENT"
                )
            for metric in METRICS:
                assert (
                    scorers[metric].run(outputs=ranked, expectations=expectations).value == reference.loc[qid, metric]
                ), (qid, metric)
            for metric in (
                "err@10",
                "mean_rank",
            ):  # depend on the whole run or qrels: equal ragtrack.evaluate on this query alone
                alone = ragtrack.evaluate({qid: judged}, {qid: run.get(qid, {})}, [metric], threshold).per_query.loc[
                    qid, metric
                ]
                assert scorers[metric].run(outputs=ranked, expectations=expectations).value == alone


def test_answer_scorers_equal_evaluate_answers() -> None:
    golds = ["Denver Broncos", "the Broncos of Denver"]
    for metric in ("answer_f1", "exact_match", "rouge1"):
        want = ragtrack.evaluate_answers({"q": golds}, {"q": "the Broncos"}, [metric]).per_query.loc["q", metric]
        for outputs in ("the Broncos", {"answer": "the Broncos", "doc_ids": ["a"]}, {"response": "the Broncos"}):
            assert score(metric, outputs=outputs, expectations={"expected_response": golds}).value == want
    one = score("exact_match", outputs="denver broncos!", expectations={"expected_response": "Denver Broncos"})
    assert one.value == 1.0 and one.name == "exact_match" and "'Denver Broncos'" in one.rationale
    assert (
        score("answer_f1", outputs={"doc_ids": ["a"]}, expectations={"expected_response": "x"}).error.error_code
        == "NO_ANSWER"
    )
    assert (
        score("answer_f1", outputs="x", expectations={"relevant_docs": {"a": 1}}).error.error_code == "NO_GOLD_ANSWER"
    )
    assert score("answer_f1", outputs="x", expectations={"expected_response": []}).error.error_code == "NO_GOLD_ANSWER"
    assert (
        score("exact_match", outputs="Denver", expectations="denver").value == 1.0
    )  # a plain string is the gold answer


def test_scorers_names_and_bad_metrics() -> None:
    built = ragtrack.mlflow.scorers(["ndcg@10", "recall@100", "mrr", "answer_f1"], relevance_threshold=1)
    assert [s.name for s in built] == ["ndcg_at_10", "recall_at_100", "mrr", "answer_f1"]
    assert all(isinstance(s, mlflow.genai.scorers.Scorer) for s in built) and built[0].description
    assert [s.name for s in ragtrack.mlflow.scorers(["ndcg@10"], span_name="bm25", prefix="bm25_")] == [
        "bm25_ndcg_at_10"
    ]
    for bad, message in (
        (["nope"], "unknown metric"),
        (["context_recall@5"], "no MLflow scorer"),
        (["mrr", "mrr"], "twice"),
        (["ndcg@x"], "ndcg@x"),
        ([], "at least one"),
    ):
        with pytest.raises(RagtrackError, match=message):
            ragtrack.mlflow.scorers(bad)
    with pytest.raises(RagtrackError, match="must not contain '/'"):
        ragtrack.mlflow.scorers(["mrr"], prefix="bm25/")
    with pytest.raises(RagtrackError, match="source"):
        ragtrack.mlflow.scorers(["mrr"], source="span")


def test_mlflow_genai_evaluate_on_rows_with_outputs(tracing) -> None:
    """No predict_fn: MLflow's own traces have no RETRIEVER span, so the ids come from the outputs."""
    rows = [
        {
            "inputs": {"question": "q1"},
            "outputs": {"doc_ids": ["b", "a"], "answer": "Denver"},
            "expectations": {"relevant_docs": {"a": 1}, "expected_response": "Denver"},
        },
        {
            "inputs": {"question": "q2"},
            "outputs": {"doc_ids": ["c"], "answer": "no"},
            "expectations": {"relevant_docs": {"c": 2, "d": 1}, "expected_response": "yes"},
        },
        {
            "inputs": {"question": "q3"},
            "outputs": {"answer": "no"},
            "expectations": {"relevant_docs": {"c": 1}, "expected_response": "no"},
        },
    ]
    result = mlflow.genai.evaluate(data=rows, scorers=ragtrack.mlflow.scorers(["mrr", "ndcg@10", "exact_match"]))
    reference = ragtrack.evaluate(
        {"1": {"a": 1}, "2": {"c": 2, "d": 1}}, {"1": {"b": 2.0, "a": 1.0}, "2": {"c": 1.0}}, ["mrr", "ndcg@10"]
    )
    assert math.isclose(
        result.metrics["mrr/mean"], reference.aggregate["mrr"], abs_tol=1e-12
    )  # the third row is an error, not a 0
    assert math.isclose(result.metrics["ndcg_at_10/mean"], reference.aggregate["ndcg@10"], abs_tol=1e-12)
    assert result.metrics["exact_match/mean"] == 2 / 3


# --------------------------------------------------------------------------- the example app, end to end


@pytest.mark.slow  # a whole job or several: make test-slow
def test_example_rag_app_scores_equal_ragtrack_evaluate_on_the_traced_lists(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    summary_file = tmp_path / "summary.json"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "RAGTRACK_ROOT": str(tmp_path)}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--encoder",
            "hashing",
            "--questions",
            str(QUESTIONS),
            "--tracking-uri",
            uri,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--json",
            str(summary_file),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(summary_file.read_text())

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    traces = client.search_traces(locations=[summary["experiment_id"]], run_id=summary["run_id"], max_results=1000)
    assert len(traces) == QUESTIONS

    scifact = load_beir(datasets_dir() / "scifact")
    titles = dict(zip(scifact.corpus.ids, scifact.corpus.titles))
    qrels, fused, bm25, answers, golds, logged = {}, {}, {}, {}, {}, {}
    for trace in traces:
        qid = trace.info.tags["qid"]
        spans = {s.name: s for s in trace.data.spans}
        assert (
            spans["retrieve"].span_type == SpanType.RETRIEVER and spans["bm25"].parent_id == spans["retrieve"].span_id
        )
        fused[qid] = [d["id"] for d in spans["retrieve"].outputs]
        bm25[qid] = [d["id"] for d in spans["bm25"].outputs]
        response = spans["rag_app"].outputs
        assert len(fused[qid]) == 100 and fused[qid] == response["doc_ids"]
        expectations = {a.name: a.value for a in trace.info.assessments if a.expectation is not None}
        qrels[qid] = {e["doc_uri"]: e["grade"] for e in expectations["expected_retrieved_context"]}
        assert qrels[qid] == scifact.qrels[qid]  # the expectations are the qrels
        answers[qid], golds[qid] = response["answer"], expectations["expected_response"]
        assert golds[qid] == [titles[d] for d in scifact.qrels[qid]]
        feedback = [a for a in trace.info.assessments if isinstance(a, Feedback)]
        assert all(a.error is None for a in feedback), [a.error for a in feedback]
        logged[qid] = {a.name: a.value for a in feedback}
    assert list(qrels) != [] and set(qrels) == set(list(scifact.qrels)[:QUESTIONS])

    def as_run(lists):
        return {qid: {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)} for qid, ranked in lists.items()}

    evaluations = [  # (Feedback name prefix, ragtrack's evaluation of the lists those scorers read)
        ("", ragtrack.evaluate(qrels, as_run(fused), ["ndcg@10", "recall@100", "mrr"])),
        ("bm25_", ragtrack.evaluate(qrels, as_run(bm25), ["ndcg@10", "recall@100"])),
        ("", ragtrack.evaluate_answers(golds, answers, ["answer_f1"])),
    ]
    run_metrics = client.get_run(summary["run_id"]).data.metrics
    checked = 0
    for prefix, evaluation in evaluations:
        for metric in evaluation.per_query.columns:
            name = prefix + metric.replace("@", "_at_")
            for qid in qrels:
                assert abs(logged[qid][name] - evaluation.per_query.loc[qid, metric]) <= 1e-12, (qid, name)
                checked += 1
            assert abs(run_metrics[f"{name}/mean"] - evaluation.aggregate[metric]) <= 1e-12, name
            assert abs(summary["metrics"][f"{name}/mean"] - evaluation.aggregate[metric]) <= 1e-12, name
    assert checked == 6 * QUESTIONS
    assert 0 < evaluations[0][1].aggregate["ndcg@10"] < 1 and 0 < evaluations[2][1].aggregate["answer_f1"] < 1
    ndcg = [a for a in traces[0].info.assessments if a.name == "ndcg_at_10"][0]
    assert "RETRIEVER span 'retrieve'" in ndcg.rationale and "Found:" in ndcg.rationale and "Missed:" in ndcg.rationale
