"""A small RAG app over the shipped SciFact, evaluated by ``mlflow.genai.evaluate`` with ragtrack's exact
metrics as MLflow scorers (docs/mlflow-scorers.md). Offline: no network, no LLM.

    python docs/examples/rag_app.py                       # all-MiniLM-L6-v2 (ONNX), 30 questions
    python docs/examples/rag_app.py --encoder hashing     # model-free encoder, for a quick run
    python docs/examples/rag_app.py --tracking-uri sqlite:////tmp/rag/mlflow.db --questions 50

The app: BM25 and a dense retriever each return their top ``--depth`` abstracts (a RETRIEVER span each,
``bm25`` and ``dense``), fused by Reciprocal Rank Fusion inside the RETRIEVER span ``retrieve``, whose
output is the ranked list of :class:`mlflow.entities.Document` (``id`` and ``metadata["doc_uri"]``: the
SciFact document id). The "answer" is the title of the top abstract: the source the app would cite (a
stand-in for a generator, so no LLM is needed). Each question's expectations come from the qrels:
``expected_retrieved_context`` (the relevant abstracts, with their grade) and ``expected_response`` (their
titles). The scorers read the last top-level RETRIEVER span (``retrieve``: the fused list); the
``bm25_`` scorers read the ``bm25`` span.

The store defaults to ragtrack's (``$MLFLOW_TRACKING_URI``, else ``sqlite:///$RAGTRACK_ROOT/mlruns/mlflow.db``
or ``./mlruns/mlflow.db``), so ``ragtrack ui`` shows the evaluation run; its Traces tab has every
question's scores and rationales. Indexes are cached in ragtrack's cache (``~/.cache/ragtrack``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # offline: no usage reporting

import mlflow
from mlflow.entities import Document, SpanType

import ragtrack.mlflow
from ragtrack.core.cache import Cache
from ragtrack.core.data import Dataset, load_beir
from ragtrack.core.runs import Run
from ragtrack.pipeline.configuration.config import datasets_dir
from ragtrack.pipeline.records.layout import default_tracking_uri
from ragtrack.retrievers.bm25 import BM25Retriever
from ragtrack.retrievers.dense import DenseRetriever
from ragtrack.retrievers.encoders import Encoder, HashingEncoder, OnnxEncoder
from ragtrack.retrievers.fusion import reciprocal_rank_fusion

METRICS = ["ndcg@10", "recall@100", "mrr", "answer_f1"]
COMPONENT_METRICS = ["ndcg@10", "recall@100"]  # also scored on the bm25 span, as bm25_ndcg_at_10 ...
EXPERIMENT = "ragtrack-rag-app-scifact"
SNIPPET = 300  # characters of title + abstract kept as a Document's page_content (keeps traces small)
_QID = "q"


def make_encoder(name: str) -> Encoder:
    """``hashing``: model-free (fast, weak); ``minilm``: all-MiniLM-L6-v2 on ONNX Runtime (fp32, the
    ``encoder=minilm_onnx`` default of ``ragtrack run``), exported once into the cache."""
    if name == "hashing":
        return HashingEncoder()
    if name == "minilm":
        return OnnxEncoder(model="all-MiniLM-L6-v2", precision="fp32")
    raise ValueError(f"unknown encoder {name!r}; use hashing or minilm")


class RagApp:
    """BM25 + dense retrieval fused with RRF over one corpus; every call is traced."""

    def __init__(self, dataset: Dataset, encoder: Encoder, cache_dir: str | Path, depth: int = 100, rrf_k: float = 60):
        self.depth, self.rrf_k = depth, rrf_k
        cache = Cache(cache_dir)
        self.bm25 = BM25Retriever()
        self.bm25.index(dataset.corpus, cache)
        self.dense = DenseRetriever(encoder)
        self.dense.index(dataset.corpus, cache)
        self.titles = dict(zip(dataset.corpus.ids, dataset.corpus.titles))
        self.snippets = {doc: text[:SNIPPET] for doc, text in zip(dataset.corpus.ids, dataset.corpus.full_texts())}

    def documents(self, run: Run) -> list[Document]:
        """The run's ranking as MLflow Documents (id and doc_uri: the corpus id; score in metadata)."""
        return [
            Document(page_content=self.snippets[doc], metadata={"doc_uri": doc, "score": score}, id=doc)
            for doc, score in run.ranking(_QID)
        ]

    def _component(self, retriever, question: str) -> Run:
        with mlflow.start_span(name=retriever.name, span_type=SpanType.RETRIEVER) as span:
            span.set_inputs({"question": question})
            run = retriever.search({_QID: question}, self.depth)
            span.set_outputs(self.documents(run))
        return run

    @mlflow.trace(span_type=SpanType.RETRIEVER, name="retrieve")
    def retrieve(self, question: str) -> list[Document]:
        """The hybrid ranking: RRF of the bm25 and dense rankings (each its own RETRIEVER span)."""
        runs = {"bm25": self._component(self.bm25, question), "dense": self._component(self.dense, question)}
        fused = reciprocal_rank_fusion(runs, ["bm25", "dense"], k=self.rrf_k, depth=self.depth)
        return self.documents(fused)

    @mlflow.trace(name="answer")
    def answer(self, question: str, documents: list[Document]) -> str:
        """The title of the top abstract: the source the app cites (no LLM)."""
        return self.titles[documents[0].id] if documents else ""

    @mlflow.trace(name="rag_app", span_type=SpanType.CHAIN)
    def __call__(self, question: str) -> dict:
        documents = self.retrieve(question)
        return {"answer": self.answer(question, documents), "doc_ids": [d.id for d in documents]}

    def close(self) -> None:
        self.dense.close()


