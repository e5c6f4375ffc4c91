"""End to end on the toy dataset: chunked retrieval, document-level and chunk-level evaluation, MLflow."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from ragtrack.core.cache import Cache
from ragtrack.evaluators.answer import contains_answer, normalize_answer
from ragtrack.evaluators.ranking import score_ranking
from ragtrack.pipeline import registry
from ragtrack.pipeline.configuration.inputs import load_dataset
from ragtrack.pipeline.execution.executor import Executor, JobParts, Live, build_chunker, build_stages
from ragtrack.pipeline.execution.experiment import run_experiment
from ragtrack.pipeline.execution.usage import Meter
from ragtrack.retrievers.chunking import plan_chunks
from tests.support import toy_config


def chunked(cfg):
    """The dataset and its chunk plan, as the experiment's load and chunking stages make them."""
    dataset = load_dataset(cfg.dataset, check_documents=False)
    return dataset, plan_chunks(dataset, *build_chunker(cfg.chunking))


def run_systems(cfg, dataset, plan, cache: Cache, evaluators: list) -> dict:
    """Every system of ``cfg`` run and scored by the live executor."""
    parts = JobParts(cfg, build_stages(cfg), evaluators, [], plan, cache, Meter())
    return Executor(parts, Live(parts.meter, Path(cfg.paths.output_dir))).run(dataset)


def systems(cfg):
    """Load, chunk, retrieve and evaluate like run_experiment, returning the plan and the results."""
    dataset, plan = chunked(cfg)
    evaluators = [registry.build("evaluators", ecfg) for ecfg in cfg.evaluator.values()]
    return dataset, plan, run_systems(cfg, dataset, plan, Cache(cfg.paths.cache_dir), evaluators)


def test_chars_chunking_end_to_end_with_mlflow(tmp_path: Path) -> None:
    cfg = toy_config(
        tmp_path,
        "chunking=chars",
        "chunking.size=40",
        "chunking.overlap=10",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
    )
    results = run_experiment(cfg)
    documents = set(load_dataset(cfg.dataset).corpus.ids)
    assert set(results["systems"]) == {"bm25", "dense", "hybrid"}
    for name, efficiency in results["efficiency"].items():
        assert efficiency["chunks"] > len(documents)
        for metric, value in results["systems"][name].items():
            assert 0 <= value <= 1, (name, metric)
    for system in ("bm25", "dense", "hybrid"):
        lines = (tmp_path / "out" / "runs" / f"{system}.trec").read_text().splitlines()
        ranked = [(line.split()[0], line.split()[2]) for line in lines]
        assert len(ranked) == len(set(ranked)) and {doc_id for _, doc_id in ranked} <= documents
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    children = mlflow.search_runs(experiment_names=["ragtrack-toy"], filter_string="tags.mlflow.parentRunId != ''")
    assert set(children["params.chunking.method"]) == {"chars"} and (children["metrics.chunks"] > len(documents)).all()


def test_generators_get_chunk_texts_and_every_ranking_lists_documents_once(tmp_path: Path) -> None:
    dataset, plan, results = systems(toy_config(tmp_path, "chunking=tokens", "chunking.size=3", "chunking.overlap=1"))
    chunk_ids = set(plan.chunked.corpus.ids)
    for result in results.values():
        assert result.passages is plan.chunked.corpus and set(result.passage_run.scores) == set(dataset.queries)
        assert all(set(ranked) <= chunk_ids for ranked in result.passage_run.scores.values())
        for qid, ranked in result.run.rankings():
            assert all(doc_id in dataset.corpus.ids for doc_id, _ in ranked)
    hybrid = results["hybrid"]
    for qid, ranked in hybrid.run.rankings():  # one best passage per fused document, in the fused order
        passages = [chunk for chunk, _ in hybrid.passage_run.ranking(qid)]
        assert [plan.chunked.parent_of()[chunk] for chunk in passages] == [doc_id for doc_id, _ in ranked]


