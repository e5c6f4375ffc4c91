"""A run made elsewhere is a system like any other (``retriever=[run_file]``): fused with BM25 exactly
as the fusion functions fuse the runs that ``ragtrack eval``'s reader reads, scored as ``ragtrack eval``
scores the file, compared, logged to MLflow and the report; gzip read; cached by content, not path;
a malformed file stops the job in one line before anything runs; queries and documents that the
dataset does not have are warned about, and a reader of texts refuses the documents; a sweep over
files runs one job per file, the relative paths read from the launch folder."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import ragtrack
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import read_run_columns, read_trec
from ragtrack.pipeline.records import layout
from ragtrack.pipeline.run_files import evaluate_files
from ragtrack.retrievers.fusion import reciprocal_rank_fusion
from tests.support import TOY
from tests.support import ragtrack as ragtrack_cli

QRELS = TOY / "qrels" / "test.tsv"
JOB = ("run", "dataset=toy", "retriever=[bm25,run_file]", "retriever.run_file.system=anserini")
# lines out of order, ranks that disagree with the scores, a tie (d2 before d1: trec_eval's larger id first),
# an unknown query (q99), an unknown document (zz9); q5 and q6 are missing
OTHER = """q2 Q0 zz9 1 1.0 other
q1 Q0 d1 5 3.5 other
q1 Q0 d2 1 3.5 other
q2 Q0 d10 9 2 other
q1 Q0 d3 3 1.0 other
q3 Q0 d4 1 0.5 other
q3 Q0 d3 2 0.25 other
q4 Q0 d12 1 7 other
q99 Q0 d1 1 0.5 other
"""
SECOND = "q1 Q0 d1 1 1 second\nq3 Q0 d4 1 1 second\nq5 Q0 d8 1 1 second\n"


def results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """bm25, the run file as ``anserini`` and their RRF, one job through the CLI with MLflow; the run
    file given by a relative path."""
    root = tmp_path_factory.mktemp("run_file")
    (root / "other.trec").write_text(OTHER)
    done = ragtrack_cli(root, *JOB, "retriever.run_file.path=other.trec", "fusion.rrf.members=[bm25,anserini]")
    assert done.returncode == 0, done.stderr[-3000:]
    (folder,) = (root / "outputs" / "runs").glob("*/")
    return root, folder, done.stdout + done.stderr


def test_the_fusion_with_bm25_is_the_fusion_of_the_runs_ragtrack_eval_reads(job) -> None:
    root, folder, _ = job
    assert list(results(folder)["systems"]) == ["bm25", "anserini", "hybrid"]
    queries = {"q1", "q2", "q3", "q4", "q5", "q6"}
    other = read_run_columns(root / "other.trec").to_run("anserini")
    assert read_trec(folder / "runs" / "anserini.trec").scores == {
        q: r for q, r in other.scores.items() if q in queries
    }
    bm25 = read_trec(folder / "runs" / "bm25.trec")
    fused = reciprocal_rank_fusion({"bm25": bm25, "anserini": other}, ["bm25", "anserini"], "hybrid", k=60, depth=100)
    assert read_trec(folder / "runs" / "hybrid.trec").scores == {q: r for q, r in fused.scores.items() if q in queries}


def test_the_run_file_system_scores_as_ragtrack_eval_scores_the_file(job) -> None:
    root, folder, log = job
    evaluation = evaluate_files(QRELS, root / "other.trec")
    scored = results(folder)
    for metric, row in evaluation.summary.items():
        assert scored["systems"]["anserini"][metric] == pytest.approx(row["mean"], abs=1e-12), metric
    counts = ("unknown_queries", "unknown_documents", "queries_without_hits")
    assert {name: scored["efficiency"]["anserini"][name] for name in counts} == dict(zip(counts, (1.0, 1.0, 2.0)))
    assert (
        f"anserini: queries of {root / 'other.trec'} that the dataset does not have: 1 (e.g. 'q99'); ignored, as trec_eval ignores them"
        in log
    )
    assert (
        "anserini: documents of its run that the corpus does not have: 1 (e.g. 'zz9'); they count as not relevant, as in trec_eval, "
        "and have no text for a reranker or generator to read"
    ) in log
    assert "anserini: 2 of 6 queries have no hits (they score 0 on every metric)" in log


def test_the_run_file_system_is_compared_reported_and_logged(job) -> None:
    root, folder, _ = job
    assert "anserini" in (folder / "comparison" / "report.html").read_text()
    assert "anserini" in (folder / "comparison" / "comparison.md").read_text()
    client = MlflowClient(f"sqlite:///{root}/mlruns/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("ragtrack-toy").experiment_id])
    (child,) = [r for r in runs if r.data.tags.get(layout.TAG_SYSTEM) == "anserini"]
    assert child.data.metrics["ndcg_at_10"] == results(folder)["systems"]["anserini"]["ndcg@10"]
    assert child.data.metrics["unknown_documents"] == 1.0 and child.data.params["path"] == str(
        root / "other.trec"
    )  # made absolute: the job names its file from any folder
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert {"anserini/ndcg_at_10", "hybrid/ndcg_at_10"} <= set(parent.data.metrics)


def test_gzip_and_a_copy_elsewhere_are_the_same_system_and_an_edit_a_new_one(job, tmp_path: Path) -> None:
    root, folder, _ = job
    shared = [
        "dataset=toy",
        "retriever=[bm25,run_file]",
        "retriever.run_file.system=anserini",
        "fusion.rrf.members=[bm25,anserini]",
        "tracking=none",
        f"paths.root_dir={root}",
        f"paths.cache_dir={root / '.cache' / 'ragtrack'}",
    ]  # the job's cache
    copy = tmp_path / "copy.trec"
    shutil.copy(root / "other.trec", copy)
    again = ragtrack.run_experiment([*shared, f"retriever.run_file.path={copy}"]).results
    assert again["efficiency"]["anserini"]["run_from_cache"] == 1.0  # the content is the key, not the path
    assert again["systems"] == results(folder)["systems"]
    (tmp_path / "other.trec.gz").write_bytes(gzip.compress(OTHER.encode()))
    packed = ragtrack.run_experiment([*shared, f"retriever.run_file.path={tmp_path / 'other.trec.gz'}"]).results
    assert packed["systems"] == results(folder)["systems"]
    copy.write_text(OTHER.replace("q4 Q0 d12 1 7", "q4 Q0 d6 1 7"))
    edited = ragtrack.run_experiment([*shared, f"retriever.run_file.path={copy}"]).results
    assert edited["efficiency"]["anserini"]["run_from_cache"] == 0.0
    assert edited["systems"]["hybrid"] != results(folder)["systems"]["hybrid"]


@pytest.mark.parametrize(
    ("extra", "reader"),
    [
        (
            ["+reranker.oracle={_target_:tests.support.OracleReranker,input:anserini}"],
            r"anserini\+oracle \(reranking anserini\)",
        ),
        (["generator=extractive", "generator.top_k=2"], "the passages of anserini"),
    ],
)
def test_a_reader_of_texts_refuses_the_documents_the_corpus_does_not_have(job, extra: list[str], reader: str) -> None:
    root, _, _ = job
    with pytest.raises(
        RagtrackError,
        match=rf"^{reader}: no text for 1 of its documents, which are not in the corpus \(e\.g\. 'zz9'\)$",
    ):
        ragtrack.run_experiment(
            [
                *JOB[1:],
                f"retriever.run_file.path={root / 'other.trec'}",
                "fusion=[]",
                "tracking=none",
                f"paths.root_dir={root}",
                *extra,
            ]
        )


def test_a_job_that_searches_chunks_and_judges_documents_refuses_a_run_file(job) -> None:
    root, _, _ = job
    with pytest.raises(
        RagtrackError, match=r"^anserini: a run file ranks the judged documents, but this job retrieves their chunks "
    ):
        ragtrack.run_experiment(
            [
                *JOB[1:],
                f"retriever.run_file.path={root / 'other.trec'}",
                "fusion=[]",
                "tracking=none",
                f"paths.root_dir={root}",
                "chunking=sentences",
            ]
        )


def test_a_malformed_run_file_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "bad.trec").write_text("q1 Q0 d1 1 2.0 x\nq1 Q0 d2 2 x\n")
    done = ragtrack_cli(tmp_path, *JOB, "retriever.run_file.path=bad.trec", "fusion=[]")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        done.stderr.strip().splitlines()[-1]
        == f"ragtrack: error: {tmp_path / 'bad.trec'}:2: expected 6 columns 'qid Q0 docid rank score tag', got 5"
    )
    assert (
        not list(tmp_path.rglob("results.json"))
        and not (tmp_path / "mlruns").exists()
        and not (tmp_path / ".cache").exists()
    )


def test_a_sweep_over_run_files_runs_one_job_per_file(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "other.trec").write_text(OTHER)
    (tmp_path / "runs" / "second.trec").write_text(SECOND)
    done = ragtrack_cli(
        tmp_path,
        "run",
        "-m",
        *JOB[1:],
        "retriever.run_file.path=runs/other.trec,runs/second.trec",
        "fusion.rrf.members=[bm25,anserini]",
        "tracking=none",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = sorted((tmp_path / "outputs" / "multiruns").glob("*/*/results.json"), key=lambda p: int(p.parent.name))
    for path, name in zip(jobs, ("other.trec", "second.trec"), strict=True):
        scored = json.loads(path.read_text())
        assert list(scored["systems"]) == ["bm25", "anserini", "hybrid"]
        assert scored["systems"]["anserini"]["ndcg@10"] == pytest.approx(
            evaluate_files(QRELS, tmp_path / "runs" / name).summary["ndcg@10"]["mean"], abs=1e-12
        )
    assert [json.loads(p.read_text())["efficiency"]["bm25"]["run_from_cache"] for p in jobs] == [0.0, 1.0]
    assert (
        "retriever.run_file.path=runs/other.trec" in done.stdout
        and "retriever.run_file.path=runs/second.trec" in done.stdout
    )
