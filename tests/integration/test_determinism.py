"""Same data and config, same bytes: run files and metrics of every system (bm25, dense, and each
fusion) are identical across PYTHONHASHSEEDs, BLAS/OpenMP thread counts and fresh index builds; a
query without hits scores 0 and the job still succeeds, even when no query has a hit."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.support import ragtrack

SYSTEMS = ("bm25", "dense", "hybrid", "combsum", "combmnz", "linear")
JOB = (
    "run",
    "dataset=beir",
    "encoder=hashing",
    "retriever=[bm25,dense]",
    "fusion=[rrf,combsum,combmnz,linear]",
    "tracking=none",
    "depth=20",
)


def write_corpus(folder: Path, documents: int, queries: int, seed: int = 0) -> Path:
    """A BEIR folder of random documents over a small Zipf-like vocabulary, so scores tie often
    (repeated texts included) and depth cuts through ties."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    weights = [1 / (rank + 1) for rank in range(len(words))]

    def text(length: int) -> str:
        return " ".join(rng.choices(words, weights, k=length))

    folder.mkdir(parents=True)
    texts = [text(rng.randint(3, 30)) for _ in range(documents)]
    texts[1::50] = [texts[0]] * len(texts[1::50])  # identical documents: tied scores in every system
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": text(rng.randint(1, 5))}) + "\n" for i in range(queries))
    )
    (folder / "qrels").mkdir()
    lines = [f"q{i}\td{rng.randrange(documents)}\t{rng.randint(1, 2)}\n" for i in range(queries)]
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(sorted(set(lines))))
    return folder


def job_outputs(root: Path, dataset: Path, hash_seed: int, threads: int) -> tuple[dict[str, bytes], dict]:
    """Run files and results.json of one job in ``root`` (its own fresh cache)."""
    env = {
        "PYTHONHASHSEED": str(hash_seed),
        **{v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
    }
    root.mkdir()
    done = ragtrack(root, *JOB, f"dataset.path={dataset}", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    output = next((root / "outputs" / "runs").iterdir())
    runs = {system: (output / "runs" / f"{system}.trec").read_bytes() for system in SYSTEMS}
    return runs, json.loads((output / "results.json").read_text())


@pytest.mark.slow  # a whole job or several: make test-slow (the default run stays under 10 minutes on 2 cores)
def test_run_files_are_identical_across_hash_seeds_threads_and_fresh_builds(tmp_path: Path) -> None:
    dataset = write_corpus(tmp_path / "data", documents=1500, queries=40)
    outputs = [job_outputs(tmp_path / f"job{seed}", dataset, hash_seed=seed, threads=1 + seed % 2) for seed in range(3)]
    first_runs, first_results = outputs[0]
    assert all(first_runs[system] for system in SYSTEMS)
    assert first_results["search"] == dict.fromkeys(SYSTEMS, "exact")
    for runs, results in outputs[1:]:
        for system in SYSTEMS:
            assert runs[system] == first_runs[system], f"{system}.trec differs"
        assert results["systems"] == first_results["systems"]


def test_queries_without_hits_score_zero_and_the_job_succeeds(tmp_path: Path) -> None:
    """Every query is out of BM25's vocabulary (unknown words and stopwords): bm25 finds nothing,
    scores 0 on every metric, and the job logs how many queries had no hits."""
    dataset = tmp_path / "data"
    dataset.mkdir()
    (dataset / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"alpha{i} beta"}) + "\n" for i in range(5))
    )
    (dataset / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "zzzqqq"}) + "\n" + json.dumps({"_id": "q2", "text": "the and of"}) + "\n"
    )
    (dataset / "qrels").mkdir()
    (dataset / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    done = ragtrack(
        tmp_path,
        "run",
        "dataset=beir",
        f"dataset.path={dataset}",
        "encoder=hashing",
        "retriever=[bm25,dense]",
        "fusion=[rrf]",
        "tracking=none",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bm25: 2 of 2 queries have no hits (they score 0 on every metric)" in done.stdout + done.stderr
    output = next((tmp_path / "outputs" / "runs").iterdir())
    results = json.loads((output / "results.json").read_text())
    assert set(results["systems"]["bm25"].values()) == {0.0}
    assert results["efficiency"]["bm25"]["queries_without_hits"] == 2.0
    assert results["efficiency"]["dense"]["queries_without_hits"] == 0.0
    assert (output / "runs" / "bm25.trec").read_bytes() == b""
    again = ragtrack(
        tmp_path,
        "run",
        "dataset=beir",
        f"dataset.path={dataset}",
        "encoder=hashing",
        "retriever=[bm25]",
        "fusion=[]",
        "tracking=none",
    )  # the empty run now comes from the cache
    assert again.returncode == 0, again.stderr[-3000:]


@pytest.mark.slow
def test_run_files_are_identical_on_a_larger_corpus(tmp_path: Path) -> None:
    """20,000 documents: there HNSW builds differ (issue 14), exact search must not."""
    dataset = write_corpus(tmp_path / "data", documents=20_000, queries=200)
    outputs = [job_outputs(tmp_path / f"job{seed}", dataset, hash_seed=seed, threads=1 + seed % 2) for seed in range(3)]
    for runs, results in outputs[1:]:
        assert runs == outputs[0][0]
        assert results["systems"] == outputs[0][1]["systems"]