def test_chunk_level_judgments_are_evaluated_on_chunk_runs_without_mapping(tmp_path: Path) -> None:
    qrels = tmp_path / "chunk-qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1#0\t2\nq1\td1#1\t1\nq1\td2#1\t0\nq2\td10#0\t1\n")
    cfg = toy_config(
        tmp_path, "chunking=tokens", "chunking.size=4", "chunking.overlap=2", f"dataset.qrels_file={qrels}"
    )
    dataset, plan, results = systems(cfg)
    assert plan.level == "chunk"
    for result in results.values():
        assert all(chunk_id in plan.chunked.corpus.ids for ranked in result.run.scores.values() for chunk_id in ranked)
        metrics = list(result.counted.columns)
        expected, _ = score_ranking(result.run.scores, dataset.qrels, metrics)
        assert (result.per_query[metrics] - expected).abs().max().max() < 1e-12
    assert results["bm25"].per_query.loc["q1", "recall@100"] == 1.0


def test_chunking_changes_every_index_key(tmp_path: Path) -> None:
    builds = []
    for chunking in (
        ["chunking=none"],
        ["chunking=chars", "chunking.size=40", "chunking.overlap=5"],
        ["chunking=chars", "chunking.size=30", "chunking.overlap=5"],
        ["chunking=chars", "chunking.size=40", "chunking.overlap=5"],
    ):
        cfg = toy_config(tmp_path, *chunking, "fusion=[]", "depth=10")
        cache = Cache(cfg.paths.cache_dir)
        dataset, plan = chunked(cfg)
        run_systems(cfg, dataset, plan, cache, [registry.build("evaluators", cfg.evaluator.ranking)])
        builds.append(sorted(entry.split("/")[0] for entry in cache.builds))
    assert builds[:3] == [["bm25", "embeddings", "run", "run"]] * 3 and builds[3] == []


def test_mixed_judgments_fail_naming_the_qrels_file(tmp_path: Path) -> None:
    qrels = tmp_path / "mixed.tsv"
    qrels.write_text("q1\td1\t1\nq1\td1#0\t1\n")
    cfg = toy_config(tmp_path, "chunking=chars", f"dataset.qrels_file={qrels}")
    with pytest.raises(Exception, match="mixed.tsv.*mix document ids"):
        systems(cfg)


def test_the_generator_reads_chunk_texts(tmp_path: Path) -> None:
    cfg = toy_config(
        tmp_path,
        "chunking=tokens",
        "chunking.size=3",
        "chunking.overlap=0",
        "generator=extractive",
        "generator.unit=sentence",
        "fusion=[]",
        "retriever=[bm25]",
    )
    _, plan, results = systems(cfg)
    texts = dict(zip(plan.chunked.corpus.ids, plan.chunked.corpus.texts))
    result = results["bm25"]
    for qid, answer in result.per_query["generated_answer"].items():
        top_chunk = result.passage_run.ranking(qid)[0][0]
        assert answer and answer in texts[top_chunk] and len(answer.split()) <= 3


def test_context_recall_reads_the_chunks_a_generator_reads(tmp_path: Path) -> None:
    """Judgments are per document, but the context a RAG system hands its reader is its top chunks:
    context_recall@k checks the top-k passages of ``passage_run`` (one best chunk per document)."""
    cfg = toy_config(
        tmp_path,
        "chunking=tokens",
        "chunking.size=4",
        "chunking.overlap=0",
        "fusion=[]",
        "+evaluator.context_recall={type:context_recall,metrics:[context_recall@1,context_recall@3]}",
    )
    dataset, plan, results = systems(cfg)
    chunk_texts = dict(zip(plan.chunked.corpus.ids, plan.chunked.corpus.full_texts()))
    document_texts = dict(zip(dataset.corpus.ids, dataset.corpus.full_texts()))

    def found(texts: dict, run, qid: str, k: int) -> float:
        """1 if one of the top-k passages of ``run`` contains a gold answer."""
        return float(
            any(
                contains_answer(normalize_answer(texts[pid]), gold)
                for pid, _ in run.ranking(qid)[:k]
                for gold in dataset.answers[qid]
            )
        )

    differs = 0
    for result in results.values():
        for qid in dataset.answers:
            for k in (1, 3):
                assert result.per_query.loc[qid, f"context_recall@{k}"] == found(
                    chunk_texts, result.passage_run, qid, k
                )
                differs += found(chunk_texts, result.passage_run, qid, k) != found(document_texts, result.run, qid, k)
    assert differs > 0, "4-token chunks cut some answers that whole documents contain"
