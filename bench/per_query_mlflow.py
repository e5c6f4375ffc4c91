"""What browsing each query in MLflow costs: ``log_table`` (ragtrack's default) against traces.

    python bench/per_query_mlflow.py [--queries 1000] [--top 10]

For ``--queries`` synthetic queries of one system, each with ``--top`` ranked documents (id, title,
score, grade) and three metric values, the script logs into a fresh SQLite store, the kind a job uses:

- ``table``: one ``MlflowClient.log_table`` call, as ``queries.json`` of the system's run: a row per
  query with the query, the ranked documents as ``rank. id [grade] score title`` lines and the metrics
  (what ``tracking.per_query_table`` logs);
- ``traces``: one trace per query, a RETRIEVER span whose inputs are the query and whose outputs are
  the ranked documents (MLflow's ``Document`` shape, grade and score in the metadata), linked to the
  same kind of run;
- ``traces+assessments``: the same traces with each metric as a feedback assessment
  (``mlflow.log_feedback``), which is how the UI's trace view shows a value per trace.

It prints the wall seconds and the store's growth (database + artifacts) of each, per 1,000 queries,
and their ratio, with the CPU named.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from machine import cpu_model  # bench/ scripts share the machine line

METRICS = ("ndcg@10", "recall@100", "mrr")


def synthetic_queries(count: int, top: int, seed: int = 0) -> list[dict]:
    """Queries with ranked documents, grades and metric values, seeded."""
    rng = random.Random(seed)
    words = [f"word{i}" for i in range(5000)]
    queries = []
    for number in range(count):
        documents = [
            {
                "id": f"d{rng.randrange(10**6)}",
                "title": " ".join(rng.choices(words, k=8)),
                "score": rng.random() * 30,
                "grade": rng.choice([0, 0, 0, 1, 2]),
            }
            for _ in range(top)
        ]
        documents.sort(key=lambda d: -d["score"])
        queries.append(
            {
                "qid": f"q{number}",
                "query": " ".join(rng.choices(words, k=10)),
                "documents": documents,
                "metrics": {metric: rng.random() for metric in METRICS},
            }
        )
    return queries


def store_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def log_as_table(queries: list[dict], uri: str, artifacts: str) -> None:
    import pandas as pd
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.create_experiment("table", artifact_location=artifacts)
    run = client.create_run(experiment, run_name="bm25")
    rows = [
        {
            "qid": q["qid"],
            "query": q["query"],
            "retrieved": "\n".join(
                f"{rank}. {d['id']} [{d['grade']}] {d['score']:.4f} {d['title']}"
                for rank, d in enumerate(q["documents"], start=1)
            ),
            **q["metrics"],
        }
        for q in queries
    ]
    client.log_table(run.info.run_id, pd.DataFrame(rows), "queries.json")
    client.set_terminated(run.info.run_id, "FINISHED")


def log_as_traces(queries: list[dict], uri: str, artifacts: str, assessments: bool) -> None:
    import mlflow
    from mlflow.entities import Document, SpanType

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment_id=mlflow.create_experiment("traces", artifact_location=artifacts))
    with mlflow.start_run(run_name="bm25"):
        for q in queries:
            with mlflow.start_span(name="bm25", span_type=SpanType.RETRIEVER) as span:
                span.set_inputs({"query": q["query"], "qid": q["qid"]})
                span.set_outputs(
                    [
                        Document(
                            page_content=d["title"],
                            id=d["id"],
                            metadata={"doc_uri": d["id"], "score": d["score"], "grade": d["grade"]},
                        ).to_dict()
                        for d in q["documents"]
                    ]
                )
            if assessments:
                trace_id = mlflow.get_last_active_trace_id()
                for metric, value in q["metrics"].items():
                    mlflow.log_feedback(trace_id=trace_id, name=metric, value=value)
    mlflow.flush_trace_async_logging()


def measure(kind: str, queries: list[dict]) -> tuple[float, int]:
    """Seconds and store bytes to log ``queries`` one way, into a fresh store (created before timing)."""
    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory(prefix=f"ragtrack-{kind}-") as scratch:
        root = Path(scratch)
        uri = f"sqlite:///{root / 'mlflow.db'}"
        MlflowClient(uri).search_experiments()  # creates and migrates the store outside the timing
        before = store_bytes(root)
        started = time.perf_counter()
        if kind == "table":
            log_as_table(queries, uri, str(root / "artifacts"))
        else:
            log_as_traces(queries, uri, str(root / "artifacts"), assessments=kind == "traces+assessments")
        seconds = time.perf_counter() - started
        return seconds, store_bytes(root) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")  # time the writes, not a queue
    queries = synthetic_queries(args.queries, args.top)
    per_thousand = 1000 / args.queries
    results = {kind: measure(kind, queries) for kind in ("table", "traces", "traces+assessments")}
    print(f"Machine: {cpu_model()}. {args.queries:,} queries x top {args.top}, per 1,000 queries:")
    for kind, (seconds, size) in results.items():
        print(f"  {kind:<19} {seconds * per_thousand:8.2f} s  {size * per_thousand / 1e6:7.2f} MB")
    seconds, size = results["table"]
    for kind in ("traces", "traces+assessments"):
        print(f"  {kind} / table: {results[kind][0] / seconds:.1f}x time, {results[kind][1] / max(size, 1):.1f}x store")


if __name__ == "__main__":
    main()