def evaluation_rows(dataset: Dataset, titles: dict[str, str], questions: int) -> list[dict]:
    """The first ``questions`` judged questions (qrels order) with expectations built from the qrels."""
    rows = []
    for qid, judged in list(dataset.qrels.items())[:questions]:
        relevant = {doc: grade for doc, grade in judged.items() if grade >= 1}
        rows.append(
            {
                "inputs": {"question": dataset.queries[qid]},
                "expectations": {
                    "expected_retrieved_context": [
                        {"doc_uri": doc, "grade": grade, "content": titles[doc]} for doc, grade in judged.items()
                    ],
                    "expected_response": [titles[doc] for doc in relevant],
                },
                "tags": {"qid": qid},
            }
        )
    return rows


def evaluation_scorers() -> list:
    return [
        *ragtrack.mlflow.scorers(METRICS),
        *ragtrack.mlflow.scorers(COMPONENT_METRICS, span_name="bm25", prefix="bm25_"),
    ]


def open_experiment(uri: str, name: str) -> str:
    """Select ``uri`` and the experiment ``name`` (created with its artifacts beside a SQLite store)."""
    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(name) is None and uri.startswith("sqlite:///"):
        artifacts = Path(uri.removeprefix("sqlite:///")).parent / "artifacts" / name
        mlflow.create_experiment(name, artifact_location=artifacts.resolve().as_uri())
    return mlflow.set_experiment(name).experiment_id


def main(argv: list[str] | None = None) -> dict:
    root = Path(os.environ.get("RAGTRACK_ROOT", os.getcwd()))
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(root))
    parser.add_argument("--experiment", default=EXPERIMENT)
    parser.add_argument("--encoder", choices=["minilm", "hashing"], default="minilm")
    parser.add_argument("--questions", type=int, default=30, help="first N judged SciFact test questions (default 30)")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--rrf-k", type=float, default=60)
    parser.add_argument("--cache-dir", default=str(root / ".cache" / "ragtrack"))
    parser.add_argument("--json", help="also write the run id, experiment id and metrics to this file")
    args = parser.parse_args(argv)

    dataset = load_beir(datasets_dir() / "scifact")
    app = RagApp(dataset, make_encoder(args.encoder), args.cache_dir, args.depth, args.rrf_k)
    try:
        rows = evaluation_rows(dataset, app.titles, args.questions)
        experiment_id = open_experiment(args.tracking_uri, args.experiment)
        with mlflow.start_run(run_name=f"rag_app hybrid ({args.encoder}, {len(rows)} questions)") as run:
            mlflow.log_params(
                {
                    "dataset": "scifact",
                    "encoder": args.encoder,
                    "questions": len(rows),
                    "depth": args.depth,
                    "rrf_k": args.rrf_k,
                    "metrics": ",".join(METRICS),
                }
            )
            result = mlflow.genai.evaluate(data=rows, predict_fn=app, scorers=evaluation_scorers())
            mlflow.flush_trace_async_logging()  # every trace is in the store before the run ends (a loaded machine lost some)
    finally:
        app.close()
    metrics = {name: float(value) for name, value in sorted(result.metrics.items())}
    summary = {
        "run_id": run.info.run_id,
        "experiment_id": experiment_id,
        "tracking_uri": args.tracking_uri,
        "metrics": metrics,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
